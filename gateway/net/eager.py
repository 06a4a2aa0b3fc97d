"""Run a coroutine's first step at once; a task carries on only when it suspends.

Most requests the gateway answers itself (a steady heartbeat, a check that fails) finish without ever
waiting: handing each to ``create_task`` costs a Task, a scheduled callback and a turn of the event
loop before the first line of the handler runs. ``start`` steps the coroutine right away instead, in a
copy of the current context as a task would, and only when it suspends on a future is the rest handed to
a task. That task resumes the coroutine exactly where it stopped: its first step hands the event loop
the future the coroutine waits on, as if the task had run the first step itself, and what the task sends
or throws later (a result, a cancellation) goes to the coroutine unchanged.

What differs from a task: while the first step runs, ``asyncio.current_task()`` is the caller's (None in
a protocol callback), so that step must not need a task of its own (``asyncio.timeout`` does; awaiting
futures, locks and other coroutines does not); and the step runs before the caller's next line, not on
a later turn of the loop.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine, Generator
from typing import Any

_NOTHING = object()


def start(coro: Coroutine[Any, Any, Any]) -> tuple[bool, Any]:
    """Step ``coro`` until it finishes or first suspends. ``(True, result)`` when it finished (what it
    raised is raised here); ``(False, task)`` when it suspended, the task carrying it on from there."""
    context = contextvars.copy_context()
    try:
        first = context.run(coro.send, None)
    except StopIteration as stop:
        return True, stop.value
    return False, asyncio.get_running_loop().create_task(_Rest(coro, first), context=context)


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


class _Rest(Coroutine[Any, Any, Any]):
    """A started coroutine as a task's coroutine: the task's first step gets what the coroutine yielded
    when it suspended, every later step goes to the coroutine itself."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self._coro = coro
        self._first = first

    def send(self, value: Any) -> Any:
        first = self._first
        if first is not _NOTHING:
            self._first = _NOTHING
            return first
        return self._coro.send(value)

    def throw(self, *args: Any) -> Any:  # type: ignore[override]
        first = self._first
        if first is not _NOTHING:
            # Cancelled before the task's first step: a task would have cancelled the future the coroutine
            # waits on as well, and the coroutine sees the error where it waits.
            self._first = _NOTHING
            if asyncio.isfuture(first):
                first.cancel()
                # A task would have read the outcome of the future it waited on; the error goes to the
                # coroutine directly here, so nobody would, and a gather cancelled this way ends with an
                # exception asyncio then logs as never retrieved.
                first.add_done_callback(_retrieve)
        return self._coro.throw(*args)

    def close(self) -> None:
        self._first = _NOTHING
        self._coro.close()

    def __await__(self) -> Generator[Any, None, Any]:
        raise TypeError("a resumed coroutine is run by its task, not awaited")
