"""What a group API handler is given, and what a group request names: the request context (Kroxylicious's
FilterContext idea: the request's identity, the client's, and the two ways out that are not the
gateway's own answer), the group ids a request names, and refusals in the API's own response shape."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from coordinator.errors import Errors
from gateway.authz.groups import ALLOW_ALL, Access
from gateway.wire import codec
from gateway.wire import group_codec as gc
from gateway.wire.api_keys import ApiKey

ANONYMOUS = "User:ANONYMOUS"


@dataclass(frozen=True, slots=True)
class RequestContext:
    """One client request, as a handler sees it (never the connection itself).

    ``principal`` is the client's principal: ``User:<name>`` once it authenticated on a SASL listener
    (gateway/security/sasl.py), "User:ANONYMOUS" otherwise. ``send_upstream(group_id, kind)`` forwards the request as the client
    sent it to the group's coordinator in the cluster and returns the answer under the client's
    correlation id (``kind``: "share" / "streams" when a success proves the cluster holds such a group);
    ``access`` answers what the principal may do, from the cluster's ACLs (gateway/authz/groups.py);
    ``refuse(kind, reason)`` notes a request refused, logged once per client and kind."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    client_host: str  # "/10.1.2.3", as Kafka shows a member's host
    node_id: int | None  # the broker listener the request arrived on (None: the bootstrap listener)
    send_upstream: Callable[[str, str | None], Awaitable[bytes]]
    refuse: Callable[[str, str], None]
    principal: str = ANONYMOUS
    # What the principal may do (gateway/authz/groups.py); everything when authorization is off.
    access: Access = ALLOW_ALL


def names_member(api_key: int, version: int, msg: Any) -> bool:
    """Whether an offset request comes from a group member (not a simple commit or an admin read): only
    then may the group be a streams group the gateway has not seen yet."""
    if api_key == ApiKey.OFFSET_FETCH:
        return version >= 9 and bool(msg.groups) and bool(msg.groups[0].member_id)
    if api_key in (ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT):
        return bool(getattr(msg, "member_id", ""))
    return False


def response_error(api_key: int, version: int, payload: bytes) -> int:
    """The error code that tells whether a forwarded request reached the group's coordinator."""
    try:
        _, r = codec.decode_response(api_key, version, payload)
    except Exception:  # noqa: BLE001 - an answer the gateway cannot read is the client's to judge
        return 0
    if getattr(r, "error_code", 0):
        return int(r.error_code)
    if api_key == ApiKey.OFFSET_FETCH and version >= 8 and r.groups:
        return int(r.groups[0].error_code)
    if api_key in (ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT):
        for t in r.topics:
            for p in t.partitions:
                return int(p.error_code)
    return 0


def refusal_payload(api_key: int, version: int, correlation_id: int, msg: Any, error: int, message: str) -> bytes:
    """``error`` for the whole request: top-level, or on every group / partition it names."""
    payload = codec.error_response(api_key, version, correlation_id, error)
    if payload is not None:
        return payload
    body = gc.refusal(api_key, version, msg, error, message)
    if body is None:
        return error_payload(api_key, version, correlation_id, error)
    return codec.encode_response(api_key, version, correlation_id, body)


def unloaded_payload(api_key: int, version: int, correlation_id: int, msg: Any) -> bytes:
    """NOT_COORDINATOR where the response carries it: top level, per group or per partition.

    ListGroups, which every broker answers for its own groups, says COORDINATOR_NOT_AVAILABLE, which
    admin clients retry (NOT_COORDINATOR there would fail the listing)."""
    error = Errors.COORDINATOR_NOT_AVAILABLE if api_key == ApiKey.LIST_GROUPS else Errors.NOT_COORDINATOR
    return refusal_payload(api_key, version, correlation_id, msg, error, "group state is being re-read")


def error_payload(api_key: int, version: int, correlation_id: int, error: int) -> bytes:
    """A response saying ``error``: top-level when the API has the field, else an empty response."""
    payload = codec.error_response(api_key, version, correlation_id, error)
    if payload is not None:
        return payload
    return codec.encode_response(api_key, version, correlation_id, codec.RESPONSES[api_key][version]())


__all__ = [
    "ANONYMOUS", "RequestContext", "error_payload", "names_member", "refusal_payload",
    "response_error", "unloaded_payload",
]
