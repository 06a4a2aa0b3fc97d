"""The records a consumer group's state is made of, as Kafka 4.x persists them in __consumer_offsets.

Every state change the coordinator makes is one of these records; ``coordinator.replay.apply`` turns
a record back into state. A tombstone is a record whose ``value`` is None. ``coordinator.records.codec``
converts records to and from Kafka's key/value bytes (key: int16 record type + non-flexible fields;
value: int16 version 0 + flexible fields).

| type | key                                     | value                                 |
| ---- | --------------------------------------- | ------------------------------------- |
| 3    | ConsumerGroupMetadataKey(group)         | GroupMetadataValue(epoch, empty since)|
| 4    | ConsumerGroupPartitionMetadataKey(group)| PartitionMetadataValue(topics)        |
| 5    | ConsumerGroupMemberMetadataKey(g, m)    | MemberMetadataValue(subscription ...) |
| 6    | ConsumerGroupTargetAssignmentMetadataKey| TargetAssignmentMetadataValue(epoch)  |
| 7    | ConsumerGroupTargetAssignmentMemberKey  | TargetAssignmentMemberValue(parts)    |
| 8    | ConsumerGroupCurrentMemberAssignmentKey | CurrentMemberAssignmentValue(...)     |
| 16   | ConsumerGroupRegularExpressionKey(g, re)| RegularExpressionValue(topics ...)    |
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from coordinator.assignors.api import TopicMetadata
from coordinator.model import Assignment, ClassicMemberMetadata, ConsumerGroupMember, MemberState


class RecordType(enum.IntEnum):
    GROUP_METADATA = 3
    PARTITION_METADATA = 4
    MEMBER_METADATA = 5
    TARGET_ASSIGNMENT_METADATA = 6
    TARGET_ASSIGNMENT_MEMBER = 7
    CURRENT_MEMBER_ASSIGNMENT = 8
    REGULAR_EXPRESSION = 16


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    epoch: int
    # When the group last became empty (ms), -1 while it has members or when unknown. groupgate's own
    # tagged field (tag 1000 in the schema): Kafka expires an empty consumer group once its offsets expired,
    # which it learns from their commit timestamps; groupgate's offsets live in the cluster, so the
    # group record carries the time instead (offsets.retention.minutes, docs/operations.md).
    empty_since_ms: int = -1


@dataclass(frozen=True, slots=True)
class PartitionMetadataValue:
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_metadata: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class TargetAssignmentMetadataValue:
    assignment_epoch: int
    # KIP-1263 (tagged field 0): when the assignment was computed; 0 = unknown (written by an older
    # coordinator, or a conversion), which never holds the next assignment back.
    assignment_timestamp_ms: int = 0


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberValue:
    partitions: Assignment


@dataclass(frozen=True, slots=True)
class CurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned_partitions: Assignment
    partitions_pending_revocation: Assignment


@dataclass(frozen=True, slots=True)
class RegularExpressionValue:
    topics: tuple[str, ...]
    version: int
    timestamp_ms: int


RecordValue = (
    GroupMetadataValue
    | PartitionMetadataValue
    | MemberMetadataValue
    | TargetAssignmentMetadataValue
    | TargetAssignmentMemberValue
    | CurrentMemberAssignmentValue
    | RegularExpressionValue
)


@dataclass(frozen=True, slots=True)
class Record:
    type: RecordType
    group_id: str
    # Member id for types 5, 7, 8; the regular expression for type 16; None otherwise.
    sub_key: str | None
    value: RecordValue | None  # None: tombstone


# Constructors, in the order a heartbeat emits them.


def member_metadata(group_id: str, m: ConsumerGroupMember) -> Record:
    return Record(
        RecordType.MEMBER_METADATA,
        group_id,
        m.member_id,
        MemberMetadataValue(
            m.instance_id, m.rack_id, m.client_id, m.client_host, tuple(sorted(m.subscribed_topic_names)),
            m.subscribed_topic_regex, m.rebalance_timeout_ms, m.server_assignor, m.classic_metadata,
        ),
    )


def member_metadata_tombstone(group_id: str, member_id: str) -> Record:
    return Record(RecordType.MEMBER_METADATA, group_id, member_id, None)


def regular_expression(group_id: str, regex: str, topics: frozenset[str], version: int, ts: int) -> Record:
    return Record(
        RecordType.REGULAR_EXPRESSION, group_id, regex, RegularExpressionValue(tuple(sorted(topics)), version, ts)
    )


def regular_expression_tombstone(group_id: str, regex: str) -> Record:
    return Record(RecordType.REGULAR_EXPRESSION, group_id, regex, None)


def partition_metadata(group_id: str, topics: dict[str, TopicMetadata]) -> Record:
    return Record(
        RecordType.PARTITION_METADATA, group_id, None, PartitionMetadataValue(tuple(topics[n] for n in sorted(topics)))
    )


def group_epoch(group_id: str, epoch: int, empty_since_ms: int = -1) -> Record:
    return Record(RecordType.GROUP_METADATA, group_id, None, GroupMetadataValue(epoch, empty_since_ms))


def target_member(group_id: str, member_id: str, partitions: Assignment) -> Record:
    return Record(RecordType.TARGET_ASSIGNMENT_MEMBER, group_id, member_id, TargetAssignmentMemberValue(partitions))


def target_member_tombstone(group_id: str, member_id: str) -> Record:
    return Record(RecordType.TARGET_ASSIGNMENT_MEMBER, group_id, member_id, None)


def target_epoch(group_id: str, epoch: int, timestamp_ms: int = 0) -> Record:
    return Record(
        RecordType.TARGET_ASSIGNMENT_METADATA, group_id, None, TargetAssignmentMetadataValue(epoch, timestamp_ms)
    )


def current_assignment(group_id: str, m: ConsumerGroupMember) -> Record:
    return Record(
        RecordType.CURRENT_MEMBER_ASSIGNMENT,
        group_id,
        m.member_id,
        CurrentMemberAssignmentValue(
            m.member_epoch, m.previous_member_epoch, m.state, m.assigned_partitions, m.partitions_pending_revocation
        ),
    )


def current_assignment_tombstone(group_id: str, member_id: str) -> Record:
    return Record(RecordType.CURRENT_MEMBER_ASSIGNMENT, group_id, member_id, None)


def group_tombstones(group_id: str) -> list[Record]:
    """Deleting an empty group: the group-level records, newest-first as Kafka writes them."""
    return [
        Record(RecordType.TARGET_ASSIGNMENT_METADATA, group_id, None, None),
        Record(RecordType.PARTITION_METADATA, group_id, None, None),
        Record(RecordType.GROUP_METADATA, group_id, None, None),
    ]
