"""Scripted reproductions of what the seeded simulation found in the group service.

An open issue is a strict xfail: it fails today and turns into an unexpected pass (a failure) once
the behaviour is fixed, so the marker goes with the fix; a fixed one stays as a regression test.
"""

from __future__ import annotations

import uuid
from typing import Any

from coordinator.messages import ConsumerGroupHeartbeatRequest
from coordinator.timers import apply_timer_changes, deadline
from rehearsal.sim_endpoint import EndpointConfig, ServiceEndpoint
from translate.classic_messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    LeaveGroupRequest,
    MemberIdentity,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from translate.embedded import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    TopicPartitions,
    encode_assignment,
    encode_subscription,
)

GROUP = "g"
TOPIC = "t"
TOPIC_ID = uuid.UUID(int=7)
ALL = (0, 1, 2, 3)


class Driver:
    """A virtual clock, the service's timers, and every response by request key."""

    def __init__(self) -> None:
        self.endpoint = ServiceEndpoint(EndpointConfig(classic_mode="native"), 0)
        self.now = 0
        self.timers: dict[Any, int] = {}
        self.answers: dict[int, Any] = {}
        self.keys = iter(range(1, 1 << 30))
        self._take(self.endpoint.on_metadata({TOPIC: (TOPIC_ID, len(ALL))}, 0))

    def _take(self, result: Any) -> None:
        for key, body in result.responses:
            self.answers[key] = body
        apply_timer_changes(self.timers, result.timers, deadline)

    def send(self, request: object) -> int:
        key = next(self.keys)
        self._take(self.endpoint.handle(request, key, self.now))
        return key

    def advance(self, ms: int) -> None:
        end = self.now + ms
        while True:
            due = sorted((d, repr(k), k) for k, d in self.timers.items() if d <= end)
            if not due:
                break
            deadline, _, key = due[0]
            del self.timers[key]
            self.now = max(self.now, deadline)
            self._take(self.endpoint.on_timer(key, self.now))
        self.now = end


def _join(member_id: str, owned: tuple[int, ...], generation: int) -> JoinGroupRequest:
    sub = ConsumerProtocolSubscription(
        topics=[TOPIC], owned_partitions=[TopicPartitions(TOPIC, owned)] if owned else [], generation_id=generation
    )
    return JoinGroupRequest(
        group_id=GROUP, session_timeout_ms=10_000, member_id=member_id, rebalance_timeout_ms=15_000,
        protocols=[JoinGroupRequestProtocol("cooperative-sticky", encode_subscription(sub, 2))], client_id="legacy",
    )


def _assignment(*partitions: int) -> bytes:
    return encode_assignment(ConsumerProtocolAssignment([TopicPartitions(TOPIC, partitions)]), 0)


def test_upgrading_a_rebalancing_cooperative_group_never_hands_out_owned_partitions() -> None:
    d = Driver()
    # A forms the classic group alone and owns every partition (cooperative-sticky).
    a = d.answers[d.send(_join("", (), -1))].member_id
    first = d.send(_join(a, (), -1))
    d.advance(1_000)
    generation = d.answers[first].generation_id
    d.send(SyncGroupRequest(GROUP, generation, a, assignments=[SyncGroupRequestAssignment(a, _assignment(*ALL))]))
    # B joins: the group rebalances; A rejoins still owning everything (cooperative).
    b = d.answers[d.send(_join("", (), -1))].member_id
    b_join = d.send(_join(b, (), -1))
    assert d.answers[d.send(HeartbeatRequest(GROUP, generation, a))].error_code == 27  # REBALANCE_IN_PROGRESS
    a_join = d.send(_join(a, ALL, generation))
    assert d.answers[a_join].error_code == 0 and d.answers[b_join].error_code == 0  # CompletingRebalance
    # B is rolled before the leader's SyncGroup: the group goes back to PreparingRebalance.
    d.send(LeaveGroupRequest(GROUP, [MemberIdentity(b)]))
    # A consumer-protocol member joins and the group is converted.
    c = d.answers[d.send(ConsumerGroupHeartbeatRequest(
        group_id=GROUP, member_id="c", member_epoch=0, rebalance_timeout_ms=15_000,
        subscribed_topic_names=[TOPIC], topic_partitions=[],
    ))]
    assert c.error_code == 0
    given = {p for tp in c.assignment or [] for p in tp.partitions}
    # A has not been told to give anything up: C must not get any of A's partitions yet.
    assert given.isdisjoint(ALL), f"C was given {sorted(given)} while A still owns {list(ALL)}"


def test_partitions_added_before_a_static_takeover_upgrade_get_assigned() -> None:
    d = Driver()
    join = _join("", (), -1)
    join.group_instance_id = "i1"  # static: no MEMBER_ID_REQUIRED round trip
    first = d.send(join)
    d.advance(1_000)
    a = d.answers[first].member_id
    generation = d.answers[first].generation_id
    d.send(SyncGroupRequest(GROUP, generation, a, group_instance_id="i1",
                            assignments=[SyncGroupRequestAssignment(a, _assignment(*ALL))]))
    # Two partitions are added; then A is replaced by a consumer-protocol member with its instance id.
    d._take(d.endpoint.on_metadata({TOPIC: (TOPIC_ID, len(ALL) + 2)}, d.now))
    request = ConsumerGroupHeartbeatRequest(
        group_id=GROUP, member_id="c", member_epoch=0, instance_id="i1", rebalance_timeout_ms=15_000,
        subscribed_topic_names=[TOPIC], topic_partitions=[],
    )
    response = d.answers[d.send(request)]
    assert response.error_code == 0
    for _ in range(3):  # acknowledge what it got, as a client does
        owned = list(response.assignment) if response.assignment is not None else None
        d.now += 1_000
        response = d.answers[d.send(ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id="c", member_epoch=response.member_epoch, instance_id="i1",
            topic_partitions=owned,
        ))]
        assert response.error_code == 0
    group = d.endpoint.coordinator.group(GROUP)
    assert group is not None
    assert group.members["c"].assigned_partitions.get(TOPIC_ID) == frozenset(range(len(ALL) + 2))
