"""The operators' endpoint (``metrics_listen``): an aiohttp application on the gateway's event loop.

``GET /metrics`` (prometheus_client's text exposition of gateway/ops/health.py's registry), ``GET /healthz``
(200 while the event loop runs), ``GET /readyz`` (200 once the gateway serves, 503 and the reasons
otherwise). aiohttp answers the rest: 404 for an unknown path, 405 (with ``Allow``) for another method, 400
for what does not parse or a request head over its line and field limits.

Idle or slow connections cannot starve the probes: aiohttp closes a connection that has not sent a whole
request within ``HEAD_TIMEOUT_S`` (its keep-alive timeout, armed from the moment a connection opens), and
to bound the descriptors they hold, once ``MAX_CONNECTIONS`` are open a new connection evicts the oldest
one with no request being answered (a probe is answered within milliseconds, so it is never that one).

More pages are routes on ``AdminServer.app`` (``admin.app.router.add_get(...)``) added before ``start()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

from gateway.logging import get_logger
from gateway.ops.health import CONTENT_TYPE, Health

log = get_logger("gateway.ops.admin_http")

# aiohttp's own limits on a request line and each header line (it answers 400 beyond them).
MAX_HEAD_BYTES = 8190
HEAD_TIMEOUT_S = 5.0
# Connections open at once; beyond it the oldest one not being answered is closed (see above). Counted in
# the descriptors gateway/net/limits.py keeps free for everything but client connections.
MAX_CONNECTIONS = 128
HEALTH_KEY: web.AppKey[Health] = web.AppKey("health", Health)


class _NotBadInput(logging.Filter):
    """aiohttp logs a request it cannot parse with its traceback; a bad request is answered 400 and
    is no error of the gateway's (a port scan would otherwise fill the log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, HttpProcessingError)


_server_log = logging.getLogger("gateway.ops.admin_http.server")
_server_log.addFilter(_NotBadInput())


class AdminServer:
    """``server = AdminServer(health); await server.start(host, port); server.address; await server.stop()``."""

    def __init__(self, health: Health) -> None:
        self.health = health
        self.app = web.Application(middlewares=[self._busy_middleware])
        self.app[HEALTH_KEY] = health
        self.app.router.add_get("/metrics", self._metrics, allow_head=False)
        self.app.router.add_get("/healthz", self._healthz, allow_head=False)
        self.app.router.add_get("/readyz", self._readyz, allow_head=False)
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self._busy: set[Any] = set()  # connections with a request being answered
        self.evicted = 0
        self.address = ("", 0)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        runner = web.AppRunner(
            self.app,
            handle_signals=False,
            access_log=None,
            logger=_server_log,
            keepalive_timeout=HEAD_TIMEOUT_S,
            max_line_size=MAX_HEAD_BYTES,
            max_field_size=MAX_HEAD_BYTES,
        )
        await runner.setup()
        self._runner = runner
        web_server = runner.server
        assert web_server is not None

        def protocol() -> RequestHandler:
            connections = web_server.connections
            if len(connections) >= MAX_CONNECTIONS:
                idle = next((h for h in connections if h not in self._busy), None)
                if idle is not None:
                    self.evicted += 1
                    idle.force_close()
            return web_server()

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(protocol, host, port, reuse_address=True)
        sockname = self._server.sockets[0].getsockname()
        self.address = (str(sockname[0]), int(sockname[1]))
        return self.address

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._runner.cleanup(), 5)
            self._runner = None

    @web.middleware
    async def _busy_middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        proto = request.protocol
        self._busy.add(proto)
        try:
            response: web.StreamResponse = await handler(request)
            return response
        finally:
            self._busy.discard(proto)

    # --- routes ----------------------------------------------------------------------------------------

    async def _metrics(self, request: web.Request) -> web.Response:
        body = self.health.render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    @staticmethod
    async def _healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        reasons = self.health.not_ready()
        if reasons:
            return web.Response(status=503, text="not ready: " + "; ".join(reasons) + "\n")
        return web.Response(text="ready\n")
