"""An asyncio event loop on a daemon thread of its own, used from other threads and other loops.

Two kinds of callers share it:

- another event loop (the gateway's) awaits work done here: ``await lt.run(coro)``. The cluster state
  store's clients and the instances group's consumer run on such a loop so that their steps (a
  transaction's round trips, a heartbeat) never wait for turns of a gateway loop whose core is full;
- synchronous code (tests, embedding) blocks on it: ``lt.call(fn, *args)``. ``GatewayThread`` runs the
  whole gateway this way.

The loop starts on first use and is started again after ``stop()``. When it stops, whatever is still
running on it is cancelled and awaited there (not left "destroyed but pending"), its async generators are
closed, and the loop is closed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """``lt = LoopThread("name"); await lt.run(coro)`` from another loop, ``lt.call(fn)`` from sync code;
    ``lt.stop()`` (blocking) ends the thread."""

    def __init__(self, name: str, new_loop: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop) -> None:
        self.name = name
        self._new_loop = new_loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _alive(self) -> bool:
        return self._loop is not None and self._thread is not None and self._thread.is_alive()

    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, started (with its thread) if it is not running."""
        with self._lock:
            if self._loop is None or not self._alive():
                loop = self._new_loop()
                started = threading.Event()

                def serve() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    try:
                        loop.run_forever()
                        left = asyncio.all_tasks(loop)
                        for task in left:
                            task.cancel()
                        if left:
                            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
                        loop.run_until_complete(loop.shutdown_asyncgens())
                    finally:
                        loop.close()

                thread = threading.Thread(target=serve, name=self.name, daemon=True)
                thread.start()
                started.wait()
                self._loop, self._thread = loop, thread
            assert self._loop is not None
            return self._loop

    def on_it(self) -> bool:
        """Whether the caller runs on this loop's thread."""
        return self._thread is not None and threading.current_thread() is self._thread

    def start(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """``coro`` started on this loop; the future says when it ends (its callbacks run on this loop's
        thread) and cancelling it cancels ``coro`` here."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop())

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """``coro`` run to its end on this loop, awaited from another; cancelling the caller cancels it
        here."""
        return await asyncio.wrap_future(self.start(coro))

    def call(self, fn: Callable[..., Coroutine[Any, Any, T]], *args: Any, timeout_s: float | None = 60.0) -> T:
        """``fn(*args)`` run on this loop, the calling thread blocked until it ends (sync callers only)."""
        return asyncio.run_coroutine_threadsafe(fn(*args), self.loop()).result(timeout_s)

    def submit(self, coro: Coroutine[Any, Any, Any]) -> None:
        """``coro`` started here, nobody waiting for it; dropped if the loop is not running (the caller's
        loop is going away and nothing here is left to finish)."""
        loop = self._loop
        if loop is None or not self._alive():
            coro.close()
            return
        asyncio.run_coroutine_threadsafe(coro, loop)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` called on this loop's thread: at once when the caller is on it (or the loop never
        started: nothing here runs concurrently), else at its next turn."""
        loop = self._loop
        if loop is None or not self._alive() or self.on_it():
            fn(*args)
            return
        loop.call_soon_threadsafe(fn, *args)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the loop and wait for its thread (blocking: call it off every loop that awaits this one)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):  # already stopped and closed
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=timeout_s)


__all__ = ["LoopThread"]
