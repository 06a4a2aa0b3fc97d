"""The gateway's link to one upstream broker on behalf of one client connection, and the dialing of it
(as the gateway itself under SASL termination)."""

from __future__ import annotations

import asyncio
import errno
import time
from collections import deque

from gateway.logging import get_logger
from gateway.net.contracts import ClientSide, Slot
from gateway.net.upstream import UpstreamAuthError, open_authenticated, set_nodelay, upstream_credentials
from gateway.security.sasl import AuthenticationFailed
from gateway.security.tls import connect_kwargs, note_upstream_failure
from gateway.wire import frames

log = get_logger("gateway.net.connection")

# Upstream frames are trusted (Fetch responses may legitimately be large); only the int32 bounds them.
UPSTREAM_FRAME_LIMIT = 2**31 - 1

# Connecting upstream failed for lack of local resources (descriptors, buffers), not because of the broker.
_LOCAL_EXHAUSTION = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class UpstreamLink(asyncio.Protocol):
    """The gateway's connection to one upstream broker on behalf of one client connection."""

    def __init__(self, client: ClientSide) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.buf = frames.FrameBuffer(UPSTREAM_FRAME_LIMIT)
        # (correlation id, slot, api key, api version, request frame) per forwarded request awaiting its
        # response; the frame answers it with an error if the link breaks first.
        self.inflight: deque[tuple[int, Slot, int, int, bytes]] = deque()
        # SASL termination: when the session the gateway's credentials got on this link ends (KIP-368,
        # time.monotonic); requests go to a fresh link from then on. None: no lifetime.
        self.renew_at: float | None = None
        self.writer: asyncio.StreamWriter | None = None  # when the link began as a stream (termination)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but they have the same methods.
        self.transport = transport  # type: ignore[assignment]
        self.client.metrics.upstream_links += 1
        set_nodelay(transport)

    def data_received(self, data: bytes) -> None:
        on_response = self.client.on_response
        for f in self.buf.feed(data):
            on_response(f, self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.metrics.upstream_links -= 1
        self.client.upstream_lost(self, exc)

    def pause_writing(self) -> None:
        self.client.pause("upstream-backpressure")

    def resume_writing(self) -> None:
        self.client.resume("upstream-backpressure")


async def open_authenticated_link(conn: ClientSide, host: str, port: int) -> UpstreamLink:
    """SASL termination (gateway/net/connection_sasl.py): a link authenticated as the gateway itself, then handed
    to an UpstreamLink."""
    try:
        reader, writer, lifetime_ms = await open_authenticated(
            host, port, conn.gw.directory.tls, upstream_credentials(conn.gw.config)
        )
    except AuthenticationFailed as e:
        raise UpstreamAuthError(str(e)) from None
    transport = writer.transport
    link = UpstreamLink(conn)
    # The stream writer closes its transport when collected: the link keeps it while it lives.
    link.writer = writer
    transport.set_protocol(link)
    link.connection_made(transport)
    if lifetime_ms > 0:
        # Move to a new link well before the broker's session ends (Kafka's clients re-authenticate
        # at 85-95% of it); a request after the end would close the link.
        link.renew_at = time.monotonic() + lifetime_ms * 0.85 / 1000
    return link


async def dial(
    conn: ClientSide, targets: list[tuple[str, int]]
) -> tuple[UpstreamLink | None, list[str], bool]:
    """The first of ``targets`` that takes a link for ``conn``; else None, what failed, and whether our own
    resources ran out (which says nothing about the cluster)."""
    gw = conn.gw
    directory = gw.directory
    loop = asyncio.get_running_loop()
    errors = []
    exhausted = False
    for host, port in targets:
        try:
            if conn.terminating:
                link = await asyncio.wait_for(open_authenticated_link(conn, host, port),
                                              gw.config.upstream_connect_timeout_s)
            else:
                _, link = await asyncio.wait_for(
                    loop.create_connection(
                        lambda: UpstreamLink(conn), host, port, **connect_kwargs(directory.tls, host)
                    ),
                    gw.config.upstream_connect_timeout_s,
                )
        except UpstreamAuthError as e:
            # The cluster refused the gateway's own credentials: says nothing about its reachability.
            log.warning("upstream refused the gateway's credentials", peer=conn.peer, error=str(e))
            errors.append(str(e))
            continue
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as e:
            errors.append(f"{host}:{port}: {note_upstream_failure(directory.tls, host, port, e)}")
            if getattr(e, "errno", None) in _LOCAL_EXHAUSTION:
                exhausted = True  # our own descriptors ran out: says nothing about the cluster
            else:
                conn.metrics.upstream_connect_failures += 1
            continue
        return link, errors, exhausted
    return None, errors, exhausted
