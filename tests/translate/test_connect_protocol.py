"""Kafka Connect's classic group protocol bytes (translate/connect_protocol.py), checked against byte strings
laid out field by field as Connect's schemas define them."""

from __future__ import annotations

import struct

import pytest

from coordinator.connect.model import NOTHING, ConnectAssignment
from translate.connect_protocol import (
    ExtendedAssignment,
    WorkerMetadata,
    after,
    decode_assignment,
    decode_metadata,
    encode_assignment,
    encode_metadata,
)


def s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def units(entries: list[tuple[str, list[int]]] | None) -> bytes:
    if entries is None:
        return struct.pack(">i", -1)
    out = struct.pack(">i", len(entries))
    for name, tasks in entries:
        out += s(name) + struct.pack(">i", len(tasks)) + b"".join(struct.pack(">i", t) for t in tasks)
    return out


def a(connectors: set[str] = frozenset(), tasks: set[tuple[str, int]] = frozenset()) -> ConnectAssignment:  # type: ignore[assignment]
    return ConnectAssignment(frozenset(connectors), frozenset(tasks))


SESSIONED_ASSIGNMENT = (
    struct.pack(">hh", 2, 0) + s("connect-1-abc") + s("http://127.0.0.1:8083/") + struct.pack(">q", 7)
    + units([("src", [-1, 0]), ("sink", [1])]) + units([("old", [-1])]) + struct.pack(">i", 3000)
)


def test_a_sessioned_assignment_reads_connectors_as_task_minus_one_and_its_revocations_and_delay() -> None:
    got = decode_assignment(SESSIONED_ASSIGNMENT)
    assert got == ExtendedAssignment(
        2, 0, "connect-1-abc", "http://127.0.0.1:8083/", 7,
        a({"src"}, {("src", 0), ("sink", 1)}), a({"old"}), 3000,
    )
    assert decode_assignment(encode_assignment(got)) == got


def test_an_eager_assignment_has_no_revocations_and_a_v1_one_may_stop_early() -> None:
    eager = struct.pack(">hh", 0, 1) + s("l") + s("u") + struct.pack(">q", -1) + units([("c", [-1, 0, 1])])
    got = decode_assignment(eager)
    assert got == ExtendedAssignment(0, 1, "l", "u", -1, a({"c"}, {("c", 0), ("c", 1)}))
    assert encode_assignment(got) == eager
    short = struct.pack(">hh", 1, 0) + s("l") + s("u") + struct.pack(">q", 4) + units(None)
    assert decode_assignment(short) == ExtendedAssignment(1, 0, "l", "u", 4, NOTHING, NOTHING, 0)


def test_metadata_of_each_version_with_and_without_an_allocation() -> None:
    v0 = struct.pack(">h", 0) + s("http://w:1/") + struct.pack(">q", 12)
    assert decode_metadata(v0) == WorkerMetadata(0, "http://w:1/", 12)
    assert encode_metadata(decode_metadata(v0)) == v0
    v2_none = struct.pack(">h", 2) + s("http://w:1/") + struct.pack(">q", 12) + struct.pack(">i", -1)
    assert decode_metadata(v2_none) == WorkerMetadata(2, "http://w:1/", 12, None)
    assert encode_metadata(decode_metadata(v2_none)) == v2_none
    v2 = struct.pack(">h", 2) + s("http://w:1/") + struct.pack(">q", 12) + struct.pack(">i", len(SESSIONED_ASSIGNMENT)) + SESSIONED_ASSIGNMENT
    got = decode_metadata(v2)
    assert got.allocation is not None and got.allocation.assigned == a({"src"}, {("src", 0), ("sink", 1)})
    assert encode_metadata(got) == v2


PROMISING_40 = struct.pack(">h", 2) + s("http://w:1/") + struct.pack(">q", 12) + struct.pack(">i", 40)


@pytest.mark.parametrize("cut", [1, 3, 10, 20, len(PROMISING_40)])
def test_truncated_bytes_are_a_value_error(cut: int) -> None:
    # Cut inside the header, the URL, the offset, the allocation's length; whole, the allocation is missing.
    with pytest.raises(ValueError):
        decode_metadata(PROMISING_40[:cut])


def test_a_snapshot_after_an_incremental_and_a_whole_assignment() -> None:
    held = a({"src"}, {("src", 0), ("old", 0)})
    inc = ExtendedAssignment(2, 0, "l", "u", 0, a(tasks={("sink", 0)}), a(tasks={("old", 0)}))
    assert after(held, inc) == a({"src"}, {("src", 0), ("sink", 0)})
    whole = ExtendedAssignment(0, 0, "l", "u", 0, a({"x"}))
    assert after(held, whole) == a({"x"})
    assert after(held, None) == held
