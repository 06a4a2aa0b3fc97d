"""Records <-> Kafka's key/value bytes, with kafka-python's JSON-schema machinery.

The layouts are in ``coordinator/records/schemas/*.json`` (Kafka's "data" schema format). A key is the
int16 record type followed by its non-flexible fields; a value is int16 version 0 followed by flexible
fields. ``encode(record) -> (key, value | None)`` and ``decode(key, value) -> Record``.
"""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.api_data import ApiData

from coordinator.assignors.api import TopicMetadata
from coordinator.model import Assignment, ClassicMemberMetadata, MemberState
from coordinator.records import (
    CurrentMemberAssignmentValue,
    GroupMetadataValue,
    MemberMetadataValue,
    PartitionMetadataValue,
    Record,
    RecordType,
    RegularExpressionValue,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
)

_SCHEMAS = "coordinator.records.schemas"


class ConsumerGroupMetadataKey(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    pass


class ConsumerGroupMetadataValue(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    pass


class ConsumerGroupPartitionMetadataKey(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    pass


class ConsumerGroupPartitionMetadataValue(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    pass


class ConsumerGroupMemberMetadataKey(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    pass


class ConsumerGroupMemberMetadataValue(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    pass


class ConsumerGroupTargetAssignmentMetadataKey(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    pass


class ConsumerGroupTargetAssignmentMetadataValue(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    pass


class ConsumerGroupTargetAssignmentMemberKey(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    pass


class ConsumerGroupTargetAssignmentMemberValue(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    pass


class ConsumerGroupCurrentMemberAssignmentKey(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    pass


class ConsumerGroupCurrentMemberAssignmentValue(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    pass


class ConsumerGroupRegularExpressionKey(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    pass


class ConsumerGroupRegularExpressionValue(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    pass


_KEYS: dict[RecordType, Any] = {
    RecordType.GROUP_METADATA: ConsumerGroupMetadataKey,
    RecordType.PARTITION_METADATA: ConsumerGroupPartitionMetadataKey,
    RecordType.MEMBER_METADATA: ConsumerGroupMemberMetadataKey,
    RecordType.TARGET_ASSIGNMENT_METADATA: ConsumerGroupTargetAssignmentMetadataKey,
    RecordType.TARGET_ASSIGNMENT_MEMBER: ConsumerGroupTargetAssignmentMemberKey,
    RecordType.CURRENT_MEMBER_ASSIGNMENT: ConsumerGroupCurrentMemberAssignmentKey,
    RecordType.REGULAR_EXPRESSION: ConsumerGroupRegularExpressionKey,
}
_SUB_KEY_FIELD = {
    RecordType.MEMBER_METADATA: "member_id",
    RecordType.TARGET_ASSIGNMENT_MEMBER: "member_id",
    RecordType.CURRENT_MEMBER_ASSIGNMENT: "member_id",
    RecordType.REGULAR_EXPRESSION: "regular_expression",
}
_VALUE_VERSION = 0


def _tps(cls: Any, a: Assignment) -> list[Any]:
    # Sorted so that equal assignments always encode to equal bytes.
    return [
        cls.TopicPartitions(topic_id=t, partitions=sorted(a[t])) for t in sorted(a, key=lambda u: u.bytes) if a[t]
    ]


def _from_tps(tps: list[Any]) -> Assignment:
    return {tp.topic_id: frozenset(tp.partitions) for tp in tps if tp.partitions}


def encode_key(record: Record) -> bytes:
    cls = _KEYS[record.type]
    fields: dict[str, Any] = {"group_id": record.group_id}
    sub = _SUB_KEY_FIELD.get(record.type)
    if sub is not None:
        fields[sub] = record.sub_key
    return bytes(cls(**fields).encode(version=int(record.type)))


def encode_value(record: Record) -> bytes | None:
    v = record.value
    if v is None:
        return None
    data: Any
    if isinstance(v, GroupMetadataValue):
        data = ConsumerGroupMetadataValue(epoch=v.epoch, empty_since_ms=v.empty_since_ms)
    elif isinstance(v, PartitionMetadataValue):
        c = ConsumerGroupPartitionMetadataValue
        data = c(
            topics=[
                c.TopicMetadata(topic_id=t.topic_id, topic_name=t.name, num_partitions=t.num_partitions, partition_metadata=[])
                for t in v.topics
            ]
        )
    elif isinstance(v, MemberMetadataValue):
        c = ConsumerGroupMemberMetadataValue
        classic = None
        if v.classic_metadata is not None:
            cm = c.ClassicMemberMetadata
            classic = cm(
                session_timeout_ms=v.classic_metadata.session_timeout_ms,
                supported_protocols=[cm.ClassicProtocol(name=n, metadata=md) for n, md in v.classic_metadata.supported_protocols],
            )
        kw: dict[str, Any] = dict(
            instance_id=v.instance_id, rack_id=v.rack_id, client_id=v.client_id, client_host=v.client_host,
            subscribed_topic_names=list(v.subscribed_topic_names), subscribed_topic_regex=v.subscribed_topic_regex,
            rebalance_timeout_ms=v.rebalance_timeout_ms, server_assignor=v.server_assignor,
        )
        if classic is not None:
            kw["classic_member_metadata"] = classic
        data = c(**kw)
    elif isinstance(v, TargetAssignmentMetadataValue):
        data = ConsumerGroupTargetAssignmentMetadataValue(
            assignment_epoch=v.assignment_epoch, assignment_timestamp=v.assignment_timestamp_ms
        )
    elif isinstance(v, TargetAssignmentMemberValue):
        c = ConsumerGroupTargetAssignmentMemberValue
        data = c(topic_partitions=_tps(c, v.partitions))
    elif isinstance(v, CurrentMemberAssignmentValue):
        c = ConsumerGroupCurrentMemberAssignmentValue
        data = c(
            member_epoch=v.member_epoch, previous_member_epoch=v.previous_member_epoch, state=int(v.state),
            assigned_partitions=_tps(c, v.assigned_partitions),
            partitions_pending_revocation=_tps(c, v.partitions_pending_revocation),
        )
    elif isinstance(v, RegularExpressionValue):
        # Kafka calls the second field "Version"; the schema names it MetadataVersion because the data
        # container reserves ``version`` (names are not on the wire).
        data = ConsumerGroupRegularExpressionValue(
            topics=list(v.topics), metadata_version=v.version, timestamp=v.timestamp_ms
        )
    else:  # pragma: no cover - exhaustive above
        raise TypeError(f"unknown record value {v!r}")
    return bytes(data.encode(version=_VALUE_VERSION))


def encode(record: Record) -> tuple[bytes, bytes | None]:
    return encode_key(record), encode_value(record)


def decode(key: bytes, value: bytes | None) -> Record:
    rtype = RecordType(int.from_bytes(key[:2], "big", signed=True))
    k = _KEYS[rtype].decode(key)
    sub_field = _SUB_KEY_FIELD.get(rtype)
    sub_key = getattr(k, sub_field) if sub_field else None
    if value is None:
        return Record(rtype, k.group_id, sub_key, None)
    out: Any
    if rtype is RecordType.GROUP_METADATA:
        d3 = ConsumerGroupMetadataValue.decode(value)
        out = GroupMetadataValue(d3.epoch, d3.empty_since_ms)
    elif rtype is RecordType.PARTITION_METADATA:
        d = ConsumerGroupPartitionMetadataValue.decode(value)
        out = PartitionMetadataValue(
            tuple(TopicMetadata(t.topic_id or uuid.UUID(int=0), t.topic_name, t.num_partitions) for t in d.topics)
        )
    elif rtype is RecordType.MEMBER_METADATA:
        d = ConsumerGroupMemberMetadataValue.decode(value)
        cmm = d.classic_member_metadata
        classic = None
        if cmm is not None:
            classic = ClassicMemberMetadata(
                cmm.session_timeout_ms, tuple((p.name, bytes(p.metadata)) for p in cmm.supported_protocols)
            )
        out = MemberMetadataValue(
            d.instance_id, d.rack_id, d.client_id, d.client_host, tuple(d.subscribed_topic_names),
            d.subscribed_topic_regex, d.rebalance_timeout_ms, d.server_assignor, classic,
        )
    elif rtype is RecordType.TARGET_ASSIGNMENT_METADATA:
        d = ConsumerGroupTargetAssignmentMetadataValue.decode(value)
        out = TargetAssignmentMetadataValue(d.assignment_epoch, d.assignment_timestamp)
    elif rtype is RecordType.TARGET_ASSIGNMENT_MEMBER:
        out = TargetAssignmentMemberValue(_from_tps(ConsumerGroupTargetAssignmentMemberValue.decode(value).topic_partitions))
    elif rtype is RecordType.CURRENT_MEMBER_ASSIGNMENT:
        d = ConsumerGroupCurrentMemberAssignmentValue.decode(value)
        out = CurrentMemberAssignmentValue(
            d.member_epoch, d.previous_member_epoch, MemberState(d.state),
            _from_tps(d.assigned_partitions), _from_tps(d.partitions_pending_revocation),
        )
    else:
        d = ConsumerGroupRegularExpressionValue.decode(value)
        out = RegularExpressionValue(tuple(d.topics), d.metadata_version, d.timestamp)
    return Record(rtype, k.group_id, sub_key, out)


def group_of_key(key: bytes) -> str:
    """The group id of a stored group record's key: every group coordinator record key (the classic
    GroupMetadataKey and the consumer group keys alike) is an int16 key version followed by the group id
    as an int16-length UTF-8 string, so this reads any of them without knowing its type.

    Raises ValueError for a key too short to hold one (not a group record)."""
    if len(key) < 4:
        raise ValueError("a group record key holds a version and a group id")
    length = int.from_bytes(key[2:4], "big", signed=True)
    if length < 0 or len(key) < 4 + length:
        raise ValueError("group id runs past the end of the key")
    return key[4 : 4 + length].decode("utf-8")
