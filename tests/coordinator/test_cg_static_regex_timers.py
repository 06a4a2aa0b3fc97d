"""Static membership, regex subscriptions, topic metadata changes and timers."""

from __future__ import annotations

import uuid

from cg_helpers import Driver

from coordinator.errors import Errors
from coordinator.messages import ConsumerGroupHeartbeatRequest, TopicPartitions
from coordinator.model import GroupState, MemberState
from coordinator.records import RecordType
from coordinator.timers import CancelTimer, ScheduleTimer, rebalance_key, session_key

G = "grp"


def test_static_member_temporary_leave_and_replacement_keeps_assignment() -> None:
    d = Driver()
    d.topics({"foo": 4})
    d.hb(G, "A", 0, instance_id="i-a")
    d.hb(G, "B", 0)
    for m in ("A", "B", "A", "B"):
        mm = d.group(G).members[m]
        d.hb(G, m, mm.member_epoch, d.parts(mm.assigned_partitions), instance_id="i-a" if m == "A" else None)
    g = d.group(G)
    assert g.state() is GroupState.STABLE
    a_parts = dict(g.members["A"].assigned_partitions)
    e = g.group_epoch

    # A new process with the same instance id before A left: refused.
    r = d.hb(G, "A2", 0, instance_id="i-a")
    assert r.error_code == Errors.UNRELEASED_INSTANCE_ID
    # A leaves temporarily (-2): it stays in the group, keeps its partitions; no epoch bump.
    res = d.hb_result(G, "A", -2, instance_id="i-a")
    assert (res.response.member_epoch, res.response.error_code) == (-2, 0)
    assert g.members["A"].member_epoch == -2 and g.group_epoch == e
    assert [r.type for r in res.records] == [RecordType.CURRENT_MEMBER_ASSIGNMENT]
    # The replacement takes over the assignment without a rebalance.
    r = d.hb(G, "A2", 0, instance_id="i-a")
    assert r.error_code == 0 and r.member_epoch == e
    assert "A" not in g.members and g.members["A2"].assigned_partitions == a_parts
    assert g.group_epoch == e and g.static_members == {"i-a": "A2"}
    assert g.state() is GroupState.STABLE
    # The old member id is gone; its instance id now belongs to A2.
    assert d.hb(G, "A", e, instance_id="i-a").error_code == Errors.FENCED_INSTANCE_ID
    assert d.hb(G, "X", e, instance_id="i-x").error_code == Errors.UNKNOWN_MEMBER_ID


def test_static_member_not_back_within_session_timeout_is_removed() -> None:
    d = Driver()
    d.topics({"foo": 2})
    d.hb(G, "A", 0, instance_id="i-a")
    d.hb(G, "A", 1, instance_id="i-a")
    d.hb(G, "A", -2, instance_id="i-a")
    g = d.group(G)
    e = g.group_epoch
    d.keep(d.coord.on_timer(session_key(G, "A"), 45_000))
    assert not g.members and g.group_epoch == e + 1 and g.state() is GroupState.EMPTY
    assert d.hb(G, "A2", 0, instance_id="i-a").error_code == 0


def test_regex_subscription_follows_topics() -> None:
    d = Driver()
    d.topics({"orders-eu": 1, "payments": 1})
    r = d.hb(G, "A", 0, subscribed_topic_names=None, subscribed_topic_regex="orders-.*")
    g = d.group(G)
    assert d.resp_parts(r) == {"orders-eu": [0]}
    assert g.resolved_regexes["orders-.*"].topics == {"orders-eu"}
    e = g.group_epoch
    # A matching topic appears: epoch bump, the member gets it on its next heartbeat.
    res = d.topics({"orders-eu": 1, "orders-us": 2, "payments": 1})
    assert RecordType.REGULAR_EXPRESSION in [r.type for r in res.records]
    assert g.group_epoch == e + 1
    r = d.hb(G, "A", e, {"orders-eu": [0]})
    assert d.resp_parts(r) == {"orders-eu": [0], "orders-us": [0, 1]}
    # A non-matching topic does not disturb the group.
    e = g.group_epoch
    d.topics({"orders-eu": 1, "orders-us": 2, "payments": 1, "audit": 1})
    assert g.group_epoch == e
    # Full-name match, as RE2/J's matches(): "orders-" alone matches nothing.
    d.hb(G, "B", 0, subscribed_topic_names=None, subscribed_topic_regex="orders-")
    assert g.resolved_regexes["orders-"].topics == frozenset()
    # The regex record goes away with its last user.
    res = d.hb_result(G, "B", -1)
    assert any(r.type is RecordType.REGULAR_EXPRESSION and r.value is None and r.sub_key == "orders-" for r in res.records)
    assert "orders-" not in g.resolved_regexes


def test_topic_deleted_and_recreated() -> None:
    d = Driver()
    d.topics({"foo": 2})
    d.hb(G, "A", 0)
    g = d.group(G)
    old = d.tid("foo")
    # Recreated under a new id: the old partitions are revoked first, then the new ones assigned.
    d.topics({"foo": 2}, ids={"foo": uuid.uuid4()})
    e = g.group_epoch
    res = d.coord.consumer_group_heartbeat(
        ConsumerGroupHeartbeatRequest(G, "A", e - 1, topic_partitions=[TopicPartitions(old, [0, 1])]), 0
    )
    assert res.response.member_epoch == e - 1 and res.response.assignment == []
    assert g.members["A"].state is MemberState.UNREVOKED_PARTITIONS
    d.keep(res)
    res = d.coord.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(G, "A", e - 1, topic_partitions=[]), 0)
    d.keep(res)
    assert res.response.member_epoch == e
    assert d.tid("foo") != old and d.resp_parts(res.response) == {"foo": [0, 1]}
    # Deleted: nothing left to assign.
    d.topics({})
    r = d.hb(G, "A", e, {"foo": [0, 1]})
    assert r.assignment == [] and g.subscription_metadata == {}


def test_rebalance_timeout_fences_a_member_that_does_not_revoke() -> None:
    d = Driver()
    d.topics({"foo": 2})
    d.hb(G, "A", 0)
    d.hb(G, "B", 0)
    d.now = 1000
    res = d.hb_result(G, "A", 1, {"foo": [0, 1]})
    assert ScheduleTimer(rebalance_key(G, "A"), 1000 + 30_000) in res.timers
    g = d.group(G)
    assert g.members["A"].state is MemberState.UNREVOKED_PARTITIONS
    d.keep(d.coord.on_timer(rebalance_key(G, "A"), 31_000))
    assert "A" not in g.members
    # B gets everything once the target is recomputed.
    r = d.hb(G, "B", 2, {})
    assert d.resp_parts(r) == {"foo": [0, 1]}


def test_rebalance_timer_cancelled_after_revocation_and_stale_firing_ignored() -> None:
    d = Driver()
    d.topics({"foo": 2})
    d.hb(G, "A", 0)
    d.hb(G, "B", 0)
    d.hb(G, "A", 1, {"foo": [0, 1]})
    res = d.hb_result(G, "A", 1, {"foo": [0]})
    assert CancelTimer(rebalance_key(G, "A")) in res.timers
    res = d.coord.on_timer(rebalance_key(G, "A"), 99_999)
    assert not res.records and "A" in d.group(G).members
    assert not d.coord.on_timer(session_key(G, "ghost"), 1).records


def test_on_loaded_arms_timers_for_replayed_members() -> None:
    from coordinator.service import ConsumerGroupCoordinator

    d = Driver()
    d.topics({"foo": 2})
    d.hb(G, "A", 0)
    d.hb(G, "B", 0)
    d.hb(G, "A", 1, {"foo": [0, 1]})  # A is revoking
    fresh = ConsumerGroupCoordinator(d.coord.state.config)
    for r in d.records:
        fresh.replay(r)
    assert fresh.snapshot() == d.coord.snapshot()
    timers = fresh.on_loaded(100).timers
    assert ScheduleTimer(session_key(G, "A"), 45_100) in timers
    assert ScheduleTimer(session_key(G, "B"), 45_100) in timers
    assert ScheduleTimer(rebalance_key(G, "A"), 30_100) in timers


def test_consumer_heartbeat_replaces_a_classic_static_member_at_once() -> None:
    from coordinator.model import ClassicMemberMetadata, ConsumerGroupMember, MemberType

    d = Driver()
    d.topics({"foo": 2})
    c = d.coord
    tx = c.begin()
    c.upsert_member(tx, G, ConsumerGroupMember(
        "K", instance_id="i-k", subscribed_topic_names=frozenset({"foo"}), rebalance_timeout_ms=5000,
        classic_metadata=ClassicMemberMetadata(10_000, (("range", b""),)),
    ), 0)
    k = c.reconcile_member(tx, G, "K", {}, 0)
    d.records.extend(tx.records)
    parts = dict(k.assigned_partitions)
    assert parts
    r = d.hb(G, "N", 0, instance_id="i-k")
    g = d.group(G)
    assert r.error_code == 0 and "K" not in g.members
    n = g.members["N"]
    assert n.member_type is MemberType.CONSUMER and n.assigned_partitions == parts
    from coordinator.replay import replay

    assert {k: v.snapshot() for k, v in replay(d.records).items()} == c.snapshot()
