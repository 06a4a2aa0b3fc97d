"""The parts of a client connection (gateway/connection.py) that are not its request path: a response
slot, the upstream link it opens to one broker, and ``ConnectionHost``, what it needs of the gateway."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from . import frames
from .upstream import set_nodelay

if TYPE_CHECKING:
    from .config import GatewayConfig
    from .connection import ClientConnection
    from .data_authz import DataAuthorizer
    from .limits import ConnectionLimits
    from .metrics import GatewayMetrics
    from .refusals import RefusalLog
    from .rewrite import Broker
    from .sasl_server import Terminator
    from .unreachable import Replies
    from .upstream import BrokerDirectory

# Upstream frames are trusted (Fetch responses may legitimately be large); only the int32 bounds them.
UPSTREAM_FRAME_LIMIT = 2**31 - 1

# A local handler answers a request itself: (connection, parsed header, request payload) -> response payload
# (response header + body, without the size prefix).
LocalHandler = Callable[["ClientConnection", frames.RequestHeader, bytes], Awaitable[bytes]]


class Slot:
    # merge: turns the cluster's answer into the client's (gateway/data_authz.py refusals merged in).
    __slots__ = ("data", "merge")

    def __init__(self, data: bytes | None = None) -> None:
        self.data = data
        self.merge: Callable[[bytes], bytes] | None = None


class UpstreamLink(asyncio.Protocol):
    """The gateway's connection to one upstream broker on behalf of one client connection."""

    def __init__(self, client: ClientConnection) -> None:
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
        set_nodelay(transport)

    def data_received(self, data: bytes) -> None:
        on_response = self.client.on_response
        for f in self.buf.feed(data):
            on_response(f, self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.upstream_lost(self, exc)

    def pause_writing(self) -> None:
        self.client.pause("upstream-backpressure")

    def resume_writing(self) -> None:
        self.client.resume("upstream-backpressure")


class ConnectionHost(Protocol):
    """What a client connection uses of the gateway that accepted it (gateway/server.py ``Gateway``), and
    nothing more: settings, counters, limits, the upstream brokers, the answers it gives itself, the SASL
    terminator, the set of open connections. A connection never reaches listeners, shutdown or the group layer (which hands
    it handlers through ``local_handlers``)."""

    config: GatewayConfig
    metrics: GatewayMetrics
    limits: ConnectionLimits
    directory: BrokerDirectory
    refusals: RefusalLog
    replies: Replies
    local_handlers: dict[int, LocalHandler]
    connections: set[ClientConnection]
    sasl_terminator: Terminator | None  # SASL termination (gateway/sasl_server.py); None: passthrough
    data_authz: DataAuthorizer | None  # termination: authorization of passed-through requests

    def addr_of(self, node_id: int) -> tuple[str, int] | None:
        """The address clients use for ``node_id`` (None: the gateway does not serve it)."""
        ...

    def listed_nodes(self) -> list[Broker]:
        """Nodes of the gateway's own listed beside the brokers in Metadata and DescribeCluster."""
        ...


__all__ = ["UPSTREAM_FRAME_LIMIT", "ConnectionHost", "LocalHandler", "Slot", "UpstreamLink"]
