"""Connect group records as bytes: key layout, tombstones, and a compacted log's order."""

from __future__ import annotations

import random

from connect_helpers import Driver

from coordinator.connect import records as rec
from coordinator.connect.codec import KEY_VERSIONS, decode, encode
from coordinator.connect.model import ClientAssignor, ConnectAssignment, ConnectWorker, WorkerState
from coordinator.connect.records import replay
from coordinator.records import RecordType
from coordinator.records.codec import group_of_key


def test_keys_start_with_their_type_and_the_group_id() -> None:
    w = ConnectWorker(
        "w-1", url="http://w", assignors=(ClientAssignor("ica", 0, 2, 1, 2, b"m"),), member_epoch=3,
        state=WorkerState.UNREVOKED, assigned=ConnectAssignment(frozenset({"A"})),
        pending_revocation=ConnectAssignment(tasks=frozenset({("A", 2)})),
    )
    records = [
        rec.group_epoch("grp", 4), rec.member_metadata("grp", w), rec.target_metadata("grp", 4, 0, "ica"),
        rec.current_assignment("grp", w), rec.current_assignment_tombstone("grp", "w-1"),
    ]
    for r in records:
        key, value = encode(r)
        assert int.from_bytes(key[:2], "big") == int(r.type)
        assert group_of_key(key) == "grp"  # the shard placement reads connect keys like any group key
        assert (value is None) == (r.value is None)
        assert decode(key, value) == r
    # Far from the consumer groups' record types (and Kafka's others below 1000).
    assert KEY_VERSIONS.isdisjoint(int(t) for t in RecordType) and min(KEY_VERSIONS) == 1000


def test_a_compacted_log_replays_to_the_same_state() -> None:
    d = Driver()
    d.join("W1")
    d.compute("W1", {"W1": ["AC0", "AT1", "AT2"]})
    d.join("W1")
    d.join("W2")
    d.hb("W1", owned=["AC0", "AT1", "AT2"])
    d.compute("W1", {"W1": ["AC0", "AT1"], "W2": ["AT2"]})
    d.hb("W1", owned=["AC0", "AT1", "AT2"])
    d.hb("W2", owned=[])
    # Compaction keeps the last record of each key, in any order.
    last: dict[bytes, tuple[bytes, bytes | None]] = {}
    for r in d.records:
        k, v = encode(r)
        last[k] = (k, v)
    kept = [decode(k, v) for k, v in last.values() if v is not None]
    random.Random(7).shuffle(kept)
    assert {g: x.snapshot() for g, x in replay(kept).items()} == d.coord.snapshot()

