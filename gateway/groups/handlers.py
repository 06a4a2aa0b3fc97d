"""One handler per group API the gateway answers itself: ``handler(ctx, msg) -> response body``.

A handler is given the request context (gateway/groups/requests.py) and the decoded request, turns it
into the sans-I/O request of translate/ or coordinator/, hands it to the group's shard through the
runtime (gateway/groups/runtime.py), merges the cluster's view where the API lists or describes groups the
cluster holds too (gateway/groups/cluster.py), and encodes the answer at the client's version.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from coordinator.errors import Errors
from gateway.authz.groups import DELETE, DESCRIBE, TRANSACTIONAL_ID, Access
from gateway.groups.adoption import UpstreamLeaver
from gateway.groups.cluster import ClusterGroups, classic_as_offsets_only, consumer_as_offsets_only
from gateway.groups.metadata_watch import MetadataWatch
from gateway.groups.offsets import OffsetBridge
from gateway.groups.requests import RequestContext
from gateway.groups.runtime import CoordinatorRuntime
from gateway.wire import codec
from gateway.wire import connect_codec as cc
from gateway.wire import group_codec as gc
from gateway.wire.api_keys import ApiKey
from translate.classic_messages import JoinGroupRequest
from translate.embedded import subscribed_topics
from translate.group_messages import (
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedClassicGroup,
)

if TYPE_CHECKING:
    from gateway.groups.fleet import Fleet

Handler = Callable[[RequestContext, Any], Awaitable[Any]]
_KEY_TYPE_TRANSACTION = 1  # FindCoordinator's key type of transactional ids


class GroupHandlers:
    def __init__(
        self,
        runtime: CoordinatorRuntime,
        cluster: ClusterGroups,
        offsets: OffsetBridge,
        adoption: UpstreamLeaver,
        watch: MetadataWatch,
        *,
        managed: Callable[[str], bool],
        home_node: Callable[[], int | None],
        addr_of: Callable[[int], tuple[str, int] | None],
    ) -> None:
        self.runtime = runtime
        self.cluster = cluster
        self.offsets = offsets
        self.adoption = adoption
        self.watch = watch
        self.managed = managed
        self.home_node = home_node
        self.addr_of = addr_of
        # Several instances (gateway/fleet/membership.py): the coordinator node (id, host, port) of the instance
        # owning a shard, the same in every instance's answers; None while the shard is in transit.
        self.fleet_coordinator: Callable[[int], tuple[int, str, int] | None] | None = None
        # ... and the membership itself (which listener is which node of the fleet, for ListGroups).
        self.fleet: Fleet | None = None
        # Awaited before a KIP-848 join (epoch 0) of a group: e.g. reading its configs from the cluster
        # (gateway/groups/cluster_configs.py). None: nothing to do first.
        self.before_join: Callable[[str], Awaitable[None]] | None = None

    def table(self) -> dict[int, Handler]:
        """api key -> handler: every API the gateway answers for the groups it manages."""
        return {
            ApiKey.FIND_COORDINATOR: self.find_coordinator,
            ApiKey.JOIN_GROUP: self.join_group,
            ApiKey.SYNC_GROUP: self.sync_group,
            ApiKey.HEARTBEAT: self.heartbeat,
            ApiKey.LEAVE_GROUP: self.leave_group,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self.consumer_group_heartbeat,
            ApiKey.CONSUMER_GROUP_DESCRIBE: self.consumer_group_describe,
            ApiKey.CONNECT_GROUP_HEARTBEAT: self.connect_group_heartbeat,
            ApiKey.CONNECT_GROUP_PREPARE_ASSIGNMENT: self.connect_group_prepare_assignment,
            ApiKey.CONNECT_GROUP_INSTALL_ASSIGNMENT: self.connect_group_install_assignment,
            ApiKey.DESCRIBE_GROUPS: self.describe_groups,
            ApiKey.LIST_GROUPS: self.list_groups,
            ApiKey.DELETE_GROUPS: self.delete_groups,
            ApiKey.OFFSET_COMMIT: self.offsets.offset_commit,
            ApiKey.TXN_OFFSET_COMMIT: self.offsets.txn_offset_commit,
            ApiKey.OFFSET_FETCH: self.offsets.offset_fetch,
            ApiKey.OFFSET_DELETE: self.offsets.offset_delete,
            ApiKey.SHARE_GROUP_DESCRIBE: self.cluster_describe,
            ApiKey.STREAMS_GROUP_DESCRIBE: self.cluster_describe,
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: self.cluster_describe,
        }

    async def call(
        self, group_id: str, request: object, topics: Iterable[str] = (), regex: bool = False, fresh: bool = False
    ) -> Any:
        """One request through its group's shard. ``topics`` (and ``regex``: a pattern subscription) name
        what it subscribes to: the topic image is refreshed for them first, in the group's turn, so that a
        topic created a moment ago is assigned. ``fresh``: refresh the image first when the group's service
        says the request follows a metadata change (``GroupService.join_follows_metadata_change``)."""
        prepare = None
        if topics or regex or fresh:
            wanted = list(topics)

            async def prepare() -> None:
                if fresh and self.runtime.shard_for(group_id).service.join_follows_metadata_change(request):
                    await self.watch.ensure_fresh()
                await self.watch.ensure(wanted, regex)

        return await self.runtime.call(group_id, request, prepare)

    # --- FindCoordinator -------------------------------------------------------------------------------

    async def find_coordinator(self, ctx: RequestContext, msg: Any) -> Any:
        version = ctx.api_version
        key_type, keys = gc.find_coordinator_keys(msg, version)
        refused: dict[str, int] = {}
        if ctx.access.enabled:
            # Kafka: DESCRIBE on the group (or transactional id) a key names, else an authorization error.
            for k in keys:
                if key_type == gc.KEY_TYPE_GROUP and not await ctx.access.group(DESCRIBE, k):
                    refused[k] = Errors.GROUP_AUTHORIZATION_FAILED
                elif key_type == _KEY_TYPE_TRANSACTION and not await ctx.access.allows(DESCRIBE, TRANSACTIONAL_ID, k):
                    refused[k] = Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            for error in sorted(set(refused.values())):
                ctx.refuse(f"authorization:{Errors(error).name}", ctx.access.reason)
        unmanaged = [
            k for k in keys if (key_type != gc.KEY_TYPE_GROUP or not self.managed(k)) and k not in refused
        ]
        upstream = await self.cluster.find_upstream(key_type, unmanaged) if unmanaged else {}
        node = self.home_node()
        addr = self.addr_of(node) if node is not None else None
        answers: list[tuple[str, int, str, int, int, str | None]] = []
        fleet = self.fleet_coordinator
        for k in keys:
            if k in refused:
                answers.append((k, -1, "", -1, int(refused[k]), None))
            elif k in upstream:
                answers.append(upstream[k])
            elif fleet is not None:
                shard = self.runtime.shard_for(k)
                owner = fleet(shard.index)
                if owner is None or (shard.state.owned and not shard.state.loaded):
                    answers.append((k, -1, "", -1, int(Errors.COORDINATOR_NOT_AVAILABLE), "the group's shard is being handed over"))
                else:
                    answers.append((k, owner[0], owner[1], owner[2], 0, None))
            elif addr is None or node is None:
                answers.append((k, -1, "", -1, int(Errors.COORDINATOR_NOT_AVAILABLE), "no broker listener is open yet"))
            elif not self.runtime.shard_for(k).state.loaded:
                answers.append((k, -1, "", -1, int(Errors.COORDINATOR_NOT_AVAILABLE), "group state is being re-read"))
            else:
                answers.append((k, node, addr[0], addr[1], 0, None))
        return gc.find_coordinator_response(version, answers)

    # --- the classic protocol --------------------------------------------------------------------------

    async def join_group(self, ctx: RequestContext, msg: Any) -> Any:
        if await self.cluster.join_refused(msg.group_id):
            # Kafka 4.3.1 answers a classic join of a share or streams group's id so.
            return gc.response(
                ApiKey.JOIN_GROUP, ctx.api_version, error_code=Errors.INCONSISTENT_GROUP_PROTOCOL,
                member_id=msg.member_id, generation_id=-1,
            )
        request = gc.join_group_request(msg, ctx.api_version, ctx.client_id, ctx.client_host)
        assert isinstance(request, JoinGroupRequest)
        # A consumer subscribing by pattern resolves it itself: its subscription names topics.
        topics = subscribed_topics(request.protocol_type, [p.metadata for p in request.protocols])
        body = await self.call(request.group_id, request, topics, fresh=bool(request.member_id))
        self.adoption.after_classic(request, body)
        return gc.join_group_response(body, ctx.api_version)

    async def sync_group(self, ctx: RequestContext, msg: Any) -> Any:
        request = gc.sync_group_request(msg, ctx.api_version, ctx.client_id, ctx.client_host)
        body = await self.call(request.group_id, request)
        self.adoption.after_classic(request, body)
        return gc.sync_group_response(body, ctx.api_version)

    async def heartbeat(self, ctx: RequestContext, msg: Any) -> Any:
        request = gc.heartbeat_request(msg, ctx.api_version, ctx.client_id, ctx.client_host)
        body = await self.call(request.group_id, request)
        self.adoption.after_classic(request, body)
        return gc.heartbeat_response(body, ctx.api_version)

    async def leave_group(self, ctx: RequestContext, msg: Any) -> Any:
        request = gc.leave_group_request(msg, ctx.api_version, ctx.client_id, ctx.client_host)
        body = await self.call(request.group_id, request)
        self.adoption.after_classic(request, body)
        return gc.leave_group_response(body, ctx.api_version)

    # --- streams groups (KIP-1071): the cluster's, but an id the gateway holds is decided here ----------

    async def streams_join_refused(self, group_id: str) -> bool:
        """KIP-1071's offline migration, as Kafka 4.3.1 decides it for a streams member's first heartbeat
        (``getOrCreateStreamsGroup``): an empty classic group of that id gives way (the gateway deletes
        its state of it; the committed offsets are the cluster's and stay, for the streams group to
        resume from); a classic group with members, or a consumer group, keeps the id: refused."""
        kind = self.runtime.group_kind(group_id)
        if kind is None:
            return False
        if kind == "classic":
            reply: DeleteGroupsResponse = await self.call(group_id, DeleteGroupsRequest([group_id]))
            return Errors.of(reply.results[0].error_code) not in (Errors.NONE, Errors.GROUP_ID_NOT_FOUND)
        return True

    # --- the consumer protocol (KIP-848) ---------------------------------------------------------------

    async def consumer_group_heartbeat(self, ctx: RequestContext, msg: Any) -> Any:
        version = ctx.api_version
        if msg.member_epoch == 0 and await self.cluster.join_refused(msg.group_id):
            # Kafka: "Group ... is not a consumer group." when the id is a share or streams group's.
            return gc.response(
                ApiKey.CONSUMER_GROUP_HEARTBEAT, version, error_code=Errors.GROUP_ID_NOT_FOUND,
                error_message=f"Group {msg.group_id} is not a consumer group.", member_epoch=-1,
            )
        if msg.member_epoch == 0 and self.before_join is not None:
            await self.before_join(msg.group_id)
        request = gc.consumer_group_heartbeat_request(msg, version, ctx.client_id, ctx.client_host)
        topics = request.subscribed_topic_names or ()
        regex = bool(request.subscribed_topic_regex)
        body = self.adoption.after_consumer(request, await self.call(request.group_id, request, topics, regex))
        return gc.consumer_group_heartbeat_response(body, version)

    # --- the connect group type (docs/connect.md): groupgate's own APIs --------------------------------

    async def connect_group_heartbeat(self, ctx: RequestContext, msg: Any) -> Any:
        if msg.member_epoch == 0 and await self.cluster.join_refused(msg.group_id):
            # The id is a share or streams group's in the cluster: as between the gateway's own types.
            return codec.RESPONSES[ApiKey.CONNECT_GROUP_HEARTBEAT][ctx.api_version](
                error_code=Errors.GROUP_ID_NOT_FOUND, error_message=f"Group {msg.group_id} is not a connect group.",
                member_epoch=-1,
            )
        request = cc.heartbeat_request(msg, ctx.client_id, ctx.client_host)
        return cc.heartbeat_response(await self.call(request.group_id, request))

    async def connect_group_prepare_assignment(self, ctx: RequestContext, msg: Any) -> Any:
        request = cc.prepare_request(msg)
        return cc.prepare_response(await self.call(request.group_id, request))

    async def connect_group_install_assignment(self, ctx: RequestContext, msg: Any) -> Any:
        request = cc.install_request(msg)
        return cc.install_response(await self.call(request.group_id, request))

    # --- describe, list, delete: the gateway's groups merged with the cluster's ------------------------

    async def consumer_group_describe(self, ctx: RequestContext, msg: Any) -> Any:
        version = ctx.api_version
        asked = list(msg.group_ids)
        refused = await _refused_groups(ctx, asked, DESCRIBE)
        ids = [g for g in asked if g not in refused]
        found: dict[str, Any] = {}
        if any(self.managed(g) for g in ids):
            request = gc.consumer_group_describe_request(msg, version)
            for reply in await self.runtime.read(ids, lambda part: dataclasses.replace(request, group_ids=part)):
                for g in reply.groups:
                    found[g.group_id] = gc.described_group(g)
        # Managed ids the gateway holds no state for are asked of the cluster too (offsets-only groups);
        # the gateway's own answer stands when the cluster cannot be asked.
        ask = [g for g in ids if g not in found or (self.managed(g) and not self.runtime.has_state(g))]
        cluster = await self.cluster.describe_many(ApiKey.CONSUMER_GROUP_DESCRIBE, ask, version)
        for g in ask:
            up = cluster[g]
            if g not in found or up.error_code == Errors.NONE:
                found[g] = up
            if self.managed(g):
                consumer_as_offsets_only(found[g])
        groups = [_unauthorized_consumer_group(g) for g in refused] + [found[g] for g in ids]
        if ctx.access.enabled:
            groups = await _authorized_describe(ctx.access, groups, msg.include_authorized_operations)
        return gc.response(ApiKey.CONSUMER_GROUP_DESCRIBE, version, groups=groups)

    async def describe_groups(self, ctx: RequestContext, msg: Any) -> Any:
        version = ctx.api_version
        asked = list(msg.groups)
        refused = await _refused_groups(ctx, asked, DESCRIBE)
        ids = [g for g in asked if g not in refused]
        found: dict[str, Any] = {}
        local = [g for g in ids if self.managed(g)]
        if local:
            request = gc.describe_groups_request(msg, version)
            for reply in await self.runtime.read(local, lambda part: dataclasses.replace(request, group_ids=part)):
                for g in reply.groups:
                    found[g.group_id] = gc.described_classic_group(g)
        # A managed id the gateway holds no state for may still be a group of the cluster (offsets-only,
        # share, streams): the cluster describes it, as it would without the gateway; the gateway's own
        # answer (Dead) stands when the cluster cannot be asked.
        ask = [g for g in ids if g not in found or (self.managed(g) and not self.runtime.has_state(g))]
        cluster = await self.cluster.describe_many(ApiKey.DESCRIBE_GROUPS, ask, version)
        for g in ask:
            up = cluster[g]
            # The cluster's own answer, errors included (v6: "Group ... is not a classic group." for a
            # share or streams group); the gateway's when the cluster could not be asked.
            if g not in found or up.error_code != Errors.COORDINATOR_NOT_AVAILABLE:
                found[g] = up
            if self.managed(g):
                classic_as_offsets_only(found[g])
        # Kafka lists the groups refused first, then the ones described.
        groups = [
            gc.described_classic_group(DescribedClassicGroup(g, Errors.GROUP_AUTHORIZATION_FAILED, None)) for g in refused
        ] + [found[g] for g in ids]
        if ctx.access.enabled and version >= 3 and msg.include_authorized_operations:
            for d in groups:
                if d.error_code == Errors.NONE:
                    # kafka-python carries this bit field as the set of the bits' positions.
                    bits = ctx.access.group_operations(d.group_id) or 0
                    d.authorized_operations = {b for b in range(32) if bits >> b & 1}
        return gc.response(ApiKey.DESCRIBE_GROUPS, version, groups=groups)

    async def list_groups(self, ctx: RequestContext, msg: Any) -> Any:
        """The gateway's own groups merged with the cluster's: every group the cluster holds and the gateway
        does not (offsets-only groups, share and streams groups, unmanaged groups) is listed as the cluster
        lists it, so nothing that has offsets or members disappears from tools and lag exporters."""
        version = ctx.api_version
        listed: list[Any] = []
        if self.fleet is not None:
            # Admin clients ask every node of a Metadata answer and concatenate. In a fleet, as with Kafka's
            # brokers, each node lists the groups it coordinates: an instance's coordinator node (its
            # bootstrap listener) the managed ids of the shards it holds (offsets-only ones too, from every
            # broker); a broker's node the cluster's groups that broker coordinates, the managed ids left
            # out. Through any one instance's node table every group of the fleet is listed once.
            mine = ctx.node_id is None
        else:
            # Admin clients ask every broker and concatenate: list the gateway's groups on one listener only.
            mine = ctx.node_id is None or ctx.node_id == self.home_node()
        if mine:
            request = gc.list_groups_request(msg, version)
            for reply in await self.runtime.read(None, lambda _part: request):
                listed.extend(gc.listed_group(g) for g in reply.groups if self.managed(g.group_id))
        if self.fleet is None:
            error, upstream = await self.cluster.list_groups(msg, version, ctx.node_id)
        elif mine:
            error, upstream = await self.cluster.list_groups_everywhere(msg, version, self._held_managed)
        else:
            error, upstream = await self.cluster.list_groups(msg, version, ctx.node_id, self._unmanaged)
        listed.extend(upstream)
        access = ctx.access
        if access.enabled and not await access.lists_all_groups():
            # Kafka: without DESCRIBE on the cluster, only the groups the principal may describe (the
            # cluster's were listed to the gateway's own principal, so they are filtered here too).
            listed = [g for g in listed if await access.group(DESCRIBE, g.group_id)]
        return gc.response(ApiKey.LIST_GROUPS, version, error_code=error, groups=listed)

    def _held_managed(self, group_id: str) -> bool:
        return self.managed(group_id) and self.runtime.shard_for(group_id).state.owned

    def _unmanaged(self, group_id: str) -> bool:
        return not self.managed(group_id)

    async def delete_groups(self, ctx: RequestContext, msg: Any) -> Any:
        version = ctx.api_version
        request = gc.delete_groups_request(msg, version)
        refused = await _refused_groups(ctx, list(dict.fromkeys(request.group_ids)), DELETE)
        if refused:
            request = dataclasses.replace(request, group_ids=[g for g in request.group_ids if g not in refused])
        results: dict[str, int] = {}
        for gid in request.group_ids:
            if not self.managed(gid):
                results[gid] = await self.offsets.delete_upstream_group(gid)
                continue
            reply: DeleteGroupsResponse = await self.call(gid, dataclasses.replace(request, group_ids=[gid]))
            local = Errors.of(reply.results[0].error_code)
            if local in (Errors.NONE, Errors.GROUP_ID_NOT_FOUND):
                # The group's offsets live upstream: deleting the group deletes them there too.
                upstream = await self.offsets.delete_upstream_group(gid)
                gone = local == Errors.GROUP_ID_NOT_FOUND or upstream != Errors.GROUP_ID_NOT_FOUND
                results[gid] = upstream if gone else 0
            else:
                results[gid] = int(local)
        # Kafka answers the refused groups after the others.
        answered = [DeletableGroupResult(g, results[g]) for g in request.group_ids]
        answered += [DeletableGroupResult(g, Errors.GROUP_AUTHORIZATION_FAILED) for g in refused]
        return gc.delete_groups_response(DeleteGroupsResponse(answered), version)

    # --- the cluster's groups --------------------------------------------------------------------------

    async def cluster_describe(self, ctx: RequestContext, msg: Any) -> Any:
        """ShareGroupDescribe / StreamsGroupDescribe / DescribeShareGroupOffsets: the cluster's coordinators
        (asked under the gateway's principal: each group is checked for the client's first)."""
        if not ctx.access.enabled:
            return await self.cluster.route_many(ctx.api_key, ctx.api_version, msg)
        share_offsets = ctx.api_key == ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS
        asked = [g.group_id for g in msg.groups] if share_offsets else list(msg.group_ids)
        refused = await _refused_groups(ctx, asked, DESCRIBE)
        if share_offsets:
            msg.groups = [g for g in msg.groups if g.group_id not in refused]
        else:
            msg.group_ids = [g for g in msg.group_ids if g not in refused]
        r = await self.cluster.route_many(ctx.api_key, ctx.api_version, msg)
        if refused:
            cls = codec.RESPONSES[ctx.api_key][ctx.api_version]
            r.groups = [cls.Groups(group_id=g, error_code=Errors.GROUP_AUTHORIZATION_FAILED) for g in refused] + list(r.groups)
        if not share_offsets and msg.include_authorized_operations:
            for d in r.groups:
                if d.error_code == Errors.NONE:
                    d.authorized_operations = ctx.access.group_operations(d.group_id)
        return r


async def _refused_groups(ctx: RequestContext, group_ids: list[str], op: Any) -> list[str]:
    """The groups of a batch the principal may not ``op`` (each answered GROUP_AUTHORIZATION_FAILED alone)."""
    if not ctx.access.enabled:
        return []
    refused = [g for g in group_ids if not await ctx.access.group(op, g)]
    if refused:
        ctx.refuse("authorization:GROUP_AUTHORIZATION_FAILED", ctx.access.reason)
    return refused


def _unauthorized_consumer_group(group_id: str) -> Any:
    return gc.response_cls(ApiKey.CONSUMER_GROUP_DESCRIBE).DescribedGroup(
        group_id=group_id, error_code=Errors.GROUP_AUTHORIZATION_FAILED
    )


async def _authorized_describe(access: Access, groups: list[Any], with_operations: bool) -> list[Any]:
    """ConsumerGroupDescribe as Kafka finishes it: authorized operations when asked, and a group whose
    members are assigned a topic the principal may not describe is answered TOPIC_AUTHORIZATION_FAILED."""
    cls = gc.response_cls(ApiKey.CONSUMER_GROUP_DESCRIBE).DescribedGroup
    out = []
    for g in groups:
        if g.error_code != Errors.NONE:
            out.append(g)
            continue
        if with_operations:
            g.authorized_operations = access.group_operations(g.group_id)
        names = {
            tp.topic_name
            for m in g.members or ()
            for a in (m.assignment, m.target_assignment)
            if a is not None
            for tp in a.topic_partitions or ()
        }
        if names and len(await access.topics(DESCRIBE, names)) < len(names):
            g = cls(
                group_id=g.group_id, error_code=Errors.TOPIC_AUTHORIZATION_FAILED,
                error_message="The group has described topic(s) that the client is not authorized to describe.",
                members=[],
            )
        out.append(g)
    return out


__all__ = ["GroupHandlers", "Handler"]
