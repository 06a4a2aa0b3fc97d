"""What a translated classic member's requests are checked and read against (translate/classic_member.py),
with no state of its own: which member a request names, whether the joiner's protocols fit the group, its
rebalance timeout, the partitions it reports by topic id and those it holds by name, and whether it must
come back to JoinGroup."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from coordinator.assignors.api import TopicMetadata
from coordinator.errors import ApiError, Errors
from coordinator.model import Assignment, ConsumerGroup, ConsumerGroupMember, MemberState
from translate.classic_messages import UNKNOWN_MEMBER_ID, JoinGroupRequest
from translate.embedded import TopicPartitions


def rebalance_timeout(request: JoinGroupRequest) -> int:
    if request.api_version == 0 or request.rebalance_timeout_ms < 0:
        return request.session_timeout_ms
    return request.rebalance_timeout_ms


def lookup(
    group: ConsumerGroup, requested_id: str, member_id: str, instance_id: str | None
) -> tuple[ConsumerGroupMember | None, ConsumerGroupMember | None]:
    """(the member rejoining, or the static member being replaced)."""
    if instance_id is not None:
        owner = group.static_members.get(instance_id)
        if requested_id == UNKNOWN_MEMBER_ID:
            return None, group.members[owner] if owner is not None else None
        if owner is None:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID)
        if owner != member_id:
            raise ApiError(Errors.FENCED_INSTANCE_ID)
        return _classic(group.members[owner]), None
    existing = group.members.get(member_id)
    # A dynamic member with an id the group forgot is simply created again.
    return (_classic(existing) if existing is not None else None), None


def _classic(member: ConsumerGroupMember) -> ConsumerGroupMember:
    if not member.uses_classic_protocol:
        raise ApiError(Errors.UNKNOWN_MEMBER_ID, f"member {member.member_id} uses the consumer protocol")
    return member


def protocols_supported(group: ConsumerGroup, request: JoinGroupRequest, joining: ConsumerGroupMember | None) -> bool:
    """At least one of the joiner's protocols must be supported by every other classic member."""
    names = {p.name for p in request.protocols}
    for member in group.members.values():
        if member.classic_metadata is None or (joining is not None and member.member_id == joining.member_id):
            continue
        names &= {name for name, _ in member.classic_metadata.supported_protocols}
        if not names:
            return False
    return bool(names)


def owned_partitions(topics: Mapping[str, TopicMetadata], owned: Iterable[TopicPartitions]) -> dict[uuid.UUID, frozenset[int]]:
    """Named partitions as an assignment; topics unknown to the metadata are dropped."""
    result: dict[uuid.UUID, frozenset[int]] = {}
    for tp in owned:
        meta = topics.get(tp.topic)
        if meta is not None and tp.partitions:
            result[meta.topic_id] = result.get(meta.topic_id, frozenset()) | frozenset(tp.partitions)
    return result


def named(topics: Mapping[str, TopicMetadata], assignment: Assignment) -> list[TopicPartitions]:
    names = {meta.topic_id: name for name, meta in topics.items()}
    result = [
        TopicPartitions(names[topic_id], tuple(sorted(partitions)))
        for topic_id, partitions in assignment.items()
        if partitions and topic_id in names
    ]
    return sorted(result, key=lambda tp: tp.topic)


def classic_member(
    group: ConsumerGroup | None, member_id: str, instance_id: str | None
) -> tuple[ConsumerGroup, ConsumerGroupMember]:
    """The classic member a SyncGroup or Heartbeat names in its group (the group looked up by the caller)."""
    if group is None or not group.members:
        raise ApiError(Errors.UNKNOWN_MEMBER_ID)
    if instance_id is not None:
        owner = group.static_members.get(instance_id)
        if owner is None:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID)
        if owner != member_id:
            raise ApiError(Errors.FENCED_INSTANCE_ID)
    member = group.members.get(member_id)
    if member is None or not member.uses_classic_protocol:
        raise ApiError(Errors.UNKNOWN_MEMBER_ID)
    return group, member


def must_rejoin(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """A classic member's epoch only moves on JoinGroup, so it is sent back to JoinGroup when
    the group moved on, when it must give partitions up, or when partitions it waits for were
    released by their previous owners."""
    if member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS:
        return True
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        target = group.target_assignment.get(member.member_id, {})
        for topic_id, partitions in target.items():
            have = member.assigned_partitions.get(topic_id, frozenset())
            for partition in partitions - have:
                if group.owner_of(topic_id, partition) is None:
                    return True
    return False
