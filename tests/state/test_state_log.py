"""The file state log: durability, torn tails, corruption, compaction."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.state_log import FileStateLog, Record, StateLogCorrupt, encode_entry


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
    import gateway.state_log as mod

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
    import gateway.state_log as mod

    log = FileStateLog(tmp_path, fsync="never")
    monkeypatch.setattr(mod.os, "fsync", lambda fd: pytest.fail("fsync under policy never"))
    log.append([Record(b"a", b"1")])
    asyncio.run(log.sync())
    monkeypatch.undo()
    assert _live(FileStateLog(tmp_path)) == {b"a": b"1"}  # unbuffered writes: a process crash loses nothing
    log.close()
