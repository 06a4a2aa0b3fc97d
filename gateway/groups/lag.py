"""Consumer lag of the managed groups this instance serves, computed in the background.

Every ``interval_s`` the watch reads the groups' committed offsets from the cluster (OffsetFetch to each
group's coordinator there: the gateway writes every commit through to it, gateway/groups/offsets.py) and
the log end offsets of the partitions they name (ListOffsets, latest, to each partition's leader), and
keeps the result as one immutable snapshot. A scrape reads the last snapshot and never waits for the
cluster; a refresh that fails keeps the previous snapshot and is counted.

Lag is ``log end offset - committed offset`` per partition with a committed offset (as kafka_exporter
computes it). Partitions without a commit are left out: their lag is not defined by an offset.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from gateway.logging import get_logger
from gateway.net.upstream import UpstreamError
from gateway.net.upstream_client import COORDINATOR_MOVED, UpstreamClient
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey

log = get_logger("gateway.groups.lag")

LATEST = -1  # ListOffsets timestamp: the log end offset
# Groups named in one OffsetFetch (v8+ batches groups that share a coordinator).
_GROUPS_PER_FETCH = 200
_TOPICS_PER_METADATA = 1000
_NO_ID = uuid.UUID(int=0)  # Metadata v10+: topics asked for by name


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int
    log_end: int

    @property
    def lag(self) -> int:
        return max(0, self.log_end - self.committed)


@dataclasses.dataclass(frozen=True, slots=True)
class LagSnapshot:
    groups: dict[str, tuple[PartitionLag, ...]]  # group id -> its partitions with a committed offset
    taken_at: float  # time.time() when the refresh completed (0: never)
    took_s: float  # how long the refresh took


EMPTY = LagSnapshot({}, 0.0, 0.0)


class LagWatch:
    """``watch = LagWatch(client, group_ids, 15.0)``; ``await watch.refresh()`` or run ``run_forever()``;
    ``watch.snapshot`` is the latest result."""

    def __init__(self, client: UpstreamClient, group_ids: Callable[[], Iterable[str]], interval_s: float) -> None:
        self.client = client
        self.group_ids = group_ids
        self.interval_s = interval_s
        self.snapshot = EMPTY
        self.refreshes = 0
        self.failures = 0
        # Told of each new snapshot (gateway/ops/health.py writes its families out then, off the scrape).
        self.on_snapshot: Callable[[LagSnapshot], Awaitable[None]] | None = None

    async def run_forever(self) -> None:
        while True:
            try:
                snapshot = await self.refresh()
                if self.on_snapshot is not None:
                    await self.on_snapshot(snapshot)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - the next round tries again; the old snapshot stays
                self.failures += 1
                log.warning("consumer lag refresh failed", error=repr(e))
            await asyncio.sleep(self.interval_s)

    async def refresh(self) -> LagSnapshot:
        """A new snapshot. What could not be read this time (a group's committed offsets, a partition's
        log end offset) keeps its values of the previous snapshot; when nothing at all could be read,
        UpstreamError (the previous snapshot stays whole)."""
        began = time.monotonic()
        gids = sorted(set(self.group_ids()))
        committed = await self._committed(gids)
        if gids and not committed:
            raise UpstreamError("no group's committed offsets could be read")
        wanted: dict[str, set[int]] = defaultdict(set)
        for parts in committed.values():
            for topic, partition, _ in parts:
                wanted[topic].add(partition)
        ends = await self._log_ends(wanted)
        if wanted and not ends:
            raise UpstreamError("no log end offset could be read")
        previous = self.snapshot.groups
        groups: dict[str, tuple[PartitionLag, ...]] = {}
        for gid in gids:
            read = committed.get(gid)
            if read is None:
                if gid in previous:
                    groups[gid] = previous[gid]
                continue
            before = {(r.topic, r.partition): r for r in previous.get(gid, ())}
            rows = []
            for t, p, off in read:
                end = ends.get((t, p))
                if end is not None:
                    rows.append(PartitionLag(t, p, off, end))
                elif (t, p) in before:  # the last log end offset known, against the new commit
                    rows.append(PartitionLag(t, p, off, max(before[t, p].log_end, off)))
            groups[gid] = tuple(sorted(rows, key=lambda r: (r.topic, r.partition)))
        self.snapshot = LagSnapshot(groups, time.time(), time.monotonic() - began)
        self.refreshes += 1
        return self.snapshot

    # --- committed offsets -----------------------------------------------------------------------------

    async def _committed(self, gids: list[str]) -> dict[str, list[tuple[str, int, int]]]:
        """group -> [(topic, partition, committed offset)] for the partitions with a commit."""
        client = self.client
        out: dict[str, list[tuple[str, int, int]]] = {}
        if not gids:
            return out
        version = client.version(ApiKey.OFFSET_FETCH, 9)
        req_cls = codec.REQUESTS[ApiKey.OFFSET_FETCH]
        if version < 8:
            for gid in gids:
                try:
                    r = await client.to_coordinator(
                        gid, ApiKey.OFFSET_FETCH, version, req_cls[version](group_id=gid, topics=None),
                        lambda r: r.error_code,
                    )
                except UpstreamError as e:
                    log.info("committed offsets not read", group_id=gid, error=str(e))
                    continue
                if r.error_code == 0:
                    out[gid] = _offsets(r.topics)
            return out
        by_coordinator: dict[tuple[str, int], list[str]] = defaultdict(list)
        for gid in gids:
            try:
                by_coordinator[await client.coordinator(gid)].append(gid)
            except UpstreamError as e:
                log.info("no coordinator for a group's committed offsets", group_id=gid, error=str(e))
        gcls = req_cls.OffsetFetchRequestGroup
        for addr, members in by_coordinator.items():
            for i in range(0, len(members), _GROUPS_PER_FETCH):
                chunk = members[i:i + _GROUPS_PER_FETCH]
                req = req_cls[version](
                    groups=[gcls(group_id=g, member_id=None, member_epoch=-1, topics=None) for g in chunk],
                    require_stable=False,
                )
                try:
                    r = await client.send(addr, ApiKey.OFFSET_FETCH, version, req)
                except UpstreamError as e:
                    log.info("committed offsets not read", coordinator=f"{addr[0]}:{addr[1]}", error=str(e))
                    for g in chunk:
                        client.forget_coordinator(g)
                    continue
                for g in r.groups:
                    if g.error_code == 0:
                        out[g.group_id] = _offsets(g.topics)
                    elif g.error_code in COORDINATOR_MOVED:
                        client.forget_coordinator(g.group_id)  # looked up again next round
        return out

    # --- log end offsets -------------------------------------------------------------------------------

    async def _log_ends(self, wanted: dict[str, set[int]]) -> dict[tuple[str, int], int]:
        if not wanted:
            return {}
        leaders = await self._leaders(sorted(wanted))
        by_leader: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        for topic, parts in wanted.items():
            for p in sorted(parts):
                leader = leaders.get((topic, p))
                if leader is not None and leader >= 0:
                    by_leader[leader][topic].append(p)
        client = self.client
        version = client.version(ApiKey.LIST_OFFSETS, 7)
        req_cls = codec.REQUESTS[ApiKey.LIST_OFFSETS]
        tcls = req_cls.ListOffsetsTopic
        pcls = tcls.ListOffsetsPartition
        out: dict[tuple[str, int], int] = {}

        async def one(node: int, topics: dict[str, list[int]]) -> None:
            req = req_cls[version](
                replica_id=-1,
                isolation_level=0,
                topics=[
                    tcls(name=t, partitions=[pcls(partition_index=p, timestamp=LATEST) for p in ps])
                    for t, ps in topics.items()
                ],
            )
            try:
                r: Any = await client.send_any(ApiKey.LIST_OFFSETS, version, req, node_id=node)
            except UpstreamError as e:
                log.info("log end offsets not read", node_id=node, error=str(e))
                return
            for t in r.topics:
                for p in t.partitions:
                    if p.error_code == 0 and p.offset >= 0:
                        out[t.name, p.partition_index] = p.offset

        await asyncio.gather(*(one(node, topics) for node, topics in by_leader.items()))
        return out

    async def _leaders(self, topics: list[str]) -> dict[tuple[str, int], int]:
        client = self.client
        version = client.version(ApiKey.METADATA, 12)
        req_cls = codec.REQUESTS[ApiKey.METADATA]
        out: dict[tuple[str, int], int] = {}
        for i in range(0, len(topics), _TOPICS_PER_METADATA):
            names = topics[i:i + _TOPICS_PER_METADATA]
            req = req_cls[version](
                topics=[req_cls.MetadataRequestTopic(topic_id=_NO_ID, name=n) for n in names],
                allow_auto_topic_creation=False,
            )
            r: Any = await client.send_any(ApiKey.METADATA, version, req)
            for t in r.topics:
                if t.error_code != 0:
                    continue
                for p in t.partitions:
                    out[t.name, p.partition_index] = p.leader_id
        return out


def _offsets(topics: Any) -> list[tuple[str, int, int]]:
    return [
        (t.name, p.partition_index, p.committed_offset)
        for t in topics
        for p in t.partitions
        if p.error_code == 0 and p.committed_offset >= 0
    ]
