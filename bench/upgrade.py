"""The rolling upgrade, straight against Kafka's own group coordinator and through the gateway's, in one run.

One Apache Kafka 4.4.0 broker (short group timings, compat_tests/upgrade/endpoints.py) and one
``groupgate serve`` in front of it. For each coordinator, in turn:

1. the rolling upgrade scenario of compat_tests/upgrade (five Java consumers of a 6-partition topic,
   classic range -> KIP-848 range and back, a VerifiableProducer throughout), measuring
   - time to complete (first restart to the last settle),
   - partition-unavailability seconds (summed time a partition had no owner, from the clients' events),
   - rebalances seen per consumer (assignment callbacks per fleet slot);
2. a synthetic heartbeat load (compat_tests/upgrade/heartbeat_load.py): N members on their own
   connections, joining one group and heartbeating as fast as the coordinator answers.

The LAST line printed is ``key=value`` pairs; the ratios are gateway / Kafka.

    .venv/bin/python bench/upgrade.py [--members 200] [--load-seconds 10] [--fleet java|confluent]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from compat_tests.harness.admin import create_topic
from compat_tests.harness.names import unique
from compat_tests.upgrade import endpoints, metrics
from compat_tests.upgrade.checks import assert_rolling_upgrade
from compat_tests.upgrade.group_probe import coordinator
from compat_tests.upgrade.heartbeat_load import LoadResult, run_load
from compat_tests.upgrade.members import RANGE, MemberSpec
from compat_tests.upgrade.scenario import RollingUpgrade, standard_run

FLEETS = {
    "java": (
        [MemberSpec("java", "classic", "3.9.1", RANGE) for _ in range(5)],
        [MemberSpec("java", "consumer", "4.4.0", "range") for _ in range(5)],
    ),
    "confluent": (
        [MemberSpec("confluent", "classic", assignor="range") for _ in range(5)],
        [MemberSpec("confluent", "consumer", assignor="range") for _ in range(5)],
    ),
}


@dataclass
class UpgradeFigures:
    seconds: float
    unavailable_s: float
    rebalances: dict[int, int]
    records: int

    @property
    def mean_rebalances(self) -> float:
        return statistics.fmean(self.rebalances.values())


def rolling_upgrade(bootstrap: str, broker: str, fleet: str, work: Path) -> UpgradeFigures:
    before, after = FLEETS[fleet]
    topic = create_topic(broker, unique("bench-upgrade"), 6)
    run = RollingUpgrade(bootstrap, topic, unique("bench-upgrade-group"), before, after, log_dir=work)
    try:
        produced = standard_run(run)
    finally:
        run.close()
    assert_rolling_upgrade(run, produced)  # figures of a run that broke an invariant would mean nothing
    first = next(s for s in run.steps if s.what.startswith("slot "))
    start_ms, end_ms = first.started_ms, run.steps[-1].settled_ms
    return UpgradeFigures(
        (end_ms - start_ms) / 1000.0,
        metrics.unavailable_seconds(run, start_ms, end_ms),
        metrics.rebalances_per_consumer(run, start_ms, end_ms),
        len(produced),
    )


def heartbeat_load(bootstrap: str, broker: str, members: int, seconds: float) -> LoadResult:
    topic = create_topic(broker, unique("bench-hb"), 64)
    group = unique("bench-hb-group")
    return asyncio.run(run_load(coordinator(bootstrap, group), group, topic, members, seconds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", type=int, default=200)
    ap.add_argument("--load-seconds", type=float, default=10.0)
    ap.add_argument("--fleet", choices=sorted(FLEETS), default="java")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-upgrade-"))
    kafka = endpoints.broker()
    kafka.start()
    gw = endpoints.gateway(kafka.bootstrap, work / "gateway")
    gw.start()
    try:
        targets = {"kafka": kafka.bootstrap, "gateway": gw.bootstrap}
        upgrade: dict[str, UpgradeFigures] = {}
        load: dict[str, LoadResult] = {}
        for name, bootstrap in targets.items():
            t = time.monotonic()
            upgrade[name] = rolling_upgrade(bootstrap, kafka.bootstrap, args.fleet, work / name)
            u = upgrade[name]
            print(
                f"[{name}] rolling upgrade+downgrade ({args.fleet}): {u.seconds:.1f} s, "
                f"partition-unavailability {u.unavailable_s:.1f} s, rebalances per consumer "
                f"{dict(sorted(u.rebalances.items()))} (mean {u.mean_rebalances:.1f}), {u.records} records "
                f"[{time.monotonic() - t:.0f} s wall]",
                flush=True,
            )
        for name, bootstrap in targets.items():
            load[name] = heartbeat_load(bootstrap, kafka.bootstrap, args.members, args.load_seconds)
            r = load[name]
            print(
                f"[{name}] heartbeat load: {r.members} members ({r.joined} joined), {r.heartbeats} heartbeats "
                f"in {r.seconds:.0f} s = {r.per_second:.0f}/s, errors {r.errors}",
                flush=True,
            )
    finally:
        gw.stop()
        kafka.stop()

    k, g = upgrade["kafka"], upgrade["gateway"]

    def ratio(a: float, b: float) -> float:
        return a / b if b else float("inf") if a else 1.0

    pairs = {
        "fleet": args.fleet,
        "kafka_duration_s": f"{k.seconds:.1f}",
        "gateway_duration_s": f"{g.seconds:.1f}",
        "duration_ratio": f"{ratio(g.seconds, k.seconds):.2f}",
        "kafka_unavailable_s": f"{k.unavailable_s:.1f}",
        "gateway_unavailable_s": f"{g.unavailable_s:.1f}",
        "unavailability_ratio": f"{ratio(g.unavailable_s, k.unavailable_s):.2f}",
        "kafka_rebalances_per_consumer": f"{k.mean_rebalances:.1f}",
        "gateway_rebalances_per_consumer": f"{g.mean_rebalances:.1f}",
        "hb_members": args.members,
        "kafka_heartbeats_per_s": f"{load['kafka'].per_second:.0f}",
        "gateway_heartbeats_per_s": f"{load['gateway'].per_second:.0f}",
        "heartbeat_throughput_ratio": f"{ratio(load['gateway'].per_second, load['kafka'].per_second):.2f}",
    }
    print(" ".join(f"{key}={value}" for key, value in pairs.items()))


if __name__ == "__main__":
    main()
