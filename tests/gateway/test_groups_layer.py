"""The group layer end to end without a broker: wire bytes in, GroupService, wire bytes out.

A stand-in gateway serves node 1; the upstream is unreachable, so whatever needs it (offsets,
ListGroups merge) degrades to its documented error answers while the group APIs are answered locally.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetDeleteRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from coordinator.errors import Errors
from gateway.config.coordinator import CoordinatorSettings
from gateway.groups import dispatch
from gateway.groups.layer import GroupLayer
from gateway.state import repair as state_repair
from gateway.wire import codec, frames
from gateway.wire.api_keys import ApiKey
from gateway.wire.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
)
from translate.group_messages import OffsetCommitCheck

from ._groups_support import (
    HOME_ADDR,
    HOME_NODE,
    StubConnection,
    StubGateway,
    call,
    layer_on,
    request_payload,
)

MEMBER_ID_REQUIRED = 79
UNKNOWN_MEMBER_ID = 25
ILLEGAL_GENERATION = 22
INVALID_REQUEST = 42
STALE_MEMBER_EPOCH = 113
NOT_COORDINATOR = 16
COORDINATOR_NOT_AVAILABLE = 15


def settings(**kw: Any) -> CoordinatorSettings:
    base: dict[str, Any] = {
        "initial_rebalance_delay_ms": 0,
        "min_session_timeout_ms": 200,
        "consumer_min_session_timeout_ms": 1000,
        "consumer_session_timeout_ms": 3000,
        "consumer_min_heartbeat_interval_ms": 100,
        "consumer_heartbeat_interval_ms": 500,
        "upstream_check_s": 0,
    }
    base.update(kw)
    return CoordinatorSettings.model_validate(base)


async def started(**kw: Any) -> GroupLayer:
    layer = layer_on(StubGateway(), settings(**kw))
    await layer.start()
    return layer


async def test_find_coordinator_names_a_served_listener_at_every_version() -> None:
    layer = await started()
    try:
        for v in range(0, 4):
            kw: dict[str, Any] = {"key": "g1"} | ({"key_type": 0} if v >= 1 else {})
            r = await call(layer, ApiKey.FIND_COORDINATOR, v, FindCoordinatorRequest[v](**kw))
            assert (r.error_code, r.node_id, r.host, r.port) == (0, HOME_NODE, *HOME_ADDR)
        for v in (4, 5, 6):
            r = await call(layer, ApiKey.FIND_COORDINATOR, v, FindCoordinatorRequest[v](key_type=0, coordinator_keys=["a", "b"]))
            assert [(c.key, c.node_id, c.port, c.error_code) for c in r.coordinators] == [
                ("a", HOME_NODE, HOME_ADDR[1], 0),
                ("b", HOME_NODE, HOME_ADDR[1], 0),
            ]
    finally:
        await layer.stop()


def test_unmanaged_groups_and_transaction_keys_are_not_claimed() -> None:
    layer = layer_on(StubGateway(), settings(managed_groups="app-.*"), install=False)

    def frame(msg: Any, v: int) -> bytes:
        payload = request_payload(msg, v)
        return frames.encode_size(len(payload)) + payload

    assert layer.claims(frame(HeartbeatRequest[4](group_id="app-1", generation_id=1, member_id="m"), 4), 12, 4)
    assert not layer.claims(frame(HeartbeatRequest[4](group_id="other", generation_id=1, member_id="m"), 4), 12, 4)
    txn = FindCoordinatorRequest[3](key="app-1", key_type=1)
    assert not layer.claims(frame(txn, 3), ApiKey.FIND_COORDINATOR, 3)
    mixed = DescribeGroupsRequest[5](groups=["other", "app-2"])
    assert layer.claims(frame(mixed, 5), ApiKey.DESCRIBE_GROUPS, 5)


@pytest.mark.parametrize("join_v,sync_v,hb_v,leave_v", [(0, 0, 0, 0), (3, 2, 2, 2), (5, 3, 3, 3), (9, 5, 4, 5)])
async def test_classic_member_joins_syncs_heartbeats_and_leaves(join_v: int, sync_v: int, hb_v: int, leave_v: int) -> None:
    layer = await started()
    try:
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01meta")]
        join: dict[str, Any] = {"group_id": "g", "session_timeout_ms": 10000, "member_id": "", "protocol_type": "consumer", "protocols": protocols}
        if join_v >= 1:
            join["rebalance_timeout_ms"] = 10000
        r = await call(layer, ApiKey.JOIN_GROUP, join_v, JoinGroupRequest[join_v](**join))
        if join_v >= 4:
            assert r.error_code == MEMBER_ID_REQUIRED and r.member_id
            join["member_id"] = r.member_id
            r = await call(layer, ApiKey.JOIN_GROUP, join_v, JoinGroupRequest[join_v](**join))
        assert r.error_code == 0 and r.generation_id == 1 and r.leader == r.member_id
        assert [m.metadata for m in r.members] == [b"\x00\x01meta"]
        member, gen = r.member_id, r.generation_id
        assignment = [SyncGroupRequest.SyncGroupRequestAssignment(member_id=member, assignment=b"assigned")]
        sync: dict[str, Any] = {"group_id": "g", "generation_id": gen, "member_id": member, "assignments": assignment}
        if sync_v >= 5:
            sync |= {"protocol_type": "consumer", "protocol_name": "range"}
        s = await call(layer, ApiKey.SYNC_GROUP, sync_v, SyncGroupRequest[sync_v](**sync))
        assert (s.error_code, bytes(s.assignment)) == (0, b"assigned")
        h = await call(layer, ApiKey.HEARTBEAT, hb_v, HeartbeatRequest[hb_v](group_id="g", generation_id=gen, member_id=member))
        assert h.error_code == 0
        h = await call(layer, ApiKey.HEARTBEAT, hb_v, HeartbeatRequest[hb_v](group_id="g", generation_id=gen + 1, member_id=member))
        assert h.error_code == ILLEGAL_GENERATION
        if leave_v >= 3:
            leave = LeaveGroupRequest[leave_v](group_id="g", members=[LeaveGroupRequest.MemberIdentity(member_id=member)])
        else:
            leave = LeaveGroupRequest[leave_v](group_id="g", member_id=member)
        lr = await call(layer, ApiKey.LEAVE_GROUP, leave_v, leave)
        assert lr.error_code == 0
        d = await call(layer, ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest[5](groups=["g"]))
        assert d.groups[0].group_state == "Empty" and not d.groups[0].members
    finally:
        await layer.stop()


async def _join_consumer_member(layer: GroupLayer, group: str, topic: str, member: str) -> Any:
    req = ConsumerGroupHeartbeatRequest[1](
        group_id=group, member_id=member, member_epoch=0, rebalance_timeout_ms=5000,
        subscribed_topic_names=[topic], topic_partitions=[],
    )
    return await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, req)


async def test_consumer_group_member_is_assigned_and_survives_a_restart_from_the_state_log(tmp_path: Path) -> None:
    topic_id = uuid.uuid4()
    layer = await started(state_dir=str(tmp_path / "state"))
    try:
        layer._on_topics({"t": (topic_id, 3)})
        member = str(uuid.uuid4())
        r = await _join_consumer_member(layer, "cg", "t", member)
        assert r.error_code == 0 and r.member_epoch == 1
        assert [(t.topic_id, sorted(t.partitions)) for t in r.assignment.topic_partitions] == [(topic_id, [0, 1, 2])]
        d = await call(layer, ApiKey.CONSUMER_GROUP_DESCRIBE, 1, ConsumerGroupDescribeRequest[1](group_ids=["cg"]))
        (m,) = d.groups[0].members
        assert (m.member_id, m.member_epoch, m.client_id, m.client_host) == (member, 1, "app", "/10.1.2.3")
    finally:
        await layer.stop()

    again = await started(state_dir=str(tmp_path / "state"))
    try:
        again._on_topics({"t": (topic_id, 3)})
        d = await call(again, ApiKey.CONSUMER_GROUP_DESCRIBE, 0, ConsumerGroupDescribeRequest[0](group_ids=["cg"]))
        g = d.groups[0]
        assert g.error_code == 0 and [(m.member_id, m.member_epoch) for m in g.members] == [(member, 1)]
        hb = ConsumerGroupHeartbeatRequest[1](group_id="cg", member_id=member, member_epoch=1)
        r = await call(again, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, hb)
        assert r.error_code == 0 and r.member_epoch == 1
    finally:
        await again.stop()


async def test_a_silent_classic_member_is_expired_by_its_session_timer() -> None:
    layer = await started()
    try:
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
        r = await call(layer, ApiKey.JOIN_GROUP, 3, JoinGroupRequest[3](
            group_id="quiet", session_timeout_ms=300, rebalance_timeout_ms=300, member_id="",
            protocol_type="consumer", protocols=protocols,
        ))
        assert r.error_code == 0
        s = await call(layer, ApiKey.SYNC_GROUP, 2, SyncGroupRequest[2](
            group_id="quiet", generation_id=r.generation_id, member_id=r.member_id, assignments=[],
        ))
        assert s.error_code == 0
        await asyncio.sleep(0.8)
        d = await call(layer, ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest[5](groups=["quiet"]))
        assert d.groups[0].group_state == "Empty"
        h = await call(layer, ApiKey.HEARTBEAT, 2, HeartbeatRequest[2](group_id="quiet", generation_id=1, member_id=r.member_id))
        assert h.error_code == UNKNOWN_MEMBER_ID
    finally:
        await layer.stop()


async def test_zombie_offset_commit_is_fenced_locally() -> None:
    layer = await started()
    try:
        layer._on_topics({"t": (uuid.uuid4(), 1)})
        member = str(uuid.uuid4())
        r = await _join_consumer_member(layer, "z", "t", member)
        assert r.error_code == 0
        cls = OffsetCommitRequest
        part = cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)
        commit = cls[9](
            group_id="z", generation_id_or_member_epoch=r.member_epoch - 1, member_id=member,
            topics=[cls.OffsetCommitRequestTopic(name="t", partitions=[part])],
        )
        out = await call(layer, ApiKey.OFFSET_COMMIT, 9, commit)
        # STALE_MEMBER_EPOCH, answered without asking the upstream (which is unreachable here).
        assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in out.topics] == [
            ("t", [(0, STALE_MEMBER_EPOCH)])
        ]
        commit.member_id = "ghost"
        out = await call(layer, ApiKey.OFFSET_COMMIT, 9, commit)
        assert out.topics[0].partitions[0].error_code == UNKNOWN_MEMBER_ID
        assert layer.counters["commits_fenced"] == 2
    finally:
        await layer.stop()


@pytest.mark.parametrize("version", [2, 8, 9])
async def test_a_member_of_a_group_the_gateway_never_saw_is_told_to_rejoin(version: int) -> None:
    """Adoption (docs/operations.md): a classic member of the cluster's coordinator commits to the gateway,
    which has no such group. Kafka would answer GROUP_ID_NOT_FOUND from v9 (ILLEGAL_GENERATION before),
    which classic clients do not take as "rejoin"; the gateway says UNKNOWN_MEMBER_ID, and tries to
    remove the abandoned member from the upstream coordinator once."""
    layer = await started()
    try:
        cls = OffsetCommitRequest
        part = cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)
        kw: dict[str, Any] = {"group_id": "adopted", "member_id": "consumer-1-upstream", "generation_id_or_member_epoch": 4}
        if version >= 7:
            kw["group_instance_id"] = None
        commit = cls[version](**kw, topics=[cls.OffsetCommitRequestTopic(name="t", partitions=[part])])
        for _ in range(2):
            out = await call(layer, ApiKey.OFFSET_COMMIT, version, commit)
            assert out.topics[0].partitions[0].error_code == UNKNOWN_MEMBER_ID
        # Nothing was created or written: the group is still unknown to the gateway.
        assert layer.runtime.group_kind("adopted") is None
        assert layer.counters["commits"] == 0 and layer.counters["commits_unknown_group"] == 2
        assert list(layer.adoption._seen) == [("adopted", "consumer-1-upstream")]
    finally:
        await layer.stop()


async def test_a_commit_of_a_never_seen_group_is_told_to_rejoin_when_a_join_creates_the_group_meanwhile() -> None:
    """Adoption under load: the commit of a member the cluster coordinated is checked while the group is
    missing (GROUP_ID_NOT_FOUND from v9), and another member's JoinGroup creates the group before the
    commit's answer is released. The client is still told UNKNOWN_MEMBER_ID (rejoin), not
    GROUP_ID_NOT_FOUND, which a classic client cannot act on."""
    layer = await started()
    try:
        real = layer.offsets.groups.call

        async def join_meanwhile(group_id: str, request: Any, *rest: Any) -> Any:
            reply = await real(group_id, request, *rest)
            if isinstance(request, OffsetCommitCheck):
                await _classic_member(layer, group_id)  # the group exists from here on
            return reply

        layer.offsets.groups.call = join_meanwhile  # type: ignore[method-assign]
        cls = OffsetCommitRequest
        part = cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)
        commit = cls[9](
            group_id="adopted-race", member_id="consumer-1-upstream", generation_id_or_member_epoch=4,
            group_instance_id=None, topics=[cls.OffsetCommitRequestTopic(name="t", partitions=[part])],
        )
        out = await call(layer, ApiKey.OFFSET_COMMIT, 9, commit)
        assert out.topics[0].partitions[0].error_code == UNKNOWN_MEMBER_ID
        assert layer.runtime.group_kind("adopted-race") == "classic"
    finally:
        await layer.stop()


async def test_an_unknown_member_id_in_a_heartbeat_is_left_upstream_unless_switched_off() -> None:
    for enabled in (True, False):
        layer = await started(leave_abandoned_upstream_members=enabled)
        try:
            hb = HeartbeatRequest[4](group_id="adopted", generation_id=3, member_id="m-upstream", group_instance_id=None)
            out = await call(layer, ApiKey.HEARTBEAT, 4, hb)
            assert out.error_code == UNKNOWN_MEMBER_ID
            assert list(layer.adoption._seen) == ([("adopted", "m-upstream")] if enabled else [])
        finally:
            await layer.stop()


async def test_undecodable_group_requests_get_an_error_not_a_closed_connection() -> None:
    layer = await started()
    try:
        for api_key, version in [(ApiKey.HEARTBEAT, 4), (ApiKey.DESCRIBE_GROUPS, 5), (ApiKey.JOIN_GROUP, 5)]:
            good = request_payload(HeartbeatRequest[4](group_id="g", generation_id=1, member_id="m"), 4)
            header_len = frames.parse_request_header(good, True).body_offset
            payload = bytearray(good[:header_len]) + b"\xff\xff\xff"
            payload[0:4] = api_key.to_bytes(2, "big") + version.to_bytes(2, "big")
            flexible = codec.request_header_flexible(api_key, version)
            header = frames.parse_request_header(bytes(payload), flexible)
            out = await layer.handle(StubConnection(), header, bytes(payload))
            _, body = codec.decode_response(api_key, version, out)
            if hasattr(body, "error_code"):
                assert body.error_code == INVALID_REQUEST
        assert layer.counters["invalid_requests"] == 3
    finally:
        await layer.stop()


async def test_list_groups_lists_managed_groups_on_the_coordinator_listener_only() -> None:
    layer = await started()
    try:
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
        await call(layer, ApiKey.JOIN_GROUP, 3, JoinGroupRequest[3](
            group_id="listed", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            protocol_type="consumer", protocols=protocols,
        ))
        home = await call(layer, ApiKey.LIST_GROUPS, 5, ListGroupsRequest[5](states_filter=[], types_filter=[]))
        assert [(g.group_id, g.group_type) for g in home.groups] == [("listed", "classic")]
        other = await call(layer, ApiKey.LIST_GROUPS, 5, ListGroupsRequest[5](states_filter=[], types_filter=[]), StubConnection(2))
        assert other.groups == []
    finally:
        await layer.stop()


async def test_offsets_of_subscribed_topics_cannot_be_deleted() -> None:
    layer = await started()
    try:
        layer._on_topics({"t": (uuid.uuid4(), 2)})
        r = await _join_consumer_member(layer, "od", "t", str(uuid.uuid4()))
        assert r.error_code == 0
        cls = OffsetDeleteRequest
        req = cls[0](group_id="od", topics=[cls.OffsetDeleteRequestTopic(
            name="t", partitions=[cls.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(partition_index=1)]
        )])
        out = await call(layer, ApiKey.OFFSET_DELETE, 0, req)
        assert [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in out.topics] == [
            ("t", [(1, 86)])  # GROUP_SUBSCRIBED_TO_TOPIC, decided without the upstream
        ]
    finally:
        await layer.stop()


def _fail_log_writes(monkeypatch: pytest.MonkeyPatch, layer: GroupLayer, how: str) -> list[int]:
    """Make the state log's next write short and then ENOSPC (``write``), or its fsync EIO (``fsync``)."""
    import errno

    import gateway.state.log as mod

    real_write, real_fsync = mod.os.write, mod.os.fsync
    fd = layer.runtime.shards[0].log._fd  # type: ignore[union-attr]
    calls: list[int] = []

    def write(f: int, data: Any) -> int:
        if f != fd:
            return real_write(f, data)
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(f, bytes(data[: len(data) // 2]))  # a short write: part of the batch lands
        raise OSError(errno.ENOSPC, "No space left on device")

    def fsync(f: int) -> None:
        if f == fd:
            calls.append(0)
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(f)

    if how == "write":
        monkeypatch.setattr(mod.os, "write", write)
    else:
        monkeypatch.setattr(mod.os, "fsync", fsync)
    return calls


async def _classic_member(layer: GroupLayer, group: str) -> tuple[str, int]:
    protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
    r = await call(layer, ApiKey.JOIN_GROUP, 3, JoinGroupRequest[3](
        group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
        protocol_type="consumer", protocols=protocols,
    ))
    assert r.error_code == 0
    s = await call(layer, ApiKey.SYNC_GROUP, 2, SyncGroupRequest[2](
        group_id=group, generation_id=r.generation_id, member_id=r.member_id, assignments=[],
    ))
    assert s.error_code == 0
    return r.member_id, r.generation_id


@pytest.mark.parametrize("how", ["write", "fsync"])
async def test_a_failed_state_log_write_unloads_the_groups_until_the_log_is_re_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:

    # One shard, so that both groups share the log that fails (tests/gateway/test_runtime.py has a failing
    # shard beside working ones).
    state = tmp_path / "state"
    layer = await started(state_dir=str(state), state_topic_num_partitions=1)
    layer.runtime.reload_backoff_s = (0.05, 0.2)
    segment = state / "shard-00" / f"{0:020d}.log"
    try:
        kept, gen = await _classic_member(layer, "kept")
        assert layer.armed_timers() == 1  # kept's session timer
        durable = segment.stat().st_size
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
        j = await call(layer, ApiKey.JOIN_GROUP, 3, JoinGroupRequest[3](
            group_id="lost", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            protocol_type="consumer", protocols=protocols,
        ))
        assert j.error_code == 0  # a join writes nothing yet: the leader's SyncGroup stores the group
        calls = _fail_log_writes(monkeypatch, layer, how)
        r = await call(layer, ApiKey.SYNC_GROUP, 2, SyncGroupRequest[2](
            group_id="lost", generation_id=j.generation_id, member_id=j.member_id,
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=j.member_id, assignment=b"a")],
        ))
        assert calls, "the failure was injected"
        # Retriable, and not the member's assignment: the group's record is not durable.
        assert (r.error_code, bytes(r.assignment)) == (NOT_COORDINATOR, b"")
        assert layer.unloaded is not None and layer.counters["state_log_failures"] == 1
        assert layer.armed_timers() == 0  # nothing expires from a memory that is no longer trusted
        # The log was cut back to what was acknowledged: loadable, no partial or unanswered record.
        assert segment.stat().st_size == durable
        assert state_repair.verify(segment.parent).damage == []
        # Every group request is told to go away and come back, not served from memory.
        h = await call(layer, ApiKey.HEARTBEAT, 2, HeartbeatRequest[2](group_id="kept", generation_id=gen, member_id=kept))
        assert h.error_code == NOT_COORDINATOR
        d = await call(layer, ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest[5](groups=["kept", "lost"]))
        assert [g.error_code for g in d.groups] == [NOT_COORDINATOR, NOT_COORDINATOR]
        f = await call(layer, ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest[3](key="kept", key_type=0))
        assert f.error_code == COORDINATOR_NOT_AVAILABLE
        cls = OffsetCommitRequest
        oc = await call(layer, ApiKey.OFFSET_COMMIT, 8, cls[8](
            group_id="kept", generation_id_or_member_epoch=gen, member_id=kept, group_instance_id=None,
            topics=[cls.OffsetCommitRequestTopic(name="t", partitions=[
                cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                    partition_index=0, committed_offset=5, committed_leader_epoch=-1, committed_metadata="")
            ])],
        ))
        assert [p.error_code for t in oc.topics for p in t.partitions] == [NOT_COORDINATOR]
        of = await call(layer, ApiKey.OFFSET_FETCH, 8, OffsetFetchRequest[8](groups=[
            OffsetFetchRequest[8].OffsetFetchRequestGroup(group_id="kept", topics=None)
        ], require_stable=False))
        assert [(g.group_id, g.error_code) for g in of.groups] == [("kept", NOT_COORDINATOR)]
        of = await call(layer, ApiKey.OFFSET_FETCH, 6, OffsetFetchRequest[6](group_id="kept", topics=None))
        assert of.error_code == NOT_COORDINATOR
        lg = await call(layer, ApiKey.LIST_GROUPS, 4, ListGroupsRequest[4](states_filter=[]))
        assert lg.error_code == COORDINATOR_NOT_AVAILABLE  # retried by admin clients, not a failed listing

        monkeypatch.undo()  # the disk works again: the layer re-reads the log by itself
        for _ in range(100):
            if layer.unloaded is None:
                break
            await asyncio.sleep(0.05)
        assert layer.unloaded is None
        h = await call(layer, ApiKey.HEARTBEAT, 2, HeartbeatRequest[2](group_id="kept", generation_id=gen, member_id=kept))
        assert h.error_code == 0  # the acknowledged member survived
        assert layer.armed_timers() == 1  # and its session timer is armed again
        d = await call(layer, ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest[5](groups=["lost"]))
        assert d.groups[0].group_state == "Dead" and not d.groups[0].members
    finally:
        await layer.stop()

    again = await started(state_dir=str(state), state_topic_num_partitions=1)  # and a restart replays cleanly
    try:
        d = await call(again, ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest[5](groups=["kept", "lost"]))
        assert [[m.member_id for m in g.members] for g in d.groups] == [[kept], []]
    finally:
        await again.stop()


async def test_nulls_in_group_requests_of_a_pattern_managed_gateway_are_answered_locally() -> None:
    # Under a managed_groups pattern a null group id matches no pattern: it is still the group layer's to
    # refuse (INVALID_REQUEST), never passed through to the broker, which would drop the connection.
    layer = await started(managed_groups="app-.*")
    try:

        def frame(msg: Any, v: int) -> bytes:
            payload = request_payload(msg, v)
            return frames.encode_size(len(payload)) + payload

        bad = [
            (ApiKey.HEARTBEAT, 4, HeartbeatRequest[4](group_id=None, generation_id=1, member_id="m")),
            (ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest[5](groups=["other", None])),
            (ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest[5](groups=None)),
        ]
        for api_key, v, msg in bad:
            assert layer.claims(frame(msg, v), api_key, v)
        hb = await call(layer, ApiKey.HEARTBEAT, 4, bad[0][2])
        assert hb.error_code == Errors.INVALID_REQUEST
        described = await call(layer, ApiKey.DESCRIBE_GROUPS, 5, bad[1][2])
        assert [(g.group_id, g.error_code) for g in described.groups] == [("other", 42), ("", 42)]
        assert (await call(layer, ApiKey.DESCRIBE_GROUPS, 5, bad[2][2])).groups == []
        assert layer.counters["invalid_requests"] == 3
    finally:
        await layer.stop()


def test_the_request_context_carries_the_clients_principal() -> None:
    """Handlers see the SASL principal the connection authenticated as (Kafka's anonymous one otherwise):
    the identity group authorization will check."""
    from tests.gateway._groups_support import StubConnection

    layer = layer_on(StubGateway(), settings(), install=False)
    msg = ListGroupsRequest[4](states_filter=[])
    payload = request_payload(msg, 4)
    header = frames.parse_request_header(payload, codec.request_header_flexible(16, 4))
    assert dispatch.context(layer, StubConnection(principal="User:alice"), header, payload).principal == "User:alice"  # type: ignore[arg-type]
    assert dispatch.context(layer, StubConnection(), header, payload).principal == "User:ANONYMOUS"  # type: ignore[arg-type]
