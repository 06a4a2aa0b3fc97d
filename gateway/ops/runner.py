"""Run a Gateway on its own event loop in a daemon thread (for tests and embedding in synchronous code)."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.config.settings import GatewayConfig
from gateway.loop_thread import LoopThread
from gateway.net.contracts import HandlerChain
from gateway.net.server import Gateway


class GatewayThread:
    """``with GatewayThread(config) as gw: KafkaProducer(bootstrap_servers=gw.bootstrap)``."""

    def __init__(self, config: GatewayConfig, chain: HandlerChain | None = None, start_timeout_s: float = 60.0) -> None:
        self.config = config
        self.start_timeout_s = start_timeout_s
        self._chain = chain
        self.gateway: Gateway | None = None
        self._thread = LoopThread("groupgate-gateway")
        self._stopped = False

    @property
    def bootstrap(self) -> str:
        assert self.gateway is not None, "not started"
        return self.gateway.bootstrap

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The gateway's event loop (started with it)."""
        assert self.gateway is not None, "not started"
        return self._thread.loop()

    async def _start(self) -> None:
        self.gateway = Gateway(self.config, self._chain)
        await self.gateway.start()

    def start(self) -> GatewayThread:
        try:
            self._thread.call(self._start, timeout_s=self.start_timeout_s)
        except TimeoutError:
            raise TimeoutError("the gateway did not start in time") from None
        except BaseException as e:  # noqa: BLE001 - reported to the starting thread
            self.gateway = None
            self._thread.stop()
            raise RuntimeError(f"the gateway failed to start: {e}") from e
        return self

    def call(self, fn: Any, *args: Any) -> Any:
        """Run a coroutine function on the gateway's loop and wait for its result."""
        return self._thread.call(fn, *args)

    def stop(self) -> None:
        gw = self.gateway
        if gw is None or self._stopped:
            return
        self._stopped = True
        try:
            self._thread.call(gw.stop, timeout_s=30)
        finally:
            self._thread.stop(30)

    def __enter__(self) -> GatewayThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
