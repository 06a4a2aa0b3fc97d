"""Response rewriting: no upstream broker address may ever reach a client.

Metadata, FindCoordinator, DescribeCluster, ShareFetch and ShareAcknowledge responses carry broker
host:port pairs; each is replaced by the gateway address of that node id's listener (port-per-broker), and a broker the gateway cannot
serve is left out (or, for a coordinator, reported as COORDINATOR_NOT_AVAILABLE so the client retries).
ApiVersions is narrowed to what the gateway proxies correctly (see ``gateway_api_ranges``), and so are
the feature levels it reports (``carried_feature_level``). Produce and Fetch responses carry leader
endpoints (KIP-951), rewritten in ``node_endpoints``. All functions are pure: payload bytes in, payload
bytes out.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.errors import Errors
from gateway.net import node_endpoints
from gateway.wire import codec, frames
from gateway.wire.api_keys import ApiKey

_INT16 = struct.Struct(">h")

# node id -> (host, port) the client should use, or None when the gateway cannot serve that node.
AddressOf = Callable[[int], "tuple[str, int] | None"]
ApiRanges = dict[int, tuple[int, int]]

# Caps besides the codec's: Produce and Fetch up to the versions whose layout node_endpoints walks to
# rewrite the leader endpoints (KIP-951); DescribeQuorum v2+ carries the controllers' listener endpoints
# (KIP-853), which the gateway does not serve, so it stops at v1.
VERSION_CAPS: dict[int, int] = {**node_endpoints.KNOWN_UP_TO, 55: 1}
# Versions below these are not decoded: the share APIs' v0 was an early-access format of Kafka 4.0 that
# 4.1 replaced with v1 (KIP-932); a 4.0 cluster's share groups stay hidden rather than misread.
VERSION_FLOORS: dict[int, int] = {
    ApiKey.SHARE_GROUP_HEARTBEAT: 1,
    ApiKey.SHARE_GROUP_DESCRIBE: 1,
    ApiKey.SHARE_FETCH: 1,
    ApiKey.SHARE_ACKNOWLEDGE: 1,
}


# Finalized features (KIP-584) tell clients which protocol to use; a client trusts a level only together
# with the API versions that level needs. Per feature: the highest level whose needs are known here
# (None: no level needs client APIs), and per level the minimum version of each API it needs.
# transaction.version 2 (KIP-890 part 2): Produce v12+ adds partitions to the transaction implicitly,
# TxnOffsetCommit v5+ does the same for the group's offsets, EndTxn v5+ bumps the epoch per transaction.
# A feature not listed here is withheld: the gateway cannot tell what it would promise.
_SHARE_APIS: dict[int, int] = {
    ApiKey.SHARE_GROUP_HEARTBEAT: 1, ApiKey.SHARE_GROUP_DESCRIBE: 1, ApiKey.SHARE_FETCH: 1, ApiKey.SHARE_ACKNOWLEDGE: 1,
}
FEATURE_NEEDS: dict[str, tuple[int | None, dict[int, dict[int, int]]]] = {
    "metadata.version": (None, {}),
    "kraft.version": (None, {}),
    "eligible.leader.replicas.version": (None, {}),
    "transaction.version": (2, {2: {ApiKey.PRODUCE: 12, ApiKey.TXN_OFFSET_COMMIT: 5, ApiKey.END_TXN: 5}}),
    "group.version": (1, {1: {ApiKey.CONSUMER_GROUP_HEARTBEAT: 0}}),
    # KIP-1071 / KIP-932: every client-facing API of the group type (share APIs from v1, see VERSION_FLOORS).
    "streams.version": (1, {1: {ApiKey.STREAMS_GROUP_HEARTBEAT: 0, ApiKey.STREAMS_GROUP_DESCRIBE: 0}}),
    # share.version 2 (Kafka 4.4, KIP-1191): the share groups' dead-letter queue, written by the brokers to a
    # topic a group config names; it needs no client API beyond level 1's.
    "share.version": (2, {level: dict(_SHARE_APIS) for level in (1, 2)}),
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
    # What the gateway withheld from an ApiVersions response, and why: (kind, detail) pairs for the log.
    narrowed: list[tuple[str, str]] | None = None


def _served(nodes: list[Any], addr_of: AddressOf, id_field: str) -> list[Any]:
    """The nodes the gateway serves, each given the gateway's address for it; the others are left out, so
    no upstream address reaches a client."""
    kept = []
    for n in nodes:
        addr = addr_of(getattr(n, id_field))
        if addr is None:
            continue
        n.host, n.port = addr
        kept.append(n)
    return kept


def _listed(existing: list[Any], listed: Sequence[Broker], make: Callable[..., Any], id_field: str) -> list[Any]:
    """``existing`` with the gateway's own nodes (``listed``) beside them; an id already there is not
    listed twice."""
    ids = {getattr(n, id_field) for n in existing}
    extra = [make(**{id_field: b.node_id}, host=b.host, port=b.port, rack=b.rack) for b in listed if b.node_id not in ids]
    return existing + extra


def rewrite_metadata(payload: bytes, version: int, addr_of: AddressOf, listed: Sequence[Broker] = ()) -> Rewritten:
    """``listed``: nodes of the gateway's own named beside the brokers (the coordinator nodes of a fleet's
    instances, gateway/fleet/membership.py)."""
    head, msg = codec.decode_response(ApiKey.METADATA, version, payload)
    seen = [Broker(b.node_id, b.host, b.port, b.rack) for b in msg.brokers]
    msg.brokers = _served(msg.brokers, addr_of, "node_id")
    if listed:
        msg.brokers = _listed(msg.brokers, listed, type(msg).MetadataResponseBroker, "node_id")
    return Rewritten(head + codec.encode_body(msg, version), brokers=seen)


def rewrite_describe_cluster(
    payload: bytes, version: int, addr_of: AddressOf, listed: Sequence[Broker] = ()
) -> Rewritten:
    head, msg = codec.decode_response(ApiKey.DESCRIBE_CLUSTER, version, payload)
    if version >= 1 and msg.endpoint_type == 2:
        # KIP-919 controller endpoints: the gateway proxies brokers only and must not reveal controllers.
        msg.brokers = []
        msg.error_code = Errors.INVALID_REQUEST
        msg.error_message = "the gateway exposes broker endpoints only"
        return Rewritten(head + codec.encode_body(msg, version))
    seen = [Broker(b.broker_id, b.host, b.port, b.rack) for b in msg.brokers]
    msg.brokers = _served(msg.brokers, addr_of, "broker_id")
    if listed and msg.error_code == 0:
        msg.brokers = _listed(msg.brokers, listed, type(msg).DescribeClusterBroker, "broker_id")
    return Rewritten(head + codec.encode_body(msg, version), brokers=seen)


def _rewrite_coordinator(c: Any, addr_of: AddressOf) -> None:
    if c.error_code != 0 or c.node_id < 0:
        c.host, c.port = "", -1
        return
    addr = addr_of(c.node_id)
    if addr is None:
        c.error_code = Errors.COORDINATOR_NOT_AVAILABLE
        c.error_message = "the coordinator's broker is not served by the gateway"
        c.node_id, c.host, c.port = -1, "", -1
    else:
        c.host, c.port = addr


def rewrite_find_coordinator(payload: bytes, version: int, addr_of: AddressOf) -> Rewritten:
    head, msg = codec.decode_response(ApiKey.FIND_COORDINATOR, version, payload)
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
    decoded APIs are capped at the codec's max version, VERSION_CAPS and VERSION_FLOORS apply, and
    ``local`` (APIs the gateway answers itself) replaces upstream ranges.
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


def narrowed_apis(
    upstream: Mapping[int, tuple[int, int]], ranges: Mapping[int, tuple[int, int]], local: Collection[int] = ()
) -> list[tuple[str, str]]:
    """(kind, reason) for every upstream API range the gateway offers less of than the cluster (the APIs
    in ``local`` are answered by the gateway itself: their ranges are its own, not a narrowing)."""
    out = []
    withheld = []
    for key, (_lo, hi) in sorted(upstream.items()):
        if key in local:
            continue
        got = ranges.get(key)
        if got is None:
            withheld.append(str(key))
        elif got[1] < hi:
            why = "its responses carry broker endpoints" if key in VERSION_CAPS else "the gateway's codec stops there"
            out.append((f"api {key}", f"cluster offers up to v{hi}; advertised up to v{got[1]}: {why}"))
    if withheld:
        out.append(("apis withheld", f"api keys {', '.join(withheld)}: the gateway cannot read their responses"))
    return out


def carried_feature_level(name: str, level: int, ranges: Mapping[int, tuple[int, int]]) -> tuple[int, str]:
    """The highest level <= ``level`` of feature ``name`` the gateway can carry with ``ranges``, and why it
    is lower ("" when it is not). 0 means the feature is withheld."""
    spec = FEATURE_NEEDS.get(name)
    if spec is None:
        return 0, "unknown feature: the gateway cannot tell which API versions it needs"
    top, needs = spec
    carried = level if top is None else min(level, top)
    why = "" if carried == level else f"levels above {top} need API versions the gateway does not know"
    for lvl in sorted(needs):
        if lvl > carried:
            break
        missing = [
            f"api {key} v{v}+" for key, v in sorted(needs[lvl].items()) if key not in ranges or ranges[key][1] < v
        ]
        if missing:
            return lvl - 1, f"level {lvl} needs {', '.join(missing)}, which the gateway does not offer"
    return carried, why


def narrow_features(msg: Any, ranges: Mapping[int, tuple[int, int]]) -> list[tuple[str, str]]:
    """Lower (or drop) the finalized and supported features of a decoded ApiVersions v3+ response to
    the levels the gateway carries with ``ranges``; returns (kind, reason) per lowered finalized feature."""
    notes = []
    finalized = []
    for f in msg.finalized_features or []:
        carried, why = carried_feature_level(f.name, f.max_version_level, ranges)
        if carried < f.max_version_level:
            notes.append((f"feature {f.name}", f"cluster finalized level {f.max_version_level}; advertised {carried}: {why}"))
        if carried <= 0:
            continue  # a feature at level 0 is one the cluster does not have; Kafka leaves it out too
        f.max_version_level = carried
        f.min_version_level = min(f.min_version_level, carried)
        finalized.append(f)
    msg.finalized_features = finalized
    supported = []
    for f in msg.supported_features or []:
        carried, _ = carried_feature_level(f.name, f.max_version, ranges)
        if carried < f.min_version or (carried == 0 and f.max_version > 0):
            continue
        f.max_version = carried
        supported.append(f)
    msg.supported_features = supported
    return notes


def rewrite_api_versions(payload: bytes, version: int, local: Mapping[int, tuple[int, int]]) -> Rewritten:
    head, msg, shape = _decode_api_versions(payload, version)
    upstream = {a.api_key: (a.min_version, a.max_version) for a in msg.api_keys}
    if msg.error_code != 0:
        # An error answer: cap what it lists and keep the shape (version) the upstream answered in.
        ranges = gateway_api_ranges(upstream, {})
        msg.api_keys = [_api_version(k, lo, hi) for k, (lo, hi) in sorted(ranges.items())]
        return Rewritten(head + codec.encode_body(msg, shape))
    ranges = gateway_api_ranges(upstream, local)
    msg.api_keys = [_api_version(k, lo, hi) for k, (lo, hi) in sorted(ranges.items())]
    narrowed = narrowed_apis(upstream, ranges, local)
    if version >= 3:
        narrowed += narrow_features(msg, ranges)
    return Rewritten(head + codec.encode_body(msg, version), api_ranges=ranges, narrowed=narrowed)


def _decode_api_versions(payload: bytes, version: int) -> tuple[bytes, Any, int]:
    """(header bytes, body, the version the body is in) of an upstream ApiVersions response.

    Kafka answers a request version it does not know with a v0 body (KIP-511), but a request it cannot
    accept (INVALID_REQUEST: e.g. a ClientSoftwareName outside [a-zA-Z0-9._-]) in the request's own
    version. kafka-python reads every error answer as v0; like Kafka's own clients, read the request's
    version first and fall back to v0.
    """
    ApiVersionsResponse = codec.RESPONSES[ApiKey.API_VERSIONS]  # noqa: N806 - a class

    off = frames.response_body_offset(payload, codec.response_header_flexible(ApiKey.API_VERSIONS, version))
    error = _INT16.unpack_from(payload, off)[0] if len(payload) >= off + 2 else 0
    if version > 0 and error not in (0, Errors.UNSUPPORTED_VERSION):
        try:
            # ApiMessage.decode, past kafka-python's always-v0 override for error answers.
            body = super(ApiVersionsResponse, ApiVersionsResponse).decode(memoryview(payload)[off:], version=version)
        except Exception:  # noqa: BLE001 - not in the request's version: the v0 fallback below reads it
            pass
        else:
            body._header = None  # decode() leaves the slot unset and encode() reads it
            return bytes(payload[:off]), body, version
    head, body = codec.decode_response(ApiKey.API_VERSIONS, version, payload)
    return head, body, version if body.error_code == 0 else 0


def _api_version(key: int, lo: int, hi: int) -> Any:
    return codec.RESPONSES[ApiKey.API_VERSIONS].ApiVersion(api_key=key, min_version=lo, max_version=hi)


def api_versions_unsupported(correlation_id: int, max_version: int) -> bytes:
    """KIP-511: a client whose ApiVersions version is too new gets a v0 response with
    UNSUPPORTED_VERSION and the ApiVersions range we do support, so it can retry with a version we know."""
    msg = codec.RESPONSES[ApiKey.API_VERSIONS][0](
        error_code=Errors.UNSUPPORTED_VERSION, api_keys=[_api_version(ApiKey.API_VERSIONS, 0, max_version)]
    )
    return codec.encode_response(ApiKey.API_VERSIONS, 0, correlation_id, msg)


def rewrite_node_endpoints(api_key: int) -> Callable[[bytes, int, AddressOf], Rewritten]:
    """ShareFetch / ShareAcknowledge (KIP-932): the new leaders of partitions answered with
    NOT_LEADER_OR_FOLLOWER, as NodeEndpoints. A leader the gateway cannot serve is left out (the client
    then refreshes its metadata, which says the same)."""

    def rewrite(payload: bytes, version: int, addr_of: AddressOf) -> Rewritten:
        head, msg = codec.decode_response(api_key, version, payload)
        if not msg.node_endpoints:
            return Rewritten(payload)
        msg.node_endpoints = _served(msg.node_endpoints, addr_of, "node_id")
        return Rewritten(head + codec.encode_body(msg, version))

    return rewrite


def rewrite_response(
    api_key: int, payload: bytes, version: int, addr_of: AddressOf, listed: Sequence[Broker] = ()
) -> Rewritten:
    """One response of an API in ``REWRITERS``; ``listed`` goes into Metadata and DescribeCluster."""
    if api_key == ApiKey.METADATA:
        return rewrite_metadata(payload, version, addr_of, listed)
    if api_key == ApiKey.DESCRIBE_CLUSTER:
        return rewrite_describe_cluster(payload, version, addr_of, listed)
    return REWRITERS[api_key](payload, version, addr_of)


REWRITERS: dict[int, Callable[[bytes, int, AddressOf], Rewritten]] = {
    ApiKey.METADATA: rewrite_metadata,
    ApiKey.FIND_COORDINATOR: rewrite_find_coordinator,
    ApiKey.DESCRIBE_CLUSTER: rewrite_describe_cluster,
    ApiKey.SHARE_FETCH: rewrite_node_endpoints(ApiKey.SHARE_FETCH),
    ApiKey.SHARE_ACKNOWLEDGE: rewrite_node_endpoints(ApiKey.SHARE_ACKNOWLEDGE),
}
