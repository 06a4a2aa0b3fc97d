"""Response rewriting: no upstream broker address may ever reach a client.

Metadata, FindCoordinator, DescribeCluster, ShareFetch and ShareAcknowledge responses carry broker
host:port pairs; each is replaced
by the gateway address of that node id's listener (port-per-broker), and a broker the gateway cannot
serve is left out (or, for a coordinator, reported as COORDINATOR_NOT_AVAILABLE so the client retries).
ApiVersions is narrowed to what the gateway proxies correctly (see ``gateway_api_ranges``).
All functions are pure: payload bytes in, payload bytes out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import codec

# node id -> (host, port) the client should use, or None when the gateway cannot serve that node.
AddressOf = Callable[[int], "tuple[str, int] | None"]
ApiRanges = dict[int, tuple[int, int]]

# Versions whose responses carry broker endpoints the gateway does not rewrite:
# Produce v10+ and Fetch v16+ carry NodeEndpoints for leader changes (KIP-951), DescribeQuorum v2+ carries
# the controllers' listener endpoints (KIP-853). Advertising only the versions below keeps them away.
VERSION_CAPS: dict[int, int] = {codec.PRODUCE: 9, codec.FETCH: 15, 55: 1}
# Versions below these are not decoded: the share APIs' v0 was an early-access format of Kafka 4.0 that
# 4.1 replaced with v1 (KIP-932); a 4.0 cluster's share groups stay hidden rather than misread.
VERSION_FLOORS: dict[int, int] = {
    codec.SHARE_GROUP_HEARTBEAT: 1,
    codec.SHARE_GROUP_DESCRIBE: 1,
    codec.SHARE_FETCH: 1,
    codec.SHARE_ACKNOWLEDGE: 1,
}

# A feature level is only worth advertising when the client-facing APIs it enables are offered: a client
# that sees share.version (KIP-932) or streams.version (KIP-1071) finalized uses those APIs.
FEATURE_APIS: dict[str, frozenset[int]] = {
    "share.version": frozenset(
        {
            codec.SHARE_GROUP_HEARTBEAT,
            codec.SHARE_GROUP_DESCRIBE,
            codec.SHARE_FETCH,
            codec.SHARE_ACKNOWLEDGE,
        }
    ),
    "streams.version": frozenset({codec.STREAMS_GROUP_HEARTBEAT, codec.STREAMS_GROUP_DESCRIBE}),
}


@dataclass(slots=True, frozen=True)
class Broker:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True)
class Rewritten:
    payload: bytes
    brokers: list[Broker] | None = None  # the upstream brokers the response listed (Metadata/DescribeCluster)
    api_ranges: ApiRanges | None = None  # the gateway ranges derived from an ApiVersions response


def rewrite_metadata(payload: bytes, version: int, addr_of: AddressOf) -> Rewritten:
    head, msg = codec.decode_response(codec.METADATA, version, payload)
    seen = [Broker(b.node_id, b.host, b.port, b.rack) for b in msg.brokers]
    kept = []
    for b in msg.brokers:
        addr = addr_of(b.node_id)
        if addr is None:
            continue
        b.host, b.port = addr
        kept.append(b)
    msg.brokers = kept
    return Rewritten(head + codec.encode_body(msg, version), brokers=seen)


def rewrite_describe_cluster(payload: bytes, version: int, addr_of: AddressOf) -> Rewritten:
    head, msg = codec.decode_response(codec.DESCRIBE_CLUSTER, version, payload)
    if version >= 1 and msg.endpoint_type == 2:
        # KIP-919 controller endpoints: the gateway proxies brokers only and must not reveal controllers.
        msg.brokers = []
        msg.error_code = codec.INVALID_REQUEST
        msg.error_message = "the gateway exposes broker endpoints only"
        return Rewritten(head + codec.encode_body(msg, version))
    seen = [Broker(b.broker_id, b.host, b.port, b.rack) for b in msg.brokers]
    kept = []
    for b in msg.brokers:
        addr = addr_of(b.broker_id)
        if addr is None:
            continue
        b.host, b.port = addr
        kept.append(b)
    msg.brokers = kept
    return Rewritten(head + codec.encode_body(msg, version), brokers=seen)


def _rewrite_coordinator(c: Any, addr_of: AddressOf) -> None:
    if c.error_code != 0 or c.node_id < 0:
        c.host, c.port = "", -1
        return
    addr = addr_of(c.node_id)
    if addr is None:
        c.error_code = codec.COORDINATOR_NOT_AVAILABLE
        c.error_message = "the coordinator's broker is not served by the gateway"
        c.node_id, c.host, c.port = -1, "", -1
    else:
        c.host, c.port = addr


def rewrite_find_coordinator(payload: bytes, version: int, addr_of: AddressOf) -> Rewritten:
    head, msg = codec.decode_response(codec.FIND_COORDINATOR, version, payload)
    if version >= 4:
        # KIP-699 batched lookups: one entry per requested key.
        for c in msg.coordinators:
            _rewrite_coordinator(c, addr_of)
    else:
        if version == 0:
            msg.error_message = None  # v0 has no field for it; keep the encoder from tripping over it
        _rewrite_coordinator(msg, addr_of)
    return Rewritten(head + codec.encode_body(msg, version))


def gateway_api_ranges(
    upstream: Mapping[int, tuple[int, int]], local: Mapping[int, tuple[int, int]]
) -> ApiRanges:
    """The versions the gateway offers: upstream ranges narrowed to what it proxies correctly.

    An API the codec does not know is dropped (its response might carry addresses we cannot see),
    decoded APIs are capped at the codec's max version, VERSION_CAPS and VERSION_FLOORS apply, and ``local`` (APIs the
    gateway answers itself) replaces upstream ranges.
    """
    out: ApiRanges = {}
    for key, (lo, hi) in upstream.items():
        if not codec.known(key):
            continue
        hi = min(hi, codec.codec_max_version(key), VERSION_CAPS.get(key, hi))
        lo = max(lo, VERSION_FLOORS.get(key, lo))
        if hi >= lo:
            out[key] = (lo, hi)
    out.update(local)
    return out


def rewrite_api_versions(payload: bytes, version: int, local: Mapping[int, tuple[int, int]]) -> Rewritten:
    head, msg = codec.decode_response(codec.API_VERSIONS, version, payload)
    upstream = {a.api_key: (a.min_version, a.max_version) for a in msg.api_keys}
    if msg.error_code != 0:
        # The upstream answered in v0 (KIP-511 fallback); cap what it lists and keep the v0 shape.
        ranges = gateway_api_ranges(upstream, {})
        msg.api_keys = [_api_version(k, lo, hi) for k, (lo, hi) in sorted(ranges.items())]
        return Rewritten(head + codec.encode_body(msg, 0))
    ranges = gateway_api_ranges(upstream, local)
    msg.api_keys = [_api_version(k, lo, hi) for k, (lo, hi) in sorted(ranges.items())]
    if version >= 3:
        missing = {name for name, keys in FEATURE_APIS.items() if not keys <= ranges.keys()}
        if missing:
            msg.supported_features = [f for f in msg.supported_features if f.name not in missing]
            msg.finalized_features = [f for f in msg.finalized_features if f.name not in missing]
    return Rewritten(head + codec.encode_body(msg, version), api_ranges=ranges)


def _api_version(key: int, lo: int, hi: int) -> Any:
    from kafka.protocol.metadata import ApiVersionsResponse

    return ApiVersionsResponse.ApiVersion(api_key=key, min_version=lo, max_version=hi)


def api_versions_unsupported(correlation_id: int, max_version: int) -> bytes:
    """KIP-511: a client whose ApiVersions version is too new gets a v0 response with
    UNSUPPORTED_VERSION and the ApiVersions range we do support, so it can retry with a version we know."""
    from kafka.protocol.metadata import ApiVersionsResponse

    msg = ApiVersionsResponse[0](
        error_code=codec.UNSUPPORTED_VERSION, api_keys=[_api_version(codec.API_VERSIONS, 0, max_version)]
    )
    return codec.encode_response(codec.API_VERSIONS, 0, correlation_id, msg)


def rewrite_node_endpoints(api_key: int) -> Callable[[bytes, int, AddressOf], Rewritten]:
    """ShareFetch / ShareAcknowledge (KIP-932): the new leaders of partitions answered with
    NOT_LEADER_OR_FOLLOWER, as NodeEndpoints. A leader the gateway cannot serve is left out (the client
    then refreshes its metadata, which says the same)."""

    def rewrite(payload: bytes, version: int, addr_of: AddressOf) -> Rewritten:
        head, msg = codec.decode_response(api_key, version, payload)
        if not msg.node_endpoints:
            return Rewritten(payload)
        kept = []
        for n in msg.node_endpoints:
            addr = addr_of(n.node_id)
            if addr is None:
                continue
            n.host, n.port = addr
            kept.append(n)
        msg.node_endpoints = kept
        return Rewritten(head + codec.encode_body(msg, version))

    return rewrite


REWRITERS: dict[int, Callable[[bytes, int, AddressOf], Rewritten]] = {
    codec.METADATA: rewrite_metadata,
    codec.FIND_COORDINATOR: rewrite_find_coordinator,
    codec.DESCRIBE_CLUSTER: rewrite_describe_cluster,
    codec.SHARE_FETCH: rewrite_node_endpoints(codec.SHARE_FETCH),
    codec.SHARE_ACKNOWLEDGE: rewrite_node_endpoints(codec.SHARE_ACKNOWLEDGE),
}
