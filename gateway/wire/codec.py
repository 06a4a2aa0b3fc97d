"""Which message classes the gateway can decode, and small helpers around kafka-python's codec.

Only the few APIs that must be rewritten are ever decoded (Metadata, FindCoordinator, DescribeCluster,
ApiVersions, ShareFetch/ShareAcknowledge responses, and whatever the group layer answers or routes
itself); all others pass through as opaque bytes.
"""

from __future__ import annotations

import functools
from typing import Any

import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.producer  # noqa: F401 - imported so their message classes register
from kafka.protocol.api_message import ApiMessage

from gateway.wire import frames
from gateway.wire.api_keys import ApiKey
from gateway.wire.protocol import connect_messages as _connect  # noqa: F401 - registers api keys 10000-10002
from gateway.wire.protocol import messages as _ours  # registers api keys 68, 69, 76-79, 88-93; OVERRIDES

# KIP-932 share groups and KIP-1071 streams groups: routed to the cluster's coordinators and leaders.

# The error codes the proxy path answers with, from the one error enum (coordinator/errors.py).


def _walk(cls: Any) -> list[Any]:
    out: list[Any] = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_walk(sub))
    return out


def _registry() -> tuple[dict[int, Any], dict[int, Any]]:
    requests: dict[int, Any] = {}
    responses: dict[int, Any] = {}
    for c in _walk(ApiMessage):
        if getattr(c, "_class_version", 1) is not None or getattr(c, "_json", None) is None:
            continue
        table = requests if c.type == "request" else responses
        table.setdefault(c.API_KEY, c)
    for key, (request, response) in _ours.OVERRIDES.items():
        requests[key], responses[key] = request, response
    return requests, responses


REQUESTS, RESPONSES = _registry()


def known(api_key: int) -> bool:
    return api_key in REQUESTS and api_key in RESPONSES


def codec_max_version(api_key: int) -> int:
    return int(RESPONSES[api_key].max_version)


# The lookups below run for every request the gateway decodes or answers; the tables never change after
# import, so each (api key, version) is looked up in kafka-python's classes once. Bounded: a version comes
# from the client, and the caches must not grow with what clients make up.


@functools.lru_cache(maxsize=1024)
def request_class(api_key: int, version: int) -> Any:
    return REQUESTS[api_key][version]


@functools.lru_cache(maxsize=1024)
def response_class(api_key: int, version: int) -> Any:
    return RESPONSES[api_key][version]


@functools.lru_cache(maxsize=1024)
def request_header_flexible(api_key: int, version: int) -> bool:
    # ApiVersions v3+ requests use header v2 like every other flexible request.
    return bool(REQUESTS[api_key].flexible_version_q(version))


@functools.lru_cache(maxsize=1024)
def response_header_flexible(api_key: int, version: int) -> bool:
    # KIP-511: the ApiVersions response header stays v0 so a client can read it before it knows versions.
    if api_key == ApiKey.API_VERSIONS:
        return False
    return bool(RESPONSES[api_key].flexible_version_q(version))


def decode_request(
    api_key: int, version: int, payload: bytes | memoryview
) -> tuple[frames.RequestHeader, Any]:
    header = frames.parse_request_header(payload, request_header_flexible(api_key, version))
    return header, decode_request_body(api_key, version, payload, header.body_offset)


def decode_request_body(api_key: int, version: int, payload: bytes | memoryview, offset: int) -> Any:
    """The request's body, which starts at ``offset`` of ``payload`` (a header already read)."""
    body = request_class(api_key, version).decode(memoryview(payload)[offset:])
    body._header = None  # decode() leaves the slot unset and encode() reads it
    return body


def decode_response(api_key: int, version: int, payload: bytes) -> tuple[bytes, Any]:
    """(header bytes kept verbatim, decoded body) of a response payload (no size prefix)."""
    off = frames.response_body_offset(payload, response_header_flexible(api_key, version))
    body = response_class(api_key, version).decode(memoryview(payload)[off:])
    body._header = None  # decode() leaves the slot unset and encode() reads it
    return bytes(payload[:off]), body


def encode_body(msg: Any, version: int) -> bytes:
    return bytes(msg.encode(version=version))


def encode_response(api_key: int, version: int, correlation_id: int, msg: Any) -> bytes:
    """Response payload (header + body, no size prefix)."""
    hdr = frames.response_header(correlation_id, response_header_flexible(api_key, version))
    return hdr + encode_body(msg, version)


def error_response(api_key: int, version: int, correlation_id: int, error_code: int) -> bytes | None:
    """A response carrying ``error_code`` at the top level, or None when this API/version has no such field.

    Kafka answers a request it cannot serve with the API's own response shape; only responses with a
    top-level ErrorCode can say so without knowing the request's contents.
    """
    if not known(api_key) or not 0 <= version <= codec_max_version(api_key):
        return None
    cls = RESPONSES[api_key]
    # kafka-python opens every schema at v0, but versions below the JSON's own validVersions (dropped by
    # Kafka 4, e.g. OffsetCommit v0-1) are not described by it: no response can be encoded for them.
    if version < int(str(cls.json["validVersions"]).split("-")[0].rstrip("+")):
        return None
    fields = {f["name"]: f for f in cls.json["fields"]}
    spec = fields.get("ErrorCode")
    if spec is None or not _in_versions(spec["versions"], version):
        return None
    msg = cls[version](error_code=error_code)
    try:
        return encode_response(api_key, version, correlation_id, msg)
    except Exception:  # noqa: BLE001 - a required field without default: no generic error response
        return None


def _in_versions(spec: str, version: int) -> bool:
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    lo, _, hi = spec.partition("-")
    return int(lo) <= version <= int(hi or lo)


def null_field(msg: Any, version: int) -> str | None:
    """The path of the first field that is null where the schema says it may not be, or None.

    kafka-python decodes a null string or array (length -1) whatever the schema says, and encodes it
    back the same way; Kafka's broker fails such a request as unparseable and closes the connection.
    So a request must pass this check before the gateway acts on it or sends it on a shared connection.
    The walk follows a plan made once per message class and version (``_null_plan``).
    """
    key = (type(msg), version)
    plan = _NULL_PLANS.get(key)
    if plan is None:
        plan = _NULL_PLANS[key] = _null_plan(type(msg).fields, version)
    return _null_in(plan, msg)


# A null check's plan: per field of the version, not tagged, (attribute, name in paths, nullable, kind,
# plan of its struct's fields). A nullable scalar has nothing to check and is left out.
_NullPlan = tuple[tuple[str, str, bool, int, Any], ...]
_SCALAR, _STRUCT_ARRAY, _ARRAY, _STRUCT = 0, 1, 2, 3
_NULL_PLANS: dict[tuple[type, int], _NullPlan] = {}


def _null_plan(fields: Any, version: int) -> _NullPlan:
    plan = []
    for name, field in fields.items():
        if not field.for_version_q(version) or field.tagged_field_q(version):
            continue
        nullable = bool(field.nullable_for_version_q(version))
        sub: Any = None
        if field.is_struct_array():
            kind, sub = _STRUCT_ARRAY, _null_plan(field.fields, version)
        elif field.is_array():
            kind = _ARRAY
        elif field.is_struct():
            kind, sub = _STRUCT, _null_plan(field.fields, version)
        else:
            if nullable:
                continue
            kind = _SCALAR
        plan.append((name, str(field.name), nullable, kind, sub))
    return tuple(plan)


def _null_in(plan: _NullPlan, obj: Any) -> str | None:
    for name, label, nullable, kind, sub in plan:
        value = getattr(obj, name, None)
        if value is None:
            if not nullable:
                return label
            continue
        if kind == _STRUCT_ARRAY:
            for i, item in enumerate(value):
                found = _null_in(sub, item)
                if found is not None:
                    return f"{label}[{i}].{found}"
        elif kind == _ARRAY:
            # Elements of an array of strings (group ids, topic names) are never nullable.
            if any(item is None for item in value):
                return f"{label}[{[item is None for item in value].index(True)}]"
        elif kind == _STRUCT:
            found = _null_in(sub, value)
            if found is not None:
                return f"{label}.{found}"
    return None
