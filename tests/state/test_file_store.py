"""The sharded file store (gateway/state/file_store.py): the shard count is part of the data, and a state dir of
the single-log layout is split into shards without losing a record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.messages import ConsumerGroupHeartbeatRequest
from coordinator.records.codec import group_of_key
from gateway.ops.cli import main
from gateway.ops.exit_codes import EXIT_STATE_CORRUPT
from gateway.state.file_store import BACKUP_DIR, STORE_FILE, FileStateStore, shard_dir
from gateway.state.log import MANIFEST, FileStateLog, Record
from gateway.state.store import StateStoreMismatch, shard_of
from translate.classic_messages import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from translate.group_config import encode_any_record
from translate.group_service import GroupService

GROUPS = [f"legacy-{i}" for i in range(12)]


def _legacy_state_dir(state: Path) -> tuple[GroupService, dict[bytes, bytes | None]]:
    """A state dir as the single-log gateway wrote it: every record a GroupService emitted, appended in order
    to one FileStateLog at the top of the directory (segments + manifest.json)."""
    service = GroupService()
    log = FileStateLog(state)
    now = 1_000
    try:
        for i, gid in enumerate(GROUPS):
            records = []
            if i % 2:  # a KIP-848 consumer group
                r = service.handle(ConsumerGroupHeartbeatRequest(
                    group_id=gid, member_id=f"m-{i}", member_epoch=0, rebalance_timeout_ms=30000,
                    subscribed_topic_names=["t"], topic_partitions=[],
                ), i, now)
                records += r.records
            else:  # a classic group: join (member id required, then the join), sync stores it
                join = JoinGroupRequest(
                    group_id=gid, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                    protocols=[JoinGroupRequestProtocol("range", b"")], client_id="c", client_host="/h",
                )
                member = service.handle(join, 100 + i, now).responses[0].body.member_id
                join.member_id = member
                r = service.handle(join, 200 + i, now)
                records += r.records
                body = r.response_to(200 + i)
                for t in r.timers if body is None else ():
                    # Parked until group.initial.rebalance.delay.ms: the delay's timer completes the join.
                    fired = service.on_timer(t.key, now + 60_000)
                    records += fired.records
                    body = body or fired.response_to(200 + i)
                assert body is not None and body.error_code == 0
                sync = SyncGroupRequest(
                    group_id=gid, generation_id=body.generation_id, member_id=member,
                    assignments=[SyncGroupRequestAssignment(member, b"a")], client_id="c", client_host="/h",
                )
                records += service.handle(sync, 300 + i, now).records
            log.append(Record(*encode_any_record(rec)) for rec in records)
        log.sync_blocking()
        live = {r.key: r.value for r in log.replay()}
    finally:
        log.close()
    assert (state / MANIFEST).exists() and list(state.glob("*.log"))
    return service, live


def _shard_records(state: Path, shard: int) -> dict[bytes, bytes | None]:
    log = FileStateLog(shard_dir(state, shard))
    try:
        return {r.key: r.value for r in log.replay()}
    finally:
        log.close()


def test_a_single_log_state_dir_is_split_into_shards_without_losing_a_record(tmp_path: Path) -> None:
    state = tmp_path / "state"
    before, live = _legacy_state_dir(state)
    assert {group_of_key(k) for k in live} == set(GROUPS)
    old_files = sorted(p.name for p in state.iterdir())

    FileStateStore(state, 8).open_blocking()

    assert json.loads((state / STORE_FILE).read_text()) == {"format": 1, "shards": 8}
    # Every live record, in the shard of the group its key names, and nowhere else.
    merged: dict[bytes, bytes | None] = {}
    for n in range(8):
        records = _shard_records(state, n)
        assert all(shard_of(group_of_key(k), 8) == n for k in records)
        merged.update(records)
    assert merged == live
    # The old files are kept aside, not deleted, and no longer at the top.
    assert sorted(p.name for p in (state / BACKUP_DIR).iterdir()) == old_files
    assert not list(state.glob("*.log")) and not (state / MANIFEST).exists()
    # Replaying the shards rebuilds the same groups.
    after = GroupService()
    for n in range(8):
        for k, v in _shard_records(state, n).items():
            after.replay_bytes(k, v)
    assert sorted(after.group_ids()) == sorted(before.group_ids()) == sorted(GROUPS)
    for g in GROUPS:
        assert after.group_kind(g) == before.group_kind(g)
        assert after.member_count(g) == before.member_count(g)

    # A second start finds the split done: nothing is split again.
    FileStateStore(state, 8).open_blocking()
    assert {k: v for n in range(8) for k, v in _shard_records(state, n).items()} == live


def test_a_split_that_stopped_before_its_commit_point_is_redone(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _, live = _legacy_state_dir(state)
    # A crash mid-split: a shard directory with partial content, no store.json yet.
    partial = FileStateLog(shard_dir(state, 3))
    partial.append([Record(b"\x00\x02\x00\x01x", b"half")])
    partial.sync_blocking()
    partial.close()
    FileStateStore(state, 4).open_blocking()
    assert {k: v for n in range(4) for k, v in _shard_records(state, n).items()} == live


def test_a_state_dir_written_with_another_shard_count_is_refused(tmp_path: Path) -> None:
    FileStateStore(tmp_path, 4).open_blocking()
    with pytest.raises(StateStoreMismatch, match=r"written with 4 shards.*state.topic.num.partitions is 8"):
        FileStateStore(tmp_path, 8).open_blocking()
    assert json.loads((tmp_path / STORE_FILE).read_text())["shards"] == 4  # untouched
    FileStateStore(tmp_path, 4).open_blocking()  # the count it was written with still opens


def test_serve_refuses_another_shard_count_with_the_state_error_exit_code(tmp_path: Path) -> None:
    FileStateStore(tmp_path, 4).open_blocking()
    env = dict(os.environ, GROUPGATE_COORDINATOR_STATE_TOPIC_NUM_PARTITIONS="6")
    # The store is read before any listener opens or the upstream is dialled (port 1: nothing there).
    done = subprocess.run(
        [sys.executable, "-m", "gateway.ops.cli", "serve", "--upstream", "127.0.0.1:1", "--listen", "127.0.0.1:0",
         "--state-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert done.returncode == EXIT_STATE_CORRUPT, done.stderr[-2000:]
    assert "written with 4 shards" in done.stderr and "state.topic.num.partitions = 4" in done.stderr
    assert "Traceback" not in done.stderr


def _group_record(shard: int, shards: int, tag: str) -> Record:
    """A consumer group's GROUP_METADATA record for a group that belongs in ``shard``."""
    from coordinator import records as rec
    from coordinator.records import codec

    group = next(g for g in (f"{tag}-{i}" for i in range(1000)) if shard_of(g, shards) == shard)
    return Record(*codec.encode(rec.Record(rec.RecordType.GROUP_METADATA, group, None, rec.GroupMetadataValue(1))))


def test_state_verify_walks_every_shard(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = FileStateStore(tmp_path, 3)
    store.open_blocking()
    for n in range(3):
        log = store.open_shard_blocking(n)
        log.append([_group_record(n, 3, "k")])
        log.sync_blocking()
        log.close()
    assert main(["state", "verify", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert all(f"state log {shard_dir(tmp_path, n)}" in out for n in range(3))
    assert all(f"shard {n}: 1 records, 1 group, no problems" in out for n in range(3)), out
    # Shard 1's first entry damaged with a valid entry after it: corruption, not a torn tail.
    after = _group_record(1, 3, "after")
    log = FileStateLog(shard_dir(tmp_path, 1))
    log.append([after])
    log.sync_blocking()
    log.close()
    seg = next(shard_dir(tmp_path, 1).glob("*.log"))
    data = bytearray(seg.read_bytes())
    data[12] ^= 0x01  # inside the first entry's body: its checksum no longer matches
    seg.write_bytes(bytes(data))
    assert main(["state", "verify", "--state-dir", str(tmp_path)]) == EXIT_STATE_CORRUPT
    out = capsys.readouterr().out
    assert f"{seg}: corrupt at bytes 0.." in out and "NOT loadable" in out
    assert main(["state", "repair", "--state-dir", str(tmp_path)]) == 0
    assert main(["state", "verify", "--state-dir", str(tmp_path)]) == 0
    assert _shard_records(tmp_path, 1) == {after.key: after.value}
    assert _shard_records(tmp_path, 2) == {_group_record(2, 3, "k").key: _group_record(2, 3, "k").value}
