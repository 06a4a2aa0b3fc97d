"""Wire <-> dataclass mapping of the group APIs, the advertised versions, and the coordinator settings."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kafka.protocol.consumer.group import JoinGroupRequest, LeaveGroupRequest
from pydantic import ValidationError

from coordinator.describe import DescribedGroup, DescribedMember, DescribedTopicPartitions
from coordinator.messages import ConsumerGroupHeartbeatResponse, TopicPartitions
from gateway.config.coordinator import CoordinatorSettings
from gateway.config.settings import load_config
from gateway.net import rewrite
from gateway.wire import codec
from gateway.wire import group_codec as gc
from gateway.wire.api_keys import ApiKey
from gateway.wire.protocol.messages import ConsumerGroupDescribeResponse
from gateway.wire.protocol.messages import ConsumerGroupHeartbeatResponse as WireHb
from translate.classic_messages import JoinGroupResponse, LeaveGroupResponse, MemberResponse
from translate.group_messages import ConsumerGroupDescribeResponse as DescribeDc


def test_advertised_versions_are_exactly_the_handled_ones() -> None:
    assert gc.LOCAL_API[ApiKey.CONSUMER_GROUP_HEARTBEAT] == (0, 1)
    assert gc.LOCAL_API[ApiKey.CONSUMER_GROUP_DESCRIBE] == (0, 1)
    # v10 (topic ids) of the offset APIs and v6 of DescribeGroups are handled (tests/gateway/test_group_api_versions.py).
    assert gc.LOCAL_API[ApiKey.OFFSET_COMMIT][1] == 10 and gc.LOCAL_API[ApiKey.OFFSET_FETCH][1] == 10
    for api_key, (_, hi) in gc.LOCAL_API.items():
        assert hi <= codec.codec_max_version(api_key)
    # Even an upstream without KIP-848 APIs (and with newer group API versions) gets our ranges.
    upstream = {ApiKey.JOIN_GROUP: (0, 9), ApiKey.OFFSET_COMMIT: (2, 10), ApiKey.DESCRIBE_GROUPS: (0, 6), 18: (0, 4)}
    ranges = rewrite.gateway_api_ranges(upstream, gc.LOCAL_API)
    assert ranges[ApiKey.CONSUMER_GROUP_HEARTBEAT] == (0, 1)
    assert ranges[ApiKey.OFFSET_COMMIT] == (0, 10) and ranges[ApiKey.DESCRIBE_GROUPS] == (0, 6)


@pytest.mark.parametrize("version", range(0, 10))
def test_join_group_request_fields_per_version(version: int) -> None:
    kw = {"group_id": "g", "session_timeout_ms": 7000, "member_id": "m", "protocol_type": "consumer",
          "protocols": [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"x")]}
    if version >= 1:
        kw["rebalance_timeout_ms"] = 9000
    if version >= 5:
        kw["group_instance_id"] = "i-1"
    msg = JoinGroupRequest[version].decode(JoinGroupRequest[version](**kw).encode(version=version))
    req = gc.join_group_request(msg, version, "cid", "/h")
    assert req.rebalance_timeout_ms == (9000 if version >= 1 else 7000)
    assert req.group_instance_id == ("i-1" if version >= 5 else None)
    assert (req.api_version, req.client_id, req.client_host) == (version, "cid", "/h")
    out = gc.join_group_response(JoinGroupResponse(generation_id=3, protocol_name=None, leader="m", member_id="m"), version)
    back = codec.RESPONSES[ApiKey.JOIN_GROUP][version].decode(out.encode(version=version))
    assert back.generation_id == 3 and back.protocol_name in ("", None)


def test_leave_group_single_member_versions_map_to_a_batch_of_one() -> None:
    msg = LeaveGroupRequest[1](group_id="g", member_id="m1")
    req = gc.leave_group_request(msg, 1, "c", "/h")
    assert [(m.member_id, m.group_instance_id) for m in req.members] == [("m1", None)]
    # v0-2 have no per-member errors: the member's error is the response's.
    out = gc.leave_group_response(LeaveGroupResponse(members=[MemberResponse("m1", None, 25)]), 1)
    assert codec.RESPONSES[ApiKey.LEAVE_GROUP][1].decode(out.encode(version=1)).error_code == 25


@pytest.mark.parametrize("version", [0, 1])
def test_consumer_group_heartbeat_response_with_and_without_assignment(version: int) -> None:
    tid = uuid.uuid4()
    for assignment in (None, [TopicPartitions(tid, [2, 0])]):
        dc = ConsumerGroupHeartbeatResponse(member_id="m", member_epoch=4, heartbeat_interval_ms=500, assignment=assignment)
        wire = WireHb[version].decode(gc.consumer_group_heartbeat_response(dc, version).encode(version=version))
        assert (wire.member_id, wire.member_epoch, wire.heartbeat_interval_ms) == ("m", 4, 500)
        if assignment is None:
            assert wire.assignment is None
        else:
            assert [(t.topic_id, list(t.partitions)) for t in wire.assignment.topic_partitions] == [(tid, [2, 0])]


def test_consumer_group_describe_member_type_only_from_v1() -> None:
    tid = uuid.uuid4()
    parts = [DescribedTopicPartitions(tid, "t", [0, 1])]
    member = DescribedMember("m", None, None, 2, "c", "/h", ["t"], None, parts, parts, 0)
    dc = DescribeDc([DescribedGroup("g", 0, None, "Stable", 2, 2, "uniform", [member])])
    for version in (0, 1):
        wire = ConsumerGroupDescribeResponse[version].decode(
            gc.consumer_group_describe_response(dc, version).encode(version=version)
        )
        (m,) = wire.groups[0].members
        assert [(t.topic_name, list(t.partitions)) for t in m.assignment.topic_partitions] == [("t", [0, 1])]
        assert m.member_type == (0 if version == 1 else -1)


def test_settings_take_kafka_names_file_and_environment(tmp_path: Path) -> None:
    cfg = tmp_path / "g.toml"
    cfg.write_text(
        '[gateway]\nupstream = "127.0.0.1:9093"\n'
        '[coordinator]\n"group.consumer.session.timeout.ms" = 50000\n"group.consumer.assignors" = "range"\n'
        'classic_groups = "translate"\n'
    )
    env = {"GROUPGATE_COORDINATOR_STATE_DIR": "/var/lib/gg", "GROUPGATE_COORDINATOR_MANAGED_GROUPS": "app-.*"}
    config = load_config(cfg, {"coordinator": {"fsync": "never"}}, environ=env)
    c = config.coordinator
    assert (c.consumer_session_timeout_ms, c.consumer_assignors, c.classic_groups) == (50000, ["range"], "translate")
    assert (c.state_dir, c.managed_groups, c.fsync) == ("/var/lib/gg", "app-.*", "never")
    service, coordinator = c.service_configs()
    assert list(coordinator.assignors) == ["range"] and coordinator.session_timeout_ms == 50000
    assert service.mode.value == "translate"


@pytest.mark.parametrize(
    "bad",
    [
        {"group.consumer.session.timeout.ms": 1000},  # below group.consumer.min.session.timeout.ms
        {"group.consumer.heartbeat.interval.ms": 100},  # below its minimum
        {"group.consumer.assignors": "sticky"},
        {"managed_groups": "(unclosed"},
        {"group.min.session.timeout.ms": 10, "group.max.session.timeout.ms": 5},
    ],
)
def test_settings_refuse_values_kafka_refuses(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        CoordinatorSettings.model_validate(bad)
