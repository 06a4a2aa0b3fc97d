"""The per-request scheduling pieces of a shard (gateway/groups/shard.py): a group's turn (its requests
one at a time, in arrival order), an armed timer whose deadline can move later without a new loop
handle, and the writes being waited for with the oldest of them at hand. Kept apart from the shard's life and answers so each is read and tested alone."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

from coordinator.timers import TimerKey


class GroupTurn:
    """``async with``: one group's turn in its shard. The group's lock lives in ``locks`` with the number
    of requests holding or waiting for it, and goes when the last of them is done."""

    __slots__ = ("_group_id", "_lock", "_locks")

    def __init__(self, locks: dict[str, tuple[asyncio.Lock, int]], group_id: str) -> None:
        self._locks = locks
        self._group_id = group_id

    async def __aenter__(self) -> None:
        locks, group_id = self._locks, self._group_id
        entry = locks.get(group_id)
        if entry is None:
            lock = asyncio.Lock()
            locks[group_id] = (lock, 1)
        else:
            lock = entry[0]
            locks[group_id] = (lock, entry[1] + 1)
        self._lock = lock
        try:
            await lock.acquire()
        except BaseException:
            self._leave()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._lock.release()
        self._leave()

    def _leave(self) -> None:
        locks, group_id = self._locks, self._group_id
        lock, users = locks[group_id]
        if users <= 1:
            del locks[group_id]
        else:
            locks[group_id] = (lock, users - 1)


class ShardTimer:
    """One armed timer of a shard, due at ``due`` (the loop's clock). Moving it later does not touch the
    loop: the handle armed for the earlier time, once it comes due, arms again for the later one. So a
    member's heartbeats, each pushing its session deadline, cost no timer handle each."""

    __slots__ = ("_callback", "_handle", "_key", "_loop", "armed", "due")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, due: float, callback: Callable[[TimerKey], None], key: TimerKey
    ) -> None:
        self._loop = loop
        self._callback = callback
        self._key = key
        self.due = self.armed = due
        self._handle = loop.call_at(due, self._come_due)

    def _come_due(self) -> None:
        if self.due > self.armed:  # moved later meanwhile
            self.armed = self.due
            self._handle = self._loop.call_at(self.due, self._come_due)
            return
        self._callback(self._key)

    def cancel(self) -> None:
        # The handle's own cancel: uvloop's timer handles are not asyncio.TimerHandle instances.
        self._handle.cancel()


class OutstandingWrites:
    """The shard's writes being waited for, each with when its wait began (ms), and the oldest of them in
    constant time: every request of a stalled shard asks for it, and thousands of writes may be waited for
    at once. Start times are kept non-decreasing (a clock stepping back counts as no time passing), so
    the oldest outstanding write is the first one begun that is not finished yet."""

    __slots__ = ("_began", "_order", "_last")

    def __init__(self) -> None:
        self._began: dict[int, int] = {}
        self._order: collections.deque[int] = collections.deque()
        self._last = 0

    def begin(self, token: int, now_ms: int) -> None:
        self._last = max(self._last, now_ms)
        self._began[token] = self._last
        self._order.append(token)

    def end(self, token: int) -> None:
        del self._began[token]

    def __bool__(self) -> bool:
        return bool(self._began)

    def __len__(self) -> int:
        return len(self._began)

    def oldest(self) -> int | None:
        """When the oldest outstanding write began; None when none is."""
        began, order = self._began, self._order
        while order:
            at = began.get(order[0])
            if at is not None:
                return at
            order.popleft()
        return None
