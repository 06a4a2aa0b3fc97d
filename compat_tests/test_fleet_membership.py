"""Gateway processes sharing the shards through an instances group on the session broker (classic
group protocol, gateway/membership.py):

- they split the shards, no shard served by both (seen from outside: a group of a shard the process does
  not own is answered NOT_COORDINATOR);
- FindCoordinator names the owner's coordinator node, the same node id and address from both;
- SIGTERM one: the other serves every shard within seconds, and a KIP-848 group and a classic group whose
  shard moved keep their member ids, epochs and assignments (read through the survivor); a librdkafka
  consumer that bootstrapped on the survivor but was coordinated by the stopped one carries on, with
  nothing lost and its partitions never revoked; the rest of a rolling restart (the first one back,
  the second stopped) keeps the members too;
- of three, SIGKILL one: the two others take its shards over (and only those) once the cluster expired
  the dead member (the instances group's session timeout), with the groups' state intact.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
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
from compat_tests.harness.names import unique
from compat_tests.harness.probe import find_coordinator_endpoints, roundtrip
from gateway.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from gateway.state_store import shard_of

pytestmark = pytest.mark.kafka

SHARDS = 6
SESSION_MS = 6000  # the brokers' group.min.session.timeout.ms: the shortest failover the cluster allows
NOT_COORDINATOR = 16
ALL = set(range(SHARDS))


class Fleet:
    """Gateway processes with the same configuration: one state topic, one instances group."""

    def __init__(self, kafka: ProcessBackend, work: Path) -> None:
        self.kafka = kafka
        self.work = work
        name = unique("fleet")
        self.config = work / "gateway.toml"
        self.config.write_text(
            "[coordinator]\n"
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

    def start(self) -> GatewayProcess:
        n = len(self.gateways)
        gw = GatewayProcess(
            upstream=self.kafka.bootstrap,
            extra_args=["--config", str(self.config), "--state-store", "kafka"],
            listen_port=free_port_block(2),
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


def test_of_three_instances_one_sigkilled_has_its_shards_taken_over_by_the_others_after_the_session_timeout(
    kafka: ProcessBackend, fleet: Fleet
) -> None:
    a, b, c = _split(fleet, 3)
    topic = create_topic(kafka.bootstrap, unique("fleet-topic"), 2)
    moving = fleet.owned(a)
    kept = {gw.bootstrap: fleet.owned(gw) for gw in (b, c)}
    group = _group_on(moving, "fleet-killed")
    _consumer_member(a.bootstrap, group, topic)
    before = _consumer_view(a.bootstrap, group)

    a.kill()  # SIGKILL: no LeaveGroup; the cluster expires the member after instances_session_timeout_ms
    # Nothing is taken over before the cluster says the member is gone.
    assert fleet.owned(b) | fleet.owned(c) == ALL - moving
    took = _wait("the survivors serve every shard", lambda: fleet.owned(b) | fleet.owned(c) == ALL,
                 SESSION_MS / 1000 + 20, fleet)
    print(f"SIGKILL takeover: the survivors served every shard {took:.1f}s after the kill (session timeout {SESSION_MS} ms)")
    _split_evenly(fleet, [b, c])
    for gw in (b, c):  # sticky: a survivor kept what it had and took only the dead one's shards
        assert fleet.owned(gw) >= kept[gw.bootstrap]
    owner = b if shard_of(group, SHARDS) in fleet.owned(b) else c
    assert _consumer_view(owner.bootstrap, group) == before
    # Both survivors send the group's clients to the same node.
    assert _coordinator_node(b.bootstrap, group) == _coordinator_node(c.bootstrap, group)
    assert _coordinator_node(b.bootstrap, group)[1] == owner.bootstrap
