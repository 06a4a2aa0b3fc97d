"""Shared pieces of the group layer's unit tests: a gateway stand-in and request/response bytes.

tests/gateway is a package, so pytest puts tests/ on sys.path; there tests/coordinator (a directory
without __init__.py) would be taken for the namespace package ``coordinator`` and shadow the real
one. ``real_coordinator()`` imports the real package first, with tests/ out of the path.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

_TESTS = Path(__file__).resolve().parents[1]


def real_coordinator() -> None:
    mod = sys.modules.get("coordinator")
    if mod is not None and getattr(mod, "__file__", None) is not None:
        return
    for name in [n for n in sys.modules if n == "coordinator" or n.startswith("coordinator.")]:
        del sys.modules[name]
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _TESTS]
    try:
        import coordinator.assignors  # noqa: F401
    finally:
        sys.path[:] = saved


real_coordinator()

from gateway import codec, frames  # noqa: E402
from gateway.config import GatewayConfig  # noqa: E402
from gateway.upstream import BrokerDirectory  # noqa: E402

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

    def addr_of(self, node_id: int) -> tuple[str, int] | None:
        return HOME_ADDR if node_id == HOME_NODE else None


class StubConnection:
    def __init__(self, node_id: int | None = HOME_NODE) -> None:
        self.node_id = node_id
        self.peer = ("10.1.2.3", 40000)


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
