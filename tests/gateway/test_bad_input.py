"""Bad input from one client: a defined behaviour for it, and the gateway serving everyone else."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from kafka.protocol.metadata import ApiVersionsResponse, MetadataRequest

from coordinator.errors import Errors
from gateway.wire import codec

from . import wire

pytestmark = pytest.mark.kafka


def _still_serves(gw) -> None:
    msg = wire.request(gw.bootstrap, MetadataRequest[12](topics=[]), 12)
    assert msg.brokers


def _connections_drain(gw, timeout=10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not gw.gateway.connections:
            return True
        time.sleep(0.05)
    return False


def test_oversize_frame_closes_the_connection(gateway):
    with wire.connect(gateway.bootstrap) as sock:
        sock.sendall(struct.pack(">i", gateway.config.max_frame_bytes + 1) + b"\x00" * 64)
        assert wire.closed_by_peer(sock)
    _still_serves(gateway)


def test_garbage_bytes_close_the_connection(gateway):
    with wire.connect(gateway.bootstrap) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert wire.closed_by_peer(sock)
    with wire.connect(gateway.bootstrap) as sock:
        sock.sendall(struct.pack(">i", 3) + b"abc")  # a frame too short to hold a request header
        assert wire.closed_by_peer(sock)
    _still_serves(gateway)


def test_unknown_api_key_closes_the_connection(gateway):
    with wire.connect(gateway.bootstrap) as sock:
        sock.sendall(struct.pack(">ihhih", 10, 9999, 0, 1, -1))
        assert wire.closed_by_peer(sock)
    _still_serves(gateway)


def test_unsupported_api_versions_version_gets_the_v0_fallback(gateway):
    with wire.connect(gateway.bootstrap) as sock:
        # ApiVersions v99, header v2: client id, empty tagged fields, then a body we cannot know
        sock.sendall(struct.pack(">ihhih", 11, 18, 99, 5, -1) + b"\x00")
        payload = wire.recv_frame(sock)
    assert struct.unpack_from(">i", payload)[0] == 5
    msg = ApiVersionsResponse[0].decode(payload[4:])
    assert msg.error_code == Errors.UNSUPPORTED_VERSION
    assert [a.api_key for a in msg.api_keys] == [18]


def test_unsupported_version_gets_an_error_response(gateway):
    # DescribeQuorum v2 is above what the gateway offers (KIP-853 controller endpoints) and has a
    # top-level error code.
    with wire.connect(gateway.bootstrap) as sock:
        sock.sendall(struct.pack(">ihhih", 11, 55, 2, 8, -1) + b"\x00")
        payload = wire.recv_frame(sock)
        _, msg = codec.decode_response(55, 2, payload)
        assert msg.error_code == Errors.UNSUPPORTED_VERSION
        # the connection stays usable
        wire.send(sock, MetadataRequest[12](topics=[]), 12, correlation_id=9)
        assert struct.unpack_from(">i", wire.recv_frame(sock))[0] == 9


def test_unsupported_version_without_error_field_closes(gateway):
    # Produce v14 (above every version the gateway knows) has only per-partition error codes: no
    # response can be built without the body.
    with wire.connect(gateway.bootstrap) as sock:
        sock.sendall(struct.pack(">ihhih", 11, 0, 14, 8, -1) + b"\x00")
        assert wire.closed_by_peer(sock)


def test_truncated_frame_and_vanishing_client_leak_nothing(gateway):
    for _ in range(5):
        sock = wire.connect(gateway.bootstrap)
        sock.sendall(struct.pack(">i", 500) + b"\x00\x03\x00\x0c")  # promises 500 bytes, sends 4
        time.sleep(0.05)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
        sock.close()
    with wire.connect(gateway.bootstrap) as sock:
        wire.send(sock, MetadataRequest[12](topics=[]), 12)
        sock.close()  # vanishes with a request in flight
    assert _connections_drain(gateway)
    _still_serves(gateway)


def test_pipelined_requests_are_answered_in_order(gateway):
    with wire.connect(gateway.bootstrap) as sock:
        for corr in range(100, 140):
            wire.send(sock, MetadataRequest[12 if corr % 2 else 1](topics=[]), 12 if corr % 2 else 1, corr)
        sock.sendall(struct.pack(">ihhih", 11, 18, 99, 140, -1) + b"\x00")  # answered by the gateway itself
        wire.send(sock, MetadataRequest[12](topics=[]), 12, 141)
        got = [struct.unpack_from(">i", wire.recv_frame(sock))[0] for _ in range(42)]
    assert got == list(range(100, 142))
