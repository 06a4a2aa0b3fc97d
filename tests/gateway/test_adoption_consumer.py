"""Adopting a live KIP-848 group (gateway/groups/adoption.py): heartbeats of members the gateway does not know."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.consumer.group import JoinGroupRequest, SyncGroupRequest

from gateway.net.upstream import UpstreamError
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey
from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest

from ._groups_support import call
from .test_groups_layer import started

UNKNOWN_MEMBER_ID = 25
GROUP_ID_NOT_FOUND = 69
COORDINATOR_LOAD_IN_PROGRESS = 14
REBALANCE_IN_PROGRESS = 27
STALE_MEMBER_EPOCH = 113


class RecordingUpstream:
    """Stands in for the layer's upstream client: records what is sent to a group's coordinator."""

    def __init__(self, answer: int = 0, kip848: bool = True) -> None:
        self.answer, self.kip848 = answer, kip848
        self.sent: list[tuple[str, int, int, Any]] = []
        self.replaced: Any = None

    def close(self) -> None:
        self.replaced.close()

    def supports(self, api_key: int) -> bool:
        return self.kip848 or api_key != ApiKey.CONSUMER_GROUP_HEARTBEAT

    def version(self, api_key: int, wanted: int) -> int:
        return wanted

    async def to_coordinator(self, group_id: str, api_key: int, version: int, msg: Any, error_of: Any, **_: Any) -> Any:
        if api_key != ApiKey.LIST_GROUPS:  # the join's group-type lookup is not what these tests count
            self.sent.append((group_id, api_key, version, msg))
        if api_key == ApiKey.LEAVE_GROUP:
            return codec.RESPONSES[api_key][version](throttle_time_ms=0, error_code=self.answer, members=[])
        if api_key in (ApiKey.DESCRIBE_GROUPS, ApiKey.CONSUMER_GROUP_DESCRIBE):
            raise UpstreamError("the cluster's group is not described in these tests")
        if api_key == ApiKey.OFFSET_FETCH:  # v8+: every asked partition at offset 42
            cls = codec.RESPONSES[api_key][version]
            g = cls.OffsetFetchResponseGroup
            t = g.OffsetFetchResponseTopics
            groups = [g(group_id=rg.group_id, error_code=0, topics=[
                t(name=rt.name, partitions=[
                    t.OffsetFetchResponsePartitions(partition_index=p, committed_offset=42, committed_leader_epoch=-1,
                                                     metadata="", error_code=0)
                    for p in rt.partition_indexes
                ]) for rt in rg.topics
            ]) for rg in msg.groups]  # fmt: skip
            return cls(throttle_time_ms=0, groups=groups)
        if api_key == ApiKey.LIST_GROUPS:  # the cluster has no share or streams groups
            return codec.RESPONSES[api_key][version](throttle_time_ms=0, error_code=0, groups=[])
        if api_key == ApiKey.OFFSET_COMMIT:
            cls = codec.RESPONSES[api_key][version]
            topics = [
                cls.OffsetCommitResponseTopic(name=t.name, partitions=[
                    cls.OffsetCommitResponseTopic.OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=self.answer,
                    ) for p in t.partitions
                ]) for t in msg.topics
            ]  # fmt: skip
            return cls(throttle_time_ms=0, topics=topics)
        return codec.RESPONSES[api_key][version](
            throttle_time_ms=0, error_code=self.answer, error_message=None, member_id=None, member_epoch=-1,
            heartbeat_interval_ms=0, assignment=None,
        )


def heartbeat(version: int, group: str, member: str, epoch: int, instance_id: str | None = None) -> Any:
    kw: dict[str, Any] = {"subscribed_topic_regex": None} if version >= 1 else {}
    return ConsumerGroupHeartbeatRequest[version](
        group_id=group, member_id=member, member_epoch=epoch, instance_id=instance_id, rack_id=None,
        rebalance_timeout_ms=-1 if epoch else 30000, subscribed_topic_names=None if epoch else ["t"],
        server_assignor=None, topic_partitions=None if epoch else [], **kw,
    )


async def settle(layer: Any) -> None:
    """Let the layer's spawned tasks (the upstream leaves) run."""
    for _ in range(5):
        await asyncio.sleep(0)


async def with_upstream(upstream: RecordingUpstream, **kw: Any) -> Any:
    layer = await started(**kw)
    upstream.replaced, layer.client = layer.client, upstream
    # Every part that talks to the cluster's coordinators holds the link it was given.
    layer.cluster.client = layer.adoption.client = layer.offsets.client = upstream
    layer.forward.close()
    layer.forward = upstream  # the cluster lookups made for clients (group types) reach the same stand-in
    layer.cluster.forward = upstream
    return layer


@pytest.mark.parametrize("version", [0, 1])
@pytest.mark.parametrize("instance_id", [None, "static-1"])
async def test_a_member_of_a_group_the_gateway_never_saw_is_told_to_rejoin_and_left_upstream(
    version: int, instance_id: str | None
) -> None:
    upstream = RecordingUpstream()
    layer = await with_upstream(upstream)
    try:
        for _ in range(3):  # the client heartbeats a few times before it acts on the answer
            out = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, version, heartbeat(version, "adopted", "m-1", 7, instance_id))
            assert out.error_code == UNKNOWN_MEMBER_ID, out
        await settle(layer)
        # One leave, for that member, sent to the cluster's coordinator of the group (in the highest
        # version both speak, whatever the client's).
        assert [(g, k, v) for g, k, v, _ in upstream.sent] == [("adopted", ApiKey.CONSUMER_GROUP_HEARTBEAT, 1)]
        leave = upstream.sent[0][3]
        assert (leave.group_id, leave.member_id, leave.member_epoch, leave.instance_id) == ("adopted", "m-1", -1, instance_id)
        assert layer.counters["upstream_members_removed"] == 1
        # The client joins again with epoch 0 and its own member id (KIP-1082): the gateway takes it.
        out = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, version, heartbeat(version, "adopted", "m-1", 0, instance_id))
        assert out.error_code == 0 and out.member_id == "m-1" and out.member_epoch > 0, out
        assert len(upstream.sent) == 1
    finally:
        await layer.stop()


async def test_an_unknown_member_of_a_known_group_is_left_upstream_too() -> None:
    upstream = RecordingUpstream(answer=UNKNOWN_MEMBER_ID)  # the cluster no longer has it either: no harm
    layer = await with_upstream(upstream)
    try:
        out = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat(1, "known", "m-new", 0))
        assert out.error_code == 0
        out = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat(1, "known", "m-old", 4))
        assert out.error_code == UNKNOWN_MEMBER_ID
        await settle(layer)
        assert [(m.member_id, m.member_epoch) for *_, m in upstream.sent] == [("m-old", -1)]
        assert layer.counters["upstream_members_removed"] == 0
    finally:
        await layer.stop()


async def test_without_adoption_the_answer_is_kafkas_and_nothing_goes_upstream() -> None:
    upstream = RecordingUpstream()
    layer = await with_upstream(upstream, leave_abandoned_upstream_members=False)
    try:
        out = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat(1, "adopted", "m-1", 7))
        assert out.error_code == GROUP_ID_NOT_FOUND
        await settle(layer)
        assert upstream.sent == []
    finally:
        await layer.stop()


async def test_joins_and_leaves_are_not_taken_for_abandoned_members() -> None:
    """Epoch 0 and the leave epochs get the same answers with adoption on as with it off (Kafka's)."""
    answers: dict[bool, list[int]] = {}
    for enabled in (True, False):
        upstream = RecordingUpstream()
        layer = await with_upstream(upstream, leave_abandoned_upstream_members=enabled)
        try:
            out = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat(1, "fresh", "m-1", 0))
            answers[enabled] = [out.error_code]
            for group, epoch in [("other", -1), ("other", -2), ("fresh", -1)]:
                out = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat(1, group, "m-9", epoch, "i-9"))
                answers[enabled].append(out.error_code)
            await settle(layer)
            assert upstream.sent == []
        finally:
            await layer.stop()
    assert answers[True] == answers[False] and answers[True][0] == 0, answers


async def test_a_cluster_without_kip848_gets_no_leave() -> None:
    upstream = RecordingUpstream(kip848=False)
    layer = await with_upstream(upstream)
    try:
        out = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat(1, "adopted", "m-1", 3))
        assert out.error_code == UNKNOWN_MEMBER_ID
        await settle(layer)
        assert upstream.sent == []
    finally:
        await layer.stop()


async def test_a_classic_leave_from_a_commit_does_not_stop_the_kip848_leave() -> None:
    """A commit cannot tell a KIP-848 member from a classic one: the LeaveGroup it triggers first must not
    count as the ConsumerGroupHeartbeat leave the member's heartbeat asks for afterwards."""
    upstream = RecordingUpstream()
    layer = await with_upstream(upstream)
    try:
        layer.adoption.abandoned("adopted", "m-1")  # what an unknown member's OffsetCommit triggers
        await settle(layer)
        out = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat(1, "adopted", "m-1", 7))
        assert out.error_code == UNKNOWN_MEMBER_ID
        await settle(layer)
        assert [(g, k) for g, k, _, _ in upstream.sent] == [
            ("adopted", ApiKey.LEAVE_GROUP), ("adopted", ApiKey.CONSUMER_GROUP_HEARTBEAT),
        ]
        # Each kind once: more commits and heartbeats of the same id send nothing more.
        layer.adoption.abandoned("adopted", "m-1")
        await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat(1, "adopted", "m-1", 7))
        await settle(layer)
        assert len(upstream.sent) == 2
    finally:
        await layer.stop()


def _commit(group: str, member: str, generation: int) -> Any:
    cls = OffsetCommitRequest
    part = cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)
    return cls[9](
        group_id=group, generation_id_or_member_epoch=generation, member_id=member,
        topics=[cls.OffsetCommitRequestTopic(name="t", partitions=[part])],
    )


async def test_a_commit_the_cluster_refuses_keeps_the_gateways_members() -> None:
    """The cluster refuses a written-through commit while its group still has old members (an adoption
    under way): the committer is a member of the gateway's group, so it is never told UNKNOWN_MEMBER_ID,
    which would make it drop a membership it has, but an error it retries or rejoins on."""
    upstream = RecordingUpstream(answer=UNKNOWN_MEMBER_ID)
    layer = await with_upstream(upstream)
    try:
        out = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat(1, "kip848", "m-1", 0))
        assert out.error_code == 0
        got = await call(layer, ApiKey.OFFSET_COMMIT, 9, _commit("kip848", "m-1", out.member_epoch))
        assert got.topics[0].partitions[0].error_code == COORDINATOR_LOAD_IN_PROGRESS

        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
        join = await call(layer, ApiKey.JOIN_GROUP, 4, JoinGroupRequest[4](
            group_id="classic", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            protocol_type="consumer", protocols=protocols,
        ))  # fmt: skip
        if join.error_code == 79:  # MEMBER_ID_REQUIRED: v4 joins twice
            join = await call(layer, ApiKey.JOIN_GROUP, 4, JoinGroupRequest[4](
                group_id="classic", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id=join.member_id,
                protocol_type="consumer", protocols=protocols,
            ))  # fmt: skip
        assert join.error_code == 0
        sync = await call(layer, ApiKey.SYNC_GROUP, 2, SyncGroupRequest[2](
            group_id="classic", generation_id=join.generation_id, member_id=join.member_id, assignments=[],
        ))  # fmt: skip
        assert sync.error_code == 0
        got = await call(layer, ApiKey.OFFSET_COMMIT, 9, _commit("classic", join.member_id, join.generation_id))
        assert got.topics[0].partitions[0].error_code == REBALANCE_IN_PROGRESS
        # Both were written through as simple commits, and each refusal started a check of the cluster's group.
        commits = [m for _, k, _, m in upstream.sent if k == ApiKey.OFFSET_COMMIT]
        assert len(commits) == 2 and all((m.member_id, m.generation_id_or_member_epoch) == ("", -1) for m in commits)
        await settle(layer)
        assert layer.counters["bypass_suspected"] == 2
        assert [k for _, k, _, _ in upstream.sent].count(ApiKey.DESCRIBE_GROUPS) == 2
    finally:
        await layer.stop()


def _fetch(group: str, member: str, epoch: int) -> Any:
    cls = OffsetFetchRequest
    g = cls.OffsetFetchRequestGroup
    return cls[9](
        groups=[g(group_id=group, member_id=member, member_epoch=epoch,
                  topics=[g.OffsetFetchRequestTopics(name="t", partition_indexes=[0])])],
        require_stable=True,
    )  # fmt: skip


def _fetched(out: Any) -> tuple[int, list[tuple[int, int, int]]]:
    (g,) = out.groups
    return g.error_code, [(p.partition_index, p.committed_offset, p.error_code) for t in g.topics for p in t.partitions]


@pytest.mark.parametrize("adopting", [True, False])
async def test_an_offset_fetch_of_an_unknown_member_is_answered_while_adopting(adopting: bool) -> None:
    """Right after a group becomes managed, a KIP-848 client fetches offsets with its member id of the
    cluster's group; the Java consumer fails poll() for good on UNKNOWN_MEMBER_ID there. A fetch changes
    nothing: while adopting it is answered with the offsets. A known member's stale epoch is still refused."""
    upstream = RecordingUpstream()
    layer = await with_upstream(upstream, leave_abandoned_upstream_members=adopting)
    try:
        joined = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat(1, "g", "m-new", 0))
        assert joined.error_code == 0
        got = _fetched(await call(layer, ApiKey.OFFSET_FETCH, 9, _fetch("g", "m-old", 5)))
        if adopting:
            assert got == (0, [(0, 42, 0)])
            assert layer.counters["fetches_unknown_member"] == 1
        else:
            assert got == (UNKNOWN_MEMBER_ID, [])
            assert layer.counters["fetches_unknown_member"] == 0
        got = _fetched(await call(layer, ApiKey.OFFSET_FETCH, 9, _fetch("g", "m-new", joined.member_epoch + 1)))
        assert got == (STALE_MEMBER_EPOCH, [])
        got = _fetched(await call(layer, ApiKey.OFFSET_FETCH, 9, _fetch("g", "m-new", joined.member_epoch)))
        assert got == (0, [(0, 42, 0)])
        # The upstream was asked without a member: it never sees the gateway's members.
        fetches = [m for _, k, _, m in upstream.sent if k == ApiKey.OFFSET_FETCH]
        assert len(fetches) == (2 if adopting else 1)
        assert all((f.groups[0].member_id, f.groups[0].member_epoch) == (None, -1) for f in fetches)
    finally:
        await layer.stop()
