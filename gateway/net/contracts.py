"""What the parts of the network floor see of each other, and what they need from the floors above: the
contracts a client connection, its upstream link, its SASL side and the listeners' limits are written
against, so that none of them imports another's class.

- ``ConnectionHost``: what a client connection uses of the gateway that accepted it (gateway/net/server.py).
- ``ClientSide``: what an upstream link, the SASL side and the limits use of a client connection
  (gateway/net/connection.py).
- ``LocalHandler``: a request the gateway answers itself (the group layer's handlers, given to the
  gateway at construction in its ``HandlerChain``).
- ``PassthroughAuthorizer`` and ``Verdict``: SASL termination's authorization of passed-through requests
  (implemented by gateway/authz/data.py).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gateway.wire import frames

if TYPE_CHECKING:
    from gateway.config.settings import GatewayConfig
    from gateway.metrics import GatewayMetrics
    from gateway.net.refusals import RefusalLog
    from gateway.net.rewrite import Broker
    from gateway.net.unreachable import Replies
    from gateway.net.upstream import BrokerDirectory
    from gateway.security.sasl import ClientSasl
    from gateway.security.sasl_server import Terminator

# A local handler answers a request itself: (the request's source, parsed header, request payload) ->
# response payload (response header + body, without the size prefix). The source is the connection's
# ``RequestSource`` (below): its peer, listener node and principal, never the connection.
LocalHandler = Callable[["RequestSource", frames.RequestHeader, bytes], Awaitable[bytes]]


@dataclass(frozen=True)
class HandlerChain:
    """What the gateway answers itself instead of forwarding, given to it at construction.

    ``local_handlers`` maps an api key to ``async handler(source, header, payload) -> response payload``:
    the gateway answers that API itself on every listener. ``payload`` is the request without its size
    prefix (decode it with ``codec.decode_request``); the handler returns the response header + body
    (``codec.encode_response``); its answer still leaves in request order. ``local_api`` lists the version
    ranges of those APIs for ApiVersions and the request check. ``passthrough_authz``: under SASL
    termination, the authorization of what the clients send through (None: passed on under the gateway's
    own rights)."""

    local_handlers: Mapping[int, LocalHandler] = field(default_factory=dict)
    local_api: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    passthrough_authz: PassthroughAuthorizer | None = None


class RequestSource:
    """Who sent a request the gateway answers itself, and all a local handler learns of the connection:
    its peer, the listener's node (None: the bootstrap listener) and, on a SASL listener, the principal
    once the client authenticated. One per connection, made when it opens."""

    __slots__ = ("_sasl", "node_id", "peer")

    def __init__(self, peer: Any, node_id: int | None, sasl: ClientSasl | None) -> None:
        self.peer = peer
        self.node_id = node_id
        self._sasl = sasl

    @property
    def principal(self) -> str | None:
        """``User:<name>`` once the client authenticated on a SASL listener; None otherwise."""
        sasl = self._sasl
        return sasl.principal if sasl is not None and sasl.authenticated else None


class Slot:
    # merge: turns the cluster's answer into the client's (gateway/authz/data.py refusals merged in).
    __slots__ = ("data", "merge")

    def __init__(self, data: bytes | None = None) -> None:
        self.data = data
        self.merge: Callable[[bytes], bytes] | None = None


@dataclass
class Verdict:
    """What to do with a request that is not passed on unchanged: ``forward`` it instead (a frame), and/or
    answer it now (``answer``: a response payload), or ``close`` the connection (nothing to answer with);
    ``merge`` turns the cluster's answer (payload) into the client's; ``reason`` for the refusal log.
    ``refused``: something was refused (logged); False: only answers to adjust (Metadata, ...)."""

    reason: str
    forward: bytes | None = None
    answer: bytes | None = None
    merge: Callable[[bytes], bytes] | None = None
    close: bool = False
    refused: bool = True



class PassthroughAuthorizer(Protocol):
    """SASL termination: the check of a request passed through for the client's principal."""

    def check(
        self, principal: str, host: str, api_key: int, version: int, frame: bytes, acks0: bool = False
    ) -> Verdict | None:
        """None: pass ``frame`` on unchanged."""
        ...


class Limits(Protocol):
    """The listeners' limits as a connection meets them (gateway/net/limits.py ``ConnectionLimits``)."""

    def admit(self, conn: ClientSide) -> bool: ...
    def link_allowed(self, conn: ClientSide) -> bool: ...
    def reserve(self, conn: ClientSide, delta: int) -> None: ...
    def release(self, conn: ClientSide) -> None: ...


class LinkOf(Protocol):
    """An upstream link as its client connection's parts see it (gateway/net/upstream_link.py)."""

    inflight: deque[tuple[int, Slot, int, int, bytes]]
    renew_at: float | None
    transport: asyncio.Transport | None


class ClientSide(Protocol):
    """A client connection as its upstream link, its SASL side and the listeners' limits see it."""

    gw: ConnectionHost
    peer: Any
    closed: bool
    transport: asyncio.Transport | None
    metrics: GatewayMetrics
    pending: deque[Slot]
    upstream: Any
    sasl: ClientSasl | None
    terminating: bool
    close_after_flush: bool  # answer what is pending, then close (nothing more is read)
    # the limits' marks (gateway/net/limits.py)
    reserved: int
    active: bool
    idle_since: float
    last_write_buffer: int
    partial_seq: int
    partial_since: float
    buf: frames.FrameBuffer

    @property
    def principal(self) -> str | None: ...

    def close(self) -> None: ...
    def flush(self) -> None: ...
    def pause(self, reason: str) -> None: ...
    def resume(self, reason: str) -> None: ...
    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None: ...
    def on_response(self, frame: bytes, link: Any = None) -> None: ...
    def upstream_lost(self, link: Any, exc: Exception | None) -> None: ...
    def answer_unlinked(self, requests: list[tuple[Slot | None, bytes, int, int, int]]) -> None: ...


class ConnectionHost(Protocol):
    """What a client connection uses of the gateway that accepted it (gateway/net/server.py ``Gateway``), and
    nothing more: settings, counters, limits, the upstream brokers, the answers it gives itself, the SASL
    terminator, the set of open connections. A connection never reaches listeners, shutdown or the group layer (whose
    handlers the gateway was constructed with)."""

    config: GatewayConfig
    metrics: GatewayMetrics
    directory: BrokerDirectory
    refusals: RefusalLog
    replies: Replies
    local_handlers: dict[int, LocalHandler]
    connections: set[Any]
    sasl_terminator: Terminator | None  # SASL termination (gateway/security/sasl_server.py); None: passthrough
    data_authz: PassthroughAuthorizer | None  # termination: authorization of passed-through requests

    @property
    def limits(self) -> Limits:
        """The listeners' limits (read only here: a connection never replaces them)."""
        ...

    def addr_of(self, node_id: int) -> tuple[str, int] | None:
        """The address clients use for ``node_id`` (None: the gateway does not serve it)."""
        ...

    def listed_nodes(self) -> list[Broker]:
        """Nodes of the gateway's own listed beside the brokers in Metadata and DescribeCluster."""
        ...

    def presented_node_ids(self, node_id: int | None) -> frozenset[int] | None:
        """The node ids clients were given for listener ``node_id`` (gateway/net/node_check.py)."""
        ...


