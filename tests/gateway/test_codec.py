import uuid

from coordinator.errors import Errors
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey
from gateway.wire.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)


def test_new_group_apis_are_registered():
    assert codec.REQUESTS[68] is ConsumerGroupHeartbeatRequest
    assert codec.RESPONSES[69] is ConsumerGroupDescribeResponse
    assert codec.codec_max_version(68) == 1 and codec.codec_max_version(69) == 1
    assert codec.request_header_flexible(68, 0) and codec.response_header_flexible(69, 0)


def test_api_versions_response_header_is_never_flexible():
    assert not codec.response_header_flexible(ApiKey.API_VERSIONS, 3)
    assert codec.request_header_flexible(ApiKey.API_VERSIONS, 3)


def test_consumer_group_heartbeat_round_trip_v1():
    tid = uuid.uuid4()
    req = ConsumerGroupHeartbeatRequest[1](
        group_id="g",
        member_id="m-1",
        member_epoch=0,
        instance_id="i",
        rack_id=None,
        rebalance_timeout_ms=30000,
        subscribed_topic_names=["a", "b"],
        subscribed_topic_regex="^x.*",
        server_assignor="uniform",
        topic_partitions=[ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=tid, partitions=[0, 2])],
    )
    back = ConsumerGroupHeartbeatRequest[1].decode(req.encode(version=1))
    assert back.subscribed_topic_regex == "^x.*"
    assert back.topic_partitions[0].topic_id == tid and back.topic_partitions[0].partitions == [0, 2]
    # v0 has no regex field: it is not on the wire
    v0 = ConsumerGroupHeartbeatRequest[0](group_id="g", member_id="m", member_epoch=3)
    assert ConsumerGroupHeartbeatRequest[0].decode(v0.encode(version=0)).member_epoch == 3
    assert len(v0.encode(version=0)) < len(
        ConsumerGroupHeartbeatRequest[1](group_id="g", member_id="m", member_epoch=3).encode(version=1)
    )


def test_consumer_group_heartbeat_response_null_assignment():
    resp = ConsumerGroupHeartbeatResponse[0](
        error_code=0, member_id="m", member_epoch=5, heartbeat_interval_ms=5000
    )
    back = ConsumerGroupHeartbeatResponse[0].decode(resp.encode(version=0))
    assert back.assignment is None and back.member_epoch == 5


def test_consumer_group_describe_member_type_only_in_v1():
    member = ConsumerGroupDescribeResponse.DescribedGroup.Member
    assignment = ConsumerGroupDescribeResponse.DescribedGroup.Member.Assignment
    group = ConsumerGroupDescribeResponse.DescribedGroup(
        error_code=0,
        group_id="g",
        group_state="Stable",
        group_epoch=3,
        assignment_epoch=3,
        assignor_name="uniform",
        members=[
            member(
                member_id="m",
                member_epoch=3,
                client_id="c",
                client_host="/127.0.0.1",
                subscribed_topic_names=["t"],
                assignment=assignment(topic_partitions=[]),
                target_assignment=assignment(topic_partitions=[]),
                member_type=1,
            )
        ],
    )
    for version, expected in ((0, -1), (1, 1)):
        raw = ConsumerGroupDescribeResponse[version](groups=[group]).encode(version=version)
        back = ConsumerGroupDescribeResponse[version].decode(raw)
        assert back.groups[0].members[0].client_id == "c"
        assert getattr(back.groups[0].members[0], "member_type", -1) == expected
    req = ConsumerGroupDescribeRequest[1](group_ids=["g"], include_authorized_operations=True)
    assert ConsumerGroupDescribeRequest[1].decode(req.encode(version=1)).group_ids == ["g"]


def test_error_response_only_where_a_top_level_error_code_exists():
    raw = codec.error_response(ApiKey.FIND_COORDINATOR, 2, 11, Errors.UNSUPPORTED_VERSION)
    assert raw is not None
    _, msg = codec.decode_response(ApiKey.FIND_COORDINATOR, 2, raw)
    assert msg.error_code == Errors.UNSUPPORTED_VERSION
    assert codec.error_response(ApiKey.FIND_COORDINATOR, 4, 11, 35) is None  # batched: per-key errors only
    assert codec.error_response(ApiKey.PRODUCE, 9, 11, 35) is None  # per-partition errors only
    assert codec.error_response(12345, 0, 1, 35) is None


def test_no_error_response_below_the_schema_minimum():
    # OffsetFetch's schema starts at v1 (Kafka 4 dropped v0); FindCoordinator's starts at v0.
    assert codec.error_response(9, 0, 1, 35) is None
    assert codec.error_response(9, 2, 1, 35) is not None
    assert codec.error_response(ApiKey.FIND_COORDINATOR, 0, 1, 35) is not None
