"""The file state log: durability, torn tails, corruption, compaction."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from gateway.state import repair as state_repair
from gateway.state.log import FileStateLog, Record, StateLogCorrupt, encode_entry


def _live(log: FileStateLog) -> dict[bytes, bytes | None]:
    return {r.key: r.value for r in log.replay()}


def test_records_survive_reopen_with_latest_value_per_key(tmp_path: Path) -> None:
    log = FileStateLog(tmp_path)
    log.append([Record(b"a", b"1"), Record(b"b", b"2"), Record(b"a", b"3")])
    asyncio.run(log.sync())
    log.close()
    again = FileStateLog(tmp_path)
    assert _live(again) == {b"a": b"3", b"b": b"2"}
    assert again.truncated_tail_bytes == 0


def test_tombstone_removes_key_on_replay(tmp_path: Path) -> None:
    log = FileStateLog(tmp_path)
    log.append([Record(b"a", b"1"), Record(b"b", b"2"), Record(b"a", None)])
    log.close()
    assert _live(FileStateLog(tmp_path)) == {b"b": b"2"}


def test_replay_order_follows_latest_write(tmp_path: Path) -> None:
    log = FileStateLog(tmp_path)
    log.append([Record(b"a", b"1"), Record(b"b", b"2"), Record(b"a", b"3")])
    log.close()
    assert [r.key for r in FileStateLog(tmp_path).replay()] == [b"b", b"a"]


def test_empty_value_is_not_a_tombstone(tmp_path: Path) -> None:
    log = FileStateLog(tmp_path)
    log.append([Record(b"k", b"")])
    log.close()
    assert _live(FileStateLog(tmp_path)) == {b"k": b""}


@pytest.mark.parametrize("cut", [1, 3, 7, 9])
def test_torn_tail_is_truncated_and_earlier_records_kept(tmp_path: Path, cut: int) -> None:
    log = FileStateLog(tmp_path)
    log.append([Record(b"a", b"1")])
    log.close()
    seg = next(tmp_path.glob("*.log"))
    partial = encode_entry(Record(b"b", b"22222"))[:-cut]
    with open(seg, "ab") as fh:
        fh.write(partial)
    again = FileStateLog(tmp_path)
    assert _live(again) == {b"a": b"1"}
    assert again.truncated_tail_bytes == len(partial)
    # the log stays appendable after the repair
    again.append([Record(b"c", b"3")])
    again.close()
    assert _live(FileStateLog(tmp_path)) == {b"a": b"1", b"c": b"3"}


def test_garbled_final_entry_is_treated_as_torn(tmp_path: Path) -> None:
    log = FileStateLog(tmp_path)
    log.append([Record(b"a", b"1"), Record(b"b", b"2")])
    log.close()
    seg = next(tmp_path.glob("*.log"))
    data = bytearray(seg.read_bytes())
    data[-1] ^= 0xFF
    seg.write_bytes(bytes(data))
    assert _live(FileStateLog(tmp_path)) == {b"a": b"1"}


def test_corruption_before_the_tail_is_refused(tmp_path: Path) -> None:
    log = FileStateLog(tmp_path)
    log.append([Record(b"a", b"1"), Record(b"b", b"2")])
    log.close()
    seg = next(tmp_path.glob("*.log"))
    data = bytearray(seg.read_bytes())
    data[12] ^= 0xFF  # inside the first entry's body
    seg.write_bytes(bytes(data))
    with pytest.raises(StateLogCorrupt):
        FileStateLog(tmp_path)


def test_compaction_keeps_only_live_records_and_survives_reopen(tmp_path: Path) -> None:
    log = FileStateLog(tmp_path, compact_min_bytes=1)
    for i in range(200):
        log.append([Record(b"hot", str(i).encode()), Record(f"k{i % 5}".encode(), b"v")])
    log.append([Record(b"k0", None)])
    before = sum(p.stat().st_size for p in tmp_path.glob("*.log"))
    asyncio.run(log.sync())  # sync triggers compaction once dead bytes dominate
    after = sum(p.stat().st_size for p in tmp_path.glob("*.log"))
    assert after < before
    assert len(list(tmp_path.glob("*.log"))) == 1
    log.append([Record(b"new", b"x")])
    log.close()
    live = _live(FileStateLog(tmp_path))
    assert live == {b"hot": b"199", b"k1": b"v", b"k2": b"v", b"k3": b"v", b"k4": b"v", b"new": b"x"}


def test_interrupted_compaction_leaves_original_segments(tmp_path: Path) -> None:
    log = FileStateLog(tmp_path)
    log.append([Record(b"a", b"1")])
    log.close()
    (tmp_path / f"{1:020d}.compacting").write_bytes(b"partial garbage")
    again = FileStateLog(tmp_path)
    assert _live(again) == {b"a": b"1"}
    assert not list(tmp_path.glob("*.compacting"))


def test_group_commit_one_fsync_covers_concurrent_syncs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.state.log as mod

    calls: list[int] = []
    real = mod.os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    log = FileStateLog(tmp_path)
    monkeypatch.setattr(mod.os, "fsync", counting)

    async def main() -> None:
        log.append([Record(b"a", b"1")])
        log.append([Record(b"b", b"2")])
        await asyncio.gather(log.sync(), log.sync(), log.sync())

    asyncio.run(main())
    assert len(calls) == 1
    log.close()


def test_never_policy_does_not_fsync_but_data_reaches_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.state.log as mod

    log = FileStateLog(tmp_path, fsync="never")
    monkeypatch.setattr(mod.os, "fsync", lambda fd: pytest.fail("fsync under policy never"))
    log.append([Record(b"a", b"1")])
    asyncio.run(log.sync())
    monkeypatch.undo()
    assert _live(FileStateLog(tmp_path)) == {b"a": b"1"}  # unbuffered writes: a process crash loses nothing
    log.close()


# -- torn tail versus corruption, missing segments, failed writes, verify and repair -----------------


def _entries(n: int) -> list[Record]:
    return [Record(f"key-{i:05d}".encode(), f"value-{i}".encode() * 3) for i in range(n)]


def _log_with(tmp_path: Path, records: list[Record]) -> tuple[Path, list[int]]:
    """A closed log holding ``records`` one per entry; the segment and each entry's offset."""
    log = FileStateLog(tmp_path)
    log.append(records)
    log.close()
    (seg,) = tmp_path.glob("*.log")
    offsets, pos = [], 0
    for rec in records:
        offsets.append(pos)
        pos += len(encode_entry(rec))
    assert pos == seg.stat().st_size
    return seg, offsets


def _flip(path: Path, offset: int, mask: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("mask", [0x80, 0x01, 0x10])
def test_a_flipped_bit_in_a_middle_entrys_length_is_refused_naming_file_and_offset(tmp_path: Path, mask: int) -> None:
    records = _entries(2000)
    seg, offsets = _log_with(tmp_path, records)
    size = seg.stat().st_size
    victim = offsets[1000]
    _flip(seg, victim, mask)  # the length field's most significant byte: it now runs past the end
    with pytest.raises(StateLogCorrupt) as err:
        FileStateLog(tmp_path)
    assert err.value.path == seg and err.value.offset == victim
    assert str(seg) in str(err.value) and f"byte {victim}" in str(err.value)
    assert seg.stat().st_size == size  # nothing was truncated


def test_verify_reports_the_damage_and_repair_drops_exactly_that_entry(tmp_path: Path) -> None:

    records = _entries(500)
    seg, offsets = _log_with(tmp_path, records)
    victim = offsets[250]
    _flip(seg, victim, 0x40)
    report = state_repair.verify(tmp_path)
    assert not report.loadable
    (d,) = report.damage
    assert (d.path, d.kind, d.offset, d.end, d.entries) == (seg, "corrupt", victim, offsets[251], 1)
    assert sum(s.entries for s in report.segments) == 499
    assert seg.read_bytes()[victim] == (encode_entry(records[250])[0] ^ 0x40)  # verify changed nothing

    result = state_repair.repair(tmp_path)
    assert result.before.damage == [d] and result.kept_entries == 499 and result.live_keys == 499
    assert result.set_aside == [seg.with_name(seg.name + ".damaged")] and result.set_aside[0].exists()
    again = FileStateLog(tmp_path)
    assert _live(again) == {r.key: r.value for i, r in enumerate(records) if i != 250}
    assert state_repair.verify(tmp_path).damage == []
    again.append([Record(b"after", b"repair")])
    again.close()
    assert _live(FileStateLog(tmp_path))[b"after"] == b"repair"


def test_garbage_between_entries_is_corruption_but_zeros_at_the_end_are_a_torn_tail(tmp_path: Path) -> None:
    records = _entries(20)
    seg, offsets = _log_with(tmp_path, records)
    data = seg.read_bytes()
    seg.write_bytes(data[: offsets[10]] + b"\x00" * 7 + data[offsets[10] :])
    with pytest.raises(StateLogCorrupt) as err:
        FileStateLog(tmp_path)
    assert err.value.offset == offsets[10]
    seg.write_bytes(data + b"\x00" * 4096)  # a crash after the size grew but before the data landed
    again = FileStateLog(tmp_path)
    assert again.truncated_tail_bytes == 4096 and len(_live(again)) == 20
    again.close()


def test_a_missing_segment_and_a_vanished_log_are_refused_not_a_fresh_start(tmp_path: Path) -> None:
    import gateway.state.log as mod

    log = FileStateLog(tmp_path)
    log.append([Record(b"a", b"1")])
    log.close()
    assert mod.read_manifest(tmp_path) == (0, 0)
    (seg,) = tmp_path.glob("*.log")
    seg.unlink()
    with pytest.raises(StateLogCorrupt, match="missing"):
        FileStateLog(tmp_path)
    assert not list(tmp_path.glob("*.log"))  # no empty log was created in its place
    report = state_repair.verify(tmp_path)
    assert [d.kind for d in report.damage] == ["missing"] and not report.loadable
    result = state_repair.repair(tmp_path)  # the explicit decision to start from nothing
    assert result.live_keys == 0
    assert _live(FileStateLog(tmp_path)) == {}


def test_a_gap_in_the_segment_sequence_is_refused(tmp_path: Path) -> None:
    log = FileStateLog(tmp_path)
    log.append([Record(b"a", b"1")])
    log.close()
    (tmp_path / f"{2:020d}.log").write_bytes(encode_entry(Record(b"b", b"2")))
    with pytest.raises(StateLogCorrupt, match="missing"):
        FileStateLog(tmp_path)


def test_a_log_written_before_manifests_loads_and_gets_one(tmp_path: Path) -> None:
    import gateway.state.log as mod

    (tmp_path / f"{3:020d}.log").write_bytes(encode_entry(Record(b"a", b"1")))
    log = FileStateLog(tmp_path)
    assert _live(log) == {b"a": b"1"}
    log.close()
    assert mod.read_manifest(tmp_path) == (3, 3)


def test_compaction_interrupted_at_each_step_reopens_with_the_same_records(tmp_path: Path) -> None:
    import gateway.state.log as mod

    log = FileStateLog(tmp_path)
    for i in range(50):
        log.append([Record(b"hot", str(i).encode()), Record(f"k{i}".encode(), b"v")])
    log.append([Record(b"k0", None)])
    log.close()
    expected = _live(FileStateLog(tmp_path))
    old = tmp_path / f"{0:020d}.log"
    compacted = b"".join(encode_entry(Record(k, v)) for k, v in expected.items())
    new = tmp_path / f"{1:020d}.log"
    # 1. the compacted segment is in place, the manifest not yet updated: both are read, in order
    new.write_bytes(compacted)
    assert _live(FileStateLog(tmp_path)) == expected
    # 2. the manifest names the new segment, the old one not yet deleted: a leftover, removed
    mod.write_manifest(tmp_path, 1, 1)
    old.write_bytes(b"")  # whatever it holds is not read
    assert _live(FileStateLog(tmp_path)) == expected
    assert not old.exists()


def test_a_torn_sealed_segment_is_corruption(tmp_path: Path) -> None:
    import gateway.state.log as mod

    (tmp_path / f"{0:020d}.log").write_bytes(encode_entry(Record(b"a", b"1"))[:-2])
    (tmp_path / f"{1:020d}.log").write_bytes(encode_entry(Record(b"b", b"2")))
    mod.write_manifest(tmp_path, 0, 1)
    with pytest.raises(StateLogCorrupt):
        FileStateLog(tmp_path)


def _failing_write(monkeypatch: pytest.MonkeyPatch, log: FileStateLog, first: int) -> None:
    """The log's writes: ``first`` bytes land, then ENOSPC (a disk that fills mid-batch)."""
    import errno

    import gateway.state.log as mod

    real = mod.os.write
    state = {"left": first}

    def write(fd: int, data: Any) -> int:
        if fd != log._fd:
            return real(fd, data)
        if state["left"] <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real(fd, bytes(data[: state["left"]]))
        state["left"] -= n
        return n

    monkeypatch.setattr(mod.os, "write", write)


def test_short_writes_are_continued(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gateway.state.log as mod

    log = FileStateLog(tmp_path)
    real = mod.os.write
    monkeypatch.setattr(mod.os, "write", lambda fd, data: real(fd, bytes(data[:3])))  # 3 bytes per call
    log.append(_entries(5))
    asyncio.run(log.sync())
    monkeypatch.undo()
    log.close()
    assert _live(FileStateLog(tmp_path)) == {r.key: r.value for r in _entries(5)}


def test_a_failed_write_cuts_the_log_back_to_what_was_acknowledged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.state.log import StateLogWriteFailed

    log = FileStateLog(tmp_path)
    log.append([Record(b"acked", b"1")])
    asyncio.run(log.sync())
    (seg,) = tmp_path.glob("*.log")
    acked = seg.stat().st_size
    log.append([Record(b"appended-not-synced", b"2")])  # its sync never returned: not acknowledged
    _failing_write(monkeypatch, log, first=5)
    with pytest.raises(StateLogWriteFailed):
        log.append([Record(b"half-written", b"3" * 100)])
    assert seg.stat().st_size == acked  # neither the partial entry nor the unacknowledged one is left
    with pytest.raises(StateLogWriteFailed):
        log.append([Record(b"later", b"4")])  # the log takes no more writes
    with pytest.raises(StateLogWriteFailed):
        asyncio.run(log.sync())
    monkeypatch.undo()
    log.close()
    again = FileStateLog(tmp_path)
    assert _live(again) == {b"acked": b"1"} and again.truncated_tail_bytes == 0
    again.close()


def test_a_failed_fsync_cuts_the_log_back_and_fails_the_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import gateway.state.log as mod
    from gateway.state.log import StateLogWriteFailed

    log = FileStateLog(tmp_path)
    log.append([Record(b"acked", b"1")])
    asyncio.run(log.sync())
    (seg,) = tmp_path.glob("*.log")
    acked = seg.stat().st_size
    log.append([Record(b"lost", b"2")])
    real = mod.os.fsync

    def fsync(fd: int) -> None:
        if fd == log._fd:
            raise OSError(errno.EIO, "Input/output error")
        real(fd)

    monkeypatch.setattr(mod.os, "fsync", fsync)
    with pytest.raises(StateLogWriteFailed):
        asyncio.run(log.sync())
    monkeypatch.undo()
    assert seg.stat().st_size == acked
    log.close()
    assert _live(FileStateLog(tmp_path)) == {b"acked": b"1"}


def test_state_verify_and_repair_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from coordinator import records as rec
    from coordinator.records import codec
    from gateway.ops.cli import main
    from gateway.ops.exit_codes import EXIT_STATE_CORRUPT

    # Group records (verify checks that each decodes): a single log is one shard, every group's.
    records = [
        Record(*codec.encode(rec.Record(rec.RecordType.GROUP_METADATA, f"g{i}", None, rec.GroupMetadataValue(i))))
        for i in range(300)
    ]
    seg, offsets = _log_with(tmp_path, records)
    assert main(["state", "verify", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "300 readable entries" in out and "shard 0: 300 records, 300 groups, no problems" in out, out
    _flip(seg, offsets[150] + 1, 0x02)
    assert main(["state", "verify", "--state-dir", str(tmp_path)]) == EXIT_STATE_CORRUPT
    out = capsys.readouterr().out
    assert f"{seg}: corrupt at bytes {offsets[150]}..{offsets[151]}" in out and "NOT loadable" in out
    assert main(["state", "repair", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    length = offsets[151] - offsets[150]
    assert f"dropped: {seg}: corrupt at bytes {offsets[150]}..{offsets[151]} ({length} bytes, 1 entry)" in out
    assert f"kept: {seg.name}: 299 entries" in out and "latest value of 299 keys" in out
    assert main(["state", "verify", "--state-dir", str(tmp_path)]) == 0
    assert main(["state", "verify", "--state-dir", str(tmp_path / "nope")]) == 2


def test_an_unreadable_manifest_is_refused_and_repair_rewrites_it(tmp_path: Path) -> None:
    import gateway.state.log as mod

    log = FileStateLog(tmp_path)
    log.append([Record(b"a", b"1")])
    log.close()
    (tmp_path / mod.MANIFEST).write_bytes(b"{not json")
    with pytest.raises(StateLogCorrupt) as err:
        FileStateLog(tmp_path)
    assert err.value.path == tmp_path / mod.MANIFEST
    assert not state_repair.verify(tmp_path).loadable
    state_repair.repair(tmp_path)
    assert _live(FileStateLog(tmp_path)) == {b"a": b"1"}


def test_a_flipped_bit_in_an_entrys_contents_is_one_entry_lost(tmp_path: Path) -> None:

    seg, offsets = _log_with(tmp_path, _entries(50))
    _flip(seg, offsets[20] + 12, 0x04)  # inside the body: the checksum no longer matches, the length does
    (d,) = state_repair.verify(tmp_path).damage
    assert (d.kind, d.offset, d.end, d.entries) == ("corrupt", offsets[20], offsets[21], 1)


def test_the_reported_case_a_bit_in_entry_37337_of_74674_no_longer_truncates_the_log(tmp_path: Path) -> None:
    """The reported failure at its size: a 4.67 MB log cut to about half by one flipped length bit."""

    records = [Record(f"group-{i % 84:03d}/member-{i:06d}".encode(), bytes(20 + i % 7)) for i in range(74674)]
    seg, offsets = _log_with(tmp_path, records)
    size = seg.stat().st_size
    assert 4_500_000 < size < 4_800_000
    victim = offsets[37336]  # entry 37,337, counting from 1
    _flip(seg, victim + 1, 0x01)  # one bit of the length field: it now runs past the end of the file
    with pytest.raises(StateLogCorrupt) as err:
        FileStateLog(tmp_path)
    assert (err.value.path, err.value.offset) == (seg, victim)
    assert seg.stat().st_size == size  # not cut to 2.49 MB
    result = state_repair.repair(tmp_path)
    assert [(d.offset, d.end, d.entries) for d in result.before.damage] == [(victim, offsets[37337], 1)]
    assert result.kept_entries == 74673
    assert len(_live(FileStateLog(tmp_path))) == 74673


def test_syncs_started_in_one_step_of_the_loop_share_one_fsync(tmp_path: Path) -> None:
    """Requests answered at once (gateway/net/eager.py) append and start their sync in the same step:
    the appends of that turn of the loop are all made durable by one fsync, not one each."""
    from gateway.net import eager

    async def main() -> None:
        log = FileStateLog(tmp_path / "log")
        try:
            started = []
            for i in range(3):
                log.append([Record(f"k{i}".encode(), b"v")])
                done, task = eager.start(log.sync())
                assert not done  # there is something to fsync: it waits
                started.append(task)
            await asyncio.gather(*started)
            assert log.fsyncs == 1
            done, _ = eager.start(log.sync())
            assert done  # nothing appended since: durable at once, no fsync
            assert log.fsyncs == 1
        finally:
            log.close()

    asyncio.run(main())


def test_unsynced_says_whether_a_sync_has_anything_to_do(tmp_path: Path) -> None:
    """What the shard reads to skip the sync before an answer (gateway/groups/shard.py): appended and not
    fsynced, or closed (a sync would raise), is something to do."""
    log = FileStateLog(tmp_path)
    assert not log.unsynced()
    log.append([Record(b"a", b"1")])
    assert log.unsynced()
    asyncio.run(log.sync())
    assert not log.unsynced() and log.fsyncs >= 1
    log.close()
    assert log.unsynced()
    with pytest.raises(Exception, match="closed"):
        asyncio.run(log.sync())
