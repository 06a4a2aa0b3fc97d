"""The embedded consumer protocol: what consumers put inside classic JoinGroup and SyncGroup.

A consumer's JoinGroup protocol metadata is a ConsumerProtocolSubscription and the assignment the
leader hands out through SyncGroup is a ConsumerProtocolAssignment. Both start with an int16
version, then the fields of that version in order (never flexible):

  subscription v0: Topics, UserData; v1 + OwnedPartitions (KIP-429); v2 + GenerationId (KIP-792);
               v3 + RackId (KIP-881)
  assignment   v0-v3: AssignedPartitions, UserData (v2/v3 only mirror the subscription bumps)

Decoding is tolerant the way Kafka's own consumer is: a version newer than 3 is read with the v3
layout (newer versions may only append fields), and a blob that ends cleanly on a field boundary
before the fields its version announces is accepted with those fields absent (some third-party
clients label the blob v1 but stop after UserData). Anything else - a truncated field, a negative
length, invalid UTF-8 - raises MalformedEmbeddedProtocol.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from translate.bytecodec import MalformedBytes, Reader, Writer

CONSUMER_PROTOCOL_TYPE = "consumer"
HIGHEST_VERSION = 3


class MalformedEmbeddedProtocol(ValueError):
    """The bytes are not a readable consumer protocol subscription or assignment."""


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    topic: str
    partitions: tuple[int, ...]


@dataclass(slots=True)
class ConsumerProtocolSubscription:
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartitions] = field(default_factory=list)
    generation_id: int = -1
    rack_id: str | None = None
    # The version the sender announced (before clamping to the highest version we know).
    version: int = HIGHEST_VERSION


@dataclass(slots=True)
class ConsumerProtocolAssignment:
    assigned_partitions: list[TopicPartitions]
    user_data: bytes | None = None
    version: int = HIGHEST_VERSION


def announced_version(blob: bytes) -> int:
    """The version in a blob's first two bytes clamped to 0..3, as Kafka does when it answers a
    classic member in the member's own subscription version; 0 when the blob is too short."""
    if len(blob) < 2:
        return 0
    version = int.from_bytes(blob[:2], "big", signed=True)
    return max(0, min(HIGHEST_VERSION, version))


def _read_version(reader: Reader) -> int:
    version = reader.int16()
    if version < 0:
        raise MalformedEmbeddedProtocol(f"negative consumer protocol version {version}")
    return version


def _read_topic_partitions(reader: Reader) -> list[TopicPartitions]:
    n = reader.array_length()
    result: list[TopicPartitions] = []
    for _ in range(max(n, 0)):
        topic = reader.string()
        count = reader.array_length()
        partitions = tuple(reader.int32() for _ in range(max(count, 0)))
        result.append(TopicPartitions(topic, partitions))
    return result


def _write_topic_partitions(writer: Writer, items: list[TopicPartitions]) -> None:
    writer.array_length(len(items))
    for item in items:
        writer.string(item.topic)
        writer.array_length(len(item.partitions))
        for partition in item.partitions:
            writer.int32(partition)


def decode_subscription(blob: bytes) -> ConsumerProtocolSubscription:
    reader = Reader(blob)
    try:
        version = _read_version(reader)
        layout = min(version, HIGHEST_VERSION)
        n = reader.array_length()
        if n < 0:
            raise MalformedEmbeddedProtocol("null topic list in subscription")
        topics = [reader.string() for _ in range(n)]
        sub = ConsumerProtocolSubscription(topics=topics, version=version)
        # Each later field is optional at the end of the blob: stop where the sender stopped.
        if reader.at_end():
            return sub
        sub.user_data = reader.nullable_bytes()
        if layout < 1 or reader.at_end():
            return sub
        sub.owned_partitions = _read_topic_partitions(reader)
        if layout < 2 or reader.at_end():
            return sub
        sub.generation_id = reader.int32()
        if layout < 3 or reader.at_end():
            return sub
        sub.rack_id = reader.nullable_string()
        return sub
    except MalformedBytes as exc:
        raise MalformedEmbeddedProtocol(f"malformed consumer protocol subscription: {exc}") from exc


def encode_subscription(sub: ConsumerProtocolSubscription, version: int | None = None) -> bytes:
    version = sub.version if version is None else version
    if not 0 <= version <= HIGHEST_VERSION:
        raise ValueError(f"cannot encode subscription version {version}")
    writer = Writer()
    writer.int16(version)
    writer.array_length(len(sub.topics))
    for topic in sub.topics:
        writer.string(topic)
    writer.nullable_bytes(sub.user_data)
    if version >= 1:
        _write_topic_partitions(writer, sub.owned_partitions)
    if version >= 2:
        writer.int32(sub.generation_id)
    if version >= 3:
        writer.nullable_string(sub.rack_id)
    return writer.getvalue()


def decode_assignment(blob: bytes) -> ConsumerProtocolAssignment:
    if not blob:
        # Kafka keeps b"" as the assignment of a member that joined but never got one (KAFKA-17733).
        return ConsumerProtocolAssignment(assigned_partitions=[], version=0)
    reader = Reader(blob)
    try:
        version = _read_version(reader)
        if reader.at_end():
            # A version and nothing else: the empty assignment some clients send for followers.
            return ConsumerProtocolAssignment(assigned_partitions=[], version=version)
        partitions = _read_topic_partitions(reader)
        assignment = ConsumerProtocolAssignment(assigned_partitions=partitions, version=version)
        if not reader.at_end():
            assignment.user_data = reader.nullable_bytes()
        return assignment
    except MalformedBytes as exc:
        raise MalformedEmbeddedProtocol(f"malformed consumer protocol assignment: {exc}") from exc


def encode_assignment(assignment: ConsumerProtocolAssignment, version: int | None = None) -> bytes:
    version = assignment.version if version is None else version
    if not 0 <= version <= HIGHEST_VERSION:
        raise ValueError(f"cannot encode assignment version {version}")
    writer = Writer()
    writer.int16(version)
    _write_topic_partitions(writer, assignment.assigned_partitions)
    writer.nullable_bytes(assignment.user_data)
    return writer.getvalue()


def subscribed_topics(protocol_type: str, metadata: list[bytes]) -> list[str]:
    """The topics a classic consumer's JoinGroup names across all its protocols' subscriptions, in
    first-seen order: the coordinator refreshes its topic image for them before assigning (a topic
    created a moment ago must not be assigned from a stale image). Unreadable blobs name nothing
    here; the join itself answers them with an error."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return []
    seen: dict[str, None] = {}
    for blob in metadata:
        try:
            topics = decode_subscription(blob).topics
        except MalformedEmbeddedProtocol:
            continue
        seen.update(dict.fromkeys(topics))
    return list(seen)
