"""The coordinator runtime: group state as independent shards, as Kafka's CoordinatorRuntime runs one
CoordinatorShard per ``__consumer_offsets`` partition.

A group belongs to shard ``shard_of(group_id, P)`` (gateway/state/store.py; P is
``state.topic.num.partitions``). A shard (gateway/groups/shard.py) is a small world of its own: its
service, log, ordering, timers, unload and reload. The runtime places groups on shards, loads them,
fans out work that spans shards, and (with several instances, gateway/fleet/membership.py) acquires and
releases them. It builds each shard with a ShardContext (gateway/groups/shard_context.py): what a shard
uses of the runtime is handed in, and a shard never reaches back. A shard's state (ACTIVE, LOADING,
FAILED, ...: gateway/groups/shard_state.py) is what the runtime asks of it.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import itertools
import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from gateway.groups.shard import Shard
from gateway.groups.shard_context import (  # noqa: F401 - re-exported: the names callers import from here
    DEFAULT_STALL_GRACE_MS,
    GroupCalls,
    ShardContext,
    ShardSettings,
    TopicImage,
    now_ms,
)
from gateway.groups.shard_state import NOT_OWNED, ShardStalled, ShardState, ShardUnloaded  # noqa: F401 - re-exported
from gateway.groups.stall_check import StallWatch
from gateway.logging import get_logger
from gateway.metrics import GroupStats
from gateway.state.log import StateLogWriteFailed
from gateway.state.store import StateStore, shard_of
from translate.group_service import GroupService

if TYPE_CHECKING:
    from coordinator.config import CoordinatorConfig
    from coordinator.connect.model import ConnectGroup
    from coordinator.model import ConsumerGroup
    from translate.classic_group import ClassicGroup

log = get_logger("gateway.groups.runtime")

_PARALLEL_LOADS = 8  # shards opened at once when the runtime loads


class CoordinatorRuntime:
    """The shards and what spans them: placement, load, fan-out of cross-shard work, the clock."""

    def __init__(
        self,
        shards: int,
        *,
        new_service: Callable[[], GroupService],
        store: StateStore | None,
        calls_for: Callable[[GroupService, int], GroupCalls] | None = None,
        topics: Callable[[], TopicImage | None] = lambda: None,
        stats: GroupStats | None = None,
        counters: Any = None,
        where: str | None = None,
        now: Callable[[], int] = now_ms,
        offload_executor: concurrent.futures.Executor | None = None,
    ) -> None:
        if store is not None and store.shards != shards:
            raise ValueError(f"the store has {store.shards} shards, the runtime {shards}")
        self.shard_count = shards
        self.new_service = new_service
        self.store = store
        self.calls_for: Callable[[GroupService, int], GroupCalls] = calls_for or (lambda service, _shard: service)
        self.topics = topics  # the current topic image (None until fetched): handed to a reloaded shard
        self.stats = stats if stats is not None else GroupStats()
        self.counters: collections.Counter[str] = counters if counters is not None else collections.Counter()
        self.where = where  # for log lines: the state dir or topic
        self.now = now
        # Where offloaded target computations run (None: the loop's default executor). Owned by the
        # caller, which shuts it down.
        self.offload_executor = offload_executor
        self.ready = asyncio.Event()
        self.keys = itertools.count(1)
        # Shared by every shard; changed here while running (see the properties below).
        self.settings = ShardSettings()
        self._tasks: set[asyncio.Task[Any]] = set()
        context = ShardContext(
            now=now,
            next_key=functools.partial(next, self.keys),
            until_ready=self.ready.wait,
            ready=self.ready.is_set,
            confirm_if_stalled=self.confirm_if_stalled,
            may_be_stalled=self.may_be_stalled,
            spawn=self.spawn,
            open_log=store.open_shard if store is not None else None,
            new_service=new_service,
            calls_for=self.calls_for,
            topics=topics,
            stats=self.stats,
            counters=self.counters,
            settings=self.settings,
            offload_executor=offload_executor,
            where=where,
        )
        self.shards = [Shard(context, i) for i in range(shards)]
        # Stall checks (stores whose shards fence older writers): see watch_stalls.
        self.stalls: StallWatch | None = None
        self.owner = f"pid {os.getpid()}"

    # --- settings every shard reads (ShardSettings) ---------------------------------------------------------

    @property
    def reload_backoff_s(self) -> tuple[float, float]:
        """First and longest wait between attempts to re-read a failed shard."""
        return self.settings.reload_backoff_s

    @reload_backoff_s.setter
    def reload_backoff_s(self, value: tuple[float, float]) -> None:
        self.settings.reload_backoff_s = value

    @property
    def stall_grace_ms(self) -> int:
        """A write outstanding longer than this postpones the timers coming due (gateway/groups/shard.py)."""
        return self.settings.stall_grace_ms

    @stall_grace_ms.setter
    def stall_grace_ms(self, value: int) -> None:
        self.settings.stall_grace_ms = value

    @property
    def answer_stall_s(self) -> float | None:
        """How long an answer may wait for its shard's write before the client is told to retry
        (ShardStalled); None: as long as the write takes (a local log's fsync)."""
        return self.settings.answer_stall_s

    @answer_stall_s.setter
    def answer_stall_s(self, value: float | None) -> None:
        self.settings.answer_stall_s = value

    # --- placement -------------------------------------------------------------------------------------

    def shard_of(self, group_id: str) -> int:
        return shard_of(group_id, self.shard_count)

    def shard_for(self, group_id: str) -> Shard:
        return self.shards[shard_of(group_id, self.shard_count)]

    def by_shard(self, group_ids: Sequence[str]) -> dict[int, list[str]]:
        """The ids grouped by shard, each list in the order asked."""
        out: dict[int, list[str]] = {}
        for g in group_ids:
            out.setdefault(self.shard_of(g), []).append(g)
        return out

    # --- lifecycle -------------------------------------------------------------------------------------

    async def load(self) -> int:
        """Open the store and replay every shard; the group records replayed.

        Raises StateStoreMismatch / StateLogCorrupt: the gateway then refuses to start."""
        if self.store is None:
            return 0
        await self.store.open()
        # Shards load side by side (a cluster store fences and reads one partition per shard), a few
        # at a time so that a large shard count does not open every connection at once.
        gate = asyncio.Semaphore(_PARALLEL_LOADS)

        async def load(shard: Shard) -> int:
            async with gate:
                return await shard.load()

        counts = await asyncio.gather(*(load(s) for s in self.shards if s.log is None and s.state.owned))
        replayed = sum(counts)
        log.info("group state replayed", state=self.where, shards=self.shard_count, records=replayed)
        return replayed

    def start(self) -> None:
        """Arm the replayed groups' timers (their records appended), then serve."""
        now = self.now()
        for shard in self.shards:
            with contextlib.suppress(ShardUnloaded):  # a full disk at start: served once re-read
                shard.apply(shard.calls.on_loaded(now))
        self.ready.set()

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for shard in self.shards:
            for h in shard.timers.values():
                h.cancel()
            shard.timers.clear()
            if shard.log is not None:
                try:
                    await shard.log.sync()
                except StateLogWriteFailed as e:
                    log.error("group state shard not synced at shutdown", shard=shard.index, error=str(e))
                shard.drop_memory()
            shard.close()
        if self.store is not None:
            await self.store.close()

    # --- ownership in a fleet (gateway/fleet/membership.py) ------------------------------------------------

    def serve_only_owned(self) -> None:
        """Before ``load``: own no shard until ``acquire`` is called for it (several instances split the
        shards); the others are answered NOT_COORDINATOR."""
        for shard in self.shards:
            if shard.log is None:
                shard.disown()

    def held(self) -> list[int]:
        """The shards this instance owns (served, being loaded, or failed and being re-read)."""
        return [s.index for s in self.shards if s.state.owned]

    async def acquire(self, indices: Sequence[int]) -> None:
        gate = asyncio.Semaphore(_PARALLEL_LOADS)

        async def one(shard: Shard) -> None:
            async with gate:
                await shard.take_over()

        await asyncio.gather(*(one(self.shards[i]) for i in indices))
        if indices:
            log.info("shards taken over", shards=sorted(indices), held=self.held())

    async def release(self, indices: Sequence[int], timeout_s: float) -> None:
        await asyncio.gather(*(self.shards[i].hand_over(timeout_s) for i in indices))
        if indices:
            log.info("shards handed over", shards=sorted(indices), held=self.held())

    # --- stalls: proving ownership before serving from memory (gateway/groups/stall_check.py) -------------

    def watch_stalls(self, stall_s: float) -> None:
        """Serve nothing from memory after a stall longer than ``stall_s`` until each held shard has proven
        its ownership (stores whose shards fence older writers)."""
        self.stalls = StallWatch(
            stall_s, shards=lambda: self.shards, spawn=self.spawn, counters=self.counters, owner=self.owner,
            parallel=_PARALLEL_LOADS,
        )
        self.stalls.start()

    async def confirm_if_stalled(self) -> None:
        if self.stalls is not None:
            await self.stalls.confirm_if_stalled()

    def may_be_stalled(self) -> bool:
        """False when ``confirm_if_stalled`` would return at once (no stall watch, or no stall)."""
        return self.stalls is not None and self.stalls.may_be_stalled()

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # --- requests --------------------------------------------------------------------------------------

    async def call(
        self, group_id: str, request: object, prepare: Callable[[], Awaitable[None]] | None = None
    ) -> Any:
        """One request of one group, through its shard (``prepare`` runs in the group's turn first)."""
        return await self.shard_for(group_id).call(group_id, request, prepare)

    async def read(self, group_ids: Sequence[str] | None, request_for: Callable[[list[str]], object]) -> list[Any]:
        """A read-only request on the shards holding ``group_ids`` (every served shard for None): the
        response bodies, in shard order, released once what they show is durable."""
        if group_ids is None:
            targets: list[tuple[Shard, list[str]]] = [(s, []) for s in self.shards if s.state.will_serve]
        else:
            targets = [(self.shards[n], ids) for n, ids in self.by_shard(group_ids).items()]
        await self.ready.wait()
        for shard, _ in targets:
            shard.check_loaded()
        now = self.now()
        bodies = [shard.service.handle(request_for(ids), 0, now).responses[0].body for shard, ids in targets]
        for shard, _ in targets:
            await shard.durable()
        return bodies

    def check_loaded(self, group_ids: Sequence[str]) -> None:
        for g in group_ids:
            self.shard_for(g).check_loaded()

    # --- fan-out ---------------------------------------------------------------------------------------

    def loaded(self) -> Iterator[Shard]:
        return (s for s in self.shards if s.state.loaded)

    def on_metadata(self, image: TopicImage) -> None:
        now = self.now()
        for shard in self.loaded():  # an unloaded shard gets the current image when it is re-read
            shard.apply_in_background(shard.calls.on_metadata(image, now))

    def expire_empty_groups(self) -> int:
        """Kafka's periodic cleanup, shard by shard; the groups expired."""
        now, expired = self.now(), 0
        for shard in list(self.loaded()):
            before = shard.service.group_count()
            result = shard.calls.expire_empty_groups(now)
            if result.records:
                gone = before - shard.service.group_count()
                expired += gone
                log.info("expired empty groups", shard=shard.index, groups=gone, records=len(result.records))
            shard.apply_in_background(result)
        self.counters["groups_expired"] += expired
        return expired

    async def expire_forever(self, interval_s: float) -> None:
        # offsets.retention.check.interval.ms: groups Empty for offsets.retention.minutes are deleted.
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.expire_empty_groups()
            except Exception:
                log.exception("expiring empty groups failed; trying again at the next check")

    # --- reads -----------------------------------------------------------------------------------------

    def services(self) -> Iterator[GroupService]:
        """The services of the shards served now."""
        return (s.service for s in self.loaded())

    def classic_groups(self) -> Iterator[ClassicGroup]:
        """The classic groups of the shards served now (read-only: for /metrics)."""
        return (g for service in self.services() for g in service.classic_groups.groups.values())

    def consumer_groups(self) -> Iterator[ConsumerGroup]:
        """The consumer groups of the shards served now (read-only: for /metrics and config refreshes)."""
        return (g for service in self.services() for g in service.coordinator.state.groups.values())

    def connect_groups(self) -> Iterator[ConnectGroup]:
        """The connect groups of the shards served now (read-only: for the groups page)."""
        return (g for service in self.services() for g in service.connect.state.groups.values())

    def group_config(self, group_id: str) -> CoordinatorConfig:
        """The coordinator settings the group's shard runs with now (a shard re-read from its log gets a
        new service, and config: always the current one's)."""
        config: CoordinatorConfig = self.shard_for(group_id).service.coordinator.state.config
        return config

    def has_state(self, group_id: str) -> bool:
        """Whether a group of this id is held now (its shard loaded)."""
        shard = self.shard_for(group_id)
        return shard.state.loaded and shard.service.group_kind(group_id) is not None

    def group_kind(self, group_id: str) -> str | None:
        shard = self.shard_for(group_id)
        return shard.service.group_kind(group_id) if shard.state.loaded else None

    def subscribed_topics(self, group_id: str) -> frozenset[str]:
        shard = self.shard_for(group_id)
        return shard.service.subscribed_topics(group_id) if shard.state.loaded else frozenset()

    def group_ids(self) -> list[str]:
        return [g for service in self.services() for g in service.group_ids()]

    def group_count(self) -> int:
        return sum(service.group_count() for service in self.services())

    def armed_timers(self) -> int:
        return sum(len(s.timers) for s in self.shards)

    def unserved(self) -> Iterator[Shard]:
        """The shards this instance owns but does not serve now (loading, failed, fenced)."""
        return (s for s in self.shards if s.state.owned and not s.state.loaded)

    @property
    def unloaded(self) -> str | None:
        """Why the first unloaded shard is (None: every shard this instance owns is served)."""
        return next((s.reason for s in self.unserved()), None)

    def log_totals(self) -> dict[str, int]:
        """Summed over the shards' logs, for /metrics."""
        out = {"entries_appended": 0, "bytes_appended": 0, "fsyncs": 0, "compactions": 0, "file_bytes": 0}
        for s in self.shards:
            if s.log is None:
                out["bytes_appended"] += s.closed_totals[0]
                out["fsyncs"] += s.closed_totals[1]
                out["compactions"] += s.closed_totals[2]
                continue
            for name in out:
                out[name] += getattr(s.log, name, 0)
        return out


__all__ = [
    "NOT_OWNED", "CoordinatorRuntime", "GroupCalls", "Shard", "ShardStalled", "ShardState", "ShardUnloaded", "now_ms",
]
