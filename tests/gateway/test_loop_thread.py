"""gateway/loop_thread.py: an event loop on a thread of its own, awaited from another loop or called from
synchronous code."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gateway.loop_thread import LoopThread


async def _where() -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    return asyncio.get_running_loop(), threading.current_thread()


async def test_work_awaited_from_another_loop_runs_on_the_threads_loop() -> None:
    lt = LoopThread("test-loop")
    try:
        loop, thread = await lt.run(_where())
        assert loop is lt.loop() and loop is not asyncio.get_running_loop()
        assert thread.name == "test-loop" and thread is not threading.current_thread()
        assert not lt.on_it()
    finally:
        await asyncio.to_thread(lt.stop)
    assert loop.is_closed() and not thread.is_alive()


async def test_cancelling_the_caller_cancels_the_work_on_the_threads_loop() -> None:
    lt = LoopThread("test-loop")
    started, cancelled = threading.Event(), threading.Event()

    async def forever() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    task = asyncio.create_task(lt.run(forever()))
    assert await asyncio.to_thread(started.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(cancelled.wait, 10)
    await asyncio.to_thread(lt.stop)


def test_stop_cancels_what_is_left_and_the_loop_starts_again_on_next_use() -> None:
    lt = LoopThread("test-loop")
    ended: list[str] = []

    async def left_running() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append("cancelled on its loop")

    first = lt.loop()
    lt.submit(left_running())
    lt.call(asyncio.sleep, 0.05)  # the submitted task has started
    lt.stop()
    assert ended == ["cancelled on its loop"] and first.is_closed()
    # Used again: a new loop on a new thread.
    loop, thread = lt.call(_where)
    assert loop is not first and thread.is_alive()
    lt.stop()
    assert not thread.is_alive()


def test_submit_to_a_stopped_loop_drops_the_work_without_a_warning() -> None:
    lt = LoopThread("test-loop")
    ran: list[int] = []

    async def work() -> None:
        ran.append(1)

    coro = work()
    lt.submit(coro)  # never started: closed here, not left un-awaited
    assert coro.cr_frame is None and ran == []


def test_call_soon_runs_on_the_loops_thread_or_at_once_when_there_is_none() -> None:
    lt = LoopThread("test-loop")
    seen: list[threading.Thread] = []
    lt.call_soon(lambda: seen.append(threading.current_thread()))
    assert seen == [threading.current_thread()]  # no loop: nothing runs concurrently, so at once
    done = threading.Event()
    lt.loop()
    lt.call_soon(lambda: (seen.append(threading.current_thread()), done.set()))
    assert done.wait(10) and seen[1].name == "test-loop"
    lt.stop()


def test_a_failing_call_raises_in_the_caller() -> None:
    lt = LoopThread("test-loop")

    async def fail() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        lt.call(fail)
    lt.stop()
