"""Reading a state store shard by shard, for ``groupgate state inspect|verify|export``, the same way for
both stores: the per-shard file logs of a ``--state-dir`` and the partitions of the state topic.

A shard is read as a list of (offset, record) in log order. In the topic the offset is the Kafka offset
(read ``read_committed`` to the last stable offset, as a shard's owner reads it on load); in a state
directory it is the entry's position in the shard's log as it is now (0 is the oldest entry of the oldest
segment kept; compaction renumbers).

``verify_shard`` checks what loading the shard relies on: each key decodes to a record type the gateway
writes, each value decodes (a tombstone is a null value under a decodable key), each group record is in
its group's shard, owner markers (gateway/state/store.py) carry an owner, and replaying the records into a
fresh ``GroupService`` (the replay the runtime's load does) succeeds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.state.log import Record
from gateway.state.store import OWNER_MARKER_KEY, shard_of

if TYPE_CHECKING:
    from gateway.state.topic import KafkaStateStore
    from translate.group_service import GroupService


@dataclass(slots=True)
class Problem:
    """Something wrong in a shard: at ``offset`` (None: the shard or store as a whole)."""

    offset: int | None
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"offset": self.offset, "problem": self.message}

    def describe(self) -> str:
        return self.message if self.offset is None else f"offset {self.offset}: {self.message}"


@dataclass(slots=True)
class ShardRead:
    """One shard as read: its records with their offsets, and what reading found wrong (keyless topic
    records, damaged file ranges). ``detail``: the store's own report (a file log's segments and damage)."""

    shard: int
    entries: list[tuple[int, Record]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # not problems: e.g. a torn tail the gateway drops itself
    detail: dict[str, Any] | None = None


@dataclass(slots=True)
class ShardReport:
    shard: int
    records: int
    groups: int
    problems: list[Problem]
    notes: list[str]
    detail: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "shard": self.shard,
            "records": self.records,
            "groups": self.groups,
            "problems": [p.as_dict() for p in self.problems],
        }
        if self.notes:
            out["notes"] = list(self.notes)
        if self.detail is not None:
            out["log"] = self.detail
        return out


# --- reading ------------------------------------------------------------------------------------------


def file_shards(state_dir: Path | str, shard: int | None = None) -> tuple[int, list[ShardRead]]:
    """(shard count, the shards read) of a file state directory; a directory of the older single-log
    layout is one shard. Read-only."""
    from gateway.state.file_store import shard_dir
    from gateway.state.repair import verify

    d = Path(state_dir)
    count, single = file_shard_count(d)
    if shard is not None and not 0 <= shard < count:
        raise ValueError(f"shard {shard} is outside 0..{count - 1}")
    wanted = range(count) if shard is None else [shard]
    out: list[ShardRead] = []
    for n in wanted:
        path = d if single else shard_dir(d, n)
        read = ShardRead(n)
        if not path.is_dir():
            read.problems.append(Problem(None, f"{path}: the shard's directory is missing"))
            out.append(read)
            continue
        report = verify(path)
        read.entries = list(enumerate(report.entries))
        read.detail = report.as_dict()
        for dmg in report.damage:
            if dmg.kind == "torn tail":  # a write that never completed: dropped on start, never acknowledged
                read.notes.append(dmg.describe())
            else:
                read.problems.append(Problem(None, dmg.describe()))
        out.append(read)
    return count, out


def file_shard_count(state_dir: Path) -> tuple[int, bool]:
    """(shard count, whether it is a single log of the older layout) of a file state directory."""
    from gateway.state.file_store import recorded_shards
    from gateway.state.repair import log_dirs

    dirs = log_dirs(state_dir)  # raises FileNotFoundError for a missing directory
    if dirs == [state_dir]:
        return 1, True
    return recorded_shards(state_dir) or len(dirs), False


async def topic_shard(store: KafkaStateStore, shard: int) -> ShardRead:
    """One partition of the state topic, read_committed to its last stable offset."""
    from gateway.state.topic import read_partition_offsets

    read = ShardRead(shard)
    for offset, key, value in await read_partition_offsets(store, shard):
        if key is None:
            read.problems.append(Problem(offset, "a record without a key (the load skips it)"))
        else:
            read.entries.append((offset, Record(key, value)))
    return read


async def topic_problems(store: KafkaStateStore, expected_shards: int) -> list[Problem]:
    """The state topic's settings against what the gateway is configured with: partition count, cleanup
    policy, min.insync.replicas (never creates or changes the topic)."""
    from aiokafka.admin import AIOKafkaAdminClient

    from gateway.state.topic_admin import (
        StateTopicAdmin,
        default_min_insync_replicas,
        default_replication_factor,
    )

    admin = AIOKafkaAdminClient(client_id=f"{store.client_id}-admin", **store._client_kwargs())
    await admin.start()
    try:
        topic_admin = StateTopicAdmin(admin, store.topic, store.load_timeout_ms)
        described = await topic_admin.describe()
        if described is None:
            return [Problem(None, f"there is no state topic {store.topic} on {store.bootstrap}")]
        brokers = len((await admin.describe_cluster())["brokers"])
        configs = await topic_admin.configs()
    finally:
        await admin.close()
    problems: list[Problem] = []
    partitions = len(described["partitions"])
    if partitions != expected_shards:
        problems.append(Problem(None, f"topic {store.topic} has {partitions} partitions; the gateway is configured "
                                      f"for {expected_shards} shards (state_topic_num_partitions): it would refuse to start"))
    policy = configs.get("cleanup.policy") or ""
    if policy != "compact":
        problems.append(Problem(None, f"topic {store.topic} has cleanup.policy={policy!r}; it must be 'compact'"))
    rf = store.replication_factor or default_replication_factor(brokers)
    wanted = store.min_insync_replicas or default_min_insync_replicas(rf)
    actual = configs.get("min.insync.replicas")
    if actual is not None and int(actual) < wanted:
        problems.append(Problem(None, f"topic {store.topic} has min.insync.replicas={actual}; "
                                      f"{wanted} configured/expected"))
    return problems


# --- checking -----------------------------------------------------------------------------------------


def record_problem(record: Record, shard: int, shards: int) -> str | None:
    """Why ``record`` could not be loaded from ``shard`` of ``shards`` (None: it can)."""
    from coordinator.connect.codec import KEY_VERSIONS as CONNECT_KEY_VERSIONS
    from coordinator.connect.codec import decode as decode_connect
    from coordinator.records import RecordType
    from coordinator.records.codec import decode
    from translate.group_records import GROUP_METADATA_KEY_VERSION, decode_key, decode_record

    if record.key == OWNER_MARKER_KEY:
        if record.value is None:
            return "an owner marker with a null value (the runtime never writes one)"
        try:
            owner = record.value.decode()
        except UnicodeDecodeError:
            return "an owner marker whose value is not UTF-8 text"
        return None if owner else "an owner marker naming no owner"
    if len(record.key) < 2:
        return f"a key of {len(record.key)} byte(s): no record type"
    version = int.from_bytes(record.key[:2], "big", signed=True)
    try:
        if version == GROUP_METADATA_KEY_VERSION:
            group = decode_key(record.key)
            kind = "CLASSIC_GROUP_METADATA"
        elif version in {int(t) for t in RecordType}:
            decoded_key = decode(record.key, None)
            group, kind = decoded_key.group_id, decoded_key.type.name
        elif version in CONNECT_KEY_VERSIONS:
            connect_key = decode_connect(record.key, None)
            group, kind = connect_key.group_id, f"CONNECT_{connect_key.type.name}"
        else:
            return f"a key of record type {version}, which the gateway never writes (the load skips it)"
    except Exception as exc:  # noqa: BLE001 - the message is the finding
        return f"the key does not decode: {type(exc).__name__}: {exc}"
    if record.value is not None:
        try:
            if kind == "CLASSIC_GROUP_METADATA":
                decode_record(record.key, record.value)
            elif kind.startswith("CONNECT_"):
                decode_connect(record.key, record.value)
            else:
                decode(record.key, record.value)
        except Exception as exc:  # noqa: BLE001
            return f"the value of a {kind} record of group {group!r} does not decode: {type(exc).__name__}: {exc}"
    home = shard_of(group, shards)
    if home != shard:
        return f"a {kind} record of group {group!r}, which belongs in shard {home}, not {shard}"
    return None


def verify_shard(read: ShardRead, shards: int, new_service: Callable[[], GroupService]) -> ShardReport:
    """Check every record of one shard and replay the good ones as the runtime's load does."""
    problems = list(read.problems)
    service = new_service()
    for offset, record in read.entries:
        why = record_problem(record, read.shard, shards)
        if why is not None:
            problems.append(Problem(offset, why))
            continue
        try:
            service.replay_bytes(record.key, record.value)
        except Exception as exc:  # noqa: BLE001
            problems.append(Problem(offset, f"replay fails: {type(exc).__name__}: {exc}"))
    try:
        service.on_loaded(int(time.time() * 1000))  # what the runtime does once a shard is replayed
    except Exception as exc:  # noqa: BLE001
        problems.append(Problem(None, f"the replayed state does not start: {type(exc).__name__}: {exc}"))
    return ShardReport(read.shard, len(read.entries), service.group_count(), problems, read.notes, read.detail)


__all__ = [
    "Problem", "ShardRead", "ShardReport", "file_shard_count", "file_shards", "record_problem", "topic_problems", "topic_shard",
    "verify_shard",
]
