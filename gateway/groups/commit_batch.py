"""Write-through of managed groups' offset commits: the commits of one group that wait together go to the
cluster as one OffsetCommit.

A broker answers the requests of one connection one at a time, so commits sent one by one on a shared link
wait for each other there, and each costs the gateway an encode, a write and a decode. Here every group has
at most one commit request on its way to the cluster; the commits that arrive meanwhile wait in the group's
queue and leave together, as one request, when the one in flight is answered. Groups are spread over
several connections per broker (``WRITE_LANES``), so the broker works on different groups' commits at once.

What every client is told stays what the cluster would have told it for its own commit:

- commits merge only when they name disjoint partitions: each partition of the merged request belongs to
  exactly one client's commit, whose answer is that partition's error as the cluster gave it. A commit that
  names a partition twice itself goes alone, answered with the cluster's answer to it unchanged;
- per partition the order of commits holds: a commit that shares a partition with an earlier one still
  waiting is not merged ahead of it (it leaves in a later request, after the earlier one is answered), and
  one group's requests never overlap, so a later commit of a partition is never overwritten by an earlier;
- only commits at the same request version (and, for v2-v4, the same retention time) merge: the request's
  top-level fields are then the same for all of them (a simple commit: generation -1, no member);
- a request that fails as a whole (the link lost under it, no coordinator) fails each of its commits the
  same way, as if each had been sent alone on that link: none is sent again (at most once).
"""

from __future__ import annotations

import asyncio
import zlib
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from coordinator.errors import Errors
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey

# Connections per upstream broker for commit write-throughs (each group uses one of them at a time).
WRITE_LANES = 4
# A merged request carries at most this many partitions, and offset records of about this many bytes (the
# cluster writes a commit's records as one batch to __consumer_offsets, which refuses a batch over its
# max.message.bytes, 1 MiB by default, as a whole); the rest wait for the next request.
MAX_BATCH_PARTITIONS = 5000
MAX_BATCH_BYTES = 256 * 1024
# An offset record's bytes besides the group id, topic name and metadata (key and value fields, headers).
_RECORD_OVERHEAD = 80
# The first OffsetCommit version that names topics by id (KIP-848's v10).
_BY_ID_FROM = 10

# (topic key, partition): the topic key is the topic's id from v10, else its name.
PartitionKey = tuple[Hashable, int]
# Per committed topic of one client's commit: (name, topic id or None, [(partition, error code)]).
Answer = list[tuple[str, Any, list[tuple[int, int]]]]
Sender = Callable[[str, int, Any, int], Any]  # (group id, version, request, lane) -> awaitable response


def topic_key(topic: Any, version: int) -> Hashable:
    return topic.topic_id if version >= _BY_ID_FROM else topic.name


@dataclass(eq=False)
class Pending:
    """One client's commit (already a simple commit) waiting for its group's next request."""

    version: int
    msg: Any
    future: asyncio.Future[Answer] | None = None
    keys: frozenset[PartitionKey] = field(init=False)
    solo: bool = field(init=False)  # names a partition twice: sent alone, answered as the cluster answers it
    merge_key: tuple[int, Any] = field(init=False)
    size: int = field(init=False)  # about the bytes of its offset records in __consumer_offsets

    def __post_init__(self) -> None:
        keys = [(topic_key(t, self.version), p.partition_index) for t in self.msg.topics for p in t.partitions]
        self.keys = frozenset(keys)
        per_record = _RECORD_OVERHEAD + len(self.msg.group_id or "")
        self.size = sum(
            per_record + len(t.name or "") + len(p.committed_metadata or "") for t in self.msg.topics for p in t.partitions
        )
        self.solo = len(self.keys) != len(keys)
        retention = getattr(self.msg, "retention_time_ms", None) if 2 <= self.version <= 4 else None
        self.merge_key = (self.version, retention)


def take_batch(
    waiting: deque[Pending], max_partitions: int = MAX_BATCH_PARTITIONS, max_bytes: int = MAX_BATCH_BYTES
) -> list[Pending]:
    """Remove from ``waiting`` the commits that leave together in the next request, in their order.

    The first waiting commit always leaves. A later one joins when it merges with the first (same version
    and retention, neither solo), names no partition already in the request, and names no partition of an
    earlier commit that stays behind (that one must reach the cluster first); the request stays within
    ``max_partitions`` and ``max_bytes`` of offset records unless the first commit alone is larger."""
    first = waiting.popleft()
    batch = [first]
    if first.solo:
        return batch
    taken = set(first.keys)
    size = first.size
    blocked: set[PartitionKey] = set()
    kept: list[Pending] = []
    while waiting:
        e = waiting.popleft()
        if (
            e.solo
            or e.merge_key != first.merge_key
            or len(taken) + len(e.keys) > max_partitions
            or size + e.size > max_bytes
            or not taken.isdisjoint(e.keys)
            or not blocked.isdisjoint(e.keys)
        ):
            kept.append(e)
            blocked.update(e.keys)
            continue
        batch.append(e)
        taken.update(e.keys)
        size += e.size
    waiting.extend(kept)
    return batch


def merged_request(batch: list[Pending]) -> Any:
    """One OffsetCommit request carrying every commit of ``batch`` (one topic entry per topic)."""
    first = batch[0]
    if len(batch) == 1:
        return first.msg
    version = first.version
    cls = codec.REQUESTS[ApiKey.OFFSET_COMMIT][version]
    topic_cls = cls.OffsetCommitRequestTopic
    by_topic: dict[Hashable, Any] = {}
    for e in batch:
        for t in e.msg.topics:
            key = topic_key(t, version)
            merged = by_topic.get(key)
            if merged is None:
                by_topic[key] = topic_cls(name=t.name, topic_id=getattr(t, "topic_id", None), partitions=list(t.partitions))
            else:
                merged.partitions.extend(t.partitions)
    m = first.msg
    kwargs: dict[str, Any] = {"group_id": m.group_id, "topics": list(by_topic.values())}
    for name in ("generation_id_or_member_epoch", "member_id", "group_instance_id", "retention_time_ms"):
        if hasattr(m, name):
            kwargs[name] = getattr(m, name)
    return cls(**kwargs)


def answers(batch: list[Pending], response: Any) -> list[Answer]:
    """Each commit's own answer out of the response to the merged request: per partition it named, the
    error the cluster gave that partition (UNKNOWN_SERVER_ERROR if the cluster left one out)."""
    version = batch[0].version
    if len(batch) == 1:
        e = batch[0]
        names = {topic_key(t, version): t for t in e.msg.topics}
        out: Answer = []
        for t in response.topics:
            sent = names.get(topic_key(t, version))
            name = t.name or (sent.name if sent is not None else "")
            topic_id = getattr(t, "topic_id", None) if version >= _BY_ID_FROM else None
            out.append((name, topic_id, [(p.partition_index, p.error_code) for p in t.partitions]))
        return [out]
    errors: dict[PartitionKey, int] = {}
    for t in response.topics:
        key = topic_key(t, version)
        for p in t.partitions:
            errors[(key, p.partition_index)] = p.error_code
    result = []
    for e in batch:
        mine: Answer = []
        for t in e.msg.topics:
            key = topic_key(t, version)
            parts = [(p.partition_index, errors.get((key, p.partition_index), Errors.UNKNOWN_SERVER_ERROR)) for p in t.partitions]
            mine.append((t.name, getattr(t, "topic_id", None) if version >= _BY_ID_FROM else None, parts))
        result.append(mine)
    return result


class _GroupQueue:
    __slots__ = ("waiting", "lane")

    def __init__(self, lane: int) -> None:
        self.waiting: deque[Pending] = deque()
        self.lane = lane


class CommitWrites:
    """The per-group queues of commit write-throughs; ``send`` writes one request to the group's upstream
    coordinator on the given lane (UpstreamClient.to_coordinator, at most once) and returns its response."""

    def __init__(self, send: Sender, spawn: Callable[[Any], Any] | None = None, lanes: int = WRITE_LANES) -> None:
        self._send = send
        self._lanes = max(1, lanes)
        self._queues: dict[str, _GroupQueue] = {}
        self._spawn = spawn or (lambda coro: asyncio.get_running_loop().create_task(coro))
        self.requests = 0  # upstream requests sent
        self.commits = 0  # client commits they carried

    def lane_of(self, group_id: str) -> int:
        return zlib.crc32(group_id.encode()) % self._lanes

    async def commit(self, group_id: str, version: int, msg: Any) -> Answer:
        """The cluster's answer to this commit, per topic; raises what the request to the cluster raised."""
        entry = Pending(version, msg, asyncio.get_running_loop().create_future())
        queue = self._queues.get(group_id)
        if queue is None:
            queue = self._queues[group_id] = _GroupQueue(self.lane_of(group_id))
            queue.waiting.append(entry)
            self._spawn(self._drain(group_id, queue))
        else:
            queue.waiting.append(entry)
        assert entry.future is not None
        # A client that goes away (its wait cancelled) does not take its commit out of the queue or out of a
        # request already on its way: only the future its answer would go to is cancelled, and the drain
        # skips it. (Not asyncio.shield, which costs every commit one more turn of the loop.)
        return await entry.future

    async def _drain(self, group_id: str, queue: _GroupQueue) -> None:
        try:
            while queue.waiting:
                batch = take_batch(queue.waiting)
                await self._write(group_id, queue.lane, batch)
        finally:
            self._queues.pop(group_id, None)
            for entry in queue.waiting:  # only when the drain itself was cancelled (the gateway stops)
                if entry.future is not None:
                    entry.future.cancel()

    async def _write(self, group_id: str, lane: int, batch: list[Pending]) -> None:
        self.requests += 1
        self.commits += len(batch)
        try:
            response = await self._send(group_id, batch[0].version, merged_request(batch), lane)
            results = answers(batch, response)
        except asyncio.CancelledError:
            for entry in batch:
                if entry.future is not None:
                    entry.future.cancel()
            raise
        except Exception as error:  # noqa: BLE001 - every commit of the request fails as the request did
            _fail(batch, error)
            return
        for entry, answer in zip(batch, results, strict=True):
            if entry.future is not None and not entry.future.done():
                entry.future.set_result(answer)


def _fail(entries: Iterable[Pending], error: BaseException) -> None:
    for e in entries:
        if e.future is not None and not e.future.done():
            e.future.set_exception(error)
            e.future.exception()  # retrieved: its client may have gone
