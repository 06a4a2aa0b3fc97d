"""Heartbeat and commit throughput with 1, 2 and 3 ``groupgate serve`` instances, against Kafka's own coordinator.

One embedded broker (or, with ``--brokers 3``, a 3-node KRaft cluster from the compat harness) and a fleet of
gateway instances in front of it sharing one state topic and one instances group (``instances_group``): the
instances split the shards among themselves, and FindCoordinator, asked of any instance, names the instance
serving the group's shard. After an untimed warm-up of the broker, each round measures Kafka's own coordinator
and the fleet at 1, 2 and 3 instances (ascending in even rounds, descending in odd ones: an instance joins or
leaves with SIGTERM, and the round waits until the shards are split evenly again). The workloads are ``bench/state.py``'s:

  - ``heartbeat``: steady KIP-848 heartbeats of a joined member (nothing to write);
  - ``commit``: synchronous offset commits of a librdkafka KIP-848 consumer.

``--clients`` threads each have their own group, client ``i``'s on shard ``i % 6`` (so the groups are spread
evenly over the shards, and over the instances); each asks FindCoordinator through one of the instances in
turn and talks to the instance named (librdkafka does that itself, bootstrapped on the list of instances).
Prints per-target p50/p99 latency and throughput, then a LAST line of ``key=value`` pairs: throughput ratios
against 1 instance and against Kafka, p99 ratios against Kafka.

All of it (broker, instances, clients) runs on one machine: on a machine of few cores, more instances share
the same cores, so this cannot show linear scaling; what it shows is what more instances cost or gain there.

    .venv/bin/python bench/fleet_scale.py [--quick] [--rounds 2] [--seconds 5] [--clients 6] [--brokers 1|3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.state import commits, heartbeats, start_cluster  # noqa: E402
from compat_tests.harness.admin import create_topic  # noqa: E402
from compat_tests.harness.brokers import free_port_block  # noqa: E402
from compat_tests.harness.gateway_proc import GatewayProcess  # noqa: E402
from compat_tests.harness.probe import roundtrip  # noqa: E402
from coordinator.errors import Errors  # noqa: E402
from gateway.state.store import shard_of  # noqa: E402

SHARDS = 6  # divisible by 1, 2 and 3: an even split at every size
SIZES = (1, 2, 3)
WORKLOADS = {"heartbeat": heartbeats, "commit": commits}
CORES_NOTE = (
    "note: broker, instances and clients share this machine's {cpus} cores (load average {load}): more instances "
    "on the same cores cannot scale linearly; the figures show what they cost or gain here"
)


def _spread(kind: str, i: int) -> str:
    """Client ``i``'s own group, on shard ``i % SHARDS``."""
    base = f"bench-{kind}-{uuid.uuid4().hex[:6]}"
    j = 0
    while shard_of(f"{base}-{j}", SHARDS) != i % SHARDS:
        j += 1
    return f"{base}-{j}"


class Fleet:
    """Gateway instances with one configuration: one state topic, one instances group."""

    def __init__(self, upstream: str, work: Path) -> None:
        self.upstream = upstream
        self.work = work
        name = f"bench-fleet-{uuid.uuid4().hex[:6]}"
        self.config = work / "gateway.toml"
        self.config.write_text(
            "[coordinator]\n"
            f'"state.topic.num.partitions" = {SHARDS}\n'
            f'state_topic = "{name}-state"\n'
            f'state_transactional_id_prefix = "{name}-"\n'
            f'instances_group = "{name}-instances"\n'
            "instances_session_timeout_ms = 6000\n"
            "instances_heartbeat_interval_ms = 500\n"
            "instances_rebalance_timeout_ms = 10000\n"
        )
        self.running: list[GatewayProcess] = []
        self.started: list[GatewayProcess] = []  # every process ever started, all stopped at the end
        # One group id per shard: DescribeGroups of it says whether an instance serves that shard.
        self.probes: dict[int, str] = {}
        i = 0
        while len(self.probes) < SHARDS:
            self.probes.setdefault(shard_of(f"probe-{i}", SHARDS), f"probe-{i}")
            i += 1

    @property
    def bootstrap(self) -> str:
        return ",".join(gw.bootstrap for gw in self.running)

    def resize(self, n: int) -> float:
        """Start or stop (SIGTERM) instances until ``n`` run and split the shards evenly; seconds it took."""
        began = time.monotonic()
        while len(self.running) > n:
            self.running.pop().stop()
        while len(self.running) < n:
            k = len(self.started)
            gw = GatewayProcess(
                upstream=self.upstream, extra_args=["--config", str(self.config), "--state-store", "kafka"],
                listen_port=free_port_block(8), log_dir=self.work / f"gw{k}",
            )
            (self.work / f"gw{k}").mkdir(parents=True, exist_ok=True)
            self.started.append(gw)
            gw.start(timeout_s=120)
            self.running.append(gw)
        deadline = time.monotonic() + 90
        while not self._split_evenly():
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {gw.log_path}\n{gw.tail(20)}" for gw in self.running)
                raise RuntimeError(f"{n} instances did not split the shards within 90 s\n{tails}")
            time.sleep(0.2)
        return time.monotonic() - began

    def _owned(self, gw: GatewayProcess) -> set[int]:
        out = set()
        for shard, group in self.probes.items():
            d = roundtrip(gw.bootstrap, DescribeGroupsRequest[5](groups=[group]), DescribeGroupsResponse, 5)
            if d.groups[0].error_code != Errors.NOT_COORDINATOR:
                out.add(shard)
        return out

    def _split_evenly(self) -> bool:
        owned = [self._owned(gw) for gw in self.running]
        return (
            sum(len(o) for o in owned) == SHARDS
            and set().union(*owned) == set(range(SHARDS))
            and all(len(o) == SHARDS // len(owned) for o in owned)
        )

    def stop(self) -> None:
        for gw in self.started:
            gw.stop()
        self.running.clear()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one round of 2 s per workload and target")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=SHARDS, help="a multiple of 6 keeps the groups evenly spread")
    ap.add_argument("--brokers", type=int, choices=(1, 3), default=1)
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.seconds = 1, 2.0

    work = Path(tempfile.mkdtemp(prefix="groupgate-bench-fleet-"))
    cluster = start_cluster(args.brokers)
    fleet: Fleet | None = None
    targets = ["kafka", *(f"gw{n}" for n in SIZES)]
    results: dict[str, dict[str, list[dict[str, float]]]] = {t: {w: [] for w in WORKLOADS} for t in targets}
    try:
        bootstrap = cluster.bootstrap
        topic = create_topic(bootstrap, f"bench-fleet-{uuid.uuid4().hex[:6]}", 1, replication_factor=args.brokers)
        fleet = Fleet(bootstrap, work)

        def measure(r: int, target: str, address: str) -> None:
            for wname, fn in WORKLOADS.items():
                got = fn(address, topic, args.clients, args.seconds, _spread)
                results[target][wname].append(got)
                print(
                    f"round {r} {target:6s} {wname:9s} p50 {got['p50']:7.2f} ms  p99 {got['p99']:7.2f} ms  "
                    f"{got['per_s']:8.0f}/s",
                    flush=True,
                )

        # Untimed: the broker's JVM compiles its hot paths in the first seconds, which would count against
        # Kafka's first round only.
        for fn in WORKLOADS.values():
            fn(bootstrap, topic, args.clients, args.seconds, _spread)
        for r in range(args.rounds):
            ascending = r % 2 == 0
            if ascending:
                measure(r, "kafka", bootstrap)
            for n in SIZES if ascending else tuple(reversed(SIZES)):
                took = fleet.resize(n)
                print(f"round {r} {n} instance(s) split the {SHARDS} shards evenly in {took:.1f} s", flush=True)
                measure(r, f"gw{n}", fleet.bootstrap)
            if not ascending:
                measure(r, "kafka", bootstrap)
    finally:
        if fleet is not None:
            fleet.stop()
        if args.brokers == 3:
            cluster.stop()
        else:
            cluster.cleanup()
    load = round(os.getloadavg()[0], 1)
    print(CORES_NOTE.format(cpus=os.cpu_count(), load=load), flush=True)
    summary: dict[str, Any] = {"rounds": args.rounds, "seconds": args.seconds, "clients": args.clients,
                               "brokers": args.brokers}
    for target, per in results.items():
        for wname, runs in per.items():
            for k in ("p50", "p99", "per_s"):
                summary[f"{wname}_{k}_{target}"] = round(statistics.median(x[k] for x in runs), 2)
    for wname in WORKLOADS:
        one, kafka = summary[f"{wname}_per_s_gw1"], summary[f"{wname}_per_s_kafka"]
        for n in SIZES:
            per_s, p99 = summary[f"{wname}_per_s_gw{n}"], summary[f"{wname}_p99_gw{n}"]
            if n > 1:
                summary[f"{wname}_per_s_ratio_gw{n}_to_gw1"] = round(per_s / one, 2) if one else None
            summary[f"{wname}_per_s_ratio_gw{n}_to_kafka"] = round(per_s / kafka, 2) if kafka else None
            base = summary[f"{wname}_p99_kafka"]
            summary[f"{wname}_p99_ratio_gw{n}_to_kafka"] = round(p99 / base, 2) if base else None
    summary["load_avg_1m"] = load
    summary["cpus"] = os.cpu_count()
    print(" ".join(f"{k}={v}" for k, v in summary.items()), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
