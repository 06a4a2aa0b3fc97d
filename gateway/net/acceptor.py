"""The gateway's listening sockets, accepted by the gateway itself on either event loop.

Each time a listener is readable every connection waiting in its queue is accepted (up to the listen
backlog), and each is handed to the loop as an accepted socket (``loop.connect_accepted_socket``), which
builds the loop's own transport around it. asyncio's ``create_server`` accepts the same way; uvloop's takes
one connection per turn of its loop (libuv since 1.45), and with the gateway's core full a turn serves
every connection that has a request ready, so new members waited for minutes (docs/performance.md, "New
connections on a full core"). Accepting here gives uvloop's cheaper transports without that wait.

A failed accept for lack of a resource (EMFILE, ENFILE, ENOBUFS, ENOMEM) goes to the loop's exception
handler as the loops report it (gateway/net/limits.py turns it into one rate-limited warning) and the
listener rests for a second, so a process out of descriptors does not spin; a connection reset before it
was accepted is skipped.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable
from typing import Any

from gateway.logging import get_logger
from gateway.net import eager

log = get_logger("gateway.net.acceptor")

# Errors of accept() that mean "no resource now": report, rest, try again (as asyncio's own server does).
_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
ACCEPT_RETRY_S = 1.0


def _bind(host: str | None, port: int, backlog: int, reuse_address: bool) -> list[socket.socket]:
    """Listening, non-blocking sockets for every address ``host`` resolves to (all interfaces for ""/None),
    as asyncio's create_server binds them: IPv6 sockets are IPv6 only, so both families can share a port."""
    infos = socket.getaddrinfo(host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    seen: set[tuple[int, Any]] = set()
    try:
        for family, type_, proto, _, addr in infos:
            if (family, addr) in seen:
                continue
            seen.add((family, addr))
            try:
                sock = socket.socket(family, type_, proto)
            except OSError:
                continue  # an address family this host cannot open (IPv6 disabled): asyncio skips it too
            sockets.append(sock)
            if reuse_address:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(addr)
            except OSError as e:
                # asyncio's own wording, which tools read (groupgate.testing retries on "address already in use").
                reason = (e.strerror or str(e)).lower()
                raise OSError(
                    e.errno, f"error while attempting to bind on address {addr!r}: {reason}"
                ) from None
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for s in sockets:
            s.close()
        raise
    if not sockets:
        raise OSError(f"no address to listen on for {host!r}")
    return sockets


class Listener:
    """Listening sockets whose connections become ``protocol_factory()`` protocols on the running loop.
    Shaped like the ``asyncio.Server`` it replaces where the gateway uses one: ``sockets``, ``close()``,
    ``wait_closed()``."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        sockets: list[socket.socket],
        backlog: int,
    ) -> None:
        self._loop = loop
        self._factory = protocol_factory
        self._sockets = sockets
        self._backlog = max(1, backlog)
        self._closed = False
        self._handovers: set[asyncio.Task[Any]] = set()
        self.accepted = 0
        for sock in sockets:
            self._listen(sock)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._sockets)

    def _listen(self, sock: socket.socket) -> None:
        if not self._closed:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(self._backlog):
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return  # the queue is empty
            except ConnectionAbortedError:
                continue  # reset by the peer while it waited: the next one
            except OSError as exc:
                self._loop.remove_reader(sock.fileno())
                self._loop.call_later(ACCEPT_RETRY_S, self._listen, sock)
                if exc.errno in _RESOURCE_ERRORS:
                    self._loop.call_exception_handler(
                        {
                            "message": "socket.accept() out of system resource",
                            "exception": exc,
                            "socket": sock,
                        }
                    )
                else:
                    log.warning(
                        "accept failed; the listener rests a second",
                        error=str(exc),
                        listen=str(sock.getsockname()),
                    )
                return
            self.accepted += 1
            self._hand_over(conn)

    def _hand_over(self, conn: socket.socket) -> None:
        try:
            conn.setblocking(False)
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            conn.close()  # gone already
            return
        # Stepped at once: the loop's transport exists, and is reading, before the next connection is taken
        # (a task would first wait for the loop's ready callbacks, which uvloop runs only once it has
        # served every ready connection, many times over on a full core).
        done, task = eager.start(self._connect(conn))
        if not done:
            self._handovers.add(task)
            task.add_done_callback(self._handovers.discard)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, conn)  # type: ignore[arg-type]
        except asyncio.CancelledError:
            conn.close()
            raise
        except OSError as e:  # the peer went away during the hand-over
            log.debug("accepted connection lost before it was served", error=str(e))
            conn.close()

    def close(self) -> None:
        """Stop accepting; connections already accepted stay open (as ``asyncio.Server.close``)."""
        if self._closed:
            return
        self._closed = True
        for sock in self._sockets:
            try:
                self._loop.remove_reader(sock.fileno())
            except (ValueError, OSError):
                pass
            sock.close()

    async def wait_closed(self) -> None:
        if self._handovers:
            await asyncio.gather(*self._handovers, return_exceptions=True)


async def listen(
    protocol_factory: Callable[[], asyncio.BaseProtocol],
    host: str | None,
    port: int,
    *,
    backlog: int = 100,
    reuse_address: bool = True,
) -> Listener:
    """Listen on ``host:port`` (0: a free port) and serve every connection on the running loop."""
    loop = asyncio.get_running_loop()
    return Listener(loop, protocol_factory, _bind(host, port, backlog, reuse_address), backlog)
