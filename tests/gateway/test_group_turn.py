"""gateway/groups/shard_schedule.py GroupTurn: one group's requests one at a time, in arrival order, with
no lock or future for a request that finds nobody ahead of it; a cancelled request neither blocks nor
drops the turn."""

from __future__ import annotations

import asyncio
import collections

import pytest

from gateway.groups.shard_schedule import GroupTurn


async def test_a_lone_request_leaves_nothing_behind() -> None:
    turns: dict[str, collections.deque[asyncio.Future[None]]] = {}
    async with GroupTurn(turns, "g"):
        assert list(turns) == ["g"] and not turns["g"]  # the group's turn is taken, nobody waits
    assert turns == {}


async def test_requests_of_one_group_take_turns_in_arrival_order() -> None:
    turns: dict[str, collections.deque[asyncio.Future[None]]] = {}
    order: list[str] = []
    inside = 0

    async def request(name: str) -> None:
        nonlocal inside
        async with GroupTurn(turns, "g"):
            inside += 1
            assert inside == 1, "two requests of one group in its turn at once"
            order.append(name)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            inside -= 1

    await asyncio.gather(*(request(f"r{i}") for i in range(5)))
    assert order == [f"r{i}" for i in range(5)]
    assert turns == {}


async def test_other_groups_do_not_wait() -> None:
    turns: dict[str, collections.deque[asyncio.Future[None]]] = {}
    held = asyncio.Event()
    other_done = asyncio.Event()

    async def holder() -> None:
        async with GroupTurn(turns, "a"):
            held.set()
            await other_done.wait()

    task = asyncio.create_task(holder())
    await held.wait()
    async with GroupTurn(turns, "b"):
        other_done.set()
    await task
    assert turns == {}


async def test_a_request_cancelled_while_waiting_is_skipped() -> None:
    turns: dict[str, collections.deque[asyncio.Future[None]]] = {}
    release = asyncio.Event()
    order: list[str] = []

    async def first() -> None:
        async with GroupTurn(turns, "g"):
            await release.wait()
            order.append("first")

    async def later(name: str) -> None:
        async with GroupTurn(turns, "g"):
            order.append(name)

    t1 = asyncio.create_task(first())
    await asyncio.sleep(0)
    t2 = asyncio.create_task(later("second"))
    t3 = asyncio.create_task(later("third"))
    await asyncio.sleep(0)
    t2.cancel()
    release.set()
    await asyncio.gather(t1, t3)
    with pytest.raises(asyncio.CancelledError):
        await t2
    assert order == ["first", "third"]
    assert turns == {}


async def test_a_request_cancelled_after_it_was_handed_the_turn_passes_it_on() -> None:
    turns: dict[str, collections.deque[asyncio.Future[None]]] = {}
    release = asyncio.Event()
    order: list[str] = []
    tasks: list[asyncio.Task[None]] = []

    async def first() -> None:
        async with GroupTurn(turns, "g"):
            await release.wait()
            order.append("first")
        # The turn is the second request's now, which has not run yet: cancelled before it does.
        tasks[0].cancel()

    async def later(name: str) -> None:
        async with GroupTurn(turns, "g"):
            order.append(name)

    t1 = asyncio.create_task(first())
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(later("second")))
    t3 = asyncio.create_task(later("third"))
    await asyncio.sleep(0)
    release.set()
    await asyncio.wait_for(asyncio.gather(t1, t3), 5)
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    assert order == ["first", "third"]
    assert turns == {}
