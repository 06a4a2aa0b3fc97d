"""The group API versions the gateway answers itself beyond v9/v5: OffsetCommit and OffsetFetch v10
(topics by id), DescribeGroups v6 (an unknown group is GROUP_ID_NOT_FOUND with a message), and the
claim of a request for an unmanaged group whose version the upstream does not have."""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.admin import DescribeGroupsRequest
from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from structlog.testing import capture_logs

from gateway.groups.layer import GroupLayer
from gateway.wire import frames
from gateway.wire import group_codec as gc
from gateway.wire.api_keys import ApiKey

from ._groups_support import StubGateway, call, layer_on, request_payload
from .test_groups_layer import STALE_MEMBER_EPOCH, _join_consumer_member, settings, started

GROUP_ID_NOT_FOUND = 69
UNKNOWN_TOPIC_ID = 100


def _topics(layer: GroupLayer, image: dict[str, tuple[uuid.UUID, int]]) -> None:
    layer.watch.topics = dict(image)
    layer._on_topics(image)


def _commit_v10(group: str, member: str, epoch: int, topic_id: uuid.UUID) -> Any:
    cls = OffsetCommitRequest
    part = cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)
    return cls[10](
        group_id=group, generation_id_or_member_epoch=epoch, member_id=member, group_instance_id=None,
        topics=[cls.OffsetCommitRequestTopic(topic_id=topic_id, partitions=[part])],
    )


async def test_offset_commit_v10_is_validated_by_topic_id_and_answered_by_topic_id() -> None:
    layer = await started()
    try:
        tid = uuid.uuid4()
        _topics(layer, {"t": (tid, 1)})
        member = str(uuid.uuid4())
        r = await _join_consumer_member(layer, "z10", "t", member)
        assert r.error_code == 0
        # Partition 0 was assigned at the member's epoch: one below it is a zombie's.
        with capture_logs() as logs:
            out = await call(layer, ApiKey.OFFSET_COMMIT, 10, _commit_v10("z10", member, r.member_epoch - 1, tid))
            again = await call(layer, ApiKey.OFFSET_COMMIT, 10, _commit_v10("z10", member, r.member_epoch - 1, tid))
        assert again.topics[0].partitions[0].error_code == STALE_MEMBER_EPOCH
        # The refusal is logged once for this client, with the reason.
        refused = [e for e in logs if e["event"] == "request refused"]
        assert [(e["kind"], e["client_id"]) for e in refused] == [("offset-commit-refused:STALE_MEMBER_EPOCH", "app")]
        assert "KIP-1251" in refused[0]["reason"] and "z10" in refused[0]["reason"]
        assert [(t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions]) for t in out.topics] == [
            (tid, [(0, STALE_MEMBER_EPOCH)])
        ]
        # A topic id nobody knows: UNKNOWN_TOPIC_ID for its partitions, nothing committed.
        ghost = uuid.uuid4()
        out = await call(layer, ApiKey.OFFSET_COMMIT, 10, _commit_v10("z10", member, r.member_epoch, ghost))
        assert [(t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions]) for t in out.topics] == [
            (ghost, [(0, UNKNOWN_TOPIC_ID)])
        ]
        assert layer.counters["commits"] == 0
    finally:
        await layer.stop()


async def test_offset_fetch_v10_answers_an_unknown_topic_id_per_partition() -> None:
    layer = await started()
    try:
        _topics(layer, {"t": (uuid.uuid4(), 1)})
        ghost = uuid.uuid4()
        g = OffsetFetchRequest.OffsetFetchRequestGroup
        req = OffsetFetchRequest[10](
            groups=[g(group_id="f10", member_id=None, member_epoch=-1,
                      topics=[g.OffsetFetchRequestTopics(topic_id=ghost, partition_indexes=[0, 1])])],
            require_stable=False,
        )
        out = await call(layer, ApiKey.OFFSET_FETCH, 10, req)
        (group,) = out.groups
        assert group.error_code == 0
        assert [(t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions]) for t in group.topics] == [
            (ghost, [(0, UNKNOWN_TOPIC_ID), (1, UNKNOWN_TOPIC_ID)])
        ]
    finally:
        await layer.stop()


async def test_describe_groups_v6_says_group_id_not_found_where_v5_says_dead() -> None:
    layer = await started()
    try:
        out = await call(layer, ApiKey.DESCRIBE_GROUPS, 6, DescribeGroupsRequest[6](groups=["nobody"], include_authorized_operations=False))
        (g,) = out.groups
        assert (g.group_id, g.error_code, g.group_state) == ("nobody", GROUP_ID_NOT_FOUND, "Dead")
        assert g.error_message == "Group nobody not found."
        out = await call(layer, ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest[5](groups=["nobody"], include_authorized_operations=False))
        assert (out.groups[0].error_code, out.groups[0].group_state) == (0, "Dead")
    finally:
        await layer.stop()


def test_a_version_the_upstream_lacks_is_claimed_for_unmanaged_groups_too() -> None:
    stub = StubGateway()
    layer = layer_on(stub, settings(managed_groups="app-.*"), install=False)

    def frame(msg: Any, v: int) -> bytes:
        payload = request_payload(msg, v)
        return frames.encode_size(len(payload)) + payload

    req = DescribeGroupsRequest[6](groups=["other"], include_authorized_operations=False)
    stub.directory.observe_api_versions({ApiKey.DESCRIBE_GROUPS: (0, 6)})
    assert not layer.claims(frame(req, 6), ApiKey.DESCRIBE_GROUPS, 6)  # passes through: the upstream has v6
    stub.directory.observe_api_versions({ApiKey.DESCRIBE_GROUPS: (0, 5)})
    assert layer.claims(frame(req, 6), ApiKey.DESCRIBE_GROUPS, 6)  # answered here, asked upstream at v5
    assert not layer.claims(frame(req, 5), ApiKey.DESCRIBE_GROUPS, 5)
    # A transactional id's FindCoordinator v6 on an upstream that stops at v4 is asked upstream at v3.
    txn = FindCoordinatorRequest[6](key_type=1, coordinator_keys=["tx"])
    stub.directory.observe_api_versions({ApiKey.FIND_COORDINATOR: (0, 4)})
    assert layer.claims(frame(txn, 6), ApiKey.FIND_COORDINATOR, 6) and not layer.claims(frame(txn, 4), ApiKey.FIND_COORDINATOR, 4)


def test_local_api_covers_every_group_api_and_the_codec_speaks_each_version() -> None:
    for api_key, (lo, hi) in gc.LOCAL_API.items():
        for v in range(lo, hi + 1):
            assert gc.request_cls(api_key)[v] is not None and gc.response_cls(api_key)[v] is not None
