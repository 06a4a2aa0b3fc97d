"""gateway/net/eager.py: a coroutine stepped at once behaves as under a task, whether or not it waits."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from gateway.net import eager

var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="caller")


def run(coro):
    return asyncio.run(coro)


def test_a_coroutine_that_never_waits_finishes_without_a_task():
    steps = []

    async def answer():
        lock = asyncio.Lock()
        async with lock:  # a free lock does not suspend
            steps.append("in")
        return 42

    async def main():
        done, value = eager.start(answer())
        steps.append("after")
        return done, value

    assert run(main()) == (True, 42)
    assert steps == ["in", "after"]  # the whole coroutine ran before start returned


def test_what_it_raises_is_raised_by_start():
    async def fails():
        raise ValueError("bad request")

    async def main():
        with pytest.raises(ValueError, match="bad request"):
            eager.start(fails())

    run(main())


def test_a_coroutine_that_waits_on_a_future_is_carried_on_by_a_task():
    async def main():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        steps = []

        async def waits():
            steps.append("first step")
            value = await fut
            steps.append(f"resumed with {value}")
            await asyncio.sleep(0)  # a bare yield to the loop
            second = loop.create_future()
            loop.call_soon(second.set_result, 2)
            return value + await second

        done, task = eager.start(waits())
        assert not done and isinstance(task, asyncio.Task)
        assert steps == ["first step"]
        await asyncio.sleep(0)
        assert not task.done()  # still waiting on fut
        fut.set_result(40)
        assert await task == 42
        assert steps == ["first step", "resumed with 40"]

    run(main())


def test_an_error_set_on_the_awaited_future_reaches_the_coroutine():
    async def main():
        fut = asyncio.get_running_loop().create_future()

        async def waits():
            try:
                await fut
            except KeyError:
                return "handled"
            return "not raised"

        _, task = eager.start(waits())
        fut.set_exception(KeyError("x"))
        assert await task == "handled"

    run(main())


@pytest.mark.parametrize("before_first_step", [True, False])
def test_cancelling_the_task_cancels_the_coroutine_where_it_waits(before_first_step):
    async def main():
        fut = asyncio.get_running_loop().create_future()
        seen = []

        async def waits():
            try:
                await fut
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise
            finally:
                seen.append("cleaned up")

        _, task = eager.start(waits())
        if not before_first_step:
            await asyncio.sleep(0)  # the task has taken over the wait on fut
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert seen == ["cancelled", "cleaned up"]
        assert fut.cancelled()  # as a task cancels the future it waits on

    run(main())


def test_a_waiting_lock_is_handed_on_in_order():
    async def main():
        lock = asyncio.Lock()
        order = []

        async def turn(name, hold):
            async with lock:
                order.append(name)
                if hold is not None:
                    await hold

        hold = asyncio.get_running_loop().create_future()
        _, first = eager.start(turn("a", hold))  # holds the lock until hold is set
        _, second = eager.start(turn("b", None))  # waits for the lock
        done, third = eager.start(turn("c", None))
        assert order == ["a"] and not done
        hold.set_result(None)
        await asyncio.gather(first, second, third)
        assert order == ["a", "b", "c"]

    run(main())


def test_context_changes_stay_in_the_coroutine_as_under_a_task():
    async def sets(wait):
        var.set("inside")
        if wait is not None:
            await wait
        return var.get()

    async def main():
        assert eager.start(sets(None)) == (True, "inside")
        assert var.get() == "caller"
        fut = asyncio.get_running_loop().create_future()
        _, task = eager.start(sets(fut))
        fut.set_result(None)
        assert await task == "inside"  # the task goes on in the context the first step ran in
        assert var.get() == "caller"

    run(main())


@pytest.mark.parametrize("before_first_step", [True, False])
def test_a_gather_cancelled_with_its_task_leaves_no_unretrieved_error(before_first_step):
    """A task cancelled while it waits on a gather reads the gather's outcome (a CancelledError set as its
    exception); so must a task that carries on a stepped coroutine, or asyncio logs the error as never
    retrieved (a traceback in the gateway's log when a client closes during a lookup)."""

    async def main():
        loop = asyncio.get_running_loop()
        reported = []
        loop.set_exception_handler(lambda _loop, context: reported.append(context.get("message")))

        async def lookup():
            await asyncio.sleep(10)

        async def waits():
            await asyncio.gather(lookup(), lookup())

        _, task = eager.start(waits())
        if not before_first_step:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(5):
            await asyncio.sleep(0)
        del task
        import gc

        gc.collect()
        for _ in range(3):
            await asyncio.sleep(0)
        assert reported == []

    run(main())
