"""ConsumerGroupHeartbeat validation, fencing, leaving and response rules."""

from __future__ import annotations

import pytest
from cg_helpers import Driver, config

from coordinator.errors import Errors
from coordinator.messages import ConsumerGroupHeartbeatRequest, TopicPartitions
from coordinator.records import RecordType
from coordinator.timers import CancelTimer, ScheduleTimer, rebalance_key, session_key

G = "grp"


def _req(**kw: object) -> ConsumerGroupHeartbeatRequest:
    base: dict[str, object] = dict(
        group_id=G, member_id="m1", member_epoch=0, rebalance_timeout_ms=1000,
        subscribed_topic_names=["foo"], topic_partitions=[],
    )
    base.update(kw)
    return ConsumerGroupHeartbeatRequest(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kw, error, message",
    [
        (dict(member_id="", api_version=1), Errors.INVALID_REQUEST, "MemberId can't be empty."),
        (dict(member_id="", api_version=0, member_epoch=3, topic_partitions=None), Errors.INVALID_REQUEST, "MemberId can't be empty."),
        (dict(member_id="", api_version=0, member_epoch=-1), Errors.INVALID_REQUEST, "MemberId can't be empty."),
        (dict(group_id=""), Errors.INVALID_REQUEST, "GroupId can't be empty."),
        (dict(instance_id=""), Errors.INVALID_REQUEST, "InstanceId can't be empty."),
        (dict(rack_id=" "), Errors.INVALID_REQUEST, "RackId can't be empty."),
        (dict(rebalance_timeout_ms=-1), Errors.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request."),
        (dict(topic_partitions=None), Errors.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."),
        (dict(topic_partitions=[TopicPartitions(__import__("uuid").uuid4(), [0])]), Errors.INVALID_REQUEST,
         "TopicPartitions must be empty when (re-)joining."),
        (dict(subscribed_topic_names=None), Errors.INVALID_REQUEST,
         "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
        (dict(member_epoch=-2, instance_id=None), Errors.INVALID_REQUEST, "InstanceId can't be null."),
        (dict(member_epoch=-3), Errors.INVALID_REQUEST, "MemberEpoch is invalid."),
        (dict(server_assignor="nope"), Errors.UNSUPPORTED_ASSIGNOR, None),
        (dict(subscribed_topic_regex="("), Errors.INVALID_REGULAR_EXPRESSION, None),
    ],
)
def test_invalid_requests(kw: dict[str, object], error: Errors, message: str | None) -> None:
    d = Driver()
    res = d.coord.consumer_group_heartbeat(_req(**kw), 0)
    assert res.response.error_code == error
    if message is not None:
        assert res.response.error_message == message
    assert not res.records and not res.timers
    assert d.coord.group(G) is None  # nothing was created


def test_v0_join_gets_a_member_id_from_the_coordinator() -> None:
    d = Driver()
    d.topics({"foo": 1})
    r = d.coord.consumer_group_heartbeat(_req(member_id="", api_version=0), 0).response
    assert r.error_code == 0 and r.member_id
    assert r.member_id in d.group(G).members


def test_join_records_in_kafka_order_and_timers() -> None:
    d = Driver()
    d.topics({"foo": 2})
    res = d.hb_result(G, "m1", 0)
    assert [r.type for r in res.records] == [
        RecordType.MEMBER_METADATA, RecordType.PARTITION_METADATA, RecordType.GROUP_METADATA,
        RecordType.TARGET_ASSIGNMENT_MEMBER, RecordType.TARGET_ASSIGNMENT_METADATA,
        RecordType.CURRENT_MEMBER_ASSIGNMENT,
    ]
    assert res.timers == [ScheduleTimer(session_key(G, "m1"), 45_000)]
    r = res.response
    assert (r.member_epoch, r.heartbeat_interval_ms, d.resp_parts(r)) == (1, 5000, {"foo": [0, 1]})


def test_steady_state_heartbeat_writes_nothing_and_refreshes_the_session() -> None:
    d = Driver()
    d.topics({"foo": 2})
    d.hb(G, "m1", 0)
    d.now = 7000
    res = d.hb_result(G, "m1", 1)
    assert res.records == [] and list(res.timers) == [ScheduleTimer(session_key(G, "m1"), 52_000)]
    assert res.response.assignment is None and res.response.member_epoch == 1
    assert res.response.heartbeat_interval_ms == 5000
    # Same answer through the slow path (owned partitions sent).
    res = d.hb_result(G, "m1", 1, {"foo": [0, 1]})
    assert not res.records and res.response.assignment is None and res.response.member_epoch == 1


def test_full_request_gets_the_assignment_again() -> None:
    d = Driver()
    d.topics({"foo": 2})
    d.hb(G, "m1", 0)
    r = d.hb(G, "m1", 1, {"foo": [0, 1]}, rebalance_timeout_ms=1000, subscribed_topic_names=["foo"])
    assert d.resp_parts(r) == {"foo": [0, 1]}


def test_unknown_member_and_group() -> None:
    d = Driver()
    d.topics({"foo": 1})
    assert d.hb("nope", "m1", 1).error_code == Errors.GROUP_ID_NOT_FOUND
    d.hb(G, "m1", 0)
    assert d.hb(G, "ghost", 1).error_code == Errors.UNKNOWN_MEMBER_ID
    assert d.hb(G, "ghost", -1).error_code == Errors.UNKNOWN_MEMBER_ID


def test_fencing_with_lost_response_tolerance() -> None:
    d = Driver()
    d.topics({"foo": 2})
    d.hb(G, "A", 0)  # epoch 1, owns 0,1
    d.hb(G, "B", 0)  # epoch 2; A must give one partition up
    g = d.group(G)
    assert d.hb(G, "A", 2).error_code == Errors.FENCED_MEMBER_EPOCH  # ahead of the coordinator
    r = d.hb(G, "A", 1, {"foo": [0, 1]})
    assert r.member_epoch == 1 and d.resp_parts(r) == {"foo": [0]}
    r = d.hb(G, "A", 1, {"foo": [0]})
    assert r.member_epoch == 2  # revocation acknowledged; suppose this response is lost
    assert g.members["A"].previous_member_epoch == 1
    # Previous epoch with a subset of the assigned partitions: accepted.
    r = d.hb(G, "A", 1, {"foo": [0]})
    assert r.error_code == 0 and r.member_epoch == 2
    # Previous epoch while owning more than assigned: fenced.
    r = d.hb(G, "A", 1, {"foo": [0, 1]})
    assert r.error_code == Errors.FENCED_MEMBER_EPOCH
    # Previous epoch without telling what it owns: fenced.
    assert d.hb(G, "A", 1).error_code == Errors.FENCED_MEMBER_EPOCH
    # Fenced members rejoin with epoch 0 and the same id; they keep their assignment.
    r = d.hb(G, "A", 0)
    assert r.error_code == 0 and r.member_epoch == 2 and d.resp_parts(r) == {"foo": [0]}


def test_leave_removes_member_and_bumps_epoch() -> None:
    d = Driver()
    d.topics({"foo": 2})
    d.hb(G, "A", 0)
    d.hb(G, "B", 0)
    g = d.group(G)
    e = g.group_epoch
    res = d.hb_result(G, "B", -1)
    assert (res.response.member_id, res.response.member_epoch) == ("B", -1)
    assert "B" not in g.members and g.group_epoch == e + 1
    assert [r.type for r in res.records][:3] == [
        RecordType.CURRENT_MEMBER_ASSIGNMENT, RecordType.TARGET_ASSIGNMENT_MEMBER, RecordType.MEMBER_METADATA,
    ]
    assert all(r.value is None for r in res.records[:3])
    assert CancelTimer(session_key(G, "B")) in res.timers and CancelTimer(rebalance_key(G, "B")) in res.timers


def test_group_max_size() -> None:
    d = Driver(config(max_group_size=1))
    d.topics({"foo": 1})
    d.hb(G, "A", 0)
    assert d.hb(G, "B", 0).error_code == Errors.GROUP_MAX_SIZE_REACHED
    assert d.hb(G, "A", 0).error_code == 0  # a rejoin is not a new member


def test_server_assignor_selection_and_change_bumps_epoch() -> None:
    from cg_helpers import StickyTestAssignor

    other = StickyTestAssignor()
    other.name = "other"
    d = Driver(config(assignors={"sticky-test": StickyTestAssignor(), "other": other}))
    d.topics({"foo": 1})
    d.hb(G, "A", 0)
    g = d.group(G)
    assert d.coord.describe([G])[0].assignor_name == "sticky-test"  # the default: first configured
    e = g.group_epoch
    d.hb(G, "A", 1, server_assignor="other")
    assert g.group_epoch == e + 1 and d.coord.describe([G])[0].assignor_name == "other"


def test_subscription_change_bumps_epoch_and_revokes() -> None:
    d = Driver()
    d.topics({"foo": 1, "bar": 1})
    d.hb(G, "A", 0, subscribed_topic_names=["foo", "bar"])
    g = d.group(G)
    e = g.group_epoch
    r = d.hb(G, "A", e, subscribed_topic_names=["bar"])
    assert g.group_epoch == e + 1
    assert d.resp_parts(r) == {"bar": [0]} and r.member_epoch == e  # revoke foo first
    r = d.hb(G, "A", e, {"bar": [0]})
    assert r.member_epoch == e + 1
    # Same names in another order: nothing changes.
    r2 = d.hb_result(G, "A", e + 1, subscribed_topic_names=["bar"])
    assert not r2.records
