"""The in-memory model of consumer groups (KIP-848, "Data Model").

Plain slotted dataclasses. State changes only through ``coordinator.replay.apply`` (the records are
the source of truth), so a replay of the emitted records rebuilds an identical model; what is not in
records (the partition-owner index, the assignment delta hint) is derived or transient.

Assignments are mappings ``topic id -> frozenset of partitions`` and are never mutated in place:
a change builds a new mapping, which is what lets callers compare them with ``is``.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from coordinator.assignors.api import TopicMetadata

Assignment = Mapping[uuid.UUID, frozenset[int]]


class _EmptyAssignment(dict[uuid.UUID, frozenset[int]]):
    """The shared empty assignment: hashable so it can be a dataclass default, and read-only."""

    __hash__ = object.__hash__  # type: ignore[assignment]

    def __setitem__(self, key: object, value: object) -> None:
        raise TypeError("the empty assignment is read-only")

    def update(self, *args: object, **kwargs: object) -> None:
        raise TypeError("the empty assignment is read-only")


EMPTY_ASSIGNMENT: Assignment = _EmptyAssignment()


class MemberState(enum.IntEnum):
    """A member's reconciliation state (the values Kafka persists in the current assignment record)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1  # must revoke partitions before moving to the target epoch
    UNRELEASED_PARTITIONS = 2  # at the target epoch, waiting for partitions other members still own
    UNKNOWN = 127


class MemberType(enum.IntEnum):
    """ConsumerGroupDescribe v1 MemberType."""

    UNKNOWN = -1
    CLASSIC = 0
    CONSUMER = 1


class GroupState(enum.Enum):
    """KIP-848 "Consumer Group States"; the values are the strings Kafka puts on the wire."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a classic-protocol member inside a consumer group keeps (tagged field of record 5)."""

    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's preference order


@dataclass(slots=True)
class ConsumerGroupMember:
    member_id: str
    # Subscription / identity (record 5).
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic_metadata: ClassicMemberMetadata | None = None
    # Current assignment (record 8).
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned_partitions: Assignment = EMPTY_ASSIGNMENT
    partitions_pending_revocation: Assignment = EMPTY_ASSIGNMENT
    # Derived (KIP-1251 "assignment epochs"): topic id -> partition -> the member epoch at which the
    # member was given the partition it still holds. Rebuilt by replay from the current-assignment
    # records; after log compaction only the last record remains, so the epochs can only be later
    # (stricter), never earlier.
    assignment_epochs: dict[uuid.UUID, dict[int, int]] = field(default_factory=dict)

    @property
    def member_type(self) -> MemberType:
        return MemberType.CONSUMER if self.classic_metadata is None else MemberType.CLASSIC

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic_metadata is not None


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    """A subscription regex resolved against the topic metadata (record 16)."""

    topics: frozenset[str]
    version: int
    timestamp_ms: int


@dataclass(slots=True)
class PendingDelta:
    """Changes since the last target assignment; a hint for incremental assignors, not persisted."""

    added: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)
    # the target each removed member held, so assignors can hand out just those partitions
    removed_assigned: dict[str, Assignment] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)
    topics_changed: bool = False
    valid: bool = False  # False until one target assignment was computed in this process


Subscription = tuple[frozenset[str], str | None]
"""A member's subscription: the topic names it asks for and its regex, if any."""


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    # Partition metadata of the subscribed topics (record 4), by topic name.
    subscription_metadata: dict[str, TopicMetadata] = field(default_factory=dict)
    resolved_regexes: dict[str, ResolvedRegex] = field(default_factory=dict)
    # Target assignment (records 6 and 7).
    assignment_epoch: int = 0
    # KIP-1263: when the current target was computed (record 6, tagged field); 0 = unknown.
    assignment_timestamp_ms: int = 0
    target_assignment: dict[str, Assignment] = field(default_factory=dict)
    # Derived: instance id -> member id, and topic id -> partition -> owning member id (assigned or
    # pending revocation). A partition may be given to a member only once it has no owner.
    static_members: dict[str, str] = field(default_factory=dict)
    partition_owners: dict[uuid.UUID, dict[int, str]] = field(default_factory=dict)
    # Derived: how many members hold each distinct subscription (topic names, regex). A join or leave
    # then refreshes the group's subscribed topics from the few distinct subscriptions instead of
    # walking every member (Kafka keeps subscribed-topic counts for the same reason).
    subscriptions: dict[Subscription, int] = field(default_factory=dict)
    delta: PendingDelta = field(default_factory=PendingDelta)
    # When the group last became empty (record 3); -1 while it has members or when not recorded.
    # offsets.retention.minutes after it, the group is deleted (expire_empty_groups).
    empty_since_ms: int = -1
    # Set when the group was deleted; a DEAD group is dropped from the coordinator's map.
    dead: bool = False

    def state(self) -> GroupState:
        """KIP-848 "Consumer Group States"."""
        if self.dead:
            return GroupState.DEAD
        if not self.members:
            return GroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupState.ASSIGNING
        epoch = self.assignment_epoch
        for m in self.members.values():
            if m.member_epoch != epoch or m.state is not MemberState.STABLE:
                return GroupState.RECONCILING
        return GroupState.STABLE

    def owner_of(self, topic_id: uuid.UUID, partition: int) -> str | None:
        owners = self.partition_owners.get(topic_id)
        return None if owners is None else owners.get(partition)

    def snapshot(self) -> tuple[object, ...]:
        """A canonical, comparable view of everything persisted (used to check replay)."""

        def canon(a: Assignment) -> tuple[tuple[str, tuple[int, ...]], ...]:
            return tuple(sorted((str(t), tuple(sorted(p))) for t, p in a.items() if p))

        members = tuple(
            sorted(
                (
                    m.member_id, m.instance_id, m.rack_id, m.client_id, m.client_host,
                    tuple(sorted(m.subscribed_topic_names)), m.subscribed_topic_regex,
                    m.rebalance_timeout_ms, m.server_assignor, m.classic_metadata,
                    m.member_epoch, m.previous_member_epoch, int(m.state),
                    canon(m.assigned_partitions), canon(m.partitions_pending_revocation),
                )
                for m in self.members.values()
            )
        )
        return (
            self.group_id,
            self.group_epoch,
            members,
            tuple(sorted((n, str(t.topic_id), t.num_partitions) for n, t in self.subscription_metadata.items())),
            tuple(sorted((r, tuple(sorted(v.topics)), v.version, v.timestamp_ms) for r, v in self.resolved_regexes.items())),
            self.assignment_epoch,
            self.assignment_timestamp_ms,
            tuple(sorted((m, canon(a)) for m, a in self.target_assignment.items())),
            self.empty_since_ms,
        )


def subscription_topic_names(group: ConsumerGroup, names: frozenset[str], regex: str | None) -> frozenset[str]:
    """The topic names of one subscription in a group: its names plus what its regex resolves to."""
    resolved = group.resolved_regexes.get(regex) if regex else None
    return names if resolved is None else names | resolved.topics


def subscribed_topic_names(group: ConsumerGroup, member: ConsumerGroupMember) -> frozenset[str]:
    """The topic names a member is subscribed to: its names plus what its regex resolves to."""
    return subscription_topic_names(group, member.subscribed_topic_names, member.subscribed_topic_regex)
