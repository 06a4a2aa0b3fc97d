"""The records a classic group persists: GroupMetadataKey (key version 2) -> GroupMetadataValue.

Layout as in Kafka's __consumer_offsets (kept identical so the bytes mean the same thing to anyone
who reads them): the key is int16 version 2 + GroupId; the value is int16 version + fields, v0-v3
classic encoding, v4 flexible (compact strings and arrays, tagged fields). A null value is the
tombstone of a deleted group. Fields by version:
  ProtocolType, Generation, Protocol?, Leader?, CurrentStateTimestamp (v2+, else -1),
  Members [MemberId, GroupInstanceId? (v3+), ClientId, ClientHost, RebalanceTimeout (v1+),
           SessionTimeout, Subscription, Assignment]
A member's Subscription is its metadata for the group's selected protocol only, as in Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from translate.bytecodec import MalformedBytes, Reader, Writer

GROUP_METADATA_KEY_VERSION = 2
# Kafka 4.x writes v3 for classic groups; v4 (flexible) is read and can be written.
DEFAULT_VALUE_VERSION = 3
HIGHEST_VALUE_VERSION = 4


class MalformedRecord(ValueError):
    """Record bytes that are not a GroupMetadata key or value."""


@dataclass(slots=True)
class GroupMetadataMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[GroupMetadataMember] = field(default_factory=list)


@dataclass(slots=True)
class GroupMetadataRecord:
    group_id: str
    # None: tombstone (the group is gone).
    value: GroupMetadataValue | None
    value_version: int = DEFAULT_VALUE_VERSION


def encode_key(group_id: str) -> bytes:
    writer = Writer()
    writer.int16(GROUP_METADATA_KEY_VERSION)
    writer.string(group_id)
    return writer.getvalue()


def decode_key(data: bytes) -> str:
    reader = Reader(data)
    try:
        version = reader.int16()
        if version != GROUP_METADATA_KEY_VERSION:
            raise MalformedRecord(f"not a GroupMetadataKey: key version {version}")
        group_id = reader.string()
    except MalformedBytes as exc:
        raise MalformedRecord(f"malformed GroupMetadataKey: {exc}") from exc
    if not reader.at_end():
        raise MalformedRecord("trailing bytes after GroupMetadataKey")
    return group_id


def encode_value(value: GroupMetadataValue, version: int = DEFAULT_VALUE_VERSION) -> bytes:
    if not 0 <= version <= HIGHEST_VALUE_VERSION:
        raise ValueError(f"cannot encode GroupMetadataValue version {version}")
    flexible = version >= 4
    w = Writer()
    w.int16(version)
    string = w.compact_string if flexible else w.string
    nullable = w.compact_nullable_string if flexible else w.nullable_string
    data = w.compact_nullable_bytes if flexible else w.nullable_bytes
    string(value.protocol_type)
    w.int32(value.generation)
    nullable(value.protocol)
    nullable(value.leader)
    if version >= 2:
        w.int64(value.current_state_timestamp)
    if flexible:
        w.compact_array_length(len(value.members))
    else:
        w.array_length(len(value.members))
    for member in value.members:
        string(member.member_id)
        if version >= 3:
            nullable(member.group_instance_id)
        string(member.client_id)
        string(member.client_host)
        if version >= 1:
            w.int32(member.rebalance_timeout_ms)
        w.int32(member.session_timeout_ms)
        data(member.subscription)
        data(member.assignment)
        if flexible:
            w.empty_tagged_fields()
    if flexible:
        w.empty_tagged_fields()
    return w.getvalue()


def decode_value(data: bytes) -> tuple[GroupMetadataValue, int]:
    """The value and the version it was written with."""
    r = Reader(data)
    try:
        version = r.int16()
        if not 0 <= version <= HIGHEST_VALUE_VERSION:
            raise MalformedRecord(f"unknown GroupMetadataValue version {version}")
        flexible = version >= 4
        string = r.compact_string if flexible else r.string
        nullable = r.compact_nullable_string if flexible else r.nullable_string
        blob = r.compact_nullable_bytes if flexible else r.nullable_bytes
        value = GroupMetadataValue(
            protocol_type=string(),
            generation=r.int32(),
            protocol=nullable(),
            leader=nullable(),
        )
        if version >= 2:
            value.current_state_timestamp = r.int64()
        count = r.compact_array_length() if flexible else r.array_length()
        for _ in range(max(count, 0)):
            member_id = string()
            instance_id = nullable() if version >= 3 else None
            client_id = string()
            client_host = string()
            rebalance_timeout = r.int32() if version >= 1 else -1
            session_timeout = r.int32()
            subscription = blob() or b""
            assignment = blob() or b""
            if flexible:
                r.skip_tagged_fields()
            if rebalance_timeout == -1:
                # v0 had no rebalance timeout: the session timeout played both roles.
                rebalance_timeout = session_timeout
            value.members.append(
                GroupMetadataMember(
                    member_id, instance_id, client_id, client_host,
                    rebalance_timeout, session_timeout, subscription, assignment,
                )
            )
        if flexible:
            r.skip_tagged_fields()
    except MalformedBytes as exc:
        raise MalformedRecord(f"malformed GroupMetadataValue: {exc}") from exc
    return value, version


def encode_record(record: GroupMetadataRecord) -> tuple[bytes, bytes | None]:
    key = encode_key(record.group_id)
    if record.value is None:
        return key, None
    return key, encode_value(record.value, record.value_version)


def decode_record(key: bytes, value: bytes | None) -> GroupMetadataRecord:
    group_id = decode_key(key)
    if value is None:
        return GroupMetadataRecord(group_id, None)
    decoded, version = decode_value(value)
    return GroupMetadataRecord(group_id, decoded, version)
