"""Operating on group state: ``groupgate state inspect|verify|export`` (either store) and ``state import``.

Each of inspect, verify and export reads one store, shard by shard, in the same format for both: the state
topic of a cluster (``--upstream``/``--config``, ``--topic``) or a file state directory (``--state-dir``).
Offsets are Kafka offsets in the topic and entry numbers in a shard's file log (gateway/state/check.py).

- ``inspect``: one shard's records as JSON lines, decoded (shard, offset, record type, group, member, value).
- ``verify``: every shard (or ``--shard N``) checked as the gateway's load would read it; a line per shard
  (records, groups, problems) and a non-zero exit status when anything is wrong (gateway/state/check.py).
- ``export``: the records as JSON lines with base64 key/value bytes, for backups and other tools; a
  tombstone has ``"value": null``.
- ``import``: copies the live records of a file state directory (``--state-dir``) into the topic, each into
  its group's shard. Idempotent: a key whose latest value in the topic already equals the file's is not
  written again, so running it twice adds nothing and leaves the same compacted content.

Reading never fences: it uses a read_committed consumer, not the shard's transactional id, so a running
gateway keeps its shards (a file state directory is only read). Importing does fence (it writes as the
shard's owner): stop the gateway first.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import enum
import json
import sys
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka.errors import KafkaError

from coordinator.connect.codec import KEY_VERSIONS as _CONNECT_KEY_VERSIONS
from gateway.ops.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_STATE_CORRUPT, EXIT_USAGE
from gateway.state.check import (
    Problem,
    ShardRead,
    ShardReport,
    file_shard_count,
    file_shards,
    topic_problems,
    topic_shard,
    verify_shard,
)
from gateway.state.log import Record, StateLogWriteFailed
from gateway.state.store import DEFAULT_SHARDS, OWNER_MARKER_KEY, shard_of
from gateway.state.topic import KafkaStateStore, StateTopicError, read_partition
from translate.group_records import GROUP_METADATA_KEY_VERSION as _CLASSIC_KEY_VERSION


def group_of_key(key: bytes) -> str:
    """The group id a state record's key belongs to (classic GroupMetadata or a consumer-group record)."""
    from coordinator.records.codec import group_of_key as of_key

    return of_key(key)


def _jsonable(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _jsonable(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, enum.Enum):
        return v.name
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [_jsonable(x) for x in v]
    return v


def describe_record(record: Record) -> dict[str, Any]:
    """A record as a JSON-able dict: its kind, group, sub-key and decoded value (None for a tombstone)."""
    out: dict[str, Any] = {}
    try:
        if record.key == OWNER_MARKER_KEY:  # written after a stall to prove the shard's ownership
            out.update(type="SHARD_OWNER", owner=None if record.value is None else record.value.decode(errors="replace"))
        elif len(record.key) >= 2 and int.from_bytes(record.key[:2], "big", signed=True) == _CLASSIC_KEY_VERSION:
            from translate.group_records import decode_record

            classic = decode_record(record.key, record.value)
            out.update(type="CLASSIC_GROUP_METADATA", group_id=classic.group_id, value=_jsonable(classic.value))
        elif len(record.key) >= 2 and int.from_bytes(record.key[:2], "big", signed=True) in _CONNECT_KEY_VERSIONS:
            from coordinator.connect.codec import decode as decode_connect

            conn = decode_connect(record.key, record.value)
            out.update(type=f"CONNECT_{conn.type.name}", group_id=conn.group_id)
            if conn.sub_key is not None:
                out["sub_key"] = conn.sub_key
            out["value"] = _jsonable(conn.value)
        else:
            from coordinator.records.codec import decode

            rec = decode(record.key, record.value)
            out.update(type=rec.type.name, group_id=rec.group_id)
            if rec.sub_key is not None:
                out["sub_key"] = rec.sub_key
            out["value"] = _jsonable(rec.value)
    except Exception as exc:  # noqa: BLE001 - an undecodable record is shown, not fatal to the listing
        out.update(type="UNDECODABLE", error=f"{type(exc).__name__}: {exc}")
    out["tombstone"] = record.value is None
    return out


def export_line(shard: int, offset: int, record: Record) -> dict[str, Any]:
    described = describe_record(Record(record.key, None))  # the key's kind and group only
    return {
        "shard": shard,
        "offset": offset,
        "type": described["type"],
        "group_id": described.get("group_id"),
        "key": base64.b64encode(record.key).decode(),
        "value": None if record.value is None else base64.b64encode(record.value).decode(),
    }


async def read_shards(store: KafkaStateStore, shards: Iterable[int]) -> dict[int, list[Record]]:
    return {s: await read_partition(store, s) for s in shards}


def latest(records: Iterable[Record]) -> dict[bytes, bytes | None]:
    """Each key's latest value (None: tombstoned): what compaction converges to."""
    out: dict[bytes, bytes | None] = {}
    for r in records:
        out[r.key] = r.value
    return out


@dataclass(slots=True)
class ImportReport:
    live_keys: int = 0  # live records in the state directory
    written: int = 0  # records produced to the topic
    unchanged: int = 0  # already in the topic with the same value
    shards: dict[int, int] = dataclasses.field(default_factory=dict)  # shard -> records written


async def import_records(store: KafkaStateStore, records: Iterable[Record]) -> ImportReport:
    """Write ``records`` (live records: no tombstones) into their groups' shards, skipping every key whose
    latest value in the topic is already the same. Opens (so fences) each shard it writes to."""
    report = ImportReport()
    by_shard: dict[int, list[Record]] = {}
    for r in records:
        report.live_keys += 1
        by_shard.setdefault(shard_of(group_of_key(r.key), store.shards), []).append(r)
    for shard, wanted in sorted(by_shard.items()):
        log = await store.open_shard(shard)
        try:
            present = latest(log.replay())
            todo = [r for r in wanted if r.key not in present or present[r.key] != r.value]
            report.unchanged += len(wanted) - len(todo)
            if todo:
                log.append(todo)
                await log.sync()
                report.written += len(todo)
                report.shards[shard] = len(todo)
        finally:
            log.close()
    return report


def file_state_records(state_dir: Path | str) -> list[Record]:
    """The live records of a file state directory (every shard of a sharded one, or a single log of the
    older layout); refuses one that `serve` would refuse too."""
    from gateway.state.repair import log_dirs, verify

    records: list[Record] = []
    for d in log_dirs(state_dir):
        report = verify(d)
        if not report.loadable:
            raise ValueError(
                f"{d}: the state log is damaged ({len(report.damage)} range(s)); run `groupgate state verify` "
                "and `groupgate state repair` first"
            )
        records.extend(report.records)
    return records


# --- the commands ---------------------------------------------------------------------------------------


def add_commands(ssub: Any) -> None:
    """``state inspect|verify|export|import`` on the subparsers of ``groupgate state``."""

    def topic(p: argparse.ArgumentParser) -> None:
        p.add_argument("--config", help="TOML file: upstream, upstream TLS and the [coordinator] state_topic settings")
        p.add_argument("--upstream", help="bootstrap HOST:PORT[,HOST:PORT...] of the cluster holding the topic")
        p.add_argument("--topic", help="the state topic (default: coordinator.state_topic, __groupgate_groups)")

    def either(p: argparse.ArgumentParser) -> None:
        topic(p)
        p.add_argument("--state-dir", help="read this file state directory instead of the state topic")

    inspect = ssub.add_parser("inspect", help="one shard of the group state, decoded, as JSON lines (read-only)")
    either(inspect)
    which = inspect.add_mutually_exclusive_group(required=True)
    which.add_argument("--shard", type=int, help="the shard to read")
    which.add_argument("--group", help="the shard of this group, and only this group's records")
    inspect.set_defaults(func=cmd_inspect)

    verify = ssub.add_parser(
        "verify", help="check every record as the gateway's load reads it; per shard: records, groups, problems "
        "(read-only; exit status 3 on a problem)"
    )
    either(verify)
    verify.add_argument("--shard", type=int, help="only this shard (default: all)")
    verify.add_argument(
        "--shards", type=int, help="the shard count the gateway is configured with, to check the store against "
        "(topic default: coordinator.state_topic_num_partitions)"
    )
    verify.add_argument("--json", action="store_true", help="one JSON line per shard")
    verify.set_defaults(func=cmd_verify)

    export = ssub.add_parser("export", help="the group state's records as JSON lines of base64 key/value (read-only)")
    either(export)
    export.add_argument("--shard", type=int, help="only this shard (default: all)")
    export.set_defaults(func=cmd_export)

    imp = ssub.add_parser(
        "import", help="copy a --state-dir's group state into the state topic, idempotently (stop the gateway first)"
    )
    topic(imp)
    imp.add_argument("--state-dir", required=True, help="the file state directory to copy from")
    imp.add_argument(
        "--shards", type=int, help=f"shard count when the topic is created (default: {DEFAULT_SHARDS}; "
        "an existing topic's own count otherwise)"
    )
    imp.set_defaults(func=cmd_import)


def _config(args: argparse.Namespace) -> Any:
    from gateway.config.settings import load_config

    config = load_config(args.config, flags={"upstream": args.upstream})
    if args.topic:
        config.coordinator.state_topic = args.topic  # validated on assignment (a legal topic name)
    return config


def _store(args: argparse.Namespace, shards: int = DEFAULT_SHARDS) -> KafkaStateStore:
    return KafkaStateStore.from_config(_config(args), shards=shards)


async def _existing(store: KafkaStateStore) -> KafkaStateStore:
    partitions = await store.partitions()
    if partitions is None:
        raise StateTopicError(f"there is no state topic {store.topic} on {store.bootstrap}")
    store.shards = partitions
    return store


def _run(coro: Any) -> int:
    import structlog

    from gateway.logging import setup_logging

    configured = structlog.is_configured()
    if not configured:
        setup_logging(level="warning")  # to stderr: stdout carries the JSON lines
    try:
        return asyncio.run(coro)  # type: ignore[no-any-return]
    except (StateTopicError, StateLogWriteFailed, ValueError, OSError, KafkaError) as e:
        print(f"groupgate: {e}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if not configured:
            structlog.reset_defaults()  # the stream it bound may not outlive the command (embedded use, tests)


async def _read(args: argparse.Namespace, shard: int | None) -> tuple[int, list[ShardRead]]:
    """(shard count, the shards read) of the store the arguments name."""
    if args.state_dir is not None:
        if args.upstream or args.topic:
            raise ValueError("--state-dir reads a file state directory: leave out --upstream and --topic")
        return file_shards(args.state_dir, shard)
    store = await _existing(_store(args))
    if shard is not None and not 0 <= shard < store.shards:
        raise ValueError(f"shard {shard} is outside 0..{store.shards - 1}")
    shards = range(store.shards) if shard is None else [shard]
    return store.shards, [await topic_shard(store, s) for s in shards]


def cmd_inspect(args: argparse.Namespace) -> int:
    async def run() -> int:
        shard = args.shard
        if args.group is not None:
            if args.state_dir is not None:
                count = file_shard_count(Path(args.state_dir))[0]
            else:
                count = (await _existing(_store(args))).shards
            shard = shard_of(args.group, count)
        _, (read,) = await _read(args, shard)
        for offset, record in read.entries:
            line = describe_record(record)
            if args.group is not None and line.get("group_id") != args.group:
                continue
            print(json.dumps({"shard": shard, "offset": offset, **line}, sort_keys=True))
        for p in read.problems:  # what could not be read as a record (keyless, damaged ranges)
            print(f"shard {shard}: {p.describe()}", file=sys.stderr)
        return EXIT_OK

    return _run(run())


def cmd_export(args: argparse.Namespace) -> int:
    async def run() -> int:
        _, reads = await _read(args, args.shard)
        for read in reads:
            for offset, record in read.entries:
                print(json.dumps(export_line(read.shard, offset, record)))
            for p in read.problems:
                print(f"shard {read.shard}: {p.describe()}", file=sys.stderr)
        return EXIT_OK

    return _run(run())


def cmd_verify(args: argparse.Namespace) -> int:
    from translate.group_service import GroupService

    if args.state_dir is not None and not Path(args.state_dir).is_dir():
        print(f"groupgate: {args.state_dir} is not a directory", file=sys.stderr)
        return EXIT_USAGE

    async def run() -> int:
        config = _config(args) if args.state_dir is None or args.config else None
        store_problems: list[Problem] = []
        count, reads = await _read(args, args.shard)
        single_log = args.state_dir is not None and file_shard_count(Path(args.state_dir))[1]  # split on start
        if args.state_dir is not None and args.shards is not None and args.shards != count and not single_log:
            store_problems.append(Problem(None, f"the state directory holds {count} shard(s); the gateway is "
                                                f"configured for {args.shards}: it would refuse to start"))
        if config is not None and args.state_dir is None:
            expected = args.shards or config.coordinator.state_topic_num_partitions
            store = KafkaStateStore.from_config(config, shards=count)
            store_problems = await topic_problems(store, expected)

        def new_service() -> GroupService:
            return GroupService() if config is None else GroupService(*config.coordinator.service_configs())

        reports = [verify_shard(read, count, new_service) for read in reads]
        _print_verify(args, reports, store_problems)
        bad = store_problems or any(r.problems for r in reports)
        return EXIT_STATE_CORRUPT if bad else EXIT_OK

    return _run(run())


def _print_verify(args: argparse.Namespace, reports: list[ShardReport], store_problems: list[Problem]) -> None:
    where = args.state_dir if args.state_dir is not None else "the state topic"
    if args.json:
        if store_problems:
            print(json.dumps({"store": str(where), "problems": [p.as_dict() for p in store_problems]}))
        for r in reports:
            print(json.dumps(r.as_dict(), sort_keys=True))
        return
    for p in store_problems:
        print(f"{where}: {p.describe()}")
    for r in reports:
        n = len(r.problems)
        said = "no problems" if not n else f"{n} problem{'s' if n > 1 else ''}"
        print(f"shard {r.shard}: {r.records} records, {r.groups} group{'' if r.groups == 1 else 's'}, {said}")
        if r.detail is not None:
            _print_file_log(r.detail, args.state_dir)
        for p in r.problems:
            print(f"  problem: {p.describe()}")
        for note in r.notes:
            print(f"  note: {note} (a write that never completed: the gateway drops it on start)")


def _print_file_log(detail: dict[str, Any], state_dir: str) -> None:
    manifest = detail["manifest"]
    span = "none" if manifest is None else f"segments {manifest['first_segment']}..{manifest['last_segment']}"
    print(f"  state log {detail['state_dir']} (manifest: {span})")
    for s in detail["segments"]:
        print(f"  segment {Path(s['file']).name}: {s['bytes']} bytes, {s['entries']} readable entries")
    print(f"  live keys: {detail['live_keys']}")
    if not detail["loadable"]:
        print(f"  NOT loadable: `groupgate serve` refuses to start; `groupgate state repair --state-dir {state_dir}`"
              " drops the damaged ranges")


def cmd_import(args: argparse.Namespace) -> int:
    async def run() -> int:
        records = file_state_records(args.state_dir)
        store = _store(args, shards=args.shards or DEFAULT_SHARDS)
        partitions = await store.partitions()
        if partitions is not None:
            if args.shards is not None and args.shards != partitions:
                raise ValueError(f"--shards {args.shards}, but {store.topic} has {partitions} partitions")
            store.shards = partitions
        await store.open()
        try:
            report = await import_records(store, records)
        finally:
            await store.close()
        print(
            f"imported {args.state_dir} into {store.topic}: {report.live_keys} live records, {report.written} "
            f"written, {report.unchanged} already there"
            + "".join(f"\n  shard {s}: {n} written" for s, n in sorted(report.shards.items()))
        )
        return EXIT_OK

    return _run(run())
