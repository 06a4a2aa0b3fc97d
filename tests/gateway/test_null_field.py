"""codec.null_field: the first field that is null where its schema forbids it, named by its path."""

from __future__ import annotations

from kafka.protocol.consumer.group import JoinGroupRequest, OffsetCommitRequest

from gateway.wire import codec
from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest

_T = OffsetCommitRequest.OffsetCommitRequestTopic
_P = _T.OffsetCommitRequestPartition


def _commit(name, metadata="", member_id="m"):
    return OffsetCommitRequest[9](
        group_id="g", generation_id_or_member_epoch=1, member_id=member_id, group_instance_id=None,
        topics=[_T(name="ok", partitions=[]), _T(name=name, partitions=[
            _P(partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="x"),
            _P(partition_index=1, committed_offset=1, committed_leader_epoch=-1, committed_metadata=metadata),
        ])],
    )


def test_nulls_the_schema_allows_pass():
    assert codec.null_field(_commit("t", metadata=None), 9) is None  # metadata and instance id are nullable
    hb = ConsumerGroupHeartbeatRequest[1](
        group_id="g", member_id="m", member_epoch=3, instance_id=None, rack_id=None, rebalance_timeout_ms=-1,
        subscribed_topic_names=None, subscribed_topic_regex=None, server_assignor=None, topic_partitions=None,
    )
    assert codec.null_field(hb, 1) is None


def test_a_forbidden_null_is_named_by_its_path_at_any_depth():
    assert codec.null_field(_commit("t", member_id=None), 9) == "member_id"
    assert codec.null_field(_commit(None), 9) == "topics[1].name"
    join = JoinGroupRequest[5](
        group_id="g", session_timeout_ms=1, rebalance_timeout_ms=1, member_id="", group_instance_id=None,
        protocol_type="consumer", protocols=None,
    )
    assert codec.null_field(join, 5) == "protocols"


def test_the_same_class_is_checked_per_version():
    # OffsetCommit v1-v6 carry no group instance id; v7+ do (nullable): neither is a forbidden null.
    msg = _commit("t")
    assert codec.null_field(msg, 6) is None and codec.null_field(msg, 9) is None
    msg.member_id = None
    assert codec.null_field(msg, 6) == "member_id" == codec.null_field(msg, 9)
