"""`groupgate rehearse calibrate`: the rehearsal simulator against real clients, on the same small fleet.

For each client mix and scenario, a fleet of real consumers (Java 4.4.0 or librdkafka) runs through
``groupgate serve`` in front of an Apache Kafka 4.4.0 broker (compat_tests/upgrade/calibration.py); the
run's schedule is replayed by the simulator with the same group timings (rehearsal/calibration.py), and
both event logs are measured alike. The result is one row per mix and scenario: measured beside predicted
for each metric (unavailability, rebalances per member, time to stable), their ratio and whether they agree
within 25 %, as a Markdown table and as JSON (the JSON is what ``rehearse report`` shows beside its
predictions when found as ``_calibration.json`` in an events directory).

``--replay DIR`` re-simulates and re-measures runs saved by an earlier calibration without real clients.
The real half is handed in (``RealRuns``): the command finds it as the ``groupgate.calibration`` entry
point, which the project's compatibility harness (``compat_tests``, shipped with the package) provides,
and it needs the Kafka jars of ``groupgate kafka fetch``. Nothing here imports the harness or the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rehearsal.calibration import (
    TOLERANCE,
    Comparison,
    Figures,
    Schedule,
    Step,
    figures,
    first_requests,
    formed,
    simulate_schedule,
)
from rehearsal.client_timings import Timings, client_timings
from rehearsal.events import EventWriter, parse_event, read_events
from rehearsal.fleet_spec import CLIENT_MIXES

SCENARIOS = ("rolling-upgrade", "rolling-restart", "crashes")
# The command's client names -> the harness' (librdkafka runs through confluent-kafka).
CLIENTS = {"java": "java", "librdkafka": "confluent", "confluent": "confluent"}
METRICS = ("unavailable", "rebalances", "time_to_stable")
Echo = Callable[[str], None]


class Process(Protocol):
    """A broker or a gateway the real half starts and stops."""

    bootstrap: str

    def start(self) -> None: ...
    def stop(self) -> None: ...


class RealRuns(Protocol):
    """The real half of a calibration: a broker, gateways configured for the simulator's timings, and one
    run of real clients through a gateway (compat_tests/upgrade/calibration.py ``HARNESS``)."""

    def broker(self) -> Process: ...

    def gateway(self, upstream: str, work_dir: Path, timings: Timings, extra_args: Sequence[str]) -> Process: ...

    def run(self, bootstrap: str, broker: str, mix: str, scenario: str, *, members: int, partitions: int,
            client: str, timings: Timings, log_dir: Path) -> Any:
        """One run: an object with ``schedule`` (a Schedule), ``events`` and ``group``."""
        ...


def _say(msg: str) -> None:
    print(msg, flush=True)


def client_label(client: str) -> str:
    return "librdkafka" if CLIENTS.get(client, client) == "confluent" else client


def parse_choice(text: str, allowed: Sequence[str], what: str) -> list[str]:
    """``all`` or a comma-separated subset of ``allowed`` (in ``allowed``'s order); ValueError names the bad one."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise ValueError(f"no {what} given")
    if items == ["all"]:
        return list(allowed)
    bad = [t for t in items if t not in allowed]
    if bad:
        raise ValueError(f"unknown {what} {', '.join(bad)} (one of: all, {', '.join(allowed)})")
    return [a for a in allowed if a in items]


def plan(mixes: Sequence[str], scenarios: Sequence[str], client: str) -> tuple[list[tuple[str, str]], list[str]]:
    """The (mix, scenario) runs to make, and notes on what was left out and why."""
    notes = []
    wanted = [(m, s) for s in scenarios for m in mixes]
    if ("consumer", "rolling-upgrade") in wanted:
        # The consumer mix's rolling upgrade is its rolling restart: run once.
        wanted.remove(("consumer", "rolling-upgrade"))
        if ("consumer", "rolling-restart") not in wanted:
            wanted.append(("consumer", "rolling-restart"))
        notes.append("consumer / rolling-upgrade is its rolling restart: run as consumer / rolling-restart")
    if CLIENTS[client] == "confluent" and any(s == "crashes" for _, s in wanted):
        # A librdkafka consumer lives in this process: it cannot be killed without a LeaveGroup.
        wanted = [(m, s) for m, s in wanted if s != "crashes"]
        notes.append("crashes need a client in a process of its own (java): skipped for librdkafka")
    return wanted, notes


# ---- figures ---------------------------------------------------------------------------------------

def averaged(runs: Sequence[Figures]) -> Figures:
    """The mean of several simulated runs of one schedule (their seeds differ in network and callback delays)."""
    first = runs[0]
    return Figures(
        first.first_disturbance_ms,
        first.first_disturbance_ms + round(statistics.fmean(f.time_to_stable_ms for f in runs)),
        first.members, first.partitions,
        unavailable_ms=round(statistics.fmean(f.unavailable_ms for f in runs)),
        window_ms=first.window_ms,
        changes=round(statistics.fmean(f.changes for f in runs) * 100) / 100,  # type: ignore[arg-type]
        crash_unavailable_ms=round(statistics.fmean(f.crash_unavailable_ms for f in runs)),
    )


def pool(figs: Sequence[Figures]) -> Figures:
    """Several runs of one scenario as one: sums (unavailability, windows, changes, slots), mean time to stable."""
    tts = round(statistics.fmean(f.time_to_stable_ms for f in figs))
    return Figures(0, tts, sum(f.members for f in figs), figs[0].partitions,
                   unavailable_ms=sum(f.unavailable_ms for f in figs), window_ms=sum(f.window_ms for f in figs),
                   changes=sum(f.changes for f in figs),  # type: ignore[arg-type]
                   crash_unavailable_ms=sum(f.crash_unavailable_ms for f in figs))


@dataclass
class Row:
    """One calibrated run (or several pooled): measured and predicted figures and where they came from."""

    comparison: Comparison
    simulated: list[Figures] = field(default_factory=list)  # every seed's figures (the prediction is their mean)
    gateway: Figures | None = None  # the same window measured on the gateway's own --rebalance-events
    events: str | None = None  # the directory with measured.jsonl, simulated-0.jsonl, schedule.json
    runs: int = 1
    start_lags_ms: list[int] = field(default_factory=list)  # per restart: its start to its first group request

    @property
    def mix(self) -> str:
        return self.comparison.mix

    @property
    def scenario(self) -> str:
        return self.comparison.scenario

    @property
    def client(self) -> str:
        return client_label(self.comparison.client)

    def metrics(self) -> dict[str, dict[str, Any]]:
        r, s = self.comparison.real, self.comparison.simulated
        ratios, within = self.comparison.ratios(), self.comparison.within(TOLERANCE)
        values = {
            "unavailable": (r.unavailable_ms / 1000, s.unavailable_ms / 1000),
            "rebalances": (r.rebalances_per_member, s.rebalances_per_member),
            "time_to_stable": (r.time_to_stable_ms / 1000, s.time_to_stable_ms / 1000),
        }
        return {name: {"measured": round(values[name][0], 3), "predicted": round(values[name][1], 3),
                       "ratio": _finite(ratios[name]), "within_25": within[name]} for name in METRICS}

    def as_json(self) -> dict[str, Any]:
        c = self.comparison
        return {
            "mix": self.mix, "scenario": self.scenario, "client": self.client, "runs": self.runs,
            "events": self.events, "metrics": self.metrics(),
            "real": fig_json(c.real), "predicted": fig_json(c.simulated),
            "simulated": [fig_json(f) for f in self.simulated] or [fig_json(c.simulated)],
            "gateway": fig_json(self.gateway) if self.gateway else None,
            "ratios": {k: _finite(v) for k, v in c.ratios().items()}, "within_25": c.within(TOLERANCE),
            "start_lags_ms": self.start_lags_ms,
        }


def _finite(value: float | None) -> float | None:
    return None if value is None or value == float("inf") else round(value, 4)


def fig_json(f: Figures) -> dict[str, Any]:
    return {"unavailable_ms": f.unavailable_ms, "crash_unavailable_ms": f.crash_unavailable_ms,
            "unavailable_share": f.unavailable_share, "window_ms": f.window_ms,
            "rebalances_per_member": f.rebalances_per_member, "time_to_stable_ms": f.time_to_stable_ms}


def compare_saved(real_events: Sequence[Any], schedule: Schedule, seeds: int, client: str) -> Row:
    """Measure a real run and ``seeds`` simulations of its schedule over one common window: from the first
    disturbance until the later of the two runs settled. The prediction is the seeds' mean."""
    members = schedule.members
    simulated = [simulate_schedule(schedule, seed) for seed in range(seeds)]
    real_fig = figures(real_events, members)
    sims = [figures(events, members) for events in simulated]
    span = max(real_fig.time_to_stable_ms, *(f.time_to_stable_ms for f in sims))
    real_fig = figures(real_events, members, real_fig.first_disturbance_ms + span)
    sims = [figures(events, members, f.first_disturbance_ms + span) for events, f in zip(simulated, sims, strict=True)]
    return Row(Comparison(schedule.mix, schedule.scenario, real_fig, averaged(sims), CLIENTS.get(client, client)), sims,
               start_lags_ms=start_lags(schedule))


def pooled(rows: Sequence[Row]) -> list[Row]:
    """Runs of one client, scenario and mix as one row (partition-seconds and changes summed, times averaged)."""
    keys = list(dict.fromkeys((r.client, r.scenario, r.mix) for r in rows))
    out = []
    for client, scenario, mix in keys:
        mine = [r for r in rows if (r.client, r.scenario, r.mix) == (client, scenario, mix)]
        if len(mine) == 1:
            out.append(mine[0])
            continue
        comparison = Comparison(mix, scenario, pool([r.comparison.real for r in mine]),
                                pool([r.comparison.simulated for r in mine]), CLIENTS[client])
        out.append(Row(comparison, runs=len(mine), start_lags_ms=[lag for r in mine for lag in r.start_lags_ms]))
    return out


# ---- rendering -------------------------------------------------------------------------------------

def _cell(measured: float, predicted: float, digits: int) -> str:
    return f"{measured:,.{digits}f} / {predicted:,.{digits}f}"


def _ratio(metric: Mapping[str, Any]) -> str:
    ratio = metric["ratio"]
    text = "-" if ratio is None else f"{ratio:.2f}"
    return text if metric["within_25"] else f"**{text}**"


def markdown(rows: Sequence[Row]) -> str:
    """Measured / predicted per metric, the ratio predicted / measured (bold when off by more than 25 %),
    and which metrics agree within 25 %."""
    head = ("| client | scenario | mix | runs | unavailable, measured / predicted (partition-s) | ratio"
            " | of it after kills | rebalances per member | ratio | time to stable (s) | ratio | within 25 % |")
    lines = [head, "|" + " --- |" * 12]
    for row in rows:
        m = row.metrics()
        r, s = row.comparison.real, row.comparison.simulated
        off = [name.replace("_", " ") for name in METRICS if not m[name]["within_25"]]
        lines.append(
            f"| {row.client} | {row.scenario} | {row.mix} | {row.runs}"
            f" | {_cell(m['unavailable']['measured'], m['unavailable']['predicted'], 1)} | {_ratio(m['unavailable'])}"
            f" | {_cell(r.crash_unavailable_ms / 1000, s.crash_unavailable_ms / 1000, 1)}"
            f" | {_cell(m['rebalances']['measured'], m['rebalances']['predicted'], 2)} | {_ratio(m['rebalances'])}"
            f" | {_cell(m['time_to_stable']['measured'], m['time_to_stable']['predicted'], 1)}"
            f" | {_ratio(m['time_to_stable'])} | {'yes' if not off else 'no: ' + ', '.join(off)} |"
        )
    return "\n".join(lines)


def write_outputs(rows: Sequence[Row], out: Path, json_path: Path | None, echo: Echo, *, header: str = "") -> None:
    """calibration.md and calibration.json under ``out`` (and the JSON at ``json_path`` too), the table echoed."""
    table = markdown(rows)
    out.mkdir(parents=True, exist_ok=True)
    (out / "calibration.md").write_text((header + "\n\n" if header else "") + table + "\n")
    data = json.dumps([r.as_json() for r in rows], indent=1) + "\n"
    (out / "calibration.json").write_text(data)
    if json_path is not None:
        json_path.write_text(data)
    echo("")
    echo(table)
    echo(f"\ntable and JSON in {out} (calibration.md, calibration.json)")


# ---- real runs -------------------------------------------------------------------------------------

def gateway_figures(path: Path, group: str, members: int, window: tuple[int, int]) -> Figures | None:
    """The run's window measured on what the gateway itself saw acknowledged (its --rebalance-events)."""
    if not path.exists():
        return None
    events = [e for e in (parse_event(line) for line in path.read_text().splitlines() if line.strip())
              if e.group == group]
    return figures(events, members, window[1], window[0]) if events else None


def coordinator_timed(schedule: Schedule, real_events: Sequence[Any], gateway_events: Path | None) -> Schedule:
    """The schedule with each restart at the moment the gateway first heard from it (``first_requests``), when
    the gateway's event log of the run is at hand; else as recorded."""
    if gateway_events is None or not gateway_events.exists() or not schedule.steps:
        return schedule
    group = next((e.group for e in real_events), None)
    events = [e for e in (parse_event(line) for line in gateway_events.read_text().splitlines() if line.strip())
              if e.group == group]
    first = next((e.ts_ms for e in real_events if e.event == "disturbance"), None)
    if not events or first is None:
        return schedule
    return first_requests(schedule, events, first - schedule.steps[0].stop_ms)


def anchored(schedule: Schedule, real_events: Sequence[Any]) -> Schedule:
    """The schedule with the real run's first assignment (``formed``), which the replay plays its steps from."""
    first = next((e.ts_ms for e in real_events if e.event == "disturbance"), None)
    if schedule.formed_ms is not None or first is None or not schedule.steps:
        return schedule
    return formed(schedule, real_events, first - schedule.steps[0].stop_ms)


def start_lags(schedule: Schedule) -> list[int]:
    """Per step, from the new incarnation's start to the coordinator's first request from it (ms)."""
    return [s.first_request_ms - s.start_ms for s in schedule.steps if s.first_request_ms is not None]


def gateway_mode(mix: str) -> str:
    return "translate" if mix == "translate" else "native"


def run_one(real_runs: RealRuns, gateway: str, broker: str, mix: str, scenario: str, *, members: int, partitions: int,
            client: str, seeds: int, keep: Path, gateway_events: Path | None = None) -> Row:
    """One real run through ``gateway`` (a gateway of ``real_runs``, in translate mode for the translate mix)
    and its simulated replays, saved under ``keep`` for --replay."""
    harness_client = CLIENTS[client]
    timings = client_timings(harness_client)
    real = real_runs.run(gateway, broker, mix, scenario, members=members, partitions=partitions,
                         client=harness_client, timings=timings, log_dir=keep)
    schedule = anchored(coordinator_timed(real.schedule, real.events, gateway_events), real.events)
    row = compare_saved(real.events, schedule, seeds, harness_client)
    keep.mkdir(parents=True, exist_ok=True)
    (keep / "run.json").write_text(json.dumps({"client": harness_client}) + "\n")
    with EventWriter(keep / "measured.jsonl") as w:
        w.write_all(real.events)
    with EventWriter(keep / "simulated-0.jsonl") as w:
        w.write_all(simulate_schedule(schedule, 0))
    (keep / "schedule.json").write_text(json.dumps(dataclasses.asdict(schedule)) + "\n")
    row.events = str(keep)
    if gateway_events is not None:
        origin = row.comparison.real.first_disturbance_ms
        row.gateway = gateway_figures(gateway_events, real.group, members,
                                      (origin, origin + row.comparison.real.window_ms))
    return row


def calibrate(args: argparse.Namespace, real_runs: RealRuns | None, echo: Echo = _say) -> int:
    """``real_runs``: the real half (None where the compatibility harness is not installed: --replay only)."""
    try:
        mixes = parse_choice(args.mix, CLIENT_MIXES, "mix")
        scenarios = parse_choice(args.scenario, SCENARIOS, "scenario")
    except ValueError as e:
        echo(f"error: {e}")
        return 2
    if args.groups < 1 or args.members < 1 or args.partitions < 1 or args.seeds < 1:
        echo("error: --groups, --members, --partitions and --seeds must be at least 1")
        return 2
    if args.replay:
        return replay(args.replay, args.seeds, Path(args.out) if args.out else None, args.json, args.client, echo)
    wanted, notes = plan(mixes, scenarios, args.client)
    for note in notes:
        echo(note)
    if not wanted:
        echo("error: nothing to run")
        return 2

    if real_runs is None:
        echo("error: real calibration runs need the compatibility harness (compat_tests, installed with the package "
             "from a source checkout); --replay works without it")
        return 2
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="calibrate-"))
    timings = client_timings(CLIENTS[args.client])
    echo(f"calibrating {client_label(args.client)}: {len(wanted)} mix/scenario pairs x {args.groups} group(s) of "
         f"{args.members} members, {args.partitions} partitions; work in {out}")
    kafka = real_runs.broker()
    kafka.start()
    gateways = {}
    rows: list[Row] = []
    started = time.monotonic()
    try:
        for mode in sorted({gateway_mode(m) for m, _ in wanted}):
            gw = real_runs.gateway(kafka.bootstrap, out / mode, timings,
                                   ["--classic-groups", mode, "--rebalance-events", str(out / mode / "events.jsonl")])
            gw.start()
            gateways[mode] = gw
        for mix, scenario in wanted:
            for g in range(args.groups):
                t = time.monotonic()
                name = f"{mix}-{scenario}" + (f"-{g}" if args.groups > 1 else "")
                mode = gateway_mode(mix)
                row = run_one(real_runs, gateways[mode].bootstrap, kafka.bootstrap, mix, scenario, members=args.members,
                              partitions=args.partitions, client=args.client, seeds=args.seeds, keep=out / name,
                              gateway_events=out / mode / "events.jsonl")
                rows.append(row)
                echo(f"[{mix} / {scenario} #{g}] {time.monotonic() - t:.0f} s wall")
                echo(markdown([row]).splitlines()[-1])
    finally:
        for gw in gateways.values():
            gw.stop()
        kafka.stop()
    header = (f"{client_label(args.client)}, {args.groups} group(s) x {args.members} members, {args.partitions} "
              f"partitions, {args.seeds} simulated seeds per run, {time.monotonic() - started:.0f} s")
    write_outputs(pooled(rows), out, args.json, echo, header=header)
    return 0


# ---- replay ----------------------------------------------------------------------------------------

def load_schedule(path: Path) -> Schedule:
    raw = json.loads(path.read_text())
    return Schedule(raw["mix"], raw["scenario"], raw["partitions"], tuple(raw["starts"]),
                    tuple(Step(**s) for s in raw["steps"]), Timings(), raw["topic"],  # replay sets the client's
                    raw.get("formed_ms"))


def saved_runs(works: Iterable[Path]) -> list[Path]:
    """Run directories (with schedule.json and measured.jsonl) under each work directory, in run order."""
    out = []
    for work in works:
        found = [work / "schedule.json"] if (work / "schedule.json").exists() else list(work.glob("*/schedule.json"))
        out += [p.parent for p in sorted(found, key=lambda p: p.stat().st_mtime)]
    return out


def replay(works: Sequence[Path], seeds: int, out: Path | None, json_path: Path | None, client: str,
           echo: Echo = _say) -> int:
    """Re-simulate and measure saved runs (several runs of one client, scenario and mix are pooled)."""
    runs = saved_runs(works)
    if not runs:
        echo(f"error: no saved calibration run (schedule.json) under {', '.join(map(str, works))}")
        return 2
    rows = []
    for run in runs:
        meta = json.loads((run / "run.json").read_text()) if (run / "run.json").exists() else {}
        who = CLIENTS.get(meta.get("client", client), "java")
        schedule = dataclasses.replace(load_schedule(run / "schedule.json"), timings=client_timings(who))
        real = list(read_events([str(run / "measured.jsonl")]))
        if not start_lags(schedule):
            # A run saved before its schedule was timed by the coordinator: its gateway's log is beside it.
            schedule = coordinator_timed(schedule, real, run.parent / gateway_mode(schedule.mix) / "events.jsonl")
        schedule = anchored(schedule, real)
        row = compare_saved(real, schedule, seeds, who)
        row.events = str(run)
        rows.append(row)
    merged = pooled(rows)
    if len(merged) < len(rows):
        echo("each run:\n\n" + markdown(rows) + "\n\npooled:")
    target = out if out is not None else runs[0].parent
    write_outputs(merged, target, json_path, echo,
                  header=f"replay of {len(rows)} saved run(s), {seeds} simulated seeds each")
    return 0
