"""The write-ahead state log that makes groupgate's group state durable.

Every record the sans-I/O layers emit (a key and a value, or a tombstone: value None, the same
key/value bytes Kafka writes to __consumer_offsets) is appended here and made durable before any
response that depends on it is released. On start the gateway replays the log to rebuild group
state. The log is compacted like a compacted Kafka topic: only the latest value of each key
survives, and tombstoned keys vanish.

Embedded backend: one directory of append-only segment files named by sequence number
(``00000000000000000007.log``) and a manifest (``manifest.json``: the range of segments that must be
present), so that a vanished or missing segment is an error rather than a silent fresh start; the
entry layout, the scanner and the manifest are in gateway/state/segments.py.

Damage is told apart by where it is. Only the last append can be torn (a crash mid-write): a damaged
entry with no valid entry anywhere after it is a torn tail, dropped on open (and logged). A damaged
entry followed by any valid, checksummed entry is corruption of the middle of the log (a flipped bit
on the disk): opening refuses with ``StateLogCorrupt`` naming the file and byte offset, and only
``groupgate state repair`` drops it, saying what it dropped. Sealed segments cannot be torn at all.

Writes: an append writes the whole batch (short writes are continued); a failed write or fsync
truncates the active segment back to the size whose records were acknowledged (``sync()``
returned), so the log stays loadable, and the log object refuses further writes
(``StateLogWriteFailed``): its owner must re-open the directory, re-reading what is durable.

Durability policy (``fsync``): ``always`` (every ``sync()`` fsyncs; group commit: one fsync covers all
entries appended before it), ``interval`` (fsync at most every ``fsync_interval_ms``; a crash of the
machine, not just the process, may lose the last interval) or ``never`` (leave it to the OS; survives a
process crash, not a power loss).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal, Protocol

from gateway.logging import get_logger
from gateway.state.segments import (
    DAMAGED_SUFFIX,
    MANIFEST,
    Damage,
    LogLayout,
    Record,
    SegmentScan,
    StateLogCorrupt,
    _corrupt,
    _fsync_dir,
    _numbered_segments,
    _segment_name,
    encode_entry,
    plan_segments,
    read_manifest,
    read_segment,
    scan_segment,
    write_manifest,
)

log = get_logger("gateway.state.log")

FsyncPolicy = Literal["always", "interval", "never"]


class StateLogWriteFailed(Exception):
    """An append or fsync failed (e.g. ENOSPC, EIO). The log was cut back to its acknowledged size and
    takes no more writes: re-open the directory to carry on."""


class StateLog(Protocol):
    """What the gateway needs from a state log backend (file today, a Kafka topic later)."""

    def replay(self) -> Iterator[Record]: ...

    def append(self, records: Iterable[Record]) -> None: ...

    async def sync(self) -> None: ...

    def close(self) -> None: ...

class FileStateLog:
    """Append-only segment files in one directory, compacted when the dead share grows."""

    def __init__(
        self,
        directory: Path | str,
        *,
        fsync: FsyncPolicy = "always",
        fsync_interval_ms: int = 100,
        compact_min_bytes: int = 64 * 1024 * 1024,
        shard: int = 0,
    ) -> None:
        self.shard = shard  # the shard this directory holds (gateway/state/store.py ShardLog)
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fsync_policy: FsyncPolicy = fsync
        self.fsync_interval_ms = fsync_interval_ms
        self.compact_min_bytes = compact_min_bytes
        self._compact_at = compact_min_bytes
        self._live: dict[bytes, bytes] = {}
        self._live_bytes = 0
        self._file_bytes = 0
        self._appended = 0  # entries appended (monotonic)
        self._size = 0  # bytes written to the active segment
        self._acked = 0  # bytes of the active segment a sync() has returned for
        self._failed: BaseException | None = None
        self._fsyncing = 0  # fsyncs running in the executor on self._fd
        self._closing = False
        self._last_fsync = 0.0
        self._sync_lock = asyncio.Lock()
        self._truncated_tail = 0
        self._number = 0
        self._first = 0
        # Since open, for /metrics (gateway/metrics.py).
        self.bytes_appended = 0
        self.fsyncs = 0
        self.compactions = 0
        self._load()
        self._fd = os.open(self._active, os.O_WRONLY | os.O_APPEND)

    # -- opening and replay -------------------------------------------------------------------
    def _segments(self) -> list[Path]:
        return [p for _, p in _numbered_segments(self.dir)]

    def _load(self) -> None:
        for tmp in self.dir.glob("*.compacting"):
            tmp.unlink()  # an interrupted compaction: its source segments are still intact
        layout = plan_segments(self.dir)
        if layout.missing:
            d = layout.missing[0]
            raise StateLogCorrupt(
                f"state log {self.dir}: segment {d.path.name} is missing ({d.reason}); refusing to start "
                f"with part of the group state (see `groupgate state repair`, docs/operations.md)",
                d.path,
                None,
            )
        segments = layout.segments
        if not segments:
            first = self.dir / _segment_name(0)
            first.touch()
            write_manifest(self.dir, 0, 0)
            log.debug("new group state log", state_dir=str(self.dir))  # one per shard: the store says it once
            segments = [(0, first)]
        for i, (_, seg) in enumerate(segments):
            last = i == len(segments) - 1
            scan = scan_segment(seg, seg.read_bytes(), sealed=not last, keep_going=False)
            for d in scan.damage:
                if d.kind == "corrupt":
                    raise _corrupt(d)
                # A torn tail: the end of an append that never completed, so never acknowledged.
                with open(seg, "r+b") as fh:
                    fh.truncate(d.offset)
                    os.fsync(fh.fileno())
                self._truncated_tail = d.bytes
                log.warning(
                    "dropped the torn tail of the group state log",
                    segment=str(seg), offset=d.offset, bytes=d.bytes, reason=d.reason,
                )
            for rec in scan.records:
                self._apply(rec)
            self._file_bytes += scan.valid_prefix
        for p in layout.leftovers:
            p.unlink()
        self._first, self._number = segments[0][0], segments[-1][0]
        if layout.manifest != (self._first, self._number):
            write_manifest(self.dir, self._first, self._number)
        self._active = segments[-1][1]
        self._size = self._acked = self._active.stat().st_size
        self._appended = 0

    @property
    def entries_appended(self) -> int:
        return self._appended

    @property
    def file_bytes(self) -> int:
        """Bytes in the segment files (live records and dead ones awaiting compaction)."""
        return self._file_bytes

    @property
    def truncated_tail_bytes(self) -> int:
        """Bytes of a torn tail dropped on open (0 after a clean shutdown)."""
        return self._truncated_tail

    @property
    def failed(self) -> BaseException | None:
        """The write or fsync error that stopped this log (None while it works)."""
        return self._failed

    def _apply(self, rec: Record) -> None:
        old = self._live.pop(rec.key, None)
        if old is not None:
            self._live_bytes -= len(rec.key) + len(old)
        if rec.value is not None:
            self._live[rec.key] = rec.value
            self._live_bytes += len(rec.key) + len(rec.value)

    def replay(self) -> Iterator[Record]:
        """The live records: the latest value of each key, tombstoned keys dropped.

        They come in the order of their latest write, as a compacted Kafka topic replays: every
        record is a whole-state upsert of its key, so a replay must not depend on older order.
        """
        for key, value in self._live.items():
            yield Record(key, value)

    # -- appending ----------------------------------------------------------------------------
    def _check(self) -> None:
        if self._closing:
            raise StateLogWriteFailed(f"state log {self._active} is closed")
        if self._failed is not None:
            raise StateLogWriteFailed(f"state log {self._active} stopped after a failed write: {self._failed}")

    def append(self, records: Iterable[Record]) -> None:
        self._check()
        recs = list(records)
        buf = b"".join(encode_entry(rec) for rec in recs)
        if not buf:
            return
        view = memoryview(buf)
        done = 0
        try:
            while done < len(buf):
                n = os.write(self._fd, view[done:])  # a short write (a full disk) is continued or fails
                if n <= 0:
                    raise OSError("write wrote nothing")
                done += n
        except OSError as exc:
            self._fail("write", exc)
            raise StateLogWriteFailed(f"state log write to {self._active} failed: {exc}") from exc
        for rec in recs:
            self._apply(rec)
        self._appended += len(recs)
        self._size += len(buf)
        self._file_bytes += len(buf)
        self.bytes_appended += len(buf)

    def _fail(self, what: str, exc: BaseException) -> None:
        """Cut the active segment back to what was acknowledged, so it stays loadable; stop writing."""
        self._failed = exc
        try:
            if self._closing:
                # Closed while the fsync ran: the directory may already be open again, appending.
                raise OSError("the log was closed meanwhile")
            os.ftruncate(self._fd, self._acked)
            os.fsync(self._fd)
            cut = "truncated"
        except OSError as again:
            # Whatever is left past the acknowledged size is an unfinished tail: the next open drops a
            # partial entry as torn, and whole ones were never answered, so replaying them is harmless.
            cut = f"could not truncate ({again})"
        log.error(
            "group state log write failed",
            operation=what, segment=str(self._active), error=str(exc),
            acknowledged_bytes=self._acked, unacknowledged_bytes=self._size - self._acked, tail=cut,
        )
        self._size = self._acked

    def unsynced(self) -> bool:
        return self._closing or self._failed is not None or self._acked < self._size

    async def sync(self) -> None:
        """Return once every entry appended so far is durable under the configured policy."""
        self._check()
        if self.fsync_policy == "never" or self._acked >= self._size:
            self._acked = self._size
            return
        if self.fsync_policy == "interval":
            now = time.monotonic()
            if (now - self._last_fsync) * 1000.0 < self.fsync_interval_ms:
                self._acked = self._size
                return
        # The other requests handled in this turn of the loop append first, so that one fsync covers them
        # all: a caller may start its sync in the same step as its append (gateway/net/eager.py).
        await asyncio.sleep(0)
        async with self._sync_lock:
            self._check()
            target = self._size
            if self._acked >= target:
                return  # a concurrent sync already covered us (group commit)
            self._fsyncing += 1
            try:
                await asyncio.get_running_loop().run_in_executor(None, os.fsync, self._fd)
            except OSError as exc:
                if self._failed is None:
                    self._fail("fsync", exc)
                raise StateLogWriteFailed(f"state log fsync of {self._active} failed: {exc}") from exc
            finally:
                self._fsyncing -= 1
                if self._closing and not self._fsyncing:
                    self._close_fd()
            if self._closing:
                raise StateLogWriteFailed(f"state log {self._active} was closed")
            self._check()  # a write failed (and cut the file) while this fsync ran
            self.fsyncs += 1
            self._acked = max(self._acked, target)
            self._last_fsync = time.monotonic()
        self._maybe_compact()

    def sync_blocking(self) -> None:
        self._check()
        if self._acked < self._size:
            try:
                os.fsync(self._fd)
            except OSError as exc:
                self._fail("fsync", exc)
                raise StateLogWriteFailed(f"state log fsync of {self._active} failed: {exc}") from exc
            self.fsyncs += 1
            self._acked = self._size

    # -- compaction -----------------------------------------------------------------------------
    def _maybe_compact(self) -> None:
        if self._fsyncing or self._failed is not None or self._closing:
            return  # another sync's fsync still runs on the active segment: a later sync compacts
        dead = self._file_bytes - self._live_bytes
        if self._file_bytes >= max(self.compact_min_bytes, self._compact_at) and dead * 2 > self._file_bytes:
            self.compact()

    def compact(self) -> None:
        """Rewrite the live records into a new segment and drop the old ones (crash-safe).

        A compaction that cannot write its segment (a full disk) leaves the log as it was and is
        tried again only after the log grew by a quarter of ``compact_min_bytes``."""
        self.sync_blocking()
        old = self._segments()
        number = self._number + 1
        final = self.dir / _segment_name(number)
        tmp = final.with_suffix(".compacting")
        size = 0
        try:
            with open(tmp, "wb") as fh:
                for key, value in self._live.items():
                    entry = encode_entry(Record(key, value))
                    fh.write(entry)
                    size += len(entry)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
            _fsync_dir(self.dir)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            self._compact_at = self._file_bytes + max(1, self.compact_min_bytes // 4)
            log.warning("group state log compaction failed; the log is unchanged", error=str(exc))
            return
        os.close(self._fd)
        self._fd = os.open(final, os.O_WRONLY | os.O_APPEND)
        self._active = final
        self._number = number
        self._file_bytes = self._size = self._acked = size
        self.compactions += 1
        try:
            write_manifest(self.dir, number, number)
        except OSError as exc:
            # The old segments stay: the manifest still lists them, and the new segment is read
            # after them as their continuation. The next compaction tries again.
            log.warning("group state log manifest not updated after compaction", error=str(exc))
            return
        self._first = number
        for seg in old:
            seg.unlink()
        _fsync_dir(self.dir)

    def probe_write(self) -> None:
        """Rewrite the manifest (a small write, fsync and rename): raises OSError while the disk is full."""
        self._check()
        write_manifest(self.dir, self._first, self._number)

    def close(self) -> None:
        if self._closing:
            return
        try:
            if self._failed is None and not self._fsyncing:
                self.sync_blocking()
        except StateLogWriteFailed as exc:
            log.error("group state log not synced on close", error=str(exc))
        finally:
            self._closing = True
            if not self._fsyncing:
                self._close_fd()  # else the running fsync closes it when it returns

    def _close_fd(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


# The format's names (gateway/state/segments.py) stay importable from here.
__all__ = [
    "DAMAGED_SUFFIX", "MANIFEST", "Damage", "FileStateLog", "FsyncPolicy", "LogLayout", "Record", "SegmentScan",
    "StateLog", "StateLogCorrupt", "StateLogWriteFailed", "encode_entry", "plan_segments", "read_manifest",
    "read_segment", "scan_segment", "write_manifest",
]
