"""Gateway processes sharing the shards through an instances group on the session broker (classic
group protocol, gateway/fleet/membership.py):

- they split the shards, no shard served by both (seen from outside: a group of a shard the process does
  not own is answered NOT_COORDINATOR);
- FindCoordinator names the owner's coordinator node, the same node id and address from both;
- SIGTERM one: the other serves every shard within seconds, and a KIP-848 group and a classic group whose
  shard moved keep their member ids, epochs and assignments (read through the survivor); a librdkafka
  consumer that bootstrapped on the survivor but was coordinated by the stopped one carries on, with
  nothing lost and its partitions never revoked; the rest of a rolling restart (the first one back,
  the second stopped) keeps the members too;
- of three, SIGKILL the one coordinating a mixed fleet mid rolling upgrade (Java 4.4.0 and librdkafka,
  classic and KIP-848, bootstrapped on every instance): the two others take its shards over (and only
  those) once the cluster expired the dead member (the instances group's session timeout); the members
  keep their ids, epochs and assignments, none takes part in a rebalance, every partition is consumed
  again; the upgrade then completes through the survivors, and a rolling restart of the three expires
  no member and causes no rebalance; nothing is lost and no partition owned twice.
"""

from __future__ import annotations

import socket
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

from compat_tests.harness.admin import create_topic
from compat_tests.harness.brokers import ProcessBackend, free_port_block
from compat_tests.harness.clients import ConfluentConsumer, produce_confluent, values
from compat_tests.harness.events import EventLog
from compat_tests.harness.gateway_proc import GatewayProcess
from compat_tests.harness.java import (
    PartitionsAssigned,
    PartitionsRevoked,
    ProducerSendSuccess,
    RecordsConsumed,
)
from compat_tests.harness.names import unique
from compat_tests.harness.probe import find_coordinator_endpoints, metadata_endpoints, roundtrip
from compat_tests.upgrade.checks import assert_rolling_upgrade, assert_same_membership
from compat_tests.upgrade.endpoints import FAST_GROUP_SETTINGS
from compat_tests.upgrade.members import COOPERATIVE_STICKY, MemberSpec, Timeouts
from compat_tests.upgrade.scenario import SPREAD_PRODUCER, RollingUpgrade
from gateway.net.routes import pick
from gateway.ops.embedded_kafka import free_port
from gateway.state.store import shard_of
from gateway.wire.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

pytestmark = pytest.mark.kafka

SHARDS = 6
PARTITIONS = 6
SESSION_MS = 6000  # the brokers' group.min.session.timeout.ms: the shortest failover the cluster allows
NOT_COORDINATOR = 16
ALL = set(range(SHARDS))


class Fleet:
    """Gateway processes with the same configuration: one state topic, one instances group."""

    def __init__(self, kafka: ProcessBackend, work: Path, groups: dict[str, int] | None = None) -> None:
        """``groups``: the instances' own group coordinator settings (Kafka's names), if not the defaults."""
        self.kafka = kafka
        self.work = work
        name = unique("fleet")
        self.config = work / "gateway.toml"
        settings = "".join(f'"{k}" = {v}\n' for k, v in (groups or {}).items())
        self.config.write_text(
            "[coordinator]\n"
            f"{settings}"
            f'"state.topic.num.partitions" = {SHARDS}\n'
            f'state_topic = "{name}-state"\n'
            f'state_transactional_id_prefix = "{name}-"\n'
            f'instances_group = "{name}-instances"\n'
            f"instances_session_timeout_ms = {SESSION_MS}\n"
            "instances_heartbeat_interval_ms = 500\n"
            "instances_rebalance_timeout_ms = 10000\n"
        )
        self.gateways: list[GatewayProcess] = []
        # One group id per shard: DescribeGroups of it says whether a process serves that shard.
        self.probes: dict[int, str] = {}
        i = 0
        while len(self.probes) < SHARDS:
            self.probes.setdefault(shard_of(f"probe-{i}", SHARDS), f"probe-{i}")
            i += 1

    def start(self, listen_port: int | None = None) -> GatewayProcess:
        n = len(self.gateways)
        gw = GatewayProcess(
            upstream=self.kafka.bootstrap,
            extra_args=[
                "--config", str(self.config), "--state-store", "kafka",
                "--metrics-listen", f"127.0.0.1:{free_port()}",  # the same port again after a restart
            ],
            # The bootstrap port, then node N's listener at +1+N (node 1).
            listen_port=listen_port if listen_port is not None else free_port_block(3),
            log_dir=self.work / f"gw{n}",
        )
        (self.work / f"gw{n}").mkdir(parents=True, exist_ok=True)
        self.gateways.append(gw)
        gw.start(timeout_s=60)
        return gw

    def owned(self, gw: GatewayProcess) -> set[int]:
        """The shards ``gw`` serves now, as a client sees it."""
        out = set()
        for n, group in self.probes.items():  # one request each: one unowned group fails a whole request
            d = roundtrip(gw.bootstrap, DescribeGroupsRequest[5](groups=[group]), DescribeGroupsResponse, 5)
            if d.groups[0].error_code != NOT_COORDINATOR:
                out.add(n)
        return out

    def stop(self) -> None:
        for gw in self.gateways:
            gw.stop()


def _wait(what: str, predicate: Callable[[], bool], timeout_s: float, fleet: Fleet) -> float:
    """Seconds until ``predicate`` held."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if predicate():
            return time.monotonic() - start
        time.sleep(0.1)
    tails = "\n".join(f"--- {gw.log_path}\n{gw.tail(30)}" for gw in fleet.gateways)
    raise AssertionError(f"not within {timeout_s}s: {what}\n{tails}")


@pytest.fixture
def fleet(kafka: ProcessBackend, tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(kafka, tmp_path)
    try:
        yield f
    finally:
        f.stop()


def _split_evenly(fleet: Fleet, gateways: list[GatewayProcess]) -> None:
    def split() -> bool:
        owned = [fleet.owned(gw) for gw in gateways]
        for i, mine in enumerate(owned):
            for theirs in owned[i + 1:]:
                assert not mine & theirs, f"shards served by two instances: {sorted(mine & theirs)}"
        return set().union(*owned) == ALL and all(len(o) == SHARDS // len(gateways) for o in owned)

    _wait(f"{len(gateways)} instances split the shards", split, 30, fleet)


def _split(fleet: Fleet, n: int = 2) -> list[GatewayProcess]:
    first = fleet.start()
    _wait("the first instance serves every shard", lambda: fleet.owned(first) == ALL, 30, fleet)
    gateways = [first] + [fleet.start() for _ in range(n - 1)]
    _split_evenly(fleet, gateways)
    return gateways


def _group_on(owned: set[int], prefix: str) -> str:
    i = 0
    while shard_of(f"{prefix}-{i}", SHARDS) not in owned:
        i += 1
    return f"{prefix}-{i}"


def _consumer_member(address: str, group: str, topic: str) -> tuple[str, int]:
    """A KIP-848 member joined and reconciled: (member id, epoch)."""
    member_id = str(uuid.uuid4())
    epoch, owned = 0, None
    for _ in range(20):
        hb: Any = ConsumerGroupHeartbeatRequest[1]  # type: ignore[misc]
        r = roundtrip(address, hb(
            group_id=group, member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30000 if epoch == 0 else -1,
            subscribed_topic_names=[topic] if epoch == 0 else None, subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=[] if epoch == 0 else owned,
        ), ConsumerGroupHeartbeatResponse, 1)
        assert r.error_code == 0, r
        epoch = r.member_epoch
        if r.assignment is not None:
            owned = [(tp.topic_id, tp.partitions) for tp in r.assignment.topic_partitions]
            if owned:
                return member_id, epoch
        time.sleep(0.2)
    raise AssertionError(f"member of {group} got no assignment")


def _consumer_view(address: str, group: str) -> tuple[int, list[tuple[str, int, list[Any]]]]:
    r = roundtrip(address, ConsumerGroupDescribeRequest[0](group_ids=[group]), ConsumerGroupDescribeResponse, 0)
    (g,) = r.groups
    assert g.error_code == 0, g
    return g.group_epoch, sorted(
        (m.member_id, m.member_epoch, sorted((tp.topic_name, sorted(tp.partitions)) for tp in m.assignment.topic_partitions))
        for m in g.members
    )


def _classic_member(address: str, group: str) -> tuple[str, int]:
    protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
    j = roundtrip(address, JoinGroupRequest[3](
        group_id=group, session_timeout_ms=45000, rebalance_timeout_ms=10000, member_id="",
        protocol_type="consumer", protocols=protocols,
    ), JoinGroupResponse, 3)
    assert j.error_code == 0, j
    s = roundtrip(address, SyncGroupRequest[2](
        group_id=group, generation_id=j.generation_id, member_id=j.member_id,
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=j.member_id, assignment=b"parts-0-1")],
    ), SyncGroupResponse, 2)
    assert s.error_code == 0, s
    return j.member_id, j.generation_id


def _classic_view(address: str, group: str) -> list[tuple[str, bytes]]:
    d = roundtrip(address, DescribeGroupsRequest[5](groups=[group]), DescribeGroupsResponse, 5)
    (g,) = d.groups
    assert g.error_code == 0, g
    return sorted((m.member_id, bytes(m.member_assignment)) for m in g.members)


def _classic_heartbeat(address: str, group: str, member_id: str, generation: int) -> int:
    r = roundtrip(address, HeartbeatRequest[2](group_id=group, generation_id=generation, member_id=member_id), HeartbeatResponse, 2)
    return int(r.error_code)


def _coordinator_node(bootstrap: str, group: str) -> tuple[int, str]:
    (ep,) = find_coordinator_endpoints(bootstrap, group, 4)
    return ep.node_id, ep.address


def test_a_broker_listener_held_by_another_process_is_routed_to_the_other_instance(
    kafka: ProcessBackend, fleet: Fleet
) -> None:
    """Of two instances, the one the routing picks for broker 1 cannot open that listener (its port held
    by another process): it logs it, and both instances name the other one's listener for broker 1 (never
    the held port), so a librdkafka consumer bootstrapped on the first alone consumes everything."""
    ports = [free_port_block(3), free_port_block(3)]
    picked = pick(1, [f"127.0.0.1:{p}" for p in ports])
    held, other = sorted(ports, key=lambda p: f"127.0.0.1:{p}" != picked)
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        holder.bind(("127.0.0.1", held + 2))  # broker 1's listener port on that instance
        holder.listen(1)
        a = fleet.start(listen_port=held)
        b = fleet.start(listen_port=other)
        _wait("the two instances split the shards", lambda: fleet.owned(a) | fleet.owned(b) == ALL
              and bool(fleet.owned(a)) and bool(fleet.owned(b)), 60, fleet)
        assert "cannot open broker listener" in a.log_path.read_text(errors="replace")
        expected = f"127.0.0.1:{other + 2}"
        _wait("both instances name the other instance's listener for broker 1",
              lambda: all({e.node_id: e.address for e in metadata_endpoints(gw.bootstrap)}.get(1) == expected
                          for gw in (a, b)), 30, fleet)
        topic = create_topic(kafka.bootstrap, unique("fleet-held-port"), 3)
        produce_confluent(kafka.bootstrap, topic, values("held", 30))
        log = EventLog()
        client = ConfluentConsumer(name="rdkafka-held", log=log, bootstrap=a.bootstrap,
                                   group_id=unique("fleet-held-port-group"), topics=[topic]).start()
        try:
            _wait("the client bootstrapped on the first consumed everything", lambda: log.count() >= 30, 60, fleet)
        finally:
            client.stop()
    finally:
        holder.close()


def test_two_instances_split_the_shards_and_sigterm_and_a_rolling_restart_keep_members(
    kafka: ProcessBackend, fleet: Fleet
) -> None:
    a, b = _split(fleet)
    topic = create_topic(kafka.bootstrap, unique("fleet-topic"), 2)
    moving = fleet.owned(a)
    consumer_group, classic_group = _group_on(moving, "fleet-cg"), _group_on(moving, "fleet-classic")
    client_group = _group_on(moving, "fleet-rdkafka")
    # Both instances name the owner's coordinator node, with the same node id and address.
    assert _coordinator_node(a.bootstrap, consumer_group) == _coordinator_node(b.bootstrap, consumer_group)
    assert _coordinator_node(b.bootstrap, consumer_group)[1] == a.bootstrap
    # A real client bootstrapped on b is sent to a for its group, and consumes through the fleet.
    log = EventLog()
    produce_confluent(kafka.bootstrap, topic, values("before", 20))
    client = ConfluentConsumer(name="rdkafka-0", log=log, bootstrap=b.bootstrap, group_id=client_group, topics=[topic],
                               group_protocol="consumer").start()
    _wait("the client consumed what was produced", lambda: log.count() >= 20, 30, fleet)
    client_before = _consumer_view(a.bootstrap, client_group)
    m1, e1 = _consumer_member(a.bootstrap, consumer_group, topic)
    c1, gen = _classic_member(a.bootstrap, classic_group)
    before = _consumer_view(a.bootstrap, consumer_group)
    classic_before = _classic_view(a.bootstrap, classic_group)
    assert (m1, e1) in [(m, e) for m, e, _ in before[1]] and classic_before[0][0] == c1
    # The other instance does not serve them.
    r = roundtrip(b.bootstrap, ConsumerGroupDescribeRequest[0](group_ids=[consumer_group]), ConsumerGroupDescribeResponse, 0)
    assert r.groups[0].error_code == NOT_COORDINATOR
    assert _classic_heartbeat(b.bootstrap, classic_group, c1, gen) == NOT_COORDINATOR

    a.stop()  # SIGTERM: drains, flushes, leaves the instances group at once
    took = _wait("the survivor serves every shard", lambda: fleet.owned(b) == ALL, 15, fleet)
    print(f"SIGTERM handover: the survivor served every shard {took:.1f}s after the process exited")

    assert _consumer_view(b.bootstrap, consumer_group) == before
    assert _classic_view(b.bootstrap, classic_group) == classic_before
    assert _classic_heartbeat(b.bootstrap, classic_group, c1, gen) == 0  # same generation: no rebalance
    hb: Any = ConsumerGroupHeartbeatRequest[1]  # type: ignore[misc]
    steady = roundtrip(b.bootstrap, hb(
        group_id=consumer_group, member_id=m1, member_epoch=e1, instance_id=None, rack_id=None,
        rebalance_timeout_ms=-1, subscribed_topic_names=None, subscribed_topic_regex=None, server_assignor=None,
        topic_partitions=None,
    ), ConsumerGroupHeartbeatResponse, 1)
    assert (steady.error_code, steady.member_epoch) == (0, e1)
    assert "left the instances group" in a.tail(400)
    assert _coordinator_node(b.bootstrap, consumer_group)[1] == b.bootstrap

    produce_confluent(kafka.bootstrap, topic, values("after", 20))
    _wait("the client consumed what was produced after the handover", lambda: log.count() >= 40, 30, fleet)
    # The same member, epoch and assignment, now coordinated by the survivor: no rebalance.
    assert _consumer_view(b.bootstrap, client_group) == client_before
    mark = time.time() * 1000
    client.stop()
    assert {r.value for r in log.records} >= set(values("before", 20)) | set(values("after", 20))
    # Its partitions were never revoked nor lost while it ran (closing revokes them).
    assert [e for e in log.ownership if e.kind in ("revoked", "lost") and e.at_ms < mark] == [], log.ownership

    # The rest of a rolling restart: the stopped instance comes back (the shards split again), then the
    # other one is stopped. Nobody's membership expired on the way.
    a.start(timeout_s=60)
    _split_evenly(fleet, [a, b])
    b.stop()
    _wait("the restarted instance serves every shard", lambda: fleet.owned(a) == ALL, 15, fleet)
    assert _consumer_view(a.bootstrap, consumer_group) == before
    assert _classic_view(a.bootstrap, classic_group) == classic_before
    assert _classic_heartbeat(a.bootstrap, classic_group, c1, gen) == 0


# A fleet of four consumers mid rolling upgrade (classic -> KIP-848): each client and protocol once. The
# classic members share one assignor (a classic group takes only members with a protocol in common).
BEFORE = [
    MemberSpec("java", "classic", "4.4.0", COOPERATIVE_STICKY),
    MemberSpec("confluent", "classic", assignor="cooperative-sticky", retry_commits=True),
    MemberSpec("java", "classic", "4.4.0", COOPERATIVE_STICKY),
    MemberSpec("confluent", "classic", assignor="cooperative-sticky", retry_commits=True),
]
AFTER = [
    MemberSpec("java", "consumer", "4.4.0", "uniform"),
    MemberSpec("confluent", "consumer", retry_commits=True),
    MemberSpec("java", "consumer", "4.4.0", "uniform"),
    MemberSpec("confluent", "consumer", retry_commits=True),
]
# The classic members' sessions outlast a failover (the instances group's session timeout, then the
# load), as Kafka's default 45 s outlasts a broker's: a librdkafka classic member whose heartbeats go
# unanswered for its whole session gives it up itself (SESSTMOUT) and rejoins under a new id.
CLIENT_TIMEOUTS = Timeouts(session_ms=30000, heartbeat_ms=500)


@pytest.fixture
def upgrade_fleet(kafka: ProcessBackend, tmp_path: Path) -> Iterator[Fleet]:
    """Instances with the short group timings of the rolling upgrade suites (FAST_GROUP_SETTINGS)."""
    (tmp_path / "fleet").mkdir()
    f = Fleet(kafka, tmp_path / "fleet", FAST_GROUP_SETTINGS)
    try:
        yield f
    finally:
        f.stop()


def _expired(gw: GatewayProcess) -> float:
    """Members the instance removed with a timer (session or rebalance expiry), from its /metrics."""
    i = gw.extra_args.index("--metrics-listen")
    with urllib.request.urlopen(f"http://{gw.extra_args[i + 1]}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
        if line.startswith("groupgate_group_members_expired_total{")
    )


def test_of_three_instances_the_one_coordinating_a_mixed_fleet_mid_upgrade_sigkilled_then_a_rolling_restart(
    kafka: ProcessBackend, upgrade_fleet: Fleet, tmp_path: Path
) -> None:
    """Three instances; a fleet of Java 4.4.0 and librdkafka consumers, classic and KIP-848, half-way
    through its rolling upgrade, its group on a shard of the first instance, the clients bootstrapped on
    every instance's address (as operators are told to), a producer throughout.

    SIGKILL that instance: the two others take its shards (and only those) once the cluster expired it;
    the group, read back through a survivor, has the same member ids, epochs and assignments, no member
    lost a partition, and every partition is consumed again; the upgrade then completes through the
    survivors. Then a rolling restart of the three (SIGTERM, start again, one after another) expires no
    member and causes no rebalance; nothing acknowledged is lost and no partition was owned twice
    (test_rolling_upgrade.py's checks)."""
    fleet = upgrade_fleet
    a, b, c = _split(fleet, 3)
    topic = create_topic(kafka.bootstrap, unique("fleet-upgrade-topic"), PARTITIONS)
    moving = fleet.owned(a)
    kept = {gw.bootstrap: fleet.owned(gw) for gw in (b, c)}
    group = _group_on(moving, "fleet-upgrade")
    run = RollingUpgrade(
        ",".join(gw.bootstrap for gw in (a, b, c)), topic, group, BEFORE, AFTER, partitions=PARTITIONS,
        timeouts=CLIENT_TIMEOUTS, log_dir=tmp_path / "clients", allow_send_errors=True, probe=a.bootstrap,
        producer_props=SPREAD_PRODUCER,
    )
    expired = 0.0
    try:
        # Mid upgrade: slots 2 and 3 already speak KIP-848, slots 0 and 1 still the classic protocol.
        began = time.monotonic()
        run.start_fleet([BEFORE[0], BEFORE[1], AFTER[2], AFTER[3]])
        run.start_producer()
        snapshot = run.settle("before the kill", time.time() * 1000).group
        assert snapshot.group_type == "consumer" and len(snapshot.members) == 4, snapshot
        owned = {slot: m.owned() for slot, m in run.members.items()}
        changes = _changes(run)
        expired += _expired(a)

        killed_ms = time.time() * 1000
        a.kill()  # SIGKILL: no LeaveGroup; the cluster expires the member after instances_session_timeout_ms
        run.probe = b.bootstrap
        # Nothing is taken over before the cluster says the member is gone.
        assert fleet.owned(b) | fleet.owned(c) == ALL - moving
        took = _wait("the survivors serve every shard", lambda: fleet.owned(b) | fleet.owned(c) == ALL,
                     SESSION_MS / 1000 + 20, fleet)
        print(f"SIGKILL takeover: the survivors served every shard {took:.1f}s after the kill "
              f"(session timeout {SESSION_MS} ms)")
        _split_evenly(fleet, [b, c])
        for gw in (b, c):  # sticky: a survivor kept what it had and took only the dead one's shards
            assert fleet.owned(gw) >= kept[gw.bootstrap]
        # Both survivors send the group's clients to its new owner.
        owner = b if shard_of(group, SHARDS) in fleet.owned(b) else c
        assert _coordinator_node(b.bootstrap, group) == _coordinator_node(c.bootstrap, group)
        assert _coordinator_node(b.bootstrap, group)[1] == owner.bootstrap

        time.sleep(2.0)  # several heartbeat intervals of both protocols go through the new owner
        after = run.settle("after the kill", killed_ms).group
        assert_same_membership(snapshot, after)
        assert {slot: m.owned() for slot, m in run.members.items()} == owned, "ownership moved"
        assert _changes(run) == changes, "a member took part in a rebalance for the failover"
        assert not _lost(run, killed_ms), "a member lost its partitions for the failover"
        _wait_consumed_again(run, killed_ms + 1000, fleet)

        print(f"fleet up and failover checked: {time.monotonic() - began:.0f}s")
        for slot in (0, 1):  # the upgrade completes through the survivors
            run.restart(slot, AFTER[slot])
        print(f"upgrade completed: {time.monotonic() - began:.0f}s")

        # A rolling restart of the three: the killed one back first, then each stopped (SIGTERM: it hands
        # its shards over at once) and started again. No member of the group expires on the way.
        upgraded = run.settle("before the rolling restart", time.time() * 1000).group
        changes = _changes(run)
        restart_ms = time.time() * 1000
        a.start(timeout_s=60)
        _split_evenly(fleet, [a, b, c])
        for gw in (b, c, a):
            others = [o for o in (a, b, c) if o is not gw]
            expired += _expired(gw)
            gw.stop()
            _wait("the others serve every shard", partial(_serve_all, fleet, others), 15, fleet)
            gw.start(timeout_s=60)
            _split_evenly(fleet, [a, b, c])
        # Every instance sends the group's clients to the same node, its owner's.
        owner = next(gw for gw in (a, b, c) if shard_of(group, SHARDS) in fleet.owned(gw))
        assert {_coordinator_node(gw.bootstrap, group) for gw in (a, b, c)} == {_coordinator_node(owner.bootstrap, group)}
        assert _coordinator_node(a.bootstrap, group)[1] == owner.bootstrap
        run.probe = a.bootstrap
        restarted = run.settle("after the rolling restart", restart_ms).group
        assert_same_membership(upgraded, restarted)
        assert _changes(run) == changes, "a member took part in a rebalance for the rolling restart"
        assert not _lost(run, killed_ms), "a member lost its partitions for the failover, the upgrade or the restart"
        expired += sum(_expired(gw) for gw in (a, b, c))
        assert expired == 0, f"{expired} members expired"
        print(f"rolling restart checked: {time.monotonic() - began:.0f}s")
        assert_rolling_upgrade(run, run.finish())
    finally:
        run.close()


def _serve_all(fleet: Fleet, gateways: list[GatewayProcess]) -> bool:
    return set().union(*(fleet.owned(gw) for gw in gateways)) == ALL


def _lost(run: RollingUpgrade, after_ms: float) -> list[Any]:
    """Partitions a member lost (fenced, or its session expired) after ``after_ms``."""
    return [e for e in list(run.log.ownership) if e.kind == "lost" and e.at_ms > after_ms]


def _last_consumed(run: RollingUpgrade) -> dict[int, tuple[float, str]]:
    """Per partition: when a record of it was last consumed, and by whom (Java members' included)."""
    out: dict[int, tuple[float, str]] = {}
    for r in list(run.log.records):
        out[r.partition] = max(out.get(r.partition, (0.0, "")), (r.at_ms, r.consumer))
    for m in run.members.values():
        if m.tool is not None:
            for e in m.tool.of_type(RecordsConsumed):
                for rng in e.ranges:
                    p = rng.partition.partition
                    out[p] = max(out.get(p, (0.0, "")), (e.timestamp_ms, m.name))
    return out


def _wait_consumed_again(run: RollingUpgrade, since_ms: float, fleet: Fleet, timeout_s: float = 60) -> None:
    """Every partition has records consumed after ``since_ms``: its consumer's data connections (through
    whichever instance) carry on. The producer spreads its records over every partition
    (SPREAD_PRODUCER), so each has some to consume."""
    deadline = time.monotonic() + timeout_s
    while True:
        produced = run.producer.of_type(ProducerSendSuccess) if run.producer is not None else []
        written = {e.partition.partition for e in produced if e.timestamp_ms > since_ms}
        last = _last_consumed(run)
        behind = {p: last.get(p) for p in range(PARTITIONS) if last.get(p, (0.0, ""))[0] <= since_ms}
        if not behind:
            return
        if time.monotonic() > deadline:
            owners = run.ownership()
            detail = {
                p: (f"last {(at - since_ms) / 1000:+.1f}s by {who}" if at else "never", owners.get((run.topic, p)),
                    sum(1 for e in produced if e.partition.partition == p and e.timestamp_ms > since_ms))
                for p, (at, who) in ((p, v or (0.0, "")) for p, v in behind.items())
            }
            raise AssertionError(f"written since the kill: partitions {sorted(written)}; not consumed since "
                                 f"(last consumed, owner, acknowledged since): {detail}")
        time.sleep(0.2)


def _changes(run: RollingUpgrade) -> dict[int, tuple[int, int]]:
    """Per running slot: the assignment and revocation callbacks its consumer has seen (a cooperative or
    KIP-848 member is called back at the end of every rebalance it takes part in)."""
    out = {}
    for slot, m in run.members.items():
        if m.tool is not None:
            out[slot] = (len(m.tool.of_type(PartitionsAssigned)), len(m.tool.of_type(PartitionsRevoked)))
        else:
            mine = [e.kind for e in list(run.log.ownership) if e.consumer == m.name]
            out[slot] = (mine.count("assigned"), len(mine) - mine.count("assigned"))
    return out
