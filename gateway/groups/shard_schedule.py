"""The per-request scheduling pieces of a shard (gateway/groups/shard.py): a group's turn (its requests
one at a time, in arrival order), an armed timer whose deadline can move later without a new loop
handle, and the writes being waited for with the oldest of them at hand. Kept apart from the shard's life and answers so each is read and tested alone."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

from coordinator.timers import TimerKey


class GroupTurn:
    """``async with``: one group's turn in its shard, in arrival order. A group in ``turns`` is someone's turn;
    its deque holds the futures of the requests waiting for it, the next one handed the turn by the one that
    ends. A group whose requests never overlap (a steady member's heartbeats) costs no lock and no future:
    the entry is made and removed, nothing waits."""

    __slots__ = ("_group_id", "_turns")

    def __init__(self, turns: dict[str, collections.deque[asyncio.Future[None]]], group_id: str) -> None:
        self._turns = turns
        self._group_id = group_id

    async def __aenter__(self) -> None:
        turns, group_id = self._turns, self._group_id
        waiting = turns.get(group_id)
        if waiting is None:
            turns[group_id] = collections.deque()
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiting.append(fut)
        try:
            await fut
        except BaseException:
            # Cancelled while waiting: off the queue (the end of a turn skips a cancelled future). Cancelled
            # after the turn was handed over but before resuming: the turn goes on to the next.
            if fut.done() and not fut.cancelled():
                self._end()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._end()

    def _end(self) -> None:
        turns, group_id = self._turns, self._group_id
        waiting = turns[group_id]
        while waiting:
            fut = waiting.popleft()
            if not fut.done():
                fut.set_result(None)  # that request's turn now
                return
        del turns[group_id]


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
