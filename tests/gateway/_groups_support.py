"""Shared pieces of the group layer's unit tests: a gateway stand-in and request/response bytes."""

from __future__ import annotations

from typing import Any

from gateway.config.settings import GatewayConfig
from gateway.metrics import GatewayMetrics
from gateway.net.limits import ConnectionLimits
from gateway.net.refusals import RefusalLog
from gateway.net.upstream import BrokerDirectory
from gateway.wire import codec, frames

HOME_NODE = 1
HOME_ADDR = ("127.0.0.1", 19093)


class StubGateway:
    """What the group layer uses of the Gateway: config, directory, handlers, served listeners."""

    def __init__(self) -> None:
        # Port 1 refuses connections at once: every upstream call fails fast.
        self.config = GatewayConfig(
            upstream="127.0.0.1:1", upstream_connect_timeout_s=0.2, upstream_request_timeout_s=0.5
        )
        self.directory = BrokerDirectory(self.config)
        self.local_handlers: dict[int, Any] = {}
        self.broker_ports = {HOME_NODE: HOME_ADDR[1]}
        # What /metrics and /readyz read (gateway/metrics.py Health).
        self.metrics = GatewayMetrics()
        self.refusals = RefusalLog()
        self.connections: set[Any] = set()
        self.serving = True
        self.tls_handshake_failures: int | None = None  # plaintext listeners
        self.limits = ConnectionLimits(self.config, self.metrics, self.connections)

    def addr_of(self, node_id: int) -> tuple[str, int] | None:
        return HOME_ADDR if node_id == HOME_NODE else None


class StubConnection:
    def __init__(self, node_id: int | None = HOME_NODE, principal: str | None = None) -> None:
        self.node_id = node_id
        self.peer = ("10.1.2.3", 40000)
        self.principal = principal  # ClientConnection.principal: set once a SASL client authenticated


def request_payload(msg: Any, version: int, correlation_id: int = 7, client_id: str = "app") -> bytes:
    msg.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(msg.encode(version=version, header=True))


async def call(layer: Any, api_key: int, version: int, msg: Any, conn: Any = None) -> Any:
    """Send one request through the layer's handler; the decoded response body."""
    payload = request_payload(msg, version)
    header = frames.parse_request_header(payload, codec.request_header_flexible(api_key, version))
    out = await layer.handle(conn or StubConnection(), header, payload)
    assert frames.response_correlation_id(out) == 7
    return codec.decode_response(api_key, version, out)[1]


def layer_on(gw: Any, settings: Any, *, install: bool = True) -> Any:
    """A group layer built on a stand-in gateway as the command builds one on the real gateway: sharing its
    config, directory and refusal log, with the stand-in as its node table; ``install``: the layer's
    handler chain given to the stand-in (what ``Gateway(config, layer.chain())`` does)."""
    from gateway.groups.layer import GroupLayer

    layer = GroupLayer(gw.config, settings, directory=gw.directory, nodes=gw, refusals=getattr(gw, "refusals", None))
    if install:
        chain = layer.chain()
        gw.local_handlers = dict(chain.local_handlers)
        gw.data_authz = chain.passthrough_authz
        gw.directory.set_local_api(chain.local_api)
    return layer
