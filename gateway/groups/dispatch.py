"""A group request's way through the group layer (gateway/groups/layer.py), from the frame to its answer.

``claims`` decodes the frame (once: the decoded request is handed on) and decides local or passthrough;
``handle`` checks it, builds the request context and calls the API's handler (gateway/groups/handlers.py),
which hands the sans-I/O request to the group's shard in the coordinator runtime
(gateway/groups/runtime.py): shard ``shard_of(group_id, state.topic.num.partitions)``, its records
appended to the shard's log in the state store (gateway/state/file_store.py for ``--state-dir``) and the
response released after ``sync()``. Share and streams groups' requests go to the cluster's
coordinators (gateway/groups/cluster.py); offsets stay in the cluster (gateway/groups/offsets.py).

While a shard is unloaded (its log could not be written: re-read in the background; or fenced by a
newer owner) its groups are answered NOT_COORDINATOR (ListGroups: COORDINATOR_NOT_AVAILABLE,
FindCoordinator for them: COORDINATOR_NOT_AVAILABLE); every other shard keeps serving.

The functions read the layer's parts at each request (``Layer``), never a copy of them.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol

from coordinator.errors import Errors
from gateway.authz.groups import ALLOW_ALL
from gateway.groups.cluster import ROUTED_MANY, ROUTED_ONE
from gateway.groups.requests import (
    ANONYMOUS,
    RequestContext,
    error_payload,
    names_member,
    refusal_payload,
    unloaded_payload,
)
from gateway.groups.runtime import ShardUnloaded
from gateway.logging import get_logger
from gateway.wire import codec, frames
from gateway.wire.api_keys import ApiKey
from gateway.wire.group_codec import group_ids

if TYPE_CHECKING:
    from gateway.authz.groups import GroupAuthorizer
    from gateway.groups.cluster import ClusterGroups
    from gateway.groups.fleet import Fleet
    from gateway.groups.handlers import GroupHandlers, Handler
    from gateway.groups.managed import ManagedGroups
    from gateway.groups.request_authz import RequestAuthorization
    from gateway.groups.runtime import CoordinatorRuntime
    from gateway.net.contracts import RequestSource
    from gateway.net.refusals import RefusalLog
    from gateway.net.upstream import BrokerDirectory

log = get_logger("gateway.groups.layer")

# Offset APIs of a share or streams group go to the cluster's coordinator as well (Streams commits with
# its member epoch, which only the cluster's coordinator can check).
_OFFSET_APIS = frozenset({ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.TXN_OFFSET_COMMIT, ApiKey.OFFSET_DELETE})

# Handlers that serve groups the gateway does not manage too, by forwarding them at a version the
# upstream speaks (topic ids turned into names where the upstream's version has only names).
_TRANSLATED_FOR_ANY_GROUP = frozenset(
    {
        ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_GROUPS, ApiKey.DELETE_GROUPS, ApiKey.CONSUMER_GROUP_DESCRIBE, ApiKey.OFFSET_FETCH,
        ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT,
    }
)  # fmt: skip


# The connect group type's APIs (groupgate's own, docs/connect.md): the cluster has none, so they are
# never passed through; a group the gateway does not coordinate is refused here.
_CONNECT_APIS = frozenset(
    {ApiKey.CONNECT_GROUP_HEARTBEAT, ApiKey.CONNECT_GROUP_PREPARE_ASSIGNMENT, ApiKey.CONNECT_GROUP_INSTALL_ASSIGNMENT}
)


class Layer(Protocol):
    """What a request's way through uses of the group layer (gateway/groups/layer.py ``GroupLayer``)."""

    directory: BrokerDirectory
    managed_groups: ManagedGroups
    runtime: CoordinatorRuntime
    handlers: GroupHandlers
    handler_table: dict[int, Handler]  # the handler of each api key the layer answers
    cluster: ClusterGroups
    request_authz: RequestAuthorization
    authorizer: GroupAuthorizer | None
    fleet: Fleet | None
    counters: collections.Counter[str]
    refusals: RefusalLog | None

    def managed(self, group_id: str) -> bool: ...


class Decoded:
    """What ``claims`` read of a frame, handed to ``handle`` so that the request is decoded once."""

    __slots__ = ("header", "msg", "null_free")

    def __init__(self, msg: Any, null_free: bool = False, header: frames.RequestHeader | None = None) -> None:
        self.msg = msg
        self.null_free = null_free  # claims found no null where the schema forbids one (codec.null_field)
        self.header = header  # the request header read with it (the connection need not read it again)

    def __bool__(self) -> bool:
        return True


def claims(layer: Layer, frame: bytes, api_key: int, version: int) -> bool | Decoded:
    """Whether this request is the group layer's (else it passes through to the upstream); what it
    decoded to decide, when it did, so that ``handle`` does not decode it again."""
    if api_key == ApiKey.LIST_GROUPS:
        return True
    managed_groups = layer.managed_groups
    if managed_groups.match_all and api_key != ApiKey.FIND_COORDINATOR:
        return True
    upstream = layer.directory.upstream_api.get(api_key)
    if upstream is not None and version > upstream[1] and api_key in _TRANSLATED_FOR_ANY_GROUP:
        # The gateway advertises its own (Kafka 4.4.0's) versions of the group APIs; an older
        # upstream would refuse a newer one for a group it coordinates: the handler speaks the
        # upstream's version for it.
        return True
    try:
        header, msg = codec.decode_request(api_key, version, frame[4:])
    except Exception:  # noqa: BLE001 - the handler answers it with an error code
        return True
    if codec.null_field(msg, version) is not None:
        return Decoded(msg, header=header)  # answered INVALID_REQUEST by the handler (the broker would drop the connection)
    if any(layer.managed(g) for g in group_ids(api_key, version, msg)) or api_key in _CONNECT_APIS:
        return Decoded(msg, null_free=True, header=header)
    if (
        managed_groups.handed_back
        and api_key == ApiKey.CONSUMER_GROUP_HEARTBEAT
        and managed_groups.handed_back_member(msg)
    ):
        return Decoded(msg, null_free=True, header=header)  # answered by handle, once per member
    return False


async def handle(
    layer: Layer, conn: RequestSource, header: frames.RequestHeader, payload: bytes, decoded: Decoded | None = None
) -> bytes:
    api_key, version, corr = header.api_key, header.api_version, header.correlation_id
    if decoded is not None:
        msg = decoded.msg
    else:
        try:
            msg = codec.decode_request_body(api_key, version, payload, header.body_offset)
        except Exception as e:  # noqa: BLE001 - answered with INVALID_REQUEST, the connection stays
            layer.counters["invalid_requests"] += 1
            refused(layer, conn, header, f"undecodable:{api_key}", f"v{version} body does not decode: {e}")
            return error_payload(api_key, version, corr, Errors.INVALID_REQUEST)
    null = None if decoded is not None and decoded.null_free else codec.null_field(msg, version)
    if null is not None:
        # A null where the schema allows none (e.g. JoinGroup protocols, an OffsetFetch group id):
        # Kafka cannot parse it either. Answered here, never acted on or sent upstream.
        refused(layer, conn, header, f"null-field:{api_key}", f"v{version} {null} is null")
        layer.counters["invalid_requests"] += 1
        return refusal_payload(api_key, version, corr, msg, Errors.INVALID_REQUEST, f"{null} is null")
    ctx = context(layer, conn, header, payload)
    try:
        if ctx.access.enabled:
            refusal = await layer.request_authz.whole_request(ctx, msg)
            if refusal is not None:
                return refusal
        if api_key in _CONNECT_APIS and not layer.managed(msg.group_id):
            ctx.refuse(f"unmanaged-connect-group:{api_key}", f"group {msg.group_id} is not managed by the gateway")
            return codec.encode_response(api_key, version, corr, codec.RESPONSES[api_key][version](
                error_code=Errors.UNSUPPORTED_VERSION,
                error_message=f"The gateway does not coordinate group {msg.group_id}; the cluster has no connect groups.",
            ))  # fmt: skip
        if api_key == ApiKey.CONSUMER_GROUP_HEARTBEAT and not layer.managed(msg.group_id):
            # Only a member of a handed-back group gets here (claims).
            if layer.managed_groups.handed_back_member(msg):
                return layer.managed_groups.tell_handed_back(msg, version, corr)
            return await ctx.send_upstream(msg.group_id, None)
        if api_key in ROUTED_ONE:
            if api_key == ApiKey.STREAMS_GROUP_HEARTBEAT and msg.member_epoch == 0 and layer.managed(msg.group_id):
                # A streams group's first member may take over an id the gateway holds (KIP-1071
                # offline migration): decided on the gateway's state of it, so that shard must be read.
                layer.runtime.check_loaded([msg.group_id])
                if await layer.handlers.streams_join_refused(msg.group_id):
                    return codec.encode_response(api_key, version, corr, codec.RESPONSES[api_key][version](
                        error_code=Errors.GROUP_ID_NOT_FOUND,
                        error_message=f"Group {msg.group_id} is not a streams group.",
                    ))  # fmt: skip
            # The cluster's groups: otherwise nothing of the gateway's state is involved (also while unloaded).
            return await ctx.send_upstream(msg.group_id, ROUTED_ONE[api_key])
        ids = group_ids(api_key, version, msg)
        if api_key == ApiKey.LIST_GROUPS:
            # In a fleet a broker's node lists none of the managed groups: a shard being loaded here
            # does not hold its answer up (gateway/groups/handlers.py list_groups).
            if layer.fleet is None or ctx.node_id is None:
                for shard in layer.runtime.shards:
                    if shard.state.will_serve:  # another instance lists the groups it owns
                        shard.check_loaded()
        elif api_key != ApiKey.FIND_COORDINATOR and api_key not in ROUTED_MANY:
            layer.runtime.check_loaded([g for g in ids if layer.managed(g)])
        if api_key in _OFFSET_APIS and len(ids) == 1 and await _cluster_coordinates(layer, api_key, version, msg, ids[0]):
            if not ctx.access.enabled:
                return await ctx.send_upstream(ids[0], None)
            return await layer.request_authz.forward_offsets(ctx, msg, ids[0])
        body = await layer.handler_table[api_key](ctx, msg)
        return codec.encode_response(api_key, version, corr, body)
    except asyncio.CancelledError:
        raise
    except ShardUnloaded:
        layer.counters["unloaded_requests"] += 1
        return unloaded_payload(api_key, version, corr, msg)
    except Exception:
        log.exception("group request failed", api_key=api_key, api_version=version)
        layer.counters["failed_requests"] += 1
        return error_payload(api_key, version, corr, Errors.UNKNOWN_SERVER_ERROR)


async def _cluster_coordinates(layer: Layer, api_key: int, version: int, msg: Any, group_id: str) -> bool:
    """Whether an offset request's group is a share or streams group of the cluster's."""
    if layer.runtime.has_state(group_id):
        return False
    if group_id in layer.cluster.foreign:
        return True
    return names_member(api_key, version, msg) and await layer.cluster.is_foreign(group_id)


def context(layer: Layer, conn: RequestSource, header: frames.RequestHeader, payload: bytes) -> RequestContext:
    """The request's context for its handler: what it learns of the client, and its ways out."""
    api_key, version, corr = header.api_key, header.api_version, header.correlation_id

    def send_upstream(group_id: str, kind: str | None) -> Awaitable[bytes]:
        return layer.cluster.route_one(api_key, version, corr, payload, group_id, kind)

    def refuse(kind: str, reason: str) -> None:
        refused(layer, conn, header, kind, reason)

    peer = conn.peer
    host = f"/{peer[0]}" if isinstance(peer, tuple) and peer else ""
    principal = conn.principal or ANONYMOUS
    return RequestContext(
        api_key=api_key,
        api_version=version,
        correlation_id=corr,
        client_id=header.client_id or "",
        client_host=host,
        node_id=conn.node_id,
        send_upstream=send_upstream,
        refuse=refuse,
        # The authenticated principal of a SASL client (passthrough with inspection); Kafka's
        # anonymous principal otherwise.
        principal=principal,
        access=ALLOW_ALL if layer.authorizer is None else layer.authorizer.access(principal, host),
    )


def refused(layer: Layer, conn: RequestSource, header: frames.RequestHeader | None, kind: str, reason: str) -> None:
    """A request the layer refuses: logged once per client and kind (gateway/net/refusals.py)."""
    refusals = layer.refusals
    if refusals is not None:
        who = {"principal": conn.principal} if conn.principal is not None else {}
        refusals.note(conn.peer, header.client_id if header is not None else None, kind, reason, **who)


class LocalHandler:
    """The connection's LocalHandler for one api key, with ``claims`` deciding local vs passthrough."""

    __slots__ = ("api_key", "layer")

    def __init__(self, layer: Layer, api_key: int) -> None:
        self.layer = layer
        self.api_key = api_key

    def claims(self, frame: bytes, api_key: int, version: int) -> bool | Decoded:
        return claims(self.layer, frame, api_key, version)

    def __call__(
        self, conn: RequestSource, header: frames.RequestHeader, payload: bytes, decoded: Any = None
    ) -> Awaitable[bytes]:
        return handle(self.layer, conn, header, payload, decoded if isinstance(decoded, Decoded) else None)


__all__ = ["Decoded", "Layer", "LocalHandler", "claims", "context", "handle", "refused"]
