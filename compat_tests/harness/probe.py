"""Raw Kafka requests over a plain socket, to see exactly what a client is told (addresses, node ids).

Uses kafka-python's generated protocol classes for encoding and decoding; no client logic in between,
so nothing is cached, retried or rewritten on the way.
"""

from __future__ import annotations

import itertools
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse
from kafka.protocol.metadata import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)

from groupgate.testing import wire
from groupgate.testing.wire import read_exact, split_address

_correlation = itertools.count(1)


def roundtrip(address: str, request: Any, response_class: Any, version: int, timeout_s: float = 10.0) -> Any:
    """Send one request at ``version`` on a fresh connection and decode the matching response."""
    return wire.roundtrip(address, request, response_class, version, timeout_s, client_id="groupgate-compat-probe")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An address some response handed out, and where it came from (for assertion messages)."""

    source: str
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def metadata_endpoints(address: str, version: int = 12, topics: list[str] | None = None) -> list[Endpoint]:
    req_topics = None if topics is None else [{"name": t} for t in topics]
    req = MetadataRequest[version](topics=req_topics, allow_auto_topic_creation=False)
    resp = roundtrip(address, req, MetadataResponse, version)
    return [Endpoint(f"Metadata v{version}", b.node_id, b.host, b.port) for b in resp.brokers]


# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE: retriable while __consumer_offsets is created.
_RETRIABLE = (14, 15)


def find_coordinator_endpoints(address: str, group: str, version: int, timeout_s: float = 30.0) -> list[Endpoint]:
    """FindCoordinator for a group, retried while the coordinator is not ready yet."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return _find_coordinator_once(address, group, version)
        except CoordinatorNotReady:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


class CoordinatorNotReady(AssertionError):
    pass


def _check(code: int, what: str) -> None:
    if code in _RETRIABLE:
        raise CoordinatorNotReady(f"{what}: error {code}")
    assert code == 0, f"{what}: error {code}"


def _find_coordinator_once(address: str, group: str, version: int) -> list[Endpoint]:
    """v0-3 carry one key and one answer; v4+ batch keys (KIP-699)."""
    if version >= 4:
        req = FindCoordinatorRequest[version](key_type=0, coordinator_keys=[group])
        resp = roundtrip(address, req, FindCoordinatorResponse, version)
        out = []
        for c in resp.coordinators:
            _check(c.error_code, f"FindCoordinator v{version} ({c.error_message})")
            out.append(Endpoint(f"FindCoordinator v{version}", c.node_id, c.host, c.port))
        return out
    kwargs: dict[str, Any] = {"key": group}
    if version >= 1:
        kwargs["key_type"] = 0
    resp = roundtrip(address, FindCoordinatorRequest[version](**kwargs), FindCoordinatorResponse, version)
    _check(resp.error_code, f"FindCoordinator v{version}")
    return [Endpoint(f"FindCoordinator v{version}", resp.node_id, resp.host, resp.port)]


def describe_cluster_endpoints(address: str, version: int = 0) -> list[Endpoint]:
    resp = roundtrip(address, DescribeClusterRequest[version](), DescribeClusterResponse, version)
    assert resp.error_code == 0, f"DescribeCluster v{version} error {resp.error_code}"
    return [Endpoint(f"DescribeCluster v{version}", b.broker_id, b.host, b.port) for b in resp.brokers]


def api_versions_v5(
    address: str, cluster_id: str | None, node_id: int, *, software: str = "compat-probe", timeout_s: float = 10.0
) -> tuple[int, bytes]:
    """An ApiVersions v5 request (KIP-1242) naming the cluster id and node id the caller expects, on a fresh
    connection: (error code, response body as sent). The body is compared as bytes, beyond the code."""
    from gateway.wire import codec
    from gateway.wire.api_keys import ApiKey

    cid = next(_correlation)
    client = b"groupgate-compat-probe"
    header = struct.pack(">hhih", ApiKey.API_VERSIONS, 5, cid, len(client)) + client + b"\x00"
    body = codec.REQUESTS[ApiKey.API_VERSIONS][5](
        client_software_name=software, client_software_version="1", cluster_id=cluster_id, node_id=node_id
    ).encode(version=5)
    frame = header + bytes(body)
    with socket.create_connection(split_address(address), timeout=timeout_s) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        (size,) = struct.unpack(">i", read_exact(sock, 4))
        payload = read_exact(sock, size)
    (got,) = struct.unpack_from(">i", payload)
    assert got == cid, f"correlation id {got} != {cid}"
    (error,) = struct.unpack_from(">h", payload, 4)
    return error, payload[4:]


def cluster_id(address: str) -> str:
    resp = roundtrip(address, MetadataRequest[12](topics=[], allow_auto_topic_creation=False), MetadataResponse, 12)
    return str(resp.cluster_id)
