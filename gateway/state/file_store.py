"""The group state store as a directory of per-shard file logs (``--state-dir``).

Layout::

    STATE_DIR/store.json        {"format": 1, "shards": P}: the shard count the state was written with
    STATE_DIR/shard-00/ ...     one FileStateLog per shard (segments and manifest, gateway/state/log.py)
    STATE_DIR/pre-shard-backup/ the single log of older versions, kept after it was split into shards

A group's shard is ``shard_of(group_id, P)`` (gateway/state/store.py), so the shard count is part of
the data: starting with another ``state.topic.num.partitions`` would look every group up in the wrong
shard. It is refused (``StateStoreMismatch``) rather than silently re-hashed.

A state directory written before shards existed (segments and ``manifest.json`` at the top level) is
split on the first start: every live record goes to the shard of the group its key names, each shard is
made durable, then ``store.json`` is written (the commit point: a crash before it leaves the old log in
charge and the split is redone), then the old files are moved into ``pre-shard-backup/``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from coordinator.records.codec import group_of_key
from gateway.logging import get_logger
from gateway.state.log import FileStateLog, FsyncPolicy, Record
from gateway.state.segments import MANIFEST, _fsync_dir, _numbered_segments
from gateway.state.store import StateStoreMismatch, shard_of

log = get_logger("gateway.state.file_store")

STORE_FILE = "store.json"
BACKUP_DIR = "pre-shard-backup"
_FORMAT = 1


def shard_dir(state_dir: Path, shard: int) -> Path:
    return state_dir / f"shard-{shard:02d}"


def recorded_shards(state_dir: Path) -> int | None:
    """The shard count ``store.json`` records; None when the directory has none (new, or pre-shard)."""
    path = state_dir / STORE_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise StateStoreMismatch(f"{path} is not readable: {e}") from e
    if not isinstance(data, dict) or data.get("format") != _FORMAT or not isinstance(data.get("shards"), int):
        raise StateStoreMismatch(f"{path} is not a groupgate state store description: {data!r}")
    return int(data["shards"])


def legacy_files(state_dir: Path) -> list[Path]:
    """The files of a single (pre-shard) state log at the top of ``state_dir``."""
    out = [p for _, p in _numbered_segments(state_dir)]
    out += [p for p in state_dir.glob("*.log.damaged")]
    manifest = state_dir / MANIFEST
    if manifest.exists():
        out.append(manifest)
    return out


def shard_dirs(state_dir: Path) -> list[Path]:
    """The shard directories present, in shard order."""
    return sorted((p for p in state_dir.glob("shard-*") if p.is_dir()), key=lambda p: int(p.name[6:]))


class FileStateStore:
    """``StateStore`` over ``state_dir``: ``open()`` checks (or records) the shard count and splits an old
    single log; ``open_shard(n)`` opens ``state_dir/shard-NN`` (a FileStateLog: its replay is the durable
    state; a damaged shard raises StateLogCorrupt naming the file and offset)."""

    def __init__(
        self, state_dir: Path | str, shards: int, *, fsync: FsyncPolicy = "always", fsync_interval_ms: int = 100
    ) -> None:
        self.dir = Path(state_dir)
        self.shards = shards
        self.fsync: FsyncPolicy = fsync
        self.fsync_interval_ms = fsync_interval_ms

    async def open(self) -> None:
        self.open_blocking()

    def open_blocking(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        recorded = recorded_shards(self.dir)
        if recorded is not None and recorded != self.shards:
            raise StateStoreMismatch(
                f"state dir {self.dir} was written with {recorded} shards and state.topic.num.partitions is "
                f"{self.shards}: a group's shard depends on that count, so the gateway does not start with "
                f"another one (set state.topic.num.partitions = {recorded})"
            )
        old = legacy_files(self.dir)
        if recorded is None and old:
            self._split_legacy()
        elif recorded is None:
            self._write_store_file()
            log.info("new group state store", state_dir=str(self.dir), shards=self.shards)
        elif old:
            # The split was committed (store.json) but the old files were not all moved aside yet.
            self._move_aside(legacy_files(self.dir))

    async def open_shard(self, shard: int) -> FileStateLog:
        return self.open_shard_blocking(shard)

    def open_shard_blocking(self, shard: int) -> FileStateLog:
        if not 0 <= shard < self.shards:
            raise ValueError(f"shard {shard} is not one of 0..{self.shards - 1}")
        return FileStateLog(
            shard_dir(self.dir, shard), fsync=self.fsync, fsync_interval_ms=self.fsync_interval_ms, shard=shard
        )

    async def close(self) -> None:
        return None

    # --- the pre-shard layout --------------------------------------------------------------------------

    def _write_store_file(self) -> None:
        path = self.dir / STORE_FILE
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as fh:
            json.dump({"format": _FORMAT, "shards": self.shards}, fh)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(self.dir)

    def _split_legacy(self) -> None:
        # Reading the old log as the gateway always did: a torn tail is dropped, damage refuses the start.
        legacy = FileStateLog(self.dir, fsync="always")
        try:
            records = list(legacy.replay())
        finally:
            legacy.close()
        for leftover in shard_dirs(self.dir):
            shutil.rmtree(leftover)  # an earlier split that crashed before its commit point
        per_shard: dict[int, list[Record]] = {}
        unplaced = 0
        for rec in records:
            try:
                shard = shard_of(group_of_key(rec.key), self.shards)
            except (ValueError, UnicodeDecodeError):
                shard, unplaced = 0, unplaced + 1  # not a group record: kept, in shard 0 (replay skips it)
            per_shard.setdefault(shard, []).append(rec)
        for shard in range(self.shards):
            log_ = self.open_shard_blocking(shard)
            try:
                log_.append(per_shard.get(shard, []))
                log_.sync_blocking()
            finally:
                log_.close()
        self._write_store_file()
        moved = self._move_aside(legacy_files(self.dir))
        log.warning(
            "split the single group state log into shards",
            state_dir=str(self.dir), shards=self.shards, records=len(records),
            records_per_shard={s: len(rs) for s, rs in sorted(per_shard.items())},
            records_without_group=unplaced, old_files_moved_to=str(self.dir / BACKUP_DIR), files=[p.name for p in moved],
        )

    def _move_aside(self, files: list[Path]) -> list[Path]:
        backup = self.dir / BACKUP_DIR
        backup.mkdir(exist_ok=True)
        for p in files:
            os.replace(p, backup / p.name)
        _fsync_dir(backup)
        _fsync_dir(self.dir)
        return files


__all__ = ["BACKUP_DIR", "STORE_FILE", "FileStateStore", "legacy_files", "recorded_shards", "shard_dir", "shard_dirs"]
