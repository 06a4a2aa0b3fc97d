"""Consumer protocol subscription/assignment codec: hand-built byte vectors for every version."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KpAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KpSubscription

from translate.embedded import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    MalformedEmbeddedProtocol,
    TopicPartitions,
    announced_version,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def s(text: str) -> bytes:
    raw = text.encode()
    return i16(len(raw)) + raw


def blob(data: bytes | None) -> bytes:
    return i32(-1) if data is None else i32(len(data)) + data


# topics ["orders", "payments"], user data b"\x01\x02"
V0_FIELDS = i32(2) + s("orders") + s("payments") + blob(b"\x01\x02")
OWNED = i32(1) + s("orders") + i32(2) + i32(0) + i32(3)
GENERATION = i32(7)
RACK = s("rack-a")

SUB_V0 = i16(0) + V0_FIELDS
SUB_V1 = i16(1) + V0_FIELDS + OWNED
SUB_V2 = i16(2) + V0_FIELDS + OWNED + GENERATION
SUB_V3 = i16(3) + V0_FIELDS + OWNED + GENERATION + RACK


def test_subscription_v0_decodes_topics_and_user_data() -> None:
    sub = decode_subscription(SUB_V0)
    assert (sub.version, sub.topics, sub.user_data) == (0, ["orders", "payments"], b"\x01\x02")
    assert sub.owned_partitions == [] and sub.generation_id == -1 and sub.rack_id is None


def test_subscription_v1_decodes_owned_partitions() -> None:
    sub = decode_subscription(SUB_V1)
    assert sub.owned_partitions == [TopicPartitions("orders", (0, 3))]
    assert sub.generation_id == -1


def test_subscription_v2_decodes_generation() -> None:
    sub = decode_subscription(SUB_V2)
    assert sub.generation_id == 7 and sub.rack_id is None


def test_subscription_v3_decodes_rack() -> None:
    sub = decode_subscription(SUB_V3)
    assert (sub.generation_id, sub.rack_id) == (7, "rack-a")
    assert sub.owned_partitions == [TopicPartitions("orders", (0, 3))]


@pytest.mark.parametrize("version,vector", [(0, SUB_V0), (1, SUB_V1), (2, SUB_V2), (3, SUB_V3)])
def test_subscription_encode_reproduces_hand_built_bytes(version: int, vector: bytes) -> None:
    sub = ConsumerProtocolSubscription(
        topics=["orders", "payments"],
        user_data=b"\x01\x02",
        owned_partitions=[TopicPartitions("orders", (0, 3))],
        generation_id=7,
        rack_id="rack-a",
    )
    assert encode_subscription(sub, version) == vector
    assert decode_subscription(vector).version == version


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_matches_kafka_python_encoding(version: int) -> None:
    theirs = KpSubscription(
        version=version,
        topics=["orders", "payments"],
        user_data=b"\x01\x02",
        owned_partitions=[("orders", [0, 3])],
        generation_id=7,
        rack_id="rack-a",
    ).encode(version=version)
    sub = decode_subscription(theirs)
    assert sub.topics == ["orders", "payments"]
    assert encode_subscription(sub, version) == theirs


def test_subscription_announcing_v1_without_owned_partitions_is_tolerated() -> None:
    sub = decode_subscription(i16(1) + V0_FIELDS)
    assert sub.version == 1 and sub.owned_partitions == [] and sub.user_data == b"\x01\x02"


def test_subscription_announcing_v3_stopping_after_owned_partitions_is_tolerated() -> None:
    sub = decode_subscription(i16(3) + V0_FIELDS + OWNED)
    assert sub.owned_partitions == [TopicPartitions("orders", (0, 3))]
    assert sub.generation_id == -1 and sub.rack_id is None


def test_subscription_without_user_data_field_is_tolerated() -> None:
    sub = decode_subscription(i16(0) + i32(1) + s("orders"))
    assert sub.topics == ["orders"] and sub.user_data is None


def test_subscription_newer_version_is_read_with_v3_layout_ignoring_extra_fields() -> None:
    sub = decode_subscription(i16(9) + V0_FIELDS + OWNED + GENERATION + RACK + b"\x00\x00\x00\x05")
    assert sub.version == 9 and sub.rack_id == "rack-a"


def test_subscription_null_user_data_and_null_rack() -> None:
    sub = decode_subscription(i16(3) + i32(0) + blob(None) + i32(0) + i32(-1) + i16(-1))
    assert sub.topics == [] and sub.user_data is None and sub.rack_id is None


@pytest.mark.parametrize(
    "vector",
    [
        b"",
        b"\x00",
        i16(-1) + i32(0),
        i16(0),  # no topic list at all
        i16(0) + i32(-1),  # null topic list
        i16(0) + i32(2) + s("orders"),  # fewer topics than announced
        i16(0) + i32(1) + i16(10) + b"abc",  # truncated string
        i16(0) + i32(1) + s("orders") + i32(10) + b"\x00",  # truncated user data
        i16(1) + V0_FIELDS + i32(1) + s("orders") + i32(2) + i32(0),  # truncated partitions
        i16(2) + V0_FIELDS + OWNED + b"\x00\x00",  # half a generation id
        i16(0) + i32(1) + i16(2) + b"\xff\xfe",  # not UTF-8
        i16(0) + i32(0x7FFFFFFF),  # absurd array length
    ],
)
def test_malformed_subscription_raises(vector: bytes) -> None:
    with pytest.raises(MalformedEmbeddedProtocol):
        decode_subscription(vector)


ASSIGNED = i32(2) + s("orders") + i32(2) + i32(1) + i32(2) + s("payments") + i32(1) + i32(0)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_round_trips_hand_built_bytes(version: int) -> None:
    vector = i16(version) + ASSIGNED + blob(b"ud")
    assignment = decode_assignment(vector)
    assert assignment.version == version
    assert assignment.assigned_partitions == [
        TopicPartitions("orders", (1, 2)),
        TopicPartitions("payments", (0,)),
    ]
    assert assignment.user_data == b"ud"
    assert encode_assignment(assignment) == vector


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_assignment_matches_kafka_python_encoding(version: int) -> None:
    theirs = KpAssignment(
        version=version, assigned_partitions=[("orders", [1, 2])], user_data=None
    ).encode(version=version)
    ours = ConsumerProtocolAssignment([TopicPartitions("orders", (1, 2))], None, version)
    assert encode_assignment(ours) == theirs
    assert decode_assignment(theirs) == ours


def test_assignment_without_user_data_is_tolerated() -> None:
    assignment = decode_assignment(i16(1) + ASSIGNED)
    assert assignment.user_data is None and len(assignment.assigned_partitions) == 2


def test_empty_assignment_bytes_mean_no_partitions() -> None:
    assert decode_assignment(b"").assigned_partitions == []
    assert decode_assignment(i16(3)).assigned_partitions == []


@pytest.mark.parametrize(
    "vector",
    [b"\x00", i16(-3) + ASSIGNED, i16(0) + i32(1) + s("orders") + i32(3) + i32(0), i16(0) + ASSIGNED + b"\x00"],
)
def test_malformed_assignment_raises(vector: bytes) -> None:
    with pytest.raises(MalformedEmbeddedProtocol):
        decode_assignment(vector)


def test_announced_version_is_clamped() -> None:
    assert announced_version(i16(7) + V0_FIELDS) == 3
    assert announced_version(SUB_V1) == 1
    assert announced_version(i16(-2)) == 0
    assert announced_version(b"") == 0


def test_encoding_an_unknown_version_is_refused() -> None:
    with pytest.raises(ValueError):
        encode_subscription(ConsumerProtocolSubscription(topics=[]), 4)
