"""A minimal blocking Kafka wire client for tests: send one request, read one response."""

from __future__ import annotations

import socket
import struct
from typing import Any

from gateway.wire import codec


def connect(bootstrap: str, timeout: float = 10.0) -> socket.socket:
    host, _, port = bootstrap.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=timeout)


def send(sock: socket.socket, msg: Any, version: int, correlation_id: int = 1) -> None:
    msg.with_header(correlation_id=correlation_id, client_id="wire-test")
    sock.sendall(bytes(msg.encode(version=version, header=True, framed=True)))


def recv_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", recv_exact(sock, 4))[0]
    return recv_exact(sock, size)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def request(bootstrap: str, msg: Any, version: int, correlation_id: int = 7) -> Any:
    with connect(bootstrap) as sock:
        send(sock, msg, version, correlation_id)
        payload = recv_frame(sock)
    assert struct.unpack_from(">i", payload)[0] == correlation_id
    return codec.decode_response(msg.API_KEY, version, payload)[1]


def closed_by_peer(sock: socket.socket, timeout: float = 10.0) -> bool:
    """True when the peer closes the connection (EOF or reset) within ``timeout``."""
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
