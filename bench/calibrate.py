"""Calibrate the rehearsal simulator against real clients: the same small fleet, real and simulated.

For each client mix and scenario, a fleet of real consumers (Java 4.3.1 VerifiableConsumer or librdkafka)
runs through ``groupgate serve`` in front of an Apache Kafka 4.3.1 broker (compat_tests/upgrade/
calibration.py); its schedule (who stopped or was killed when, when the next incarnation started) is then
replayed by the simulator with the same group timings (rehearsal/calibration.py), and both event logs are
measured alike: partition-unavailability from the first disturbance, acknowledged rebalances per fleet slot,
time to stable. Prints one Markdown table (measured / simulated, and the simulation's difference) and,
with ``--json``, writes every figure.

    .venv/bin/python bench/calibrate.py [--members 3] [--partitions 6] [--client java|confluent]
        [--mix classic-eager,...] [--scenario rolling-upgrade,...] [--seeds 3] [--json out.json]

The gateways write their own rebalance events (``--rebalance-events``) under the work directory; the
``gateway`` figures of the JSON come from them (what the coordinator saw acknowledged).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

# This directory holds bench/rehearsal.py, which would shadow the rehearsal package: the project comes first.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from compat_tests.upgrade import endpoints  # noqa: E402
from compat_tests.upgrade.calibration import SCENARIOS, gateway_settings, run_real  # noqa: E402
from rehearsal.calibration import (  # noqa: E402
    Comparison,
    Figures,
    Schedule,
    Step,
    Timings,
    client_timings,
    figures,
    simulate_schedule,
    table,
)
from rehearsal.events import EventWriter, parse_event, read_events  # noqa: E402
from rehearsal.fleet import CLIENT_MIXES  # noqa: E402

COMBINATIONS = [
    (mix, scenario) for scenario in SCENARIOS for mix in CLIENT_MIXES
    # The consumer mix's rolling upgrade is its rolling restart: run once.
    if not (mix == "consumer" and scenario == "rolling-upgrade")
]


def averaged(runs: list[Figures]) -> Figures:
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


def gateway_figures(path: Path, group: str, members: int, window: tuple[int, int]) -> Figures | None:
    if not path.exists():
        return None
    events = [e for e in (parse_event(line) for line in path.read_text().splitlines() if line.strip())
              if e.group == group]
    return figures(events, members, window[1], window[0]) if events else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--client", choices=("java", "confluent"), default="java")
    ap.add_argument("--mix", default=",".join(CLIENT_MIXES))
    ap.add_argument("--scenario", default=",".join(SCENARIOS))
    ap.add_argument("--seeds", type=int, default=3, help="simulated runs per schedule (averaged)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--replay", type=Path, action="append", default=[],
                    help="no real run: re-simulate and measure the runs saved under this work directory "
                         "(each run's measured.jsonl and schedule.json; repeatable, runs are listed in order)")
    args = ap.parse_args()
    if args.replay:
        return replay(args.replay, args.seeds, args.json, args.client)
    mixes, scenarios = set(args.mix.split(",")), set(args.scenario.split(","))
    wanted = [(m, s) for m, s in COMBINATIONS if m in mixes and s in scenarios]
    if args.client == "confluent" and any(s == "crashes" for _, s in wanted):
        # A librdkafka consumer runs inside this process: it cannot be killed without a LeaveGroup.
        print("crashes need a client in a process of its own (java): skipped for confluent", flush=True)
        wanted = [(m, s) for m, s in wanted if s != "crashes"]
    if not wanted:
        print("nothing to run", file=sys.stderr)
        return 2
    timings = client_timings(args.client)
    work = Path(tempfile.mkdtemp(prefix="calibrate-"))
    kafka = endpoints.broker()
    kafka.start()
    gateways = {}
    try:
        for mode in sorted({"translate" if m == "translate" else "native" for m, _ in wanted}):
            gw = endpoints.gateway(kafka.bootstrap, work / mode, extra=gateway_settings(timings))
            gw.extra_args += ["--classic-groups", mode, "--rebalance-events", str(work / mode / "events.jsonl")]
            gw.start()
            gateways[mode] = gw
        rows: list[Comparison] = []
        report = []
        for mix, scenario in wanted:
            mode = "translate" if mix == "translate" else "native"
            t = time.monotonic()
            real = run_real(gateways[mode].bootstrap, kafka.bootstrap, mix, scenario, members=args.members,  # type: ignore[arg-type]
                            partitions=args.partitions, client=args.client, timings=timings,
                            log_dir=work / f"{mix}-{scenario}")
            row, real_fig, sims = compare_saved(real.events, real.schedule, args.members, args.seeds, args.client)
            span = real_fig.window_ms
            keep = work / f"{mix}-{scenario}"
            keep.mkdir(parents=True, exist_ok=True)
            (keep / "run.json").write_text(json.dumps({"client": args.client}) + "\n")
            with EventWriter(keep / "measured.jsonl") as w:
                w.write_all(real.events)
            with EventWriter(keep / "simulated-0.jsonl") as w:
                w.write_all(simulate_schedule(real.schedule, 0))
            (keep / "schedule.json").write_text(json.dumps(dataclasses.asdict(real.schedule)) + "\n")
            rows.append(row)
            origin = real_fig.first_disturbance_ms
            gw_fig = gateway_figures(work / mode / "events.jsonl", real.group, args.members, (origin, origin + span))
            report.append({
                "mix": mix, "scenario": scenario, "client": args.client, "events": str(keep),
                "real": _fig(real_fig), "simulated": [_fig(f) for f in sims],
                "gateway": _fig(gw_fig) if gw_fig else None, "ratios": row.ratios(), "within_25": row.within(),
            })
            print(f"[{mix} / {scenario}] {time.monotonic() - t:.0f} s wall", flush=True)
            print(table([row]).splitlines()[-1], flush=True)
    finally:
        for gw in gateways.values():
            gw.stop()
        kafka.stop()
    print()
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


def compare_saved(real_events: list, schedule: Schedule, members: int, seeds: int, client: str) -> tuple[
        Comparison, Figures, list[Figures]]:
    """Measure a real run and ``seeds`` simulations of its schedule over one common window."""
    real_fig = figures(real_events, members)
    sims = [figures(simulate_schedule(schedule, seed), members) for seed in range(seeds)]
    span = max(real_fig.time_to_stable_ms, *(f.time_to_stable_ms for f in sims))
    real_fig = figures(real_events, members, real_fig.first_disturbance_ms + span)
    sims = [figures(simulate_schedule(schedule, seed), members, f.first_disturbance_ms + span)
            for seed, f in enumerate(sims)]
    return Comparison(schedule.mix, schedule.scenario, real_fig, averaged(sims), client), real_fig, sims


def load_schedule(path: Path) -> Schedule:
    raw = json.loads(path.read_text())
    return Schedule(raw["mix"], raw["scenario"], raw["partitions"], tuple(raw["starts"]),
                    tuple(Step(**s) for s in raw["steps"]), Timings(), raw["topic"])  # replay sets the client's


def replay(works: list[Path], seeds: int, out: Path | None, client: str) -> int:
    rows: list[Comparison] = []
    report = []
    for work in works:
        for run in sorted(work.glob("*/schedule.json"), key=lambda p: p.stat().st_mtime):
            meta = json.loads((run.parent / "run.json").read_text()) if (run.parent / "run.json").exists() else {}
            schedule = dataclasses.replace(load_schedule(run), timings=client_timings(meta.get("client", client)))
            meta = json.loads((run.parent / "run.json").read_text()) if (run.parent / "run.json").exists() else {}
            real = list(read_events([str(run.parent / "measured.jsonl")]))
            row, real_fig, sims = compare_saved(real, schedule, schedule.members, seeds, meta.get("client", client))
            rows.append(row)
            report.append({"mix": row.mix, "scenario": row.scenario, "client": row.client, "events": str(run.parent),
                           "real": _fig(real_fig), "simulated": [_fig(f) for f in sims], "ratios": row.ratios(),
                           "within_25": row.within()})
    print(table(rows))
    if len(works) > 1:
        print("\nPooled over the runs of each client, scenario and mix (partition-seconds and changes summed,"
              " times to stable averaged):\n")
        print(table(pooled(rows)))
    if out:
        out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


def pool(figs: list[Figures]) -> Figures:
    """Several runs of one scenario as one: sums (unavailability, windows, changes, slots), mean time to stable."""
    tts = round(statistics.fmean(f.time_to_stable_ms for f in figs))
    return Figures(0, tts, sum(f.members for f in figs), figs[0].partitions,
                   unavailable_ms=sum(f.unavailable_ms for f in figs), window_ms=sum(f.window_ms for f in figs),
                   changes=sum(f.changes for f in figs),  # type: ignore[arg-type]
                   crash_unavailable_ms=sum(f.crash_unavailable_ms for f in figs))


def pooled(rows: list[Comparison]) -> list[Comparison]:
    keys = list(dict.fromkeys((r.client, r.scenario, r.mix) for r in rows))
    out = []
    for client, scenario, mix in keys:
        mine = [r for r in rows if (r.client, r.scenario, r.mix) == (client, scenario, mix)]
        out.append(Comparison(mix, scenario, pool([r.real for r in mine]), pool([r.simulated for r in mine]), client))
    return out


def _fig(f: Figures) -> dict[str, object]:
    return {"unavailable_ms": f.unavailable_ms, "crash_unavailable_ms": f.crash_unavailable_ms,
            "unavailable_share": f.unavailable_share, "window_ms": f.window_ms,
            "rebalances_per_member": f.rebalances_per_member, "time_to_stable_ms": f.time_to_stable_ms}


if __name__ == "__main__":
    sys.exit(main())
