"""Where group state is kept: a store of shards, each shard an independent, fenced, compacted log.

A group belongs to shard ``shard_of(group_id, shards)``: Kafka's own placement of a group on a partition
of ``__consumer_offsets`` (the Java ``String.hashCode`` of the group id, made non-negative, modulo the
partition count). Each shard has its own log, request ordering and timers; the runtime opens a shard
(which fences every older writer of it and returns its durable records for replay), appends records,
and releases responses only after ``sync()`` says the records are durable.

Two stores implement this protocol: a directory of per-shard file logs (``--state-dir``) and a compacted
topic of the upstream cluster, one partition per shard, written by one transactional producer per shard.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Protocol

from gateway.state.log import Record, StateLogWriteFailed

DEFAULT_SHARDS = 50  # Kafka's offsets.topic.num.partitions default


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()`` (a signed 32-bit int) over the UTF-16 code units of ``s``."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


# Every group request looks its shard up; the hash walks the id in Python, so the answers are kept.
@functools.lru_cache(maxsize=1 << 16)
def shard_of(group_id: str, shards: int) -> int:
    """The shard (state-topic partition) of ``group_id``: as Kafka places a group on ``__consumer_offsets``
    (``Utils.abs(hashCode) % partitions``, where the absolute value of Integer.MIN_VALUE is taken as 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % shards


# A record of no group: after a stall (the process was paused, e.g. SIGSTOP or a long GC-like freeze of
# the machine) the runtime writes it to each shard it holds, so that a shard a newer owner took over in the
# meantime fails with ShardFenced before anything is served from memory. Its key version (0x7fff) is no
# group record's, so replay skips it; one key per shard, so compaction keeps only the latest.
OWNER_MARKER_KEY = b"\x7f\xff" + b"groupgate.shard-owner"


def owner_marker(owner: str) -> Record:
    return Record(OWNER_MARKER_KEY, owner.encode())


class ShardFenced(StateLogWriteFailed):
    """A newer owner opened this shard (its producer epoch fenced ours): stop serving the shard at once
    and never write to it again; whatever this instance holds in memory for it is stale."""


class StateStoreMismatch(Exception):
    """The store holds state written with another shard count (or is not a store at all): a group's shard
    depends on the count, so the gateway refuses to start rather than look groups up in the wrong shard."""


class ShardLog(Protocol):
    """One shard's log, as the runtime uses it."""

    shard: int

    def replay(self) -> Iterator[Record]:
        """The shard's durable records in log order (what was read when the shard was opened)."""
        ...

    def append(self, records: Iterable[Record]) -> None:
        """Queue records for the next durable write; raises StateLogWriteFailed (or ShardFenced) when the
        log takes no more writes."""
        ...

    async def sync(self) -> None:
        """Return once every record appended before the call is durable; raises StateLogWriteFailed when
        they are not (the shard must then be unloaded and re-opened) or ShardFenced."""
        ...

    def unsynced(self) -> bool:
        """Whether ``sync()`` has anything to do: records appended and not durable yet, or a failure it
        would raise. False lets a caller that only needs durability skip the call (most answers append
        nothing: a steady heartbeat, a commit's check)."""
        ...

    def close(self) -> None: ...


class StateStore(Protocol):
    """A set of shards: a directory of file logs, or a compacted topic of the upstream cluster."""

    shards: int

    async def open(self) -> None:
        """Prepare the store (create or verify the topic / directory layout); raises on a mismatch such as
        a different shard count than the one the state was written with."""
        ...

    async def open_shard(self, shard: int) -> ShardLog:
        """Take ownership of ``shard``: fence older writers, read its log to the end, return it."""
        ...

    async def close(self) -> None: ...


__all__ = [
    "DEFAULT_SHARDS",
    "OWNER_MARKER_KEY",
    "Record",
    "ShardFenced",
    "ShardLog",
    "StateStore",
    "StateStoreMismatch",
    "java_string_hash",
    "owner_marker",
    "shard_of",
]

