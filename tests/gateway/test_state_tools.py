"""The pure parts of ``groupgate state inspect|export|import``: which group (so shard) a record key belongs
to, how records are shown, and import's idempotence (with a stand-in store; the real cluster is exercised
in compat_tests/test_state_topic.py)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator

from coordinator import records as rec
from coordinator.records import codec
from gateway.state_log import Record
from gateway.state_store import shard_of
from gateway.state_tools import describe_record, export_line, group_of_key, import_records, latest
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
    line = export_line(3, r)
    assert (line["shard"], base64.b64decode(line["key"]), base64.b64decode(line["value"])) == (3, r.key, r.value)
    assert export_line(0, Record(b"k", None))["value"] is None


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

    from gateway.file_store import FileStateStore
    from gateway.state_tools import file_state_records

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
    from gateway.state_store import owner_marker
    from translate.group_service import GroupService

    marker = owner_marker("pid 42")
    assert describe_record(marker) == {"type": "SHARD_OWNER", "owner": "pid 42", "tombstone": False}
    assert GroupService().replay_bytes(marker.key, marker.value) is False
