"""gateway/groups/shard_schedule.py: ShardTimer (a deadline moved later fires once, at the later time) and
OutstandingWrites (the oldest write being waited for)."""

from __future__ import annotations

import asyncio

from gateway.groups.shard_schedule import OutstandingWrites, ShardTimer

KEY = ("session", "g", "m")


def test_a_deadline_moved_later_fires_once_at_the_later_time():
    async def main():
        loop = asyncio.get_running_loop()
        fired: list[tuple[object, float]] = []
        start = loop.time()
        timer = ShardTimer(loop, start + 0.05, lambda key: fired.append((key, loop.time())), KEY)
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
        moved = ShardTimer(loop, start + 0.02, fired.append, KEY)
        moved.due = start + 0.06
        await asyncio.sleep(0.04)  # armed again for the later time
        moved.cancel()
        still = ShardTimer(loop, start + 0.02, fired.append, ("rebalance", "g", "m"))
        still.cancel()
        await asyncio.sleep(0.08)
        assert fired == []

    asyncio.run(main())


def test_the_oldest_outstanding_write_is_the_first_begun_that_has_not_ended() -> None:
    writes = OutstandingWrites()
    assert not writes and writes.oldest() is None
    for token, at in ((1, 100), (2, 150), (3, 200)):
        writes.begin(token, at)
    assert len(writes) == 3 and writes.oldest() == 100
    writes.end(2)  # a later write ending first leaves the oldest as it is
    assert writes.oldest() == 100
    writes.end(1)
    assert writes.oldest() == 200
    writes.begin(4, 90)  # the clock stepped back: counted as no time passing
    assert writes.oldest() == 200
    writes.end(3)
    assert writes.oldest() == 200 and len(writes) == 1  # token 4, begun at 200 by the clamped clock
    writes.end(4)
    assert not writes and writes.oldest() is None
