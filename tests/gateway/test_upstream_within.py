"""gateway/net/upstream_client.py's wait for a link's answer: its result, a timeout, or the caller's cancel."""

from __future__ import annotations

import asyncio

import pytest

from gateway.net.upstream_client import _within


def test_the_answer_in_time_is_returned():
    async def main():
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, fut.set_result, "answer")
        assert await _within(fut, 5.0) == "answer"

    asyncio.run(main())


def test_no_answer_in_time_raises_timeout_and_cancels_the_answer():
    async def main():
        fut = asyncio.get_running_loop().create_future()
        with pytest.raises(TimeoutError):
            await _within(fut, 0.02)
        assert fut.cancelled()  # the link ignores the answer should it still come

    asyncio.run(main())


def test_a_cancelled_caller_is_cancelled_not_timed_out():
    async def main():
        fut = asyncio.get_running_loop().create_future()
        waiting = asyncio.ensure_future(_within(fut, 5.0))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert fut.cancelled()

    asyncio.run(main())


def test_an_error_answer_is_raised_as_it_is():
    async def main():
        fut = asyncio.get_running_loop().create_future()
        fut.set_exception(ConnectionResetError("gone"))
        with pytest.raises(ConnectionResetError):
            await _within(fut, 5.0)

    asyncio.run(main())
