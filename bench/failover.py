"""Coordinator failover: a gateway instance SIGKILLed, against Kafka's own coordinator failover, in one run.

One 3-node Kafka 4.4.0 cluster (compat_tests/harness/cluster.py: replication factor 3, a killed broker
noticed after broker.session.timeout.ms = 3 s, the short group timings of compat_tests/upgrade). The
same consumer fleet (Java 4.4.0 and librdkafka, classic and KIP-848: a group mid rolling upgrade) and a
VerifiableProducer run twice:

- gateway: three ``groupgate serve`` instances in front of the cluster sharing the shards through an
  instances group (``instances_session_timeout_ms`` = the cluster's broker.session.timeout.ms, so both
  detect the death in the same time), the clients bootstrapped on the three; the instance owning the
  group's shard is SIGKILLed;
- kafka: the clients on the brokers; the broker leading the group's ``__consumer_offsets`` partition is
  SIGKILLed (then started again).

Measured from the kill:

- served again: until every affected group is answered again, through a survivor, by its new
  coordinator (FindCoordinator, then ConsumerGroupDescribe without a retriable error), polled every
  50 ms. Affected: the fleet's group and one idle group on each other shard / ``__consumer_offsets``
  partition the dead process coordinated;
- partition-unavailability: per partition of the fleet's topic, the gaps longer than 1 s between two
  records consumed (the producer writes ~16 records/s to each), summed over the partitions, from 1 s
  before the kill to the end of the window (the same for the records acknowledged to the producer, whose
  own stall shows in the consumers' too); per partition, the longest wait of a record acknowledged in
  that window until a consumer first read it (the consumers' share alone), summed; and the seconds a
  partition had no owner (the clients' assignment callbacks: a rebalance caused by the failover would
  show there). The consumers commit synchronously after every batch, so a commit waiting for the
  coordinator holds their consumption too, as it does an application's;
- members that took part in a rebalance or lost their partitions because of the failover.

Each run is checked as the compat tests check it (nothing acknowledged lost, no partition owned twice,
the group Stable and fully assigned at the end); a broken invariant is printed and named in the last
line, since the figures of such a run mean little. The LAST line is ``key=value`` pairs; the ratios are gateway / Kafka (below 1:
the gateway recovers quicker). Not run in CI (minutes; the figures depend on the machine's load).

    .venv/bin/python bench/failover.py [--quick] [--window 30] [--session-ms 3000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compat_tests.harness.admin import create_topic
from compat_tests.harness.brokers import free_port_block
from compat_tests.harness.cluster import CLUSTER_CONFIG, KafkaCluster
from compat_tests.harness.events import ProducedRecord
from compat_tests.harness.gateway_proc import GatewayProcess
from compat_tests.harness.invariants import missing, overlaps, tenures
from compat_tests.harness.java import (
    PartitionsAssigned,
    PartitionsRevoked,
    ProducerSendSuccess,
)
from compat_tests.harness.names import unique
from compat_tests.harness.probe import find_coordinator_endpoints, roundtrip
from compat_tests.upgrade import metrics
from compat_tests.upgrade.checks import assert_rolling_upgrade
from compat_tests.upgrade.endpoints import FAST_GROUP_SETTINGS
from compat_tests.upgrade.members import COOPERATIVE_STICKY, MemberSpec, Timeouts
from compat_tests.upgrade.scenario import SPREAD_PRODUCER, RollingUpgrade
from gateway.state.store import shard_of
from gateway.wire.protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse

SHARDS = 6
PARTITIONS = 6
RETRIABLE = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
GAP_MS = 1000.0

# A group mid rolling upgrade (classic -> KIP-848): each client and protocol.
FLEET = [
    MemberSpec("java", "classic", "4.4.0", COOPERATIVE_STICKY),
    MemberSpec("confluent", "classic", assignor="cooperative-sticky", retry_commits=True),
    MemberSpec("java", "consumer", "4.4.0", "uniform"),
    MemberSpec("confluent", "consumer", retry_commits=True),
]
QUICK_FLEET = [FLEET[1], FLEET[2]]
# Classic sessions outlast a failover, as Kafka's default 45 s does (see test_fleet_membership.py).
CLIENT_TIMEOUTS = Timeouts(session_ms=30000, heartbeat_ms=500)


@dataclass
class Figures:
    served_s: float
    groups: int
    gap_s: float  # summed consumption gaps (partition-seconds)
    produce_gap_s: float  # summed gaps between acknowledged records (partition-seconds)
    delay_s: float  # summed per-partition longest wait from acknowledgement to consumption
    unowned_s: float  # summed seconds without an owner (partition-seconds)
    rebalanced: int  # members called back with a new assignment or a revocation after the kill
    records: int
    broken: str  # the invariant the run broke (nothing lost, no partition owned twice), if any


class GatewayFleet:
    """Three instances sharing the shards (as compat_tests/test_fleet_membership.py's Fleet)."""

    def __init__(self, cluster: KafkaCluster, work: Path, session_ms: int) -> None:
        name = unique("bench-failover")
        work.mkdir(parents=True, exist_ok=True)
        config = work / "gateway.toml"
        settings = "".join(f'"{k}" = {v}\n' for k, v in FAST_GROUP_SETTINGS.items())
        config.write_text(
            f"[coordinator]\n{settings}"
            f'"state.topic.num.partitions" = {SHARDS}\n'
            f'state_topic = "{name}-state"\n'
            f'state_transactional_id_prefix = "{name}-"\n'
            f'instances_group = "{name}-instances"\n'
            f"instances_session_timeout_ms = {session_ms}\n"
            "instances_heartbeat_interval_ms = 500\n"
            "instances_rebalance_timeout_ms = 10000\n"
        )
        self.gateways = []
        # Each instance's ports: the bootstrap port P, then broker N's listener at P + 1 + N (N from 1).
        for n in range(3):
            (work / f"gw{n}").mkdir(parents=True, exist_ok=True)
            self.gateways.append(GatewayProcess(
                upstream=cluster.bootstrap, extra_args=["--config", str(config), "--state-store", "kafka"],
                listen_port=free_port_block(2 + max(cluster.brokers)), log_dir=work / f"gw{n}",
            ))
        self.probes: dict[int, str] = {}
        i = 0
        while len(self.probes) < SHARDS:
            self.probes.setdefault(shard_of(f"bench-probe-{i}", SHARDS), f"bench-probe-{i}")
            i += 1

    def start(self) -> None:
        for gw in self.gateways:
            gw.start(timeout_s=120)
        deadline = time.monotonic() + 90
        while [len(self.owned(gw)) for gw in self.gateways] != [2, 2, 2]:
            if time.monotonic() > deadline:
                raise TimeoutError("the three instances did not split the shards")
            time.sleep(0.3)

    def unopened_listeners(self) -> list[str]:
        """The instances' "cannot open broker listener" lines: a port of the block taken by another
        process between choosing and binding it (such a broker is routed to another instance)."""
        return [f"{gw.bootstrap}: {line.strip()}" for gw in self.gateways if gw.log_path.exists()
                for line in gw.log_path.read_text(errors="replace").splitlines()
                if "cannot open broker listener" in line]

    def owned(self, gw: GatewayProcess) -> set[int]:
        return {n for n, group in self.probes.items() if _served_at(gw.bootstrap, group)}

    def stop(self) -> None:
        for gw in self.gateways:
            gw.stop()


def _describe(address: str, group: str) -> int:
    req: Any = ConsumerGroupDescribeRequest[0]  # type: ignore[misc]
    r = roundtrip(address, req(group_ids=[group], include_authorized_operations=False), ConsumerGroupDescribeResponse, 0)
    return int(r.groups[0].error_code)


def _served_at(address: str, group: str) -> bool:
    try:
        return _describe(address, group) not in RETRIABLE
    except OSError:
        return False


def _served(via: str, group: str) -> bool:
    """Whether ``group``'s coordinator, as ``via`` names it, answers it now."""
    try:
        (ep,) = find_coordinator_endpoints(via, group, 4, timeout_s=0)
        return _served_at(ep.address, group)
    except (AssertionError, OSError, ValueError):
        return False


def _groups_on(n: int, partitions: int) -> str:
    i = 0
    while shard_of(f"bench-idle-{n}-{i}", partitions) != n:
        i += 1
    return f"bench-idle-{n}-{i}"


def _callbacks(run: RollingUpgrade, after_ms: float) -> int:
    """Members called back with an assignment or a revocation after ``after_ms``."""
    out = 0
    for m in run.members.values():
        if m.tool is not None:
            events = [e for e in m.tool.events if isinstance(e, PartitionsAssigned | PartitionsRevoked)]
            out += any(e.timestamp_ms > after_ms for e in events)
        else:
            out += any(e.consumer == m.name and e.at_ms > after_ms for e in list(run.log.ownership))
    return out


def _gaps(times: dict[int, list[float]], start_ms: float, end_ms: float) -> tuple[float, dict[int, float]]:
    """Summed gaps longer than GAP_MS between the events of each partition in [start_ms, end_ms]
    (partition-seconds), and each partition's longest gap (seconds)."""
    total, longest = 0.0, {}
    for p in range(PARTITIONS):
        inside = sorted({start_ms, end_ms, *(t for t in times.get(p, []) if start_ms <= t <= end_ms)})
        gaps = [b - a for a, b in zip(inside, inside[1:], strict=False)]
        total += sum(g for g in gaps if g > GAP_MS)
        longest[p] = max(gaps, default=0.0) / 1000.0
    return total / 1000.0, longest


def _consumption_gaps(run: RollingUpgrade, start_ms: float, end_ms: float) -> tuple[float, dict[int, float]]:
    """Over the records consumed (once the run is closed: every Java member's events are in the log)."""
    times: dict[int, list[float]] = {}
    for r in list(run.log.records):
        times.setdefault(r.partition, []).append(r.at_ms)
    return _gaps(times, start_ms, end_ms)


def _production_gaps(run: RollingUpgrade, start_ms: float, end_ms: float) -> float:
    """Over the records acknowledged to the producer (once it has stopped: all its events are read)."""
    times: dict[int, list[float]] = {}
    for e in run.producer.of_type(ProducerSendSuccess) if run.producer is not None else []:
        times.setdefault(e.partition.partition, []).append(e.timestamp_ms)
    return _gaps(times, start_ms, end_ms)[0]


def _delivery_delays(run: RollingUpgrade, start_ms: float, end_ms: float) -> float:
    """Per partition, the longest wait of a record acknowledged in [start_ms, end_ms] before a consumer
    first read it (seconds), summed over the partitions: the consumers' share of the unavailability,
    apart from the producer's."""
    first: dict[tuple[str, int, int], float] = {}
    for r in list(run.log.records):
        first[r.position] = min(first.get(r.position, r.at_ms), r.at_ms)
    worst: dict[int, float] = {}
    for e in run.producer.of_type(ProducerSendSuccess) if run.producer is not None else []:
        at = first.get((e.partition.topic, e.partition.partition, e.offset))
        if start_ms <= e.timestamp_ms <= end_ms and at is not None:
            worst[e.partition.partition] = max(worst.get(e.partition.partition, 0.0), at - e.timestamp_ms)
    return sum(worst.values()) / 1000.0


def _explain(run: RollingUpgrade, produced: list[ProducedRecord], killed_ms: float, closing_ms: float) -> list[str]:
    """What a broken run shows, times in seconds from the kill: per partition with records never
    consumed, how many, when they were acknowledged, who held the partition and who last consumed it;
    per partition owned twice, the two holdings and when the fleet's shutdown began."""
    def at(ms: float) -> str:
        return f"{(ms - killed_ms) / 1000:+.1f}s"

    out = []
    gone = set(missing(produced, run.log))
    acked: dict[int, list[float]] = {}
    for e in run.producer.of_type(ProducerSendSuccess) if run.producer is not None else []:
        if (e.partition.topic, e.partition.partition, e.offset) in gone:
            acked.setdefault(e.partition.partition, []).append(e.timestamp_ms)
    holders: dict[int, list[str]] = {}
    for t in tenures(run.log):
        holders.setdefault(t.partition[1], []).append(
            f"{t.consumer} {at(t.start_ms)}..{at(t.end_ms) if t.end_ms != float('inf') else 'end'}")
    last: dict[int, tuple[float, str]] = {}
    for r in run.log.records:
        last[r.partition] = max(last.get(r.partition, (0.0, "")), (r.at_ms, r.consumer))
    for p, times in sorted(acked.items()):
        seen = f"{last[p][1]} at {at(last[p][0])}" if p in last else "never"
        out.append(f"partition {p}: {len(times)} never consumed, acknowledged {at(min(times))}..{at(max(times))}; "
                   f"held by {holders.get(p, [])}; last consumed by {seen}")
    for o in overlaps(run.log):
        out.append(f"partition {o.partition[1]} owned twice: {o.first.consumer} {at(o.first.start_ms)}.."
                   f"{at(o.first.end_ms)} and {o.second.consumer} {at(o.second.start_ms)}..{at(o.second.end_ms)}; "
                   f"the fleet's shutdown began {at(closing_ms)}")
    return out


def scenario(
    name: str, run: RollingUpgrade, kill: Callable[[], tuple[str, list[str]]], window_s: float,
    after: Callable[[], None] = lambda: None,
) -> Figures:
    """Fleet up and settled with the producer running; ``kill()`` (returns a live address to probe through
    and the affected groups); served-again polled; the window waited out; then drained and checked."""
    members = len(run.before)
    try:
        run.start_fleet()
        run.start_producer()
        run.settle("before the kill", time.time() * 1000)
        time.sleep(2.0)
        killed_ms = time.time() * 1000
        t0 = time.monotonic()
        via, groups = kill()
        waiting = set(groups)
        while waiting and time.monotonic() - t0 < window_s:
            waiting = {g for g in waiting if not _served(via, g)}
            time.sleep(0.05)
        served_s = time.monotonic() - t0 if not waiting else float("inf")
        time.sleep(max(0.0, window_s - (time.monotonic() - t0)))
        end_ms = time.time() * 1000
        owners = {p: names for (_, p), names in run.ownership().items()}
        rebalanced = _callbacks(run, killed_ms)
        after()
        broken = ""
        produced = run.stop_producer()
        try:
            run.wait_consumed(produced)
        except AssertionError as e:  # records never consumed: reported beside the figures
            broken = str(e).splitlines()[0][:400]
        closing_ms = time.time() * 1000
    finally:
        run.close()
    # Once the run is closed: the tools' output read to the end, every Java member's events in the log
    # (read while they run, the events of a loaded machine's tools lag behind).
    gaps, longest = _consumption_gaps(run, killed_ms - 1000, end_ms)
    produce_gaps = _production_gaps(run, killed_ms - 1000, end_ms)
    delays = _delivery_delays(run, killed_ms - 1000, end_ms)
    unowned = metrics.unavailable_seconds(run, killed_ms, end_ms)
    if not broken:
        try:
            assert_rolling_upgrade(run, produced)
        except AssertionError as e:  # reported beside the figures, which then mean little
            broken = str(e).splitlines()[0][:400]
    if broken:
        print(f"[{name}] INVARIANT BROKEN: {broken}", flush=True)
        for line in _explain(run, produced, killed_ms, closing_ms):
            print(f"[{name}]   {line}", flush=True)
    acknowledged = len(run.producer.of_type(ProducerSendSuccess)) if run.producer is not None else 0
    f = Figures(served_s, len(groups), gaps, produce_gaps, delays, unowned, rebalanced, acknowledged, broken)
    print(
        f"[{name}] every affected group ({f.groups}) served again {f.served_s:.1f} s after the kill; "
        f"consumption gaps > {GAP_MS / 1000:.0f} s: {f.gap_s:.1f} partition-s (production gaps: "
        f"{f.produce_gap_s:.1f}); longest wait from acknowledged to consumed, summed: {f.delay_s:.1f} s; "
        f"without an owner: "
        f"{f.unowned_s:.1f} partition-s; members called back after the kill: {f.rebalanced}/{members}; "
        f"{f.records} records",
        flush=True,
    )
    print(f"[{name}] per partition: longest consumption gap (s), owner: "
          f"{ {p: (round(longest[p], 1), owners.get(p)) for p in sorted(longest)} }", flush=True)
    return f


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="two members (librdkafka classic, Java KIP-848), 15 s window")
    ap.add_argument("--window", type=float, default=30.0, help="seconds observed after the kill")
    ap.add_argument("--session-ms", type=int, default=int(CLUSTER_CONFIG["broker.session.timeout.ms"]),
                    help="instances_session_timeout_ms (default: the cluster's broker.session.timeout.ms)")
    args = ap.parse_args()
    fleet_specs = QUICK_FLEET if args.quick else FLEET
    window = 15.0 if args.quick and args.window == 30.0 else args.window

    work = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    cluster = KafkaCluster()
    fleet: GatewayFleet | None = None
    results: dict[str, Figures] = {}
    try:
        cluster.start()
        fleet = GatewayFleet(cluster, work / "fleet", args.session_ms)
        fleet.start()
        a, b, c = fleet.gateways
        offsets_partitions = int(CLUSTER_CONFIG["offsets.topic.num.partitions"])

        # The gateway: the instance owning the group's shard killed.
        group = unique("bench-failover-group")
        victim = next(gw for gw in fleet.gateways if shard_of(group, SHARDS) in fleet.owned(gw))
        survivor = next(gw for gw in fleet.gateways if gw is not victim)
        topic = create_topic(cluster.bootstrap, unique("bench-failover"), PARTITIONS, replication_factor=3)
        run = RollingUpgrade(
            ",".join(gw.bootstrap for gw in (victim, *(g for g in fleet.gateways if g is not victim))),
            topic, group, fleet_specs, fleet_specs, partitions=PARTITIONS, timeouts=CLIENT_TIMEOUTS,
            log_dir=work / "gateway-clients", allow_send_errors=True, probe=victim.bootstrap,
            producer_props=SPREAD_PRODUCER,
        )

        def kill_instance() -> tuple[str, list[str]]:
            shards = fleet.owned(victim)
            victim.kill()
            run.probe = survivor.bootstrap
            return survivor.bootstrap, [group] + [_groups_on(n, SHARDS) for n in sorted(shards) if n != shard_of(group, SHARDS)]

        results["gateway"] = scenario("gateway", run, kill_instance, window)
        for line in fleet.unopened_listeners():
            print(f"[gateway] {line}", flush=True)

        # Kafka: the broker leading the group's __consumer_offsets partition killed.
        group = unique("bench-failover-group")
        topic = create_topic(cluster.bootstrap, unique("bench-failover"), PARTITIONS, replication_factor=3)
        offsets = shard_of(group, offsets_partitions)  # Kafka's partitionFor
        run = RollingUpgrade(
            cluster.bootstrap, topic, group, fleet_specs, fleet_specs, partitions=PARTITIONS,
            timeouts=CLIENT_TIMEOUTS, log_dir=work / "kafka-clients", allow_send_errors=True,
            probe=cluster.brokers[1].bootstrap, producer_props=SPREAD_PRODUCER,
        )
        killed: list[int] = []

        def kill_broker() -> tuple[str, list[str]]:
            leader = cluster.wait_leader("__consumer_offsets", offsets)
            led = [p for p in range(offsets_partitions) if cluster.leader("__consumer_offsets", p) == leader]
            live = next(b.bootstrap for n, b in cluster.brokers.items() if n != leader)
            run.probe = live
            killed.append(leader)
            cluster.kill(leader)
            return live, [group] + [_groups_on(p, offsets_partitions) for p in led if p != offsets]

        def restart_broker() -> None:
            for n in killed:
                cluster.restart(n)

        results["kafka"] = scenario("kafka", run, kill_broker, window, after=restart_broker)
    finally:
        if fleet is not None:
            fleet.stop()
        cluster.stop()

    g, k = results["gateway"], results["kafka"]

    def ratio(x: float, y: float) -> str:
        return f"{x / y:.2f}" if y else ("inf" if x else "1.00")

    pairs = {
        "members": len(fleet_specs),
        "instances_session_timeout_ms": args.session_ms,
        "broker_session_timeout_ms": CLUSTER_CONFIG["broker.session.timeout.ms"],
        "gateway_served_again_s": f"{g.served_s:.1f}",
        "kafka_served_again_s": f"{k.served_s:.1f}",
        "served_again_ratio": ratio(g.served_s, k.served_s),
        "gateway_consumption_gap_partition_s": f"{g.gap_s:.1f}",
        "kafka_consumption_gap_partition_s": f"{k.gap_s:.1f}",
        "consumption_gap_ratio": ratio(g.gap_s, k.gap_s),
        "gateway_production_gap_partition_s": f"{g.produce_gap_s:.1f}",
        "kafka_production_gap_partition_s": f"{k.produce_gap_s:.1f}",
        "gateway_delivery_delay_s": f"{g.delay_s:.1f}",
        "kafka_delivery_delay_s": f"{k.delay_s:.1f}",
        "delivery_delay_ratio": ratio(g.delay_s, k.delay_s),
        "gateway_unowned_partition_s": f"{g.unowned_s:.1f}",
        "kafka_unowned_partition_s": f"{k.unowned_s:.1f}",
        "gateway_members_rebalanced": g.rebalanced,
        "kafka_members_rebalanced": k.rebalanced,
        "gateway_invariants": "broken" if g.broken else "held",
        "kafka_invariants": "broken" if k.broken else "held",
    }
    print(" ".join(f"{key}={value}" for key, value in pairs.items()))


if __name__ == "__main__":
    main()
