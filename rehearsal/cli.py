"""`groupgate rehearse report PATH... --out DIR`: event logs in, Parquet tables + summary.json + report.html out."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rehearsal.events import EventLogError, validate_logs
from rehearsal.report import HISTOGRAM_BINS, ReportInput, choose_group, histogram_width, render


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
    spark = pipeline.spark_session(master, kafka=kafka)
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
        say(
            f"{summary['events']} events, {summary['groups']} groups, {summary['partitions']} partitions, "
            f"{summary['double_ownership_violations']} double ownership violations"
        )
        say(f"writing Parquet tables and summary.json to {out}")
        pipeline.write(metrics, summary, out)
        say("rendering report.html")
        try:
            data = spark_report_input(metrics, summary, group)
        except ValueError as e:
            echo(f"error: {e}")
            return 2
        report = Path(out, "report.html")
        report.write_text(render(data), encoding="utf-8")
        say(f"done: {os.path.abspath(report)}")
        return 0
    finally:
        if owned_session:
            spark.stop()


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


if __name__ == "__main__":  # pragma: no cover
    import argparse

    ap = argparse.ArgumentParser(prog="python -m rehearsal.cli")
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--master")
    ap.add_argument("--group")
    a = ap.parse_args()
    sys.exit(report_main(a.paths, a.out, a.master, a.group))
