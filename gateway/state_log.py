"""The write-ahead state log that makes groupgate's group state durable.

Every record the sans-I/O layers emit (a key and a value, or a tombstone: value None, the same
key/value bytes Kafka writes to __consumer_offsets) is appended here and made durable before any
response that depends on it is released. On start the gateway replays the log to rebuild group
state. The log is compacted like a compacted Kafka topic: only the latest value of each key
survives, and tombstoned keys vanish.

Embedded backend: one directory of append-only segment files. Entry layout (big-endian):

    u32 body_length | u32 crc32(body) | body
    body = i32 key_length | key | i32 value_length (-1 = tombstone) | value

A torn or corrupt tail (a crash mid-write) is detected by length/checksum and truncated on open;
corruption before the tail is an error, never silently skipped.

Durability policy (``fsync``): ``always`` (every ``sync()`` fsyncs; group commit: one fsync covers all
entries appended before it), ``interval`` (fsync at most every ``fsync_interval_ms``; a crash of the
machine, not just the process, may lose the last interval) or ``never`` (leave it to the OS; survives a
process crash, not a power loss).
"""

from __future__ import annotations

import asyncio
import os
import struct
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

FsyncPolicy = Literal["always", "interval", "never"]

_HEAD = struct.Struct(">II")
_LEN = struct.Struct(">i")
_SEGMENT_SUFFIX = ".log"


@dataclass(frozen=True, slots=True)
class Record:
    key: bytes
    value: bytes | None  # None is a tombstone


class StateLogCorrupt(Exception):
    """A segment is damaged somewhere other than its tail: refuse to guess."""


class StateLog(Protocol):
    """What the gateway needs from a state log backend (file today, a Kafka topic later)."""

    def replay(self) -> Iterator[Record]: ...

    def append(self, records: Iterable[Record]) -> None: ...

    async def sync(self) -> None: ...

    def close(self) -> None: ...


def encode_entry(record: Record) -> bytes:
    key = record.key
    value = record.value
    if value is None:
        body = _LEN.pack(len(key)) + key + _LEN.pack(-1)
    else:
        body = _LEN.pack(len(key)) + key + _LEN.pack(len(value)) + value
    return _HEAD.pack(len(body), zlib.crc32(body)) + body


def _decode_body(body: bytes) -> Record:
    (klen,) = _LEN.unpack_from(body, 0)
    key = body[4 : 4 + klen]
    (vlen,) = _LEN.unpack_from(body, 4 + klen)
    value = None if vlen < 0 else body[8 + klen : 8 + klen + vlen]
    if len(key) != klen or (value is not None and len(value) != vlen):
        raise ValueError("entry shorter than its lengths")
    return Record(bytes(key), None if value is None else bytes(value))


def read_segment(path: Path) -> tuple[list[Record], int]:
    """Decode a segment; return its records and the byte length of its valid prefix."""
    data = path.read_bytes()
    records: list[Record] = []
    pos = 0
    size = len(data)
    while pos < size:
        if pos + _HEAD.size > size:
            break  # torn header at the tail
        length, crc = _HEAD.unpack_from(data, pos)
        end = pos + _HEAD.size + length
        if end > size:
            break  # torn body at the tail
        body = data[pos + _HEAD.size : end]
        if zlib.crc32(body) != crc:
            if end == size:
                break  # a torn final write can leave a full-length but garbled entry
            raise StateLogCorrupt(f"{path}: checksum mismatch at byte {pos} (not at the tail)")
        try:
            records.append(_decode_body(body))
        except (ValueError, struct.error) as exc:
            raise StateLogCorrupt(f"{path}: malformed entry at byte {pos}: {exc}") from exc
        pos = end
    return records, pos


class FileStateLog:
    """Append-only segment files in one directory, compacted when the dead share grows."""

    def __init__(
        self,
        directory: Path | str,
        *,
        fsync: FsyncPolicy = "always",
        fsync_interval_ms: int = 100,
        compact_min_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.fsync_policy: FsyncPolicy = fsync
        self.fsync_interval_ms = fsync_interval_ms
        self.compact_min_bytes = compact_min_bytes
        self._live: dict[bytes, bytes] = {}
        self._live_bytes = 0
        self._file_bytes = 0
        self._appended = 0  # entries appended (monotonic)
        self._synced = 0  # entries known durable
        self._last_fsync = 0.0
        self._sync_lock = asyncio.Lock()
        self._truncated_tail = 0
        # Since open, for /metrics (gateway/metrics.py).
        self.bytes_appended = 0
        self.fsyncs = 0
        self.compactions = 0
        self._load()
        self._fh = open(self._active, "ab", buffering=0)  # noqa: SIM115 - lives as long as the log

    # -- opening and replay -------------------------------------------------------------------
    def _segments(self) -> list[Path]:
        return sorted(self.dir.glob(f"*{_SEGMENT_SUFFIX}"))

    def _load(self) -> None:
        for tmp in self.dir.glob("*.compacting"):
            tmp.unlink()  # an interrupted compaction: its source segments are still intact
        segments = self._segments()
        if not segments:
            segments = [self.dir / f"{0:020d}{_SEGMENT_SUFFIX}"]
            segments[0].touch()
            _fsync_dir(self.dir)
        for i, seg in enumerate(segments):
            records, valid = read_segment(seg)
            actual = seg.stat().st_size
            if valid < actual:
                if i != len(segments) - 1:
                    raise StateLogCorrupt(f"{seg}: damaged entry in a sealed segment at byte {valid}")
                with open(seg, "r+b") as fh:  # drop the torn tail of the active segment
                    fh.truncate(valid)
                    os.fsync(fh.fileno())
                self._truncated_tail = actual - valid
            for rec in records:
                self._apply(rec)
            self._file_bytes += valid
        self._active = segments[-1]
        self._synced = self._appended = 0

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
    def append(self, records: Iterable[Record]) -> None:
        buf = bytearray()
        for rec in records:
            buf += encode_entry(rec)
            self._apply(rec)
            self._appended += 1
        if buf:
            self._fh.write(buf)
            self._file_bytes += len(buf)
            self.bytes_appended += len(buf)

    async def sync(self) -> None:
        """Return once every entry appended so far is durable under the configured policy."""
        if self.fsync_policy == "never" or self._synced >= self._appended:
            return
        if self.fsync_policy == "interval":
            now = time.monotonic()
            if (now - self._last_fsync) * 1000.0 < self.fsync_interval_ms:
                return
        async with self._sync_lock:
            target = self._appended
            if self._synced >= target:
                return  # a concurrent sync already covered us (group commit)
            await asyncio.get_running_loop().run_in_executor(None, os.fsync, self._fh.fileno())
            self.fsyncs += 1
            self._synced = max(self._synced, target)
            self._last_fsync = time.monotonic()
        self._maybe_compact()

    def sync_blocking(self) -> None:
        if self._synced < self._appended:
            os.fsync(self._fh.fileno())
            self.fsyncs += 1
            self._synced = self._appended

    # -- compaction -----------------------------------------------------------------------------
    def _maybe_compact(self) -> None:
        dead = self._file_bytes - self._live_bytes
        if self._file_bytes >= self.compact_min_bytes and dead * 2 > self._file_bytes:
            self.compact()

    def compact(self) -> None:
        """Rewrite the live records into a new segment and drop the old ones (crash-safe)."""
        self.sync_blocking()
        old = self._segments()
        number = int(old[-1].stem) + 1 if old else 0
        final = self.dir / f"{number:020d}{_SEGMENT_SUFFIX}"
        tmp = final.with_suffix(".compacting")
        size = 0
        with open(tmp, "wb") as fh:
            for key, value in self._live.items():
                entry = encode_entry(Record(key, value))
                fh.write(entry)
                size += len(entry)
            fh.flush()
            os.fsync(fh.fileno())
        self._fh.close()
        os.replace(tmp, final)
        _fsync_dir(self.dir)
        for seg in old:
            seg.unlink()
        _fsync_dir(self.dir)
        self._active = final
        self._file_bytes = size
        self.compactions += 1
        self._fh = open(final, "ab", buffering=0)  # noqa: SIM115

    def close(self) -> None:
        if not self._fh.closed:
            self.sync_blocking()
            self._fh.close()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
