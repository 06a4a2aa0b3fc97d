"""Proving shard ownership after a stall, before anything is served from memory again.

With a store that fences (the state topic: one transactional id per shard), a process paused longer than
``stall_s`` (SIGSTOP, a frozen machine) may have been replaced by a newer owner that fenced it meanwhile;
what it holds in memory may then be stale. A ticker notices the gap, and so does every request (which may
be handled before the ticker runs again); either way each held shard is written an owner marker
(gateway/state/store.py) first, and a shard whose write fails (fenced, or failed) is unloaded: a fenced
one for good, answering NOT_COORDINATOR instead of stale state.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Protocol

from gateway.groups.shard_state import ShardState
from gateway.logging import get_logger
from gateway.state.store import ShardLog, owner_marker

log = get_logger("gateway.groups.runtime")


class HeldShard(Protocol):
    """What the check needs of a shard (gateway/groups/shard.py ``Shard``)."""

    @property
    def log(self) -> ShardLog | None: ...
    @property
    def state(self) -> ShardState: ...

    def unload(self, error: BaseException, failed_log: ShardLog | None = None) -> None: ...


class StallWatch:
    def __init__(
        self,
        stall_s: float,
        *,
        shards: Callable[[], Iterable[HeldShard]],
        spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]],
        counters: collections.Counter[str],
        owner: str,
        parallel: int,
    ) -> None:
        self.stall_s = stall_s
        self._shards = shards
        self._spawn = spawn
        self._counters = counters
        self.owner = owner  # written in the marker: who proved ownership
        self._parallel = parallel  # shards written at once
        self.last_tick = time.monotonic()
        self._confirming: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.last_tick = time.monotonic()
        self._spawn(self._tick_forever(min(1.0, self.stall_s / 4)))

    async def _tick_forever(self, tick_s: float) -> None:
        while True:
            await asyncio.sleep(tick_s)
            await self.confirm_if_stalled()
            self.last_tick = time.monotonic()

    def may_be_stalled(self) -> bool:
        """False when ``confirm_if_stalled`` would return at once: no confirmation runs and the loop has
        not stood still longer than ``stall_s``."""
        return self._confirming is not None or time.monotonic() - self.last_tick > self.stall_s

    async def confirm_if_stalled(self) -> None:
        """Return at once unless the loop stood still longer than ``stall_s``; then once every held
        shard has proven (or lost) its ownership."""
        if self._confirming is None and time.monotonic() - self.last_tick > self.stall_s:
            self._confirming = self._spawn(self._confirm_ownership())
        if self._confirming is not None:
            await asyncio.shield(self._confirming)

    async def _confirm_ownership(self) -> None:
        gap = time.monotonic() - self.last_tick
        try:
            held = [s for s in self._shards() if s.log is not None and s.state.loaded]
            log.warning("event loop stalled: proving ownership of the shards held", stalled_s=round(gap, 1), shards=len(held))
            gate = asyncio.Semaphore(self._parallel)

            async def confirm(shard: HeldShard) -> None:
                log_ = shard.log
                if log_ is None:
                    return
                async with gate:
                    try:
                        log_.append([owner_marker(self.owner)])
                        await log_.sync()
                    except Exception as e:  # noqa: BLE001 - fenced or failed: the shard unloads
                        shard.unload(e, log_)

            await asyncio.gather(*(confirm(s) for s in held))
            self._counters["stall_checks"] += 1
        finally:
            self.last_tick = time.monotonic()
            self._confirming = None


__all__ = ["HeldShard", "StallWatch"]
