"""Classic members inside a consumer group: the per-member translation of JoinGroup, SyncGroup,
Heartbeat and LeaveGroup onto the new-protocol coordinator (KIP-848 online upgrade)."""

from __future__ import annotations

import itertools
import uuid

from coordinator.config import CoordinatorConfig
from coordinator.errors import Errors
from coordinator.messages import ConsumerGroupHeartbeatRequest
from coordinator.outcome import Outcome
from coordinator.service import ConsumerGroupCoordinator
from coordinator.timers import session_key
from translate.classic_member import (
    CLASSIC_MEMBER_JOIN_TIMER,
    CLASSIC_MEMBER_SYNC_TIMER,
    ClassicMemberTranslator,
)
from translate.classic_messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    SyncGroupRequest,
)
from translate.embedded import (
    ConsumerProtocolSubscription,
    TopicPartitions,
    decode_assignment,
    encode_subscription,
)
from translate.result import Schedule, timer_key

TOPIC = "orders"
TOPIC_ID = uuid.UUID(int=1)


class World:
    def __init__(self) -> None:
        ids = itertools.count(1)
        self.coordinator = ConsumerGroupCoordinator(CoordinatorConfig(member_id_generator=lambda: f"new-{next(ids)}"))
        self.coordinator.on_metadata({TOPIC: (TOPIC_ID, 6)}, 0)
        counter = itertools.count(1)
        self.translator = ClassicMemberTranslator(self.coordinator, lambda client: f"{client}-classic-{next(counter)}")
        self.now = 0
        self.keys = itertools.count(1)
        self.consumers = itertools.count(1)
        self.records: list[object] = []
        # The group exists as a consumer group (routing JoinGroup here is the caller's decision).
        self.coordinator.get_or_create_group("g")

    def consumer_member(self) -> str:
        """A new-protocol member creates the consumer group."""
        res = self.coordinator.consumer_group_heartbeat(
            ConsumerGroupHeartbeatRequest(
                group_id="g", member_id=f"consumer-{next(self.consumers)}", member_epoch=0,
                rebalance_timeout_ms=30000,
                subscribed_topic_names=[TOPIC], topic_partitions=[],
            ),
            self.now,
        )
        assert res.response.error_code == 0
        self.records.extend(res.records)
        assert res.response.member_id is not None
        return res.response.member_id

    def join(self, member_id: str = "", version: int = 9, instance_id: str | None = None,
             owned: list[TopicPartitions] | None = None, sub_version: int = 1,
             protocol: str = "range") -> tuple[Outcome, object]:
        metadata = encode_subscription(
            ConsumerProtocolSubscription(topics=[TOPIC], owned_partitions=owned or []), sub_version
        )
        request = JoinGroupRequest(
            group_id="g", session_timeout_ms=10000, member_id=member_id,
            protocols=[JoinGroupRequestProtocol(protocol, metadata)], rebalance_timeout_ms=20000,
            group_instance_id=instance_id, api_version=version, client_id="legacy",
        )
        key = next(self.keys)
        result = self.translator.join_group(request, key, self.now)
        assert [r.request_key for r in result.responses] == [key]
        self.records.extend(result.records)
        return result, result.responses[0].body

    def joined(self, **kwargs: object) -> tuple[str, int]:
        _, first = self.join(**kwargs)  # type: ignore[arg-type]
        if first.error_code == Errors.MEMBER_ID_REQUIRED:  # type: ignore[attr-defined]
            _, first = self.join(member_id=first.member_id, **kwargs)  # type: ignore[attr-defined,arg-type]
        assert first.error_code == Errors.NONE, first  # type: ignore[attr-defined]
        return first.member_id, first.generation_id  # type: ignore[attr-defined]

    def sync(self, member_id: str, generation: int, instance_id: str | None = None) -> object:
        request = SyncGroupRequest("g", generation, member_id, instance_id, "consumer", "range")
        return self.translator.sync_group(request, "s", self.now).responses[0].body

    def heartbeat(self, member_id: str, generation: int, instance_id: str | None = None) -> int:
        res = self.translator.heartbeat(HeartbeatRequest("g", generation, member_id, instance_id), "h", self.now)
        return res.responses[0].body.error_code  # type: ignore[union-attr]


def test_classic_join_into_consumer_group_requires_member_id_first_then_joins_as_follower() -> None:
    w = World()
    w.consumer_member()
    result, response = w.join()
    assert response.error_code == Errors.MEMBER_ID_REQUIRED and result.records == []  # type: ignore[attr-defined]
    result, response = w.join(member_id=response.member_id)  # type: ignore[attr-defined]
    assert response.error_code == Errors.NONE  # type: ignore[attr-defined]
    assert response.leader == "" and response.members == [] and response.protocol_name == "range"  # type: ignore[attr-defined]
    group = w.coordinator.group("g")
    assert group is not None
    member = group.members[response.member_id]  # type: ignore[attr-defined]
    assert member.uses_classic_protocol and member.subscribed_topic_names == {TOPIC}
    assert response.generation_id == member.member_epoch == group.group_epoch  # type: ignore[attr-defined]
    assert result.records, "the join must persist the member"
    scheduled = {t.key for t in result.timers if isinstance(t, Schedule)}
    assert session_key("g", member.member_id) in scheduled
    assert timer_key(CLASSIC_MEMBER_SYNC_TIMER, "g", member.member_id) in scheduled


def test_classic_sync_returns_the_members_current_assignment_in_its_subscription_version() -> None:
    w = World()
    w.consumer_member()
    member_id, generation = w.joined(sub_version=1)
    response = w.sync(member_id, generation)
    assert response.error_code == Errors.NONE  # type: ignore[attr-defined]
    assert response.assignment[:2] == b"\x00\x01"  # type: ignore[attr-defined]
    assignment = decode_assignment(response.assignment)  # type: ignore[attr-defined]
    group = w.coordinator.group("g")
    assert group is not None
    expected = sorted(group.members[member_id].assigned_partitions.get(TOPIC_ID, frozenset()))
    assert [p for tp in assignment.assigned_partitions for p in tp.partitions] == expected


def test_classic_heartbeat_asks_for_rejoin_when_the_group_epoch_moves_on() -> None:
    w = World()
    member_id, generation = w.joined()
    assert w.heartbeat(member_id, generation) == Errors.NONE
    w.consumer_member()  # a new-protocol member joins: group epoch bumps
    assert w.heartbeat(member_id, generation) == Errors.REBALANCE_IN_PROGRESS
    # Rejoining moves the classic member to the new epoch.
    _, rejoined = w.join(member_id=member_id)
    assert rejoined.generation_id > generation  # type: ignore[attr-defined]


def test_classic_heartbeat_with_wrong_generation_is_illegal_generation_not_fenced_epoch() -> None:
    w = World()
    w.consumer_member()
    member_id, generation = w.joined()
    assert w.heartbeat(member_id, generation + 7) == Errors.ILLEGAL_GENERATION
    assert w.heartbeat("ghost", generation) == Errors.UNKNOWN_MEMBER_ID
    response = w.sync(member_id, generation + 7)
    assert response.error_code == Errors.ILLEGAL_GENERATION  # type: ignore[attr-defined]


def test_consumer_protocol_member_is_unknown_to_classic_requests() -> None:
    w = World()
    consumer = w.consumer_member()
    group = w.coordinator.group("g")
    assert group is not None
    assert w.heartbeat(consumer, group.members[consumer].member_epoch) == Errors.UNKNOWN_MEMBER_ID


def test_join_with_another_protocol_type_or_unshared_protocol_is_inconsistent() -> None:
    w = World()
    w.consumer_member()
    w.joined(protocol="range")
    _, response = w.join(version=3, protocol="roundrobin")
    assert response.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL  # type: ignore[attr-defined]


def test_malformed_subscription_is_refused() -> None:
    w = World()
    w.consumer_member()
    request = JoinGroupRequest(
        group_id="g", session_timeout_ms=10000, member_id="",
        protocols=[JoinGroupRequestProtocol("range", b"\x00\x00\x00\x00\x00\x05ab")], api_version=3,
    )
    response = w.translator.join_group(request, 1, 0).responses[0].body
    assert response.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL  # type: ignore[union-attr]


def test_static_classic_member_restart_takes_over_its_assignment() -> None:
    w = World()
    w.consumer_member()
    old_id, generation = w.joined(instance_id="s1")
    group = w.coordinator.group("g")
    assert group is not None
    before = group.members[old_id].assigned_partitions
    new_id, _ = w.joined(instance_id="s1")
    assert new_id != old_id and old_id not in group.members
    assert group.members[new_id].assigned_partitions == before
    assert w.heartbeat(old_id, generation, instance_id="s1") == Errors.FENCED_INSTANCE_ID


def test_classic_member_that_never_syncs_is_fenced_by_its_sync_timer() -> None:
    w = World()
    w.consumer_member()
    member_id, _ = w.joined()
    key = timer_key(CLASSIC_MEMBER_SYNC_TIMER, "g", member_id)
    early = w.translator.on_timer(key, 19_999)
    assert early.records == []  # not due yet: scheduled again for its deadline, not dropped
    assert [(t.key, t.deadline_ms) for t in early.timers] == [(key, 20_000)]  # type: ignore[union-attr]
    result = w.translator.on_timer(key, 20_000)
    group = w.coordinator.group("g")
    assert group is not None and member_id not in group.members and result.records


def test_classic_member_told_to_rejoin_that_does_not_is_fenced_by_its_join_timer() -> None:
    w = World()
    member_id, generation = w.joined()
    w.consumer_member()
    assert w.heartbeat(member_id, generation) == Errors.REBALANCE_IN_PROGRESS
    w.translator.on_timer(timer_key(CLASSIC_MEMBER_JOIN_TIMER, "g", member_id), 20_000)
    group = w.coordinator.group("g")
    assert group is not None and member_id not in group.members


def test_replay_of_translated_records_rebuilds_the_consumer_group() -> None:
    w = World()
    w.consumer_member()
    w.joined()
    w.joined(instance_id="s1")
    w.joined(instance_id="s1")  # static restart
    fresh = ConsumerGroupCoordinator()
    for record in w.records:
        fresh.replay(record)  # type: ignore[arg-type]
    assert fresh.snapshot() == w.coordinator.snapshot()
    group = fresh.group("g")
    assert group is not None
    assert sum(m.uses_classic_protocol for m in group.members.values()) == 2


def _owned_after_sync(w: World, member_id: str, generation: int) -> list[TopicPartitions]:
    response = w.sync(member_id, generation)
    return decode_assignment(response.assignment).assigned_partitions  # type: ignore[attr-defined]


def test_cooperative_classic_member_keeps_its_epoch_until_it_gives_up_revoked_partitions() -> None:
    w = World()
    member_id, generation = w.joined()
    owned = _owned_after_sync(w, member_id, generation)
    assert sum(len(tp.partitions) for tp in owned) == 6
    w.consumer_member()
    assert w.heartbeat(member_id, generation) == Errors.REBALANCE_IN_PROGRESS
    # Rejoin still owning everything: some partitions must be revoked first.
    _, response = w.join(member_id=member_id, owned=owned)
    assert response.generation_id == generation  # type: ignore[attr-defined]
    kept = _owned_after_sync(w, member_id, generation)
    assert 0 < sum(len(tp.partitions) for tp in kept) < 6
    # Rejoin owning only what it kept: now it moves to the new epoch.
    _, response = w.join(member_id=member_id, owned=kept)
    assert response.generation_id > generation  # type: ignore[attr-defined]


def test_eager_classic_member_moves_to_the_new_epoch_at_once() -> None:
    w = World()
    member_id, generation = w.joined(sub_version=0)
    w.sync(member_id, generation)
    w.consumer_member()
    _, response = w.join(member_id=member_id, sub_version=0)  # v0: owns nothing on rejoin
    assert response.generation_id > generation  # type: ignore[attr-defined]
