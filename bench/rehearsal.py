"""Rehearsal throughput on this machine: events per second through the Spark pipeline, and simulated
member-seconds per second of the fleet simulator.

Pipeline: a small simulated fleet (rolling upgrade, all four client mixes) is written once, then its
lines are REPLICATED under distinct run ids (``"run":"<id>"`` -> ``"run":"<id>~k"``) until there are
``--events`` lines, so the input has the shape of real simulated events (every group's events are a
real simulated group's) at a size the simulator would take long to produce. Timed: reading the JSON
lines, every metric table, summary.json and writing the Parquet tables (what ``rehearse report``
does, without the HTML); the events are not validated with pydantic first (``check=False``).

Simulator: ``--sim-groups`` groups of ``--members`` members through a rolling upgrade in this
process, writing their events; member-seconds = members x simulated time of each group.

Not run in CI. Prints ``key=value`` pairs last:
``pipeline_events_per_s=N sim_member_seconds_per_s=N``.
Run: .venv/bin/python bench/rehearsal.py [--events 10000000] [--master local[2]]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rehearsal.fleet import simulate_fleet  # noqa: E402
from rehearsal.fleet_spec import FleetSpec


def simulate(groups: int, members: int, out: Path) -> tuple[float, int, float]:
    """(simulated member-seconds per second, events, wall seconds) of a serial rolling upgrade."""
    spec = FleetSpec(scenario="rolling-upgrade", groups=groups, members=members, seed=1,
                     topics={"orders": 2 * members, "payments": members})
    result = simulate_fleet(spec, out, echo=lambda _: None)
    return result.member_seconds / result.wall_s, result.events, result.wall_s


def replicate(source: Path, target: Path, events: int) -> int:
    """Write ``events`` lines to target: source's lines, copy k under run ids suffixed with ~k."""
    lines = [line for f in sorted(source.glob("*.jsonl")) for line in f.read_text().splitlines(keepends=True)]
    runs = {line.split('"run":"', 1)[1].split('"', 1)[0] for line in lines}
    base = "".join(lines)
    written = 0
    target.mkdir(parents=True, exist_ok=True)
    copy = 0
    per_file = max(1, 1_000_000 // len(lines))  # ~1M lines per file: parallel reads, few files
    out = None
    while written < events:
        if copy % per_file == 0:
            if out is not None:
                out.close()
            out = (target / f"part-{copy // per_file:05d}.jsonl").open("w", encoding="utf-8")
        chunk = base
        for run in runs:
            chunk = chunk.replace(f'"run":"{run}"', f'"run":"{run}~{copy}"')
        if written + len(lines) > events:
            chunk = "".join(chunk.splitlines(keepends=True)[: events - written])
        assert out is not None
        out.write(chunk)
        written += min(len(lines), events - written)
        copy += 1
    if out is not None:
        out.close()
    return written


def pipeline(paths: list[str], master: str, out: Path) -> tuple[float, dict[str, object]]:
    """Seconds to read, compute, summarise and write the tables; and the summary."""
    from rehearsal import pipeline as p

    spark = p.spark_session(master)
    try:
        start = time.perf_counter()
        metrics = p.compute(p.load_events(spark, paths, check=False))
        summary = p.summarize(metrics)
        p.write(metrics, summary, str(out))
        return time.perf_counter() - start, summary
    finally:
        spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--sim-groups", type=int, default=40)
    ap.add_argument("--members", type=int, default=20)
    ap.add_argument("--workdir", help="keep the files here (default: a temporary directory, removed)")
    a = ap.parse_args()
    work = Path(a.workdir) if a.workdir else Path(tempfile.mkdtemp(prefix="rehearsal-bench-"))
    try:
        rate, sim_events, sim_wall = simulate(a.sim_groups, a.members, work / "sim")
        print(f"simulator: {a.sim_groups} groups x {a.members} members, {sim_events} events in {sim_wall:.1f}s, "
              f"{rate:.0f} simulated member-seconds per second", flush=True)
        started = time.perf_counter()
        n = replicate(work / "sim" / "events", work / "events", a.events)
        size = sum(f.stat().st_size for f in (work / "events").iterdir())
        print(f"replicated to {n} events ({size / 1e6:.0f} MB) in {time.perf_counter() - started:.1f}s", flush=True)
        seconds, summary = pipeline([str(work / "events")], a.master, work / "out")
        assert summary["events"] == n, summary["events"]
        print(f"pipeline ({a.master}): {n} events, {summary['groups']} groups, {summary['partitions']} partitions "
              f"in {seconds:.1f}s; cores={os.cpu_count()}", flush=True)
        print(f"events={n} pipeline_events_per_s={int(n / seconds)} sim_member_seconds_per_s={int(rate)}")
    finally:
        if not a.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
