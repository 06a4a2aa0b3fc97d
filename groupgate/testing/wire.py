"""Single Kafka requests over a plain socket (kafka-python's and the gateway's protocol classes), to ask
exactly one thing of a broker or a gateway: no client logic, caching or retries in between."""

from __future__ import annotations

import itertools
import socket
import struct
from typing import Any

_correlation = itertools.count(1)


def split_address(address: str) -> tuple[str, int]:
    host, _, port = address.split(",")[0].strip().rpartition(":")
    return host, int(port)


def read_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def roundtrip(
    address: str, request: Any, response_class: Any, version: int, timeout_s: float = 10.0,
    client_id: str = "groupgate-testing",
) -> Any:
    """Send one request at ``version`` on a fresh connection and decode the matching response."""
    cid = next(_correlation)
    request.with_header(correlation_id=cid, client_id=client_id)
    frame = request.encode(version=version, header=True, framed=True)
    with socket.create_connection(split_address(address), timeout=timeout_s) as sock:
        sock.sendall(frame)
        (size,) = struct.unpack(">i", read_exact(sock, 4))
        payload = read_exact(sock, size)
    response = response_class[version].decode(payload, version=version, header=True)
    got = response.header.correlation_id
    if got != cid:
        raise ConnectionError(f"correlation id {got} != {cid}")
    return response
