"""gateway/groups/shard_schedule.py: ShardTimer: a deadline moved later fires once, at the later time; and
the shard (gateway/groups/shard.py) never hands its service a timer before the deadline by its own clock."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from coordinator.outcome import Outcome
from coordinator.timers import ScheduleTimer
from gateway.groups.shard import Shard
from gateway.groups.shard_context import ShardContext, ShardSettings
from gateway.groups.shard_schedule import ShardTimer
from gateway.groups.shard_state import ShardState

KEY = ("session", "g", "m")


def test_a_deadline_moved_later_fires_once_at_the_later_time():
    async def main():
        loop = asyncio.get_running_loop()
        fired: list[tuple[object, float]] = []
        start = loop.time()
        timer = ShardTimer(loop, start + 0.05, lambda key: fired.append((key, loop.time())), KEY, 0)
        timer.due = start + 0.15  # a heartbeat pushed the deadline: the armed handle stays
        await asyncio.sleep(0.1)
        assert fired == []  # the first arming came due and armed again for the later time
        await asyncio.sleep(0.1)
        assert [k for k, _ in fired] == [KEY]
        assert fired[0][1] >= start + 0.15
        await asyncio.sleep(0.05)
        assert len(fired) == 1

    asyncio.run(main())


def test_a_cancelled_timer_does_not_fire_whether_or_not_it_moved():
    async def main():
        loop = asyncio.get_running_loop()
        fired: list[object] = []
        start = loop.time()
        moved = ShardTimer(loop, start + 0.02, fired.append, KEY, 0)
        moved.due = start + 0.06
        await asyncio.sleep(0.04)  # armed again for the later time
        moved.cancel()
        still = ShardTimer(loop, start + 0.02, fired.append, ("rebalance", "g", "m"), 0)
        still.cancel()
        await asyncio.sleep(0.08)
        assert fired == []

    asyncio.run(main())


class _Calls:
    """The shard's service, reduced to what a fired timer reaches: when each came, by the shard's clock."""

    def __init__(self) -> None:
        self.fired: list[tuple[object, int]] = []

    def take_assignment_jobs(self) -> list[object]:
        return []

    def member_count(self, group_id: str) -> tuple[int, str]:
        return 0, "consumer"

    def on_timer(self, key: Any, now_ms: int) -> Outcome:
        self.fired.append((key, now_ms))
        return Outcome()


def test_a_timer_the_loop_runs_early_by_the_shards_clock_reaches_the_service_only_at_its_deadline():
    """uvloop's timers run on libuv's clock (whole milliseconds, cached per turn), so one may come due a
    moment before its deadline by the shard's clock: the shard arms it again for the rest."""

    async def main():
        loop = asyncio.get_running_loop()
        clock = [1_000]  # the shard's ms clock, standing still while the loop's runs on
        calls = _Calls()
        stats = type("Stats", (), {"timers_fired": collections.Counter(), "expired": collections.Counter()})()
        ctx = ShardContext(
            now=lambda: clock[0], next_key=lambda: 0, until_ready=None, confirm_if_stalled=None,  # type: ignore[arg-type]
            spawn=loop.create_task, open_log=None, new_service=lambda: calls,  # type: ignore[arg-type,return-value]
            calls_for=lambda service, index: calls, topics=lambda: None,  # type: ignore[arg-type,return-value]
            stats=stats, counters=collections.Counter(), settings=ShardSettings(),
        )
        shard = Shard(ctx, 0)
        shard._life.state = ShardState.ACTIVE
        out = Outcome()
        out.timers.append(ScheduleTimer(KEY, 1_050))
        shard.apply(out)
        await asyncio.sleep(0.08)  # the loop's timer came due while the shard's clock says 1,000 < 1,050
        assert calls.fired == []
        assert KEY in shard.timers  # armed again for the rest, not dropped
        clock[0] = 1_050
        await asyncio.sleep(0.08)
        assert calls.fired == [(KEY, 1_050)]
        assert KEY not in shard.timers

    asyncio.run(main())
