"""The operators' endpoint (``metrics_listen``): a small HTTP/1.1 server on the gateway's event loop.

``GET /metrics`` (Prometheus text format 0.0.4), ``GET /healthz`` (200 while the event loop runs),
``GET /readyz`` (200 once the gateway serves, 503 and the reasons otherwise). Anything else: 404 for an
unknown path, 405 for another method, 400 for what does not parse, 431 for a request head over
``MAX_HEAD_BYTES``, 408 when the head does not arrive in time. One request per connection: the
server answers and closes. It never reads a body and keeps no state between requests, so a bad
request costs one short-lived connection and nothing else.

Idle or slow connections cannot starve the probes: every connection is served on its own with a
deadline for its request head, and there is no small cap that idle sockets could fill. To bound the
descriptors they hold, once ``MAX_CONNECTIONS`` are open a new connection evicts the one that has
waited longest for its request head (a probe sends its head at once and is gone within milliseconds,
so it is never the oldest waiting).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from gateway.logging import get_logger
from gateway.ops.health import CONTENT_TYPE, Health

log = get_logger("gateway.ops.admin_http")

MAX_HEAD_BYTES = 8192
HEAD_TIMEOUT_S = 5.0
# Connections open at once; beyond it the longest-waiting one is closed (see above). Counted in the
# descriptors gateway/net/limits.py keeps free for everything but client connections.
MAX_CONNECTIONS = 128

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    503: "Service Unavailable",
}
_TEXT = "text/plain; charset=utf-8"


class AdminServer:
    """``server = AdminServer(health); await server.start(host, port); server.address; await server.stop()``."""

    def __init__(self, health: Health) -> None:
        self.health = health
        self._routes: dict[str, Callable[[], tuple[int, str, str]]] = {
            "/metrics": self._metrics,
            "/healthz": self._healthz,
            "/readyz": self._readyz,
        }
        self._server: asyncio.Server | None = None
        # Connections still waiting for their request head, oldest first (dicts keep insertion order).
        self._waiting: dict[asyncio.StreamWriter, None] = {}
        self._open = 0
        self.evicted = 0
        self.address = ("", 0)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self._server = await asyncio.start_server(
            self._serve, host, port, limit=MAX_HEAD_BYTES, reuse_address=True
        )
        sockname = self._server.sockets[0].getsockname()
        self.address = (str(sockname[0]), int(sockname[1]))
        return self.address

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None

    # --- one connection --------------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open += 1
        if self._open > MAX_CONNECTIONS and self._waiting:
            oldest = next(iter(self._waiting))
            del self._waiting[oldest]
            self.evicted += 1
            oldest.transport.abort()  # its pending read ends at EOF; it is not answered
        self._waiting[writer] = None
        try:
            try:
                status, ctype, body = await self._answer(reader)
            finally:
                self._waiting.pop(writer, None)
            if writer.transport.is_closing():
                return  # evicted while it waited, or gone
            head = (
                f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
                f"Content-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\n"
                + ("Allow: GET\r\n" if status == 405 else "")
                + "Connection: close\r\n\r\n"
            )
            writer.write(head.encode("ascii") + body)
            await asyncio.wait_for(writer.drain(), HEAD_TIMEOUT_S)
            if status >= 400:
                await _discard_input(reader, writer)
        except (ConnectionError, TimeoutError):
            pass
        except Exception:
            log.exception("admin request failed")
        finally:
            self._open -= 1
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[int, str, bytes]:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
        except asyncio.LimitOverrunError:
            return _text(431, "request head too large\n")
        except asyncio.IncompleteReadError as e:
            if len(e.partial) > MAX_HEAD_BYTES:
                return _text(431, "request head too large\n")
            return _text(400, "incomplete request\n")
        except TimeoutError:
            return _text(408, "request head not received in time\n")
        if len(head) > MAX_HEAD_BYTES:
            return _text(431, "request head too large\n")
        line = head.split(b"\r\n", 1)[0]
        parts = line.split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1.") or not parts[1].startswith(b"/"):
            return _text(400, "malformed request line\n")
        method = parts[0]
        path = parts[1].split(b"?", 1)[0].decode("ascii", "replace")
        route = self._routes.get(path)
        if route is None:
            return _text(404, "not found\n")
        if method != b"GET":
            return _text(405, "only GET is supported\n")
        status, ctype, text = route()
        return status, ctype, text.encode("utf-8")

    # --- routes ----------------------------------------------------------------------------------------

    def _metrics(self) -> tuple[int, str, str]:
        return 200, CONTENT_TYPE, self.health.render()

    @staticmethod
    def _healthz() -> tuple[int, str, str]:
        return 200, _TEXT, "ok\n"

    def _readyz(self) -> tuple[int, str, str]:
        reasons = self.health.not_ready()
        if reasons:
            return 503, _TEXT, "not ready: " + "; ".join(reasons) + "\n"
        return 200, _TEXT, "ready\n"


async def _discard_input(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Before closing on a bad request: read what the client still sends, briefly, so that closing
    with unread input (a TCP reset) does not destroy the answer before the client reads it."""
    if writer.can_write_eof():
        writer.write_eof()
    with contextlib.suppress(Exception):
        for _ in range(16):
            if not await asyncio.wait_for(reader.read(65536), 1.0):
                break


def _text(status: int, text: str) -> tuple[int, str, bytes]:
    return status, _TEXT, text.encode("utf-8")
