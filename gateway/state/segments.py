"""The file state log's on-disk format (gateway/state/log.py): entry framing, reading a segment and
telling its damage apart, and the directory of numbered segments with its manifest.

Entry layout (big-endian):

    u32 body_length | u32 crc32(body) | body
    body = i32 key_length | key | i32 value_length (-1 = tombstone) | value

Nothing here keeps a log open or appends: ``FileStateLog`` does, and ``groupgate state verify|repair``
(gateway/state/repair.py) reads with the same scanner.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

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

def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
