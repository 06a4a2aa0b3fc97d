"""Reading a damaged group state log, and rebuilding it: ``groupgate state verify`` and ``state repair``.

A state directory holds one log per shard (``shard-NN/``, gateway/state/file_store.py); both commands walk every
shard's log (``log_dirs``). A directory of the older single-log layout is one log.

The gateway itself never drops anything but a torn tail (gateway/state/log.py). Everything else that is
damaged is for an operator to look at (``verify``, read-only) and to drop on purpose (``repair``), which
says exactly which ranges it dropped and keeps the damaged segments beside the new one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.state.segments import (
    DAMAGED_SUFFIX,
    Damage,
    LogLayout,
    Record,
    StateLogCorrupt,
    _fsync_dir,
    _numbered_segments,
    _segment_name,
    encode_entry,
    plan_segments,
    scan_segment,
    write_manifest,
)


def log_dirs(state_dir: Path | str) -> list[Path]:
    """The log directories of a state directory: its shards', or itself when it holds a single log."""
    from gateway.state.file_store import STORE_FILE, shard_dirs

    d = Path(state_dir)
    if not d.is_dir():
        raise FileNotFoundError(f"{d} is not a directory")
    shards = shard_dirs(d)
    if shards or (d / STORE_FILE).exists():
        return shards
    return [d]


@dataclass(slots=True)
class SegmentReport:
    path: Path
    size: int
    entries: int
    kept_bytes: int


@dataclass(slots=True)
class VerifyReport:
    directory: Path
    manifest: tuple[int, int] | None
    segments: list[SegmentReport]
    damage: list[Damage]
    live_keys: int
    records: list[Record] = field(default_factory=list, repr=False)  # the live records (latest per key)
    entries: list[Record] = field(default_factory=list, repr=False)  # every readable entry, in log order

    @property
    def loadable(self) -> bool:
        """Whether the gateway would start on it (a torn tail it drops itself)."""
        return all(d.kind == "torn tail" for d in self.damage)

    def as_dict(self) -> dict[str, Any]:
        return {
            "state_dir": str(self.directory),
            "manifest": None if self.manifest is None else {"first_segment": self.manifest[0], "last_segment": self.manifest[1]},
            "segments": [
                {"file": str(s.path), "bytes": s.size, "entries": s.entries, "readable_bytes": s.kept_bytes}
                for s in self.segments
            ],
            "damage": [
                {"file": str(d.path), "kind": d.kind, "offset": d.offset, "end": d.end, "bytes": d.bytes,
                 "entries": d.entries, "reason": d.reason}
                for d in self.damage
            ],
            "live_keys": self.live_keys,
            "loadable": self.loadable,
        }


def verify(directory: Path | str) -> VerifyReport:
    """Read the whole log without changing anything: every segment, every damaged range."""
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"{d} is not a directory")
    try:
        layout = plan_segments(d)
        manifest = layout.manifest
        damage = list(layout.missing)
    except StateLogCorrupt as exc:
        assert exc.path is not None
        manifest = None
        damage = [Damage(exc.path, "corrupt", 0, exc.path.stat().st_size, str(exc))]
        present = _numbered_segments(d)
        layout = LogLayout(present, [], [], None)
    segments: list[SegmentReport] = []
    live: dict[bytes, bytes | None] = {}
    records: list[Record] = []
    for i, (_, seg) in enumerate(layout.segments):
        scan = scan_segment(seg, seg.read_bytes(), sealed=i != len(layout.segments) - 1, keep_going=True)
        segments.append(SegmentReport(seg, scan.size, len(scan.records), scan.kept_bytes))
        damage.extend(scan.damage)
        records.extend(scan.records)
        for rec in scan.records:
            live.pop(rec.key, None)
            live[rec.key] = rec.value
    kept = [Record(k, v) for k, v in live.items() if v is not None]
    return VerifyReport(d, manifest, segments, damage, len(kept), kept, records)


@dataclass(slots=True)
class RepairReport:
    before: VerifyReport
    new_segment: Path | None
    kept_entries: int
    live_keys: int
    set_aside: list[Path]


def repair(directory: Path | str) -> RepairReport:
    """Rebuild the log from every entry that can be read: one new segment holding the latest value of
    each key, a new manifest; damaged segments are kept beside it as ``NAME.log.damaged``.

    What is dropped is exactly ``before.damage``: the unreadable ranges and missing segments."""
    d = Path(directory)
    before = verify(d)
    if not before.damage:
        return RepairReport(before, None, sum(s.entries for s in before.segments), before.live_keys, [])
    present = _numbered_segments(d)
    number = max([n for n, _ in present], default=-1) + 1
    if before.manifest is not None:
        number = max(number, before.manifest[1] + 1)
    final = d / _segment_name(number)
    tmp = final.with_suffix(".compacting")
    with open(tmp, "wb") as fh:
        for rec in before.records:
            fh.write(encode_entry(rec))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    _fsync_dir(d)
    write_manifest(d, number, number)
    damaged = {x.path for x in before.damage if x.kind != "missing"}
    set_aside = []
    for _, seg in present:
        if seg in damaged:
            aside = seg.with_name(seg.name + DAMAGED_SUFFIX)
            os.replace(seg, aside)
            set_aside.append(aside)
        else:
            seg.unlink()
    _fsync_dir(d)
    return RepairReport(before, final, sum(s.entries for s in before.segments), before.live_keys, set_aside)
