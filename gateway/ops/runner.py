"""Run a Gateway on its own event loop in a daemon thread (for tests and embedding in synchronous code)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from gateway.config.settings import GatewayConfig
from gateway.net.contracts import HandlerChain
from gateway.net.server import Gateway


class GatewayThread:
    """``with GatewayThread(config) as gw: KafkaProducer(bootstrap_servers=gw.bootstrap)``."""

    def __init__(self, config: GatewayConfig, chain: HandlerChain | None = None, start_timeout_s: float = 60.0) -> None:
        self.config = config
        self.start_timeout_s = start_timeout_s
        self._chain = chain
        self.gateway: Gateway | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def bootstrap(self) -> str:
        assert self.gateway is not None, "not started"
        return self.gateway.bootstrap

    def start(self) -> GatewayThread:
        self._thread = threading.Thread(target=self._run, name="groupgate-gateway", daemon=True)
        self._thread.start()
        if not self._ready.wait(self.start_timeout_s):
            raise TimeoutError("the gateway did not start in time")
        if self._error is not None:
            raise RuntimeError(f"the gateway failed to start: {self._error}") from self._error
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            self.gateway = Gateway(self.config, self._chain)
            loop.run_until_complete(self.gateway.start())
        except BaseException as e:  # noqa: BLE001 - reported to the starting thread
            self._error = e
            self._ready.set()
            loop.close()
            return
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def call(self, fn: Any, *args: Any) -> Any:
        """Run a coroutine function on the gateway's loop and wait for its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(fn(*args), self._loop).result(60)

    def stop(self) -> None:
        loop, gw = self._loop, self.gateway
        if loop is None or gw is None or loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(gw.stop(), loop).result(30)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(30)

    def __enter__(self) -> GatewayThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
