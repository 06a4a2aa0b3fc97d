"""``groupgate state inspect|verify|export`` on a file state directory, and the pure parts of ``import``: which group (so shard) a record key belongs
to, how records are shown, and import's idempotence (with a stand-in store; the real cluster is exercised
in compat_tests/test_state_topic.py)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator

from coordinator import records as rec
from coordinator.records import codec
from gateway.ops.state_cli import describe_record, export_line, group_of_key, import_records, latest
from gateway.state.log import Record
from gateway.state.store import shard_of
from translate.group_records import GroupMetadataRecord, GroupMetadataValue, encode_record


def _consumer(group: str, epoch: int) -> Record:
    return Record(*codec.encode(rec.Record(rec.RecordType.GROUP_METADATA, group, None, rec.GroupMetadataValue(epoch))))


def _classic(group: str, generation: int) -> Record:
    return Record(*encode_record(GroupMetadataRecord(group, GroupMetadataValue("consumer", generation, "range", "m1"))))


def test_group_of_key_reads_both_record_families() -> None:
    assert group_of_key(_consumer("orders", 1).key) == "orders"
    assert group_of_key(_classic("legacy", 1).key) == "legacy"
    member = codec.encode(rec.Record(rec.RecordType.MEMBER_METADATA, "orders", "member-1", None))
    assert group_of_key(member[0]) == "orders"


def test_describe_record_is_json_and_says_what_it_cannot_decode() -> None:
    d = describe_record(_consumer("orders", 7))
    assert d == {"type": "GROUP_METADATA", "group_id": "orders", "value": {"epoch": 7, "empty_since_ms": -1},
                 "tombstone": False}
    c = describe_record(_classic("legacy", 4))
    assert c["type"] == "CLASSIC_GROUP_METADATA" and c["value"]["generation"] == 4 and c["value"]["leader"] == "m1"
    t = describe_record(Record(_consumer("orders", 1).key, None))
    assert t["tombstone"] and t["value"] is None
    bad = describe_record(Record(b"\x7f\x7f junk", b"x"))
    assert bad["type"] == "UNDECODABLE" and bad["error"]
    for shown in (d, c, t, bad):
        json.dumps(shown)


def test_export_line_round_trips_bytes() -> None:
    r = _consumer("g", 1)
    line = export_line(3, 17, r)
    assert (line["shard"], line["offset"], base64.b64decode(line["key"]), base64.b64decode(line["value"])) == (
        3, 17, r.key, r.value
    )
    assert (line["type"], line["group_id"]) == ("GROUP_METADATA", "g")
    assert export_line(0, 0, Record(b"k", None))["value"] is None


def test_latest_keeps_each_keys_last_value() -> None:
    assert latest([Record(b"a", b"1"), Record(b"b", b"1"), Record(b"a", None), Record(b"b", b"2")]) == {
        b"a": None, b"b": b"2"
    }


class FakeLog:
    def __init__(self, records: list[Record]) -> None:
        self.records = records

    def replay(self) -> Iterator[Record]:
        return iter(list(self.records))

    def append(self, records: Iterable[Record]) -> None:
        self.records.extend(records)

    def unsynced(self) -> bool:
        return True  # every sync runs, as a log that cannot tell

    async def sync(self) -> None:
        pass

    def close(self) -> None:
        pass


class FakeStore:
    def __init__(self, shards: int) -> None:
        self.shards = shards
        self.logs: dict[int, list[Record]] = {}
        self.opened: list[int] = []

    async def open_shard(self, shard: int) -> FakeLog:
        self.opened.append(shard)
        return FakeLog(self.logs.setdefault(shard, []))


async def test_import_places_records_in_their_groups_shards_and_is_idempotent() -> None:
    store = FakeStore(shards=5)
    records = [_consumer(f"g{i}", i) for i in range(10)] + [_classic("legacy", 2)]
    first = await import_records(store, records)  # type: ignore[arg-type]
    assert (first.live_keys, first.written, first.unchanged) == (11, 11, 0)
    for shard, logged in store.logs.items():
        assert all(shard_of(group_of_key(r.key), 5) == shard for r in logged)
    before = {s: list(v) for s, v in store.logs.items()}

    again = await import_records(store, records)  # type: ignore[arg-type]
    assert (again.written, again.unchanged) == (0, 11)
    assert store.logs == before

    # A changed value is written once; keys only the topic holds are left alone.
    store.logs.setdefault(0, []).append(Record(b"only-in-topic", b"x"))
    changed = [*records[:-1], _classic("legacy", 3)]
    third = await import_records(store, changed)  # type: ignore[arg-type]
    assert (third.written, third.unchanged) == (1, 10)
    assert latest(store.logs[shard_of("legacy", 5)])[_classic("legacy", 3).key] == _classic("legacy", 3).value
    assert Record(b"only-in-topic", b"x") in store.logs[0]


def test_file_state_records_reads_every_shard_of_a_sharded_state_dir(tmp_path) -> None:
    import asyncio

    from gateway.ops.state_cli import file_state_records
    from gateway.state.file_store import FileStateStore

    wanted = [_consumer(f"g{i}", 1) for i in range(12)] + [_classic(f"c{i}", 2) for i in range(6)]

    async def write() -> None:
        store = FileStateStore(tmp_path, 4, fsync="never")
        await store.open()
        by_shard: dict[int, list[Record]] = {}
        for r in wanted:
            by_shard.setdefault(shard_of(group_of_key(r.key), 4), []).append(r)
        assert len(by_shard) > 1  # the records really are spread over several shards
        for shard, records in by_shard.items():
            log = await store.open_shard(shard)
            log.append(records)
            await log.sync()
            log.close()
        await store.close()

    asyncio.run(write())
    got = file_state_records(tmp_path)
    assert sorted((r.key, r.value) for r in got) == sorted((r.key, r.value) for r in wanted)


def test_the_shard_owner_marker_is_shown_and_replayed_as_no_group() -> None:
    from gateway.state.store import owner_marker
    from translate.group_service import GroupService

    marker = owner_marker("pid 42")
    assert describe_record(marker) == {"type": "SHARD_OWNER", "owner": "pid 42", "tombstone": False}
    assert GroupService().replay_bytes(marker.key, marker.value) is False


def _file_state(tmp_path, shards: int, extra: dict[int, list[Record]] | None = None) -> dict[int, list[Record]]:
    """A file state directory of ``shards`` shards holding consumer groups, a classic group, a deleted
    group and each shard's owner marker; ``extra`` records appended to their shards last."""
    import asyncio

    from gateway.state.file_store import FileStateStore
    from gateway.state.store import owner_marker

    by_shard: dict[int, list[Record]] = {n: [] for n in range(shards)}
    for r in [_consumer(f"g{i}", i + 1) for i in range(8)] + [_classic("legacy", 2)]:
        by_shard[shard_of(group_of_key(r.key), shards)].append(r)
    gone = _consumer("gone", 1)
    by_shard[shard_of("gone", shards)] += [gone, Record(gone.key, None)]
    for n in range(shards):
        by_shard[n].append(owner_marker("pid 7"))
        by_shard[n] += (extra or {}).get(n, [])

    async def write() -> None:
        store = FileStateStore(tmp_path, shards, fsync="never")
        await store.open()
        for n, records in by_shard.items():
            log = await store.open_shard(n)
            log.append(records)
            await log.sync()
            log.close()
        await store.close()

    asyncio.run(write())
    return by_shard


def _cli(argv: list[str], capsys) -> tuple[int, list[str]]:
    from gateway.ops.cli import main

    capsys.readouterr()  # what came before (the store's log lines when it was written)
    rc = main(argv)
    return rc, [line for line in capsys.readouterr().out.splitlines() if line.strip()]


def test_inspect_export_and_verify_read_a_file_state_dir_in_the_topic_format(tmp_path, capsys) -> None:
    written = _file_state(tmp_path, 3)
    home = shard_of("g3", 3)
    rc, lines = _cli(["state", "inspect", "--state-dir", str(tmp_path), "--group", "g3"], capsys)
    assert rc == 0
    (g3,) = [json.loads(line) for line in lines]
    assert g3 == {"shard": home, "offset": written[home].index(_consumer("g3", 4)), "type": "GROUP_METADATA",
                  "group_id": "g3", "value": {"epoch": 4, "empty_since_ms": -1}, "tombstone": False}

    rc, lines = _cli(["state", "export", "--state-dir", str(tmp_path)], capsys)
    assert rc == 0
    exported = [json.loads(line) for line in lines]
    assert [(e["shard"], e["offset"]) for e in exported] == [
        (n, i) for n in range(3) for i in range(len(written[n]))
    ]
    assert [(base64.b64decode(e["key"]), e["value"] and base64.b64decode(e["value"])) for e in exported] == [
        (r.key, r.value) for n in range(3) for r in written[n]
    ]
    assert {e["type"] for e in exported} == {"GROUP_METADATA", "CLASSIC_GROUP_METADATA", "SHARD_OWNER"}

    rc, lines = _cli(["state", "verify", "--state-dir", str(tmp_path), "--json"], capsys)
    assert rc == 0, lines
    reports = [json.loads(line) for line in lines]
    assert [(r["shard"], r["records"], r["problems"]) for r in reports] == [
        (n, len(written[n]), []) for n in range(3)
    ]
    # Every group but the deleted one, each counted once in its own shard.
    assert sum(r["groups"] for r in reports) == 9

    rc, lines = _cli(["state", "verify", "--state-dir", str(tmp_path), "--shard", "1"], capsys)
    assert rc == 0 and lines[0].startswith("shard 1: ") and lines[0].endswith("no problems")
    assert _cli(["state", "verify", "--state-dir", str(tmp_path), "--shard", "3"], capsys)[0] == 1
    rc, lines = _cli(["state", "verify", "--state-dir", str(tmp_path), "--shards", "4"], capsys)
    assert rc == 3 and "holds 3 shard(s); the gateway is configured for 4" in lines[0], lines
    assert _cli(["state", "verify", "--state-dir", str(tmp_path / "missing")], capsys)[0] == 2


def test_verify_names_the_shard_and_offset_of_each_bad_record(tmp_path, capsys) -> None:
    from gateway.ops.exit_codes import EXIT_STATE_CORRUPT
    from gateway.state.store import OWNER_MARKER_KEY

    g0 = next(g for g in (f"g{i}" for i in range(8)) if shard_of(g, 3) == 0)
    not_here = next(g for g in (f"x{i}" for i in range(50)) if shard_of(g, 3) != 2)
    bad = {
        0: [Record(_consumer(g0, 1).key, b"\xff\xff not a value")],  # a valid key, a garbage value
        2: [_consumer(not_here, 1), Record(OWNER_MARKER_KEY, None), Record(b"\x7f\x00junk", b"v")],
    }
    written = _file_state(tmp_path, 3, bad)
    rc, lines = _cli(["state", "verify", "--state-dir", str(tmp_path)], capsys)
    assert rc == EXIT_STATE_CORRUPT
    text = "\n".join(lines)
    n0, n2 = len(written[0]), len(written[2])
    assert f"shard 0: {n0} records" in text and "1 problem\n" in text + "\n"
    assert (f"problem: offset {n0 - 1}: the value of a GROUP_METADATA record of group '{g0}' does not decode"
            in text), text
    assert f"shard 2: {n2} records" in text and "3 problems" in text
    assert f"offset {n2 - 3}: a GROUP_METADATA record of group '{not_here}', which belongs in shard" in text
    assert f"offset {n2 - 2}: an owner marker with a null value" in text
    assert f"offset {n2 - 1}: a key of record type {0x7f00}, which the gateway never writes" in text
    assert "shard 1: " in text and text.count("no problems") == 1


def test_record_problem_accepts_what_the_gateway_writes() -> None:
    from gateway.state.check import record_problem
    from gateway.state.store import owner_marker

    for r in (_consumer("g", 1), Record(_consumer("g", 1).key, None), _classic("g", 2), owner_marker("me")):
        assert record_problem(r, shard_of("g", 7), 7) is None
    assert record_problem(Record(b"\x00", b"x"), 0, 1) == "a key of 1 byte(s): no record type"
    assert "does not decode" in (record_problem(Record(_classic("g", 1).key, b"\x00\x09?"), 0, 1) or "")


def test_connect_group_records_are_shown_and_accepted_by_verify() -> None:
    from coordinator.connect import records as connect_records
    from coordinator.connect.codec import encode as encode_connect
    from gateway.state.check import record_problem

    key, value = encode_connect(connect_records.group_epoch("workers", 3))
    d = describe_record(Record(key, value))
    assert (d["type"], d["group_id"], d["value"], d["tombstone"]) == ("CONNECT_GROUP_METADATA", "workers", {"epoch": 3}, False)
    json.dumps(d)
    assert describe_record(Record(key, None))["tombstone"] is True
    assert record_problem(Record(key, value), shard_of("workers", 7), 7) is None
    wrong = (shard_of("workers", 7) + 1) % 7
    assert "belongs in shard" in (record_problem(Record(key, value), wrong, 7) or "")
    assert "does not decode" in (record_problem(Record(key, b"\x00\x09?"), shard_of("workers", 7), 7) or "")
