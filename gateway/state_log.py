"""The write-ahead state log that makes groupgate's group state durable.

Every record the sans-I/O layers emit (a key and a value, or a tombstone: value None, the same
key/value bytes Kafka writes to __consumer_offsets) is appended here and made durable before any
response that depends on it is released. On start the gateway replays the log to rebuild group
state. The log is compacted like a compacted Kafka topic: only the latest value of each key
survives, and tombstoned keys vanish.

Embedded backend: one directory of append-only segment files named by sequence number
(``00000000000000000007.log``) and a manifest (``manifest.json``: the range of segments that must be
present), so that a vanished or missing segment is an error rather than a silent fresh start. Entry
layout (big-endian):

    u32 body_length | u32 crc32(body) | body
    body = i32 key_length | key | i32 value_length (-1 = tombstone) | value

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
import json
import os
import struct
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from .logging import get_logger

log = get_logger("gateway.state_log")

FsyncPolicy = Literal["always", "interval", "never"]

_HEAD = struct.Struct(">II")
_LEN = struct.Struct(">i")
_MIN_BODY = 2 * _LEN.size  # an empty key and a tombstone
_SEGMENT_SUFFIX = ".log"
MANIFEST = "manifest.json"
_MANIFEST_FORMAT = 1
DAMAGED_SUFFIX = ".damaged"


@dataclass(frozen=True, slots=True)
class Record:
    key: bytes
    value: bytes | None  # None is a tombstone


class StateLogCorrupt(Exception):
    """The log is damaged somewhere a crash cannot explain: refuse to guess.

    ``path`` and ``offset`` locate the damage (offset None: the file as a whole, e.g. a missing segment).
    """

    def __init__(self, message: str, path: Path | None = None, offset: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset


class StateLogWriteFailed(Exception):
    """An append or fsync failed (e.g. ENOSPC, EIO). The log was cut back to its acknowledged size and
    takes no more writes: re-open the directory to carry on."""


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


def _decode_body(body: bytes | memoryview) -> Record:
    (klen,) = _LEN.unpack_from(body, 0)
    if klen < 0:
        raise ValueError("negative key length")
    key = body[4 : 4 + klen]
    (vlen,) = _LEN.unpack_from(body, 4 + klen)
    value = None if vlen < 0 else body[8 + klen : 8 + klen + vlen]
    if len(key) != klen or (value is not None and len(value) != vlen):
        raise ValueError("entry shorter than its lengths")
    if 8 + klen + (0 if value is None else vlen) != len(body):
        raise ValueError("entry longer than its lengths")
    return Record(bytes(key), None if value is None else bytes(value))


def _entry_at(data: bytes | memoryview, pos: int) -> tuple[Record | None, int, str]:
    """The entry at ``pos``: (record, end, "") when valid, else (None, end or -1, why not)."""
    size = len(data)
    if pos + _HEAD.size > size:
        return None, -1, f"header cut short ({size - pos} of {_HEAD.size} bytes)"
    length, crc = _HEAD.unpack_from(data, pos)
    end = pos + _HEAD.size + length
    if end > size:
        return None, -1, f"entry length {length} runs past the end of the file ({size} bytes)"
    if length < _MIN_BODY:
        return None, end, f"entry length {length} is shorter than any entry"
    body = data[pos + _HEAD.size : end]
    if zlib.crc32(body) != crc:
        return None, end, "checksum mismatch"
    try:
        return _decode_body(body), end, ""
    except (ValueError, struct.error) as exc:
        return None, end, f"malformed entry: {exc}"


def _next_valid(data: bytes | memoryview, start: int) -> int | None:
    """The first offset at or after ``start`` where a whole, checksummed entry starts (None: nowhere)."""
    size = len(data)
    unpack = _HEAD.unpack_from
    for q in range(start, size - _HEAD.size - _MIN_BODY + 1):
        length, crc = unpack(data, q)
        if length < _MIN_BODY or q + _HEAD.size + length > size:
            continue  # cheap rejections first: most offsets fail here
        body = data[q + _HEAD.size : q + _HEAD.size + length]
        if zlib.crc32(body) != crc:
            continue
        try:
            _decode_body(body)
        except (ValueError, struct.error):
            continue
        return q
    return None


@dataclass(slots=True)
class Damage:
    """A byte range the log cannot read. kind: ``torn tail`` (a crash mid-append: dropped on open),
    ``corrupt`` (before valid entries: refused), ``missing`` (a whole segment)."""

    path: Path
    kind: Literal["torn tail", "corrupt", "missing"]
    offset: int
    end: int
    reason: str
    # Entries lost in the range: 1 when the range is exactly one entry whose checksum still matches
    # (only its length field is damaged) or a torn final entry; None when it cannot be told.
    entries: int | None = None

    @property
    def bytes(self) -> int:
        return self.end - self.offset

    def describe(self) -> str:
        if self.kind == "missing":
            return f"{self.path}: segment missing ({self.reason})"
        n = "unknown number of entries" if self.entries is None else f"{self.entries} entr{'y' if self.entries == 1 else 'ies'}"
        return f"{self.path}: {self.kind} at bytes {self.offset}..{self.end} ({self.bytes} bytes, {n}): {self.reason}"


@dataclass(slots=True)
class SegmentScan:
    path: Path
    size: int
    records: list[Record] = field(default_factory=list)
    kept_bytes: int = 0
    valid_prefix: int = 0  # end of the last valid entry before any damage
    damage: list[Damage] = field(default_factory=list)


def scan_segment(path: Path, data: bytes, *, sealed: bool, keep_going: bool) -> SegmentScan:
    """Read a segment. Damage with a valid entry after it is ``corrupt``; at the end of the active
    segment, with nothing valid after it, a ``torn tail``. Without ``keep_going`` the scan stops at
    the first damage; with it, the scan resumes at the next valid entry (for verify and repair)."""
    out = SegmentScan(path, len(data))
    view = memoryview(data)
    pos = 0
    size = len(data)
    clean = True
    while pos < size:
        rec, end, why = _entry_at(view, pos)
        if rec is not None:
            out.records.append(rec)
            out.kept_bytes += end - pos
            pos = end
            if clean:
                out.valid_prefix = pos
            continue
        nxt = _next_valid(view, pos + 1)
        clean = False
        if nxt is None:
            kind: Literal["torn tail", "corrupt"] = "corrupt" if sealed else "torn tail"
            reason = why if not sealed else f"{why}; a sealed segment cannot have a torn tail"
            out.damage.append(Damage(path, kind, pos, size, reason, 1 if kind == "torn tail" else None))
            break
        entries = None
        if end == nxt:
            entries = 1  # its length leads exactly to the next valid entry: only its contents are damaged
        elif pos + _HEAD.size <= nxt:
            # One entry whose length field alone is damaged: its checksum covers the bytes up to the next entry.
            (crc,) = struct.unpack_from(">I", view, pos + 4)
            if zlib.crc32(view[pos + _HEAD.size : nxt]) == crc:
                entries = 1
        out.damage.append(Damage(path, "corrupt", pos, nxt, f"{why}; a valid entry follows at byte {nxt}", entries))
        if not keep_going:
            break
        pos = nxt
    return out


def read_segment(path: Path) -> tuple[list[Record], int]:
    """Decode an active segment; return its records and the byte length of its valid prefix.

    Raises StateLogCorrupt for damage that is not a torn tail."""
    scan = scan_segment(path, path.read_bytes(), sealed=False, keep_going=False)
    for d in scan.damage:
        if d.kind == "corrupt":
            raise _corrupt(d)
    return scan.records, scan.valid_prefix


def _corrupt(d: Damage) -> StateLogCorrupt:
    return StateLogCorrupt(
        f"state log {d.path} is damaged at byte {d.offset}: {d.reason}. This is not a torn final write; "
        f"see `groupgate state verify` and `groupgate state repair` (docs/operations.md)",
        d.path,
        d.offset,
    )


# -- the directory: segments and manifest --------------------------------------------------------


def _segment_name(number: int) -> str:
    return f"{number:020d}{_SEGMENT_SUFFIX}"


def _numbered_segments(directory: Path) -> list[tuple[int, Path]]:
    out = []
    for p in directory.glob(f"*{_SEGMENT_SUFFIX}"):
        if p.stem.isdigit():
            out.append((int(p.stem), p))
    return sorted(out)


def read_manifest(directory: Path) -> tuple[int, int] | None:
    """(first, last) segment numbers the manifest requires, or None when there is no manifest."""
    path = directory / MANIFEST
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw)
        first, last = int(doc["first_segment"]), int(doc["last_segment"])
        if doc.get("format") != _MANIFEST_FORMAT or first > last or first < 0:
            raise ValueError("unexpected contents")
    except (ValueError, KeyError, TypeError) as exc:
        raise StateLogCorrupt(f"state log manifest {path} is unreadable: {exc}", path, None) from exc
    return first, last


def write_manifest(directory: Path, first: int, last: int) -> None:
    """Atomically replace the manifest (write, fsync, rename, fsync the directory)."""
    path = directory / MANIFEST
    tmp = directory / (MANIFEST + ".tmp")
    doc = {"format": _MANIFEST_FORMAT, "first_segment": first, "last_segment": last}
    try:
        with open(tmp, "wb") as fh:
            fh.write(json.dumps(doc).encode() + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(directory)


@dataclass(slots=True)
class LogLayout:
    """Which segments to read, in order, and which are leftovers of a finished compaction."""

    segments: list[tuple[int, Path]]
    leftovers: list[Path]
    missing: list[Damage]
    manifest: tuple[int, int] | None


def plan_segments(directory: Path) -> LogLayout:
    """Check the segment files against the manifest (never modifies anything).

    Every segment the manifest lists must be present. Segments below its first one are leftovers of a
    compaction that finished (their records are in a later segment). Segments above its last one are
    accepted only as its contiguous continuation: a compaction renames its complete segment into place
    before it updates the manifest."""
    manifest = read_manifest(directory)
    present = _numbered_segments(directory)
    numbers = {n for n, _ in present}
    missing: list[Damage] = []
    leftovers: list[Path] = []
    if manifest is None:
        use = present  # a new log, or one written before manifests existed
        expected = range(use[0][0], use[-1][0] + 1) if use else range(0)
    else:
        first, last = manifest
        leftovers = [p for n, p in present if n < first]
        use = [(n, p) for n, p in present if n >= first]
        top = max([last, *(n for n, _ in use)])
        expected = range(first, top + 1)
        if not use:
            missing.append(Damage(
                directory / _segment_name(first), "missing", 0, 0,
                f"the manifest lists segments {first}..{last} but none is present: the log has vanished",
            ))
            return LogLayout([], leftovers, missing, manifest)
    for n in expected:
        if n not in numbers:
            where = "listed in the manifest" if manifest is not None and n <= manifest[1] else "a gap in the sequence"
            missing.append(Damage(directory / _segment_name(n), "missing", 0, 0, where))
    return LogLayout(use, leftovers, missing, manifest)


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
        self.shard = shard  # the shard this directory holds (gateway/state_store.py ShardLog)
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


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
