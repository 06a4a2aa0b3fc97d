"""`groupgate rehearse simulate|report|validate`: simulated fleets write event logs; event logs in,
Parquet tables + summary.json + report.html out."""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rehearsal.events import EventLogError, validate_logs
from rehearsal.report import render
from rehearsal.report_input import HISTOGRAM_BINS, ReportInput, choose_group, histogram_width
from rehearsal.report_provenance import annotate


def _rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict() for r in df.collect()]


def spark_report_input(m: Any, summary: dict[str, Any], group: str | None) -> ReportInput:
    """What the report needs, gathered from the pipeline's DataFrames (only the chosen group is collected)."""
    from pyspark.sql import functions as F

    groups = _rows(m.group_summary)
    chosen = choose_group(groups, group)

    def of_group(df: Any) -> list[dict[str, Any]]:
        if chosen is None:
            return []
        return _rows(df.filter((F.col("run") == chosen[0]) & (F.col("group") == chosen[1])))

    top = max((mix["unavailability_ms"]["max"] or 0 for mix in summary["client_mixes"].values()), default=0)
    top = int(top)
    binned = m.partition_unavailability.select(
        "client_mix",
        F.least(F.expr(f"(unavailable_ms * {HISTOGRAM_BINS}) div {max(top, 1)}"), F.lit(HISTOGRAM_BINS - 1)).alias(
            "bin"
        ),
    )
    hist: dict[str, list[int]] = {}
    for r in binned.groupBy("client_mix", "bin").count().collect():
        hist.setdefault(r["client_mix"], [0] * HISTOGRAM_BINS)[r["bin"]] = r["count"]
    return ReportInput(
        summary=summary,
        groups=groups,
        timeline_group=chosen,
        intervals=of_group(m.ownership_intervals),
        partitions=of_group(m.partition_unavailability),
        overlaps=of_group(m.double_ownership),
        members=of_group(m.member_rebalances),
        histogram=hist,
        bin_width_ms=histogram_width(top),
    )


def report_main(
    paths: list[str],
    out: str,
    master: str | None = None,
    group: str | None = None,
    *,
    echo: Callable[[str], None] = print,
) -> int:
    """Analyse rehearsal event logs (files, directories, kafka://BOOTSTRAP/TOPIC) into out/.

    Returns 0 on success, 2 when the inputs are not valid event logs (the reason is printed)."""
    started = time.monotonic()

    def say(msg: str) -> None:
        echo(f"[{time.monotonic() - started:6.1f}s] {msg}")

    local = [p for p in paths if "://" not in p]
    try:
        if local:
            say(f"validating {len(local)} local path(s)")
            errors = validate_logs(local)
            if errors:
                for e in errors:
                    echo(f"error: {e}")
                return 2
    except FileNotFoundError as e:
        echo(f"error: {e}")
        return 2

    try:
        from rehearsal import pipeline
    except ImportError as e:  # pragma: no cover - depends on the installation
        echo(f"error: the rehearsal report needs PySpark (pip install 'groupgate[rehearsal]'; Java 17): {e}")
        return 2
    from pyspark.sql import SparkSession

    owned_session = SparkSession.getActiveSession() is None
    kafka = any(p.startswith(pipeline.KAFKA_SCHEME) for p in paths)
    say(f"starting Spark ({master or 'local[*]'}{', with the Kafka connector' if kafka else ''})")
    try:
        spark = pipeline.spark_session(master, kafka=kafka)
    except pipeline.spark_kafka.ConnectorError as e:
        echo(f"error: {e}")
        return 2
    try:
        say("reading events")
        try:
            # Local files were validated above (more strictly than Spark can); other sources are checked here.
            events = pipeline.load_events(spark, paths, check=len(local) < len(paths))
            metrics = pipeline.compute(events)
        except EventLogError as e:
            echo(f"error: {e}")
            return 2
        say("computing ownership intervals and metrics")
        summary = pipeline.summarize(metrics)
        calibration, sources = find_calibration_sources(local)
        simulations = find_simulations(local)
        for sim in simulations:
            for warning in sim.get("warnings") or []:
                echo(f"warning: run {sim.get('run')}: not modelled: {warning}")
        annotate(summary, simulations, calibration, sources)
        say(
            f"{summary['events']} events, {summary['groups']} groups, {summary['partitions']} partitions, "
            f"{summary['double_ownership_violations']} double ownership violations"
        )
        if summary.get("connect"):
            c = summary["connect"]
            say(f"connect groups: {c['tasks']} tasks, task unavailability {c['task_unavailable_ms'] / 1000:,.1f} "
                f"task-s; {c['connectors']} connectors, {c['connector_unavailable_ms'] / 1000:,.1f} connector-s")
        say(f"writing Parquet tables and summary.json to {out}")
        pipeline.write(metrics, summary, out)
        say("rendering report.html")
        try:
            data = spark_report_input(metrics, summary, group)
        except ValueError as e:
            echo(f"error: {e}")
            return 2
        data.calibration, data.calibration_sources, data.simulations = calibration, sources, simulations
        if data.calibration:
            say(f"calibration against real clients: {len(data.calibration)} rows")
        report = Path(out, "report.html")
        report.write_text(render(data), encoding="utf-8")
        say(f"done: {os.path.abspath(report)}")
        return 0
    finally:
        if owned_session:
            spark.stop()


CALIBRATION_FILE = "_calibration.json"


def find_calibration(paths: list[str]) -> list[dict[str, Any]]:
    """The rows of ``_calibration.json`` files (`groupgate rehearse calibrate --json`) in the input directories (the
    event reader skips names starting with ``_``)."""
    return find_calibration_sources(paths)[0]


def _beside(paths: list[str], name: str) -> list[Path]:
    """Files called ``name`` in the input directories, or beside an input ``events`` directory."""
    found: list[Path] = []
    for p in paths:
        if not Path(p).is_dir():
            continue
        for candidate in (Path(p, name), Path(p).parent / name if Path(p).name == "events" else None):
            if candidate is not None and candidate.is_file() and candidate.resolve() not in found:
                found.append(candidate.resolve())
    return found


def find_calibration_sources(paths: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The calibration rows and the files they came from."""
    import json

    rows: list[dict[str, Any]] = []
    files = _beside(paths, CALIBRATION_FILE)
    for f in files:
        rows += json.loads(f.read_text(encoding="utf-8"))
    return rows, [str(f) for f in files]


def find_simulations(paths: list[str]) -> list[dict[str, Any]]:
    """The ``_fleet.json`` manifests of simulated fleets among the inputs (their settings and warnings)."""
    import json

    from rehearsal.fleet import MANIFEST

    out = []
    for f in _beside(paths, MANIFEST):
        try:
            out.append(json.loads(f.read_text(encoding="utf-8")))
        except ValueError:
            continue
    return out


def validate_main(paths: list[str], *, echo: Callable[[str], None] = print) -> int:
    """`groupgate rehearse validate PATH...`: 0 when every line is a valid rebalance event, else 2."""
    try:
        errors = validate_logs(paths)
    except FileNotFoundError as missing:
        echo(f"error: {missing}")
        return 2
    for err in errors:
        echo(f"error: {err}")
    if not errors:
        echo("ok: every line is a valid rebalance event")
    return 2 if errors else 0


def parse_topics(text: str) -> dict[str, int]:
    """``orders:12,payments:6`` -> {"orders": 12, "payments": 6}."""
    topics: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, count = item.rpartition(":")
        if not sep or not name or not count.isdigit():
            raise ValueError(f"{item!r} is not TOPIC:PARTITIONS")
        topics[name] = int(count)
    if not topics:
        raise ValueError("no topic given")
    return topics


def parse_clients(text: str) -> list[dict[str, Any]]:
    """``java@4.3.1:3,librdkafka:1/range`` -> ClientSpec fields: CLIENT[@VERSION][:SHARE][/STRATEGY]."""
    out: list[dict[str, Any]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        head, _, strategy = item.partition("/")
        head, _, share = head.partition(":")
        client, _, version = head.partition("@")
        if not client or (share and not share.isdigit()):
            raise ValueError(f"{item!r} is not CLIENT[@VERSION][:SHARE][/STRATEGY]")
        entry: dict[str, Any] = {"client": client}
        if version:
            entry["version"] = version
        if share:
            entry["share"] = int(share)
        if strategy:
            entry["strategy"] = strategy
        out.append(entry)
    if not out:
        raise ValueError("no client given")
    return out


def simulate_main(
    groups: int,
    members: int,
    scenario: str,
    seed: int,
    out: str,
    mix: str = "all",
    *,
    spark: bool = False,
    master: str | None = None,
    spec_file: str | None = None,
    topics: str | None = None,
    config: str | None = None,
    clients: str | None = None,
    group_type: str | None = None,
    connectors: int | None = None,
    tasks: int | None = None,
    scheduled_delay_ms: int | None = None,
    echo: Callable[[str], None] = functools.partial(print, flush=True),
) -> int:
    """Simulate a fleet (groups x members, a named scenario, the client mix) into out/events.

    ``spark`` or a ``master`` runs the groups in Spark tasks (local[*] unless a master is given).
    ``spec_file``: a JSON FleetSpec whose fields the other arguments override. ``config``: a gateway
    configuration file (the TOML `groupgate serve --config` reads) whose coordinator settings the simulated
    gateway runs with. ``clients``: the clients of every group (``parse_clients``). ``group_type`` connect
    simulates connect groups of ``members`` workers running ``connectors`` connectors of ``tasks`` tasks
    each, with the workers' ``scheduled_delay_ms`` (rehearsal/sim_connect.py). Returns 0, or 2 when
    the description is invalid. Groups whose simulation broke an invariant are listed (exit 0: the
    events up to the violation are written and the report shows it)."""
    from pydantic import ValidationError

    from rehearsal.fleet import simulate_fleet, simulate_fleet_spark
    from rehearsal.fleet_spec import FleetSpec, fleet_warnings, simulation_settings

    started = time.monotonic()
    fields: dict[str, Any] = {}
    if spec_file is not None:
        import json

        try:
            fields = json.loads(Path(spec_file).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            echo(f"error: {spec_file}: {e}")
            return 2
    fields.update(groups=groups, members=members, scenario=scenario, seed=seed, mix=mix)
    for name, value in (("group_type", group_type), ("connectors", connectors), ("tasks_per_connector", tasks),
                        ("scheduled_rebalance_delay_ms", scheduled_delay_ms)):
        if value is not None:
            fields[name] = value
    if topics is not None:
        try:
            fields["topics"] = parse_topics(topics)
        except ValueError as e:
            echo(f"error: --topics: {e}")
            return 2
    if clients is not None:
        try:
            fields["clients"] = parse_clients(clients)
        except ValueError as e:
            echo(f"error: --clients: {e}")
            return 2
    if config is not None:
        from rehearsal.fleet_settings import gateway_from_config

        try:
            fields["gateway"] = gateway_from_config(config).model_dump(mode="json")
        except (OSError, ValueError) as e:
            echo(f"error: --config {config}: {e}")
            return 2
    try:
        spec = FleetSpec.model_validate(fields)
    except ValidationError as e:
        echo(f"error: invalid fleet description: {e}")
        return 2
    where = f"Spark ({master or 'local[*]'})" if spark or master else "this process"
    echo("settings: " + "; ".join(f"{k} {v}" for k, v in simulation_settings(spec).items()))
    for warning in fleet_warnings(spec):
        echo(f"warning: not modelled: {warning}")
    if spec.group_type == "connect":
        echo(
            f"simulating {spec.groups} connect groups x {spec.members} workers, {spec.connectors} connectors x "
            f"{spec.tasks_per_connector} tasks, scenario {spec.scenario}, seed {spec.seed}, run {spec.run_id}, "
            f"in {where}"
        )
    else:
        echo(
            f"simulating {spec.groups} groups x {spec.members} members, scenario {spec.scenario}, mix {spec.mix}, "
            f"seed {spec.seed}, run {spec.run_id}, in {where}"
        )
    if spark or master:
        result = simulate_fleet_spark(spec, out, master, echo=echo)
    else:
        result = simulate_fleet(spec, out, echo=echo)
    for bad in result.violations:
        echo(f"violation in {bad.group}: {bad.violation}")
    echo(
        f"done in {time.monotonic() - started:.1f}s: {result.events} events, {len(result.outcomes)} groups, "
        f"{len(result.violations)} with an invariant violation, {result.member_seconds:.0f} simulated "
        f"member-seconds; events in {os.path.join(out, 'events')}"
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    import argparse

    ap = argparse.ArgumentParser(prog="python -m rehearsal.cli")
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--master")
    ap.add_argument("--group")
    a = ap.parse_args()
    sys.exit(report_main(a.paths, a.out, a.master, a.group))
