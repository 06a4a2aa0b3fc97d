"""A round-robin TCP load balancer on loopback, as a layer-4 balancer in front of a fleet: every accepted
connection is piped, byte for byte, to the next target in turn. ``with RoundRobinProxy([a, b]) as lb:
lb.address``; it runs its own event loop on a thread and closes every connection on exit."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence

from .probe import split_address


class RoundRobinProxy:
    def __init__(self, targets: Sequence[str], host: str = "127.0.0.1") -> None:
        assert targets
        self.targets = [split_address(t) for t in targets]
        self.host = host
        self.port = 0
        self.accepted = 0  # connections accepted, for assertions
        self._next = 0
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> RoundRobinProxy:
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(asyncio.start_server(self._accept, self.host, 0))
            self.port = int(self._server.sockets[0].getsockname()[1])
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="round-robin-proxy", daemon=True)
        self._thread.start()
        assert ready.wait(10), "the proxy did not start"
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for w in list(self._writers):
                w.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self._thread = None

    def __enter__(self) -> RoundRobinProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        host, port = self.targets[self._next % len(self.targets)]
        self._next += 1
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            writer.close()
            self._writers.discard(writer)
            return
        self._writers.add(up_writer)
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except asyncio.CancelledError:
            pass  # stop(): the connection is closed below, as the balancer goes away
        finally:
            for w in (writer, up_writer):
                w.close()
                self._writers.discard(w)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()
