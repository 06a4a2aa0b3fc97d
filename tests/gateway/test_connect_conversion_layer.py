"""A classic Kafka Connect group converted to a connect group and back through the group layer with real
encoded requests (docs/connect.md, "Classic Connect workers and conversion"), kept in the shard's state
log across a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kafka.protocol.admin import DescribeGroupsRequest
from kafka.protocol.consumer.group import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest

from coordinator.connect.model import ConnectAssignment
from coordinator.errors import Errors
from gateway.config.coordinator import CoordinatorSettings
from gateway.groups.layer import GroupLayer
from gateway.wire.api_keys import ApiKey
from gateway.wire.protocol.connect_messages import ConnectGroupHeartbeatRequest
from translate.connect_protocol import (
    ExtendedAssignment,
    WorkerMetadata,
    decode_assignment,
    encode_assignment,
    encode_metadata,
)

from ._groups_support import StubGateway, call, layer_on

G = "connect-cluster"
RUNS = ConnectAssignment(frozenset({"A"}), frozenset({("A", 0), ("A", 1)}))


async def started(tmp_path: Path) -> GroupLayer:
    settings = CoordinatorSettings.model_validate(
        {"initial_rebalance_delay_ms": 0, "upstream_check_s": 0, "state_dir": str(tmp_path / "state")}
    )
    layer = layer_on(StubGateway(), settings)
    await layer.start()
    return layer


def protocols(runs: ConnectAssignment | None) -> list[Any]:
    p = JoinGroupRequest.JoinGroupRequestProtocol
    alloc = ExtendedAssignment(2, 0, "", "", 5, runs) if runs else None
    return [p(name="sessioned", metadata=encode_metadata(WorkerMetadata(2, "http://a:8083", 5, alloc)))]


def joiner(member_epoch: int) -> Any:
    a = ConnectGroupHeartbeatRequest.Assignor
    return ConnectGroupHeartbeatRequest[0](
        group_id=G, member_id="n", member_epoch=member_epoch, instance_id=None,
        rebalance_timeout_ms=60_000 if member_epoch == 0 else -1, server_assignor=None,
        client_assignors=[a(name="sessioned", minimum_version=2, maximum_version=2, reason=0, metadata_version=2,
                            metadata=encode_metadata(WorkerMetadata(2, "http://n:8083", 5)))] if member_epoch == 0 else None,
        connectors_and_tasks=ConnectGroupHeartbeatRequest.ConnectorsAndTasks(connectors=[], tasks=[]),
        worker_url="http://n:8083" if member_epoch == 0 else None,
    )  # fmt: skip


async def describe(layer: GroupLayer) -> Any:
    d = await call(layer, ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest[5](groups=[G]))
    return d.groups[0]


async def test_a_classic_connect_group_upgrades_on_a_joining_worker_and_downgrades_when_it_leaves(tmp_path: Path) -> None:
    layer = await started(tmp_path)
    try:
        # One classic Connect worker forms the group and, as leader, assigns itself connector A and its tasks.
        r = await call(layer, ApiKey.JOIN_GROUP, 3, JoinGroupRequest[3](
            group_id=G, session_timeout_ms=10_000, rebalance_timeout_ms=60_000, member_id="",
            protocol_type="connect", protocols=protocols(None),
        ))  # fmt: skip
        assert r.error_code == 0 and r.leader == r.member_id
        a, generation = str(r.member_id), r.generation_id
        mine = encode_assignment(ExtendedAssignment(2, 0, a, "http://a:8083", 5, RUNS))
        s = await call(layer, ApiKey.SYNC_GROUP, 1, SyncGroupRequest[1](
            group_id=G, generation_id=generation, member_id=a,
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=a, assignment=mine)],
        ))  # fmt: skip
        assert s.error_code == 0
        assert (await describe(layer)).group_state == "Stable"

        # A worker on the connect protocol joins: the group converts, the classic worker keeps running A.
        hb = await call(layer, ApiKey.CONNECT_GROUP_HEARTBEAT, 0, joiner(0))
        # Nothing is free for it yet: it stands at the target epoch, the classic generation.
        assert hb.error_code == 0 and hb.member_epoch == generation
        assert layer.runtime.group_kind(G) == "connect"
        group = layer.runtime.shard_for(G).service.connect.group(G)
        assert group is not None and group.workers[a].assigned == RUNS and group.last_computer == a
        # The classic worker is asked to rejoin: it must compute the new target.
        beat = await call(layer, ApiKey.HEARTBEAT, 1, HeartbeatRequest[1](group_id=G, generation_id=generation, member_id=a))
        assert beat.error_code == Errors.REBALANCE_IN_PROGRESS
        r = await call(layer, ApiKey.JOIN_GROUP, 3, JoinGroupRequest[3](
            group_id=G, session_timeout_ms=10_000, rebalance_timeout_ms=60_000, member_id=a,
            protocol_type="connect", protocols=protocols(RUNS),
        ))  # fmt: skip
        assert r.error_code == 0 and r.leader == a and sorted(m.member_id for m in r.members) == sorted([a, "n"])
        assert r.protocol_name == "sessioned"
        # As Connect's leader would in its first round: revoke task 1 from itself, assign nothing yet.
        revoke = encode_assignment(ExtendedAssignment(2, 0, a, "http://a:8083", 5, ConnectAssignment(),
                                                      ConnectAssignment(tasks=frozenset({("A", 1)}))))  # fmt: skip
        none = encode_assignment(ExtendedAssignment(2, 0, a, "http://a:8083", 5, ConnectAssignment()))
        s = await call(layer, ApiKey.SYNC_GROUP, 1, SyncGroupRequest[1](
            group_id=G, generation_id=r.generation_id, member_id=a,
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=a, assignment=revoke),
                         SyncGroupRequest.SyncGroupRequestAssignment(member_id="n", assignment=none)],
        ))  # fmt: skip
        given = decode_assignment(bytes(s.assignment))
        assert s.error_code == 0 and given is not None and given.leader == a
        assert given.revoked == ConnectAssignment(tasks=frozenset({("A", 1)})) and not given.assigned

        # The new worker leaves: the group is a classic connect group again, rebalancing.
        gone = await call(layer, ApiKey.CONNECT_GROUP_HEARTBEAT, 0, joiner(-1))
        assert gone.error_code == 0
        assert layer.runtime.group_kind(G) == "classic"
        d = await describe(layer)
        assert (d.protocol_type, d.group_state, [m.member_id for m in d.members]) == ("connect", "PreparingRebalance", [a])
    finally:
        await layer.stop()

    again = await started(tmp_path)
    try:
        assert again.runtime.group_kind(G) == "classic"
        d = await describe(again)
        assert d.protocol_type == "connect" and [m.member_id for m in d.members] == [a]
    finally:
        await again.stop()
