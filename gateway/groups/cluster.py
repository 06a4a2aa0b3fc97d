"""The cluster's side of group coordination: what the gateway asks of, and forwards to, the upstream's
own group coordinators.

- FindCoordinator for keys the gateway does not coordinate (unmanaged groups, transactional ids).
- Merges: describe and list answers of the cluster joined with the gateway's, so that groups that exist
  only in the cluster (offsets-only groups, share and streams groups, unmanaged groups) do not vanish
  from tools and lag exporters.
- Share groups (KIP-932) and streams groups (KIP-1071), which the cluster coordinates: their requests are
  forwarded to the group's upstream coordinator, and the ids seen as such groups are remembered.
- Bypass detection: members of a managed group on the cluster's coordinator (clients that do not go
  through the gateway), checked periodically and when an upstream answer suggests it.

Nothing here holds group state; it asks ``has_state`` of the runtime when it must know.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from typing import Any

from coordinator.errors import Errors
from gateway.groups.requests import error_payload, response_error
from gateway.logging import get_logger
from gateway.net.upstream import UpstreamError
from gateway.net.upstream_client import COORDINATOR_MOVED, CoordinatorMoved, UpstreamClient
from gateway.security.rights import warn_missing
from gateway.wire import codec
from gateway.wire import group_codec as gc
from gateway.wire.api_keys import ApiKey
from translate.group_messages import DescribedClassicGroup

log = get_logger("gateway.groups.cluster")

# Requests naming one share or streams group, forwarded as the client's bytes (client id and all) and
# answered with the upstream's bytes under the client's correlation id; the value is the group type a
# success proves.
ROUTED_ONE: dict[int, str | None] = {
    ApiKey.SHARE_GROUP_HEARTBEAT: "share",
    ApiKey.STREAMS_GROUP_HEARTBEAT: "streams",
    # KIP-1331 (Kafka 4.4): a member pushes its topology's description when the heartbeat asks for it.
    ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE: None,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: "share",
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: "share",
}
# Requests naming several groups are split per group (each may have another coordinator) and merged.
ROUTED_MANY = frozenset({ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.STREAMS_GROUP_DESCRIBE, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS})
# The group types the cluster coordinates on its own (ListGroups v5 TypesFilter values).
FOREIGN_TYPES = ("share", "streams")
# How long "the cluster has no share/streams group of that id" is believed before asking again.
_NOT_FOREIGN_TTL_S = 10.0

# (key, node id, host, port, error code, error message) of one FindCoordinator answer.
Coordinator = tuple[str, int, str, int, int, "str | None"]


class ClusterGroups:
    def __init__(
        self,
        client: UpstreamClient,
        forward: UpstreamClient,
        *,
        addr_of: Callable[[int], tuple[str, int] | None],
        managed: Callable[[str], bool],
        has_state: Callable[[str], bool],
        counters: collections.Counter[str],
        spawn: Callable[[Any], Any],
        principal: str | None = None,
    ) -> None:
        self.principal = principal  # the gateway's User:<name>, for the warning naming a right it lacks
        # ``client``: the gateway's own link (its commits, metadata, checks). ``forward``: what clients
        # decide goes upstream, on links of its own, so that nothing a client sends waits in front of, or
        # breaks (a broker closes a connection on a request it cannot read), the gateway's own traffic.
        self.client = client
        self.forward = forward
        self.addr_of = addr_of
        self.managed = managed
        self.has_state = has_state
        self.counters = counters
        self.spawn = spawn
        # group id -> "share" / "streams": groups the cluster coordinates, seen in answers it gave.
        self.foreign: dict[str, str] = {}
        self._not_foreign: dict[str, float] = {}  # group id -> monotonic time the cluster said so

    # --- FindCoordinator -------------------------------------------------------------------------------

    async def find_upstream(self, key_type: int, keys: list[str]) -> dict[str, Coordinator]:
        """Upstream coordinators of keys the gateway does not coordinate, rewritten to gateway addresses."""
        out: dict[str, Coordinator] = {}
        version = self.client.version(ApiKey.FIND_COORDINATOR, 3)
        for k in keys:
            try:
                req = codec.REQUESTS[ApiKey.FIND_COORDINATOR][version](key=k, key_type=key_type)
                r = await self.client.send_any(ApiKey.FIND_COORDINATOR, version, req)
                err, node = Errors.of(r.error_code), r.node_id
            except UpstreamError as e:
                log.warning("upstream FindCoordinator failed", key=k, error=str(e))
                err, node = Errors.COORDINATOR_NOT_AVAILABLE, -1
            addr = self.addr_of(node) if err == Errors.NONE and node >= 0 else None
            if addr is None:
                out[k] = (k, -1, "", -1, int(err or Errors.COORDINATOR_NOT_AVAILABLE), None)
            else:
                out[k] = (k, node, addr[0], addr[1], 0, None)
        return out

    # --- describe and list merges ----------------------------------------------------------------------

    async def describe(self, api_key: int, group_id: str, version: int) -> Any:
        """One group of a describe batch (DescribeGroups / ConsumerGroupDescribe), asked of its upstream
        coordinator; a stub carrying the error when the cluster cannot be asked."""
        try:
            if not self.forward.supports(api_key):
                raise UpstreamError("the upstream does not speak this api")
            v = self.forward.version(api_key, version)
            cls = codec.REQUESTS[api_key][v]
            req = cls(group_ids=[group_id]) if api_key == ApiKey.CONSUMER_GROUP_DESCRIBE else cls(groups=[group_id])
            r = await self.forward.to_coordinator(group_id, api_key, v, req, lambda r: r.groups[0].error_code)
            return r.groups[0]
        except UpstreamError as e:
            if api_key == ApiKey.CONSUMER_GROUP_DESCRIBE:
                return gc.response_cls(api_key).DescribedGroup(
                    group_id=group_id, error_code=Errors.GROUP_ID_NOT_FOUND, error_message=str(e)
                )
            return gc.described_classic_group(DescribedClassicGroup(group_id, Errors.COORDINATOR_NOT_AVAILABLE, str(e)))

    async def describe_many(self, api_key: int, group_ids: list[str], version: int) -> dict[str, Any]:
        """Several groups of a describe batch (DescribeGroups / ConsumerGroupDescribe) asked of the cluster:
        ONE request per upstream coordinator for all the ids it coordinates (as Kafka's admin client
        batches them), concurrently. An id whose coordinator cannot be found, whose answer says the
        coordinator moved, or whose batch was lost is asked alone (``describe``, which looks the
        coordinator up again)."""
        ids = list(dict.fromkeys(group_ids))
        out: dict[str, Any] = {}
        if len(ids) > 1 and self.forward.supports(api_key):
            v = self.forward.version(api_key, version)
            cls = codec.REQUESTS[api_key][v]
            if api_key == ApiKey.CONSUMER_GROUP_DESCRIBE:
                out = await self._per_coordinator(api_key, v, ids, lambda batch: cls(group_ids=batch))
            else:
                out = await self._per_coordinator(api_key, v, ids, lambda batch: cls(groups=batch))
        for g in ids:
            if g not in out:
                out[g] = await self.describe(api_key, g, version)
        return out

    async def _per_coordinator(
        self, api_key: int, version: int, ids: list[str], request_for: Callable[[list[str]], Any]
    ) -> dict[str, Any]:
        """One request per upstream coordinator naming all of ``ids`` it coordinates, sent side by side;
        the described groups by id. Ids left out of the result (coordinator unknown or moved, batch
        lost) are for the caller to ask alone."""

        async def where(g: str) -> tuple[str, int] | None:
            try:
                return await self.forward.coordinator(g)
            except UpstreamError:
                return None

        batches: dict[tuple[str, int], list[str]] = {}
        for g, addr in zip(ids, await asyncio.gather(*(where(g) for g in ids)), strict=True):
            if addr is not None:
                batches.setdefault(addr, []).append(g)

        async def ask(addr: tuple[str, int], batch: list[str]) -> list[Any]:
            try:
                r = await self.forward.send(addr, api_key, version, request_for(batch))
            except UpstreamError:
                for g in batch:
                    self.forward.forget_coordinator(g)
                return []
            self.counters["cluster_describe_batches"] += 1
            return list(r.groups)

        asked = set(ids)
        out: dict[str, Any] = {}
        for described in await asyncio.gather(*(ask(a, b) for a, b in batches.items())):
            for d in described:
                if d.error_code in COORDINATOR_MOVED:
                    self.forward.forget_coordinator(d.group_id)
                elif d.group_id in asked:
                    out[d.group_id] = d
        return out

    async def list_groups(
        self, msg: Any, version: int, node_id: int | None, keep: Callable[[str], bool] | None = None
    ) -> tuple[int, list[Any]]:
        """The cluster's groups that the gateway does not list itself: (error code, ListGroups entries).

        A managed id the gateway holds state for is left out (the gateway lists its own view); a managed
        id it holds none for is shown as the cluster holds it, offsets only. ``keep``: only the ids it
        selects (several instances split what each lists)."""
        try:
            v = self.forward.version(ApiKey.LIST_GROUPS, version)
            up = await self.forward.send_any(ApiKey.LIST_GROUPS, v, msg, node_id=node_id)
        except UpstreamError as e:
            log.warning("upstream ListGroups failed; listing the gateway's groups only", error=str(e))
            return 0, []
        listed = []
        for g in up.groups:
            if keep is not None and not keep(g.group_id):
                continue
            if self.managed(g.group_id) and self.has_state(g.group_id):
                continue  # the gateway's view of it is listed; the cluster only holds its offsets
            if version >= 5 and g.group_type in FOREIGN_TYPES:
                self.note_foreign(g.group_id, g.group_type)
            if self.managed(g.group_id):
                listed_as_offsets_only(g, version)
            listed.append(g)
        return int(Errors.of(up.error_code)), listed

    async def list_groups_everywhere(
        self, msg: Any, version: int, keep: Callable[[str], bool]
    ) -> tuple[int, list[Any]]:
        """``list_groups`` of every upstream broker (each lists the groups it coordinates), the ids ``keep``
        selects, each once."""
        nodes = sorted(self.forward.directory.brokers)
        answers = await asyncio.gather(*(self.list_groups(msg, version, n, keep) for n in nodes))
        error, out, seen = 0, [], set()
        for err, groups in answers:
            error = error or err
            for g in groups:
                if g.group_id not in seen:
                    seen.add(g.group_id)
                    out.append(g)
        return error, out

    # --- share and streams groups: the cluster's coordinator -------------------------------------------

    async def route_one(
        self, api_key: int, version: int, correlation_id: int, payload: bytes, group_id: str, kind: str | None
    ) -> bytes:
        """One group's request, forwarded as it is to the group's upstream coordinator."""

        def error_of(answer: bytes) -> int:
            return response_error(api_key, version, answer)

        try:
            # At most once: a heartbeat or commit lost in flight may have been applied; the client retries.
            answer = await self.forward.to_coordinator(
                group_id, api_key, version, bytes(payload), error_of, idempotent=False
            )
        except CoordinatorMoved as e:
            return error_payload(api_key, version, correlation_id, e.error_code)
        except UpstreamError as e:
            log.warning("upstream coordinator unreachable", group_id=group_id, api_key=api_key, error=str(e))
            return error_payload(api_key, version, correlation_id, Errors.COORDINATOR_NOT_AVAILABLE)
        if kind is not None and error_of(answer) == Errors.NONE:
            self.note_foreign(group_id, kind)
        self.counters["routed_requests"] += 1
        return correlation_id.to_bytes(4, "big", signed=True) + answer[4:]

    async def route_many(self, api_key: int, version: int, msg: Any) -> Any:
        """ShareGroupDescribe / StreamsGroupDescribe / DescribeShareGroupOffsets: one request per upstream
        coordinator for the groups it coordinates, the answers merged in the order asked."""
        req_cls = codec.REQUESTS[api_key][version]
        resp_cls = codec.RESPONSES[api_key][version]
        if api_key == ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS:
            asked = [(g.group_id, g) for g in msg.groups]
        else:
            asked = [(g, g) for g in msg.group_ids]
        kind = "streams" if api_key == ApiKey.STREAMS_GROUP_DESCRIBE else "share"
        items = dict(asked)
        # StreamsGroupDescribe v1 (KIP-1331): the topology description only when the client asks for it.
        more = {"include_topology_description": msg.include_topology_description} if kind == "streams" and version >= 1 else {}

        def request_for(batch: list[str]) -> Any:
            if api_key == ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS:
                return req_cls(groups=[items[g] for g in batch])
            return req_cls(group_ids=batch, include_authorized_operations=msg.include_authorized_operations, **more)

        # One request per coordinator for the ids it holds, when each id is asked once (a group named twice
        # in DescribeShareGroupOffsets may ask for different partitions each time); the rest one by one.
        batched: dict[str, Any] = {}
        if len(items) == len(asked) > 1:
            batched = await self._per_coordinator(api_key, version, list(items), request_for)
        out = []
        for gid, _ in asked:
            g = batched.get(gid)
            if g is None:
                try:
                    r = await self.forward.to_coordinator(
                        gid, api_key, version, request_for([gid]), lambda r: r.groups[0].error_code
                    )
                    g = r.groups[0]
                except UpstreamError as e:
                    error = e.error_code if isinstance(e, CoordinatorMoved) else Errors.COORDINATOR_NOT_AVAILABLE
                    g = resp_cls.Groups(group_id=gid, error_code=error, error_message=str(e))
            if g.error_code == Errors.NONE and api_key != ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS:
                self.note_foreign(gid, kind)
            out.append(g)
        self.counters["routed_requests"] += 1
        return resp_cls(groups=out)

    def note_foreign(self, group_id: str, kind: str) -> None:
        self.foreign[group_id] = kind
        self._not_foreign.pop(group_id, None)

    async def is_foreign(self, group_id: str) -> bool:
        """Whether the cluster holds a share or streams group of this id (which the gateway does not)."""
        if self.has_state(group_id):
            return False
        if group_id in self.foreign:
            return True
        since = self._not_foreign.get(group_id)
        if since is not None and time.monotonic() - since < _NOT_FOREIGN_TTL_S:
            return False
        return await self.cluster_group(group_id) is not None

    async def join_refused(self, group_id: str) -> bool:
        """Whether Kafka would refuse a consumer or classic member joining ``group_id``: Kafka 4.3.1 keeps a
        share group's id for it, and a streams group's while the streams group has members (an Empty one
        gives way to the joining group)."""
        if self.has_state(group_id):
            return False
        kind = self.foreign.get(group_id)
        if kind == "share":
            return True
        since = self._not_foreign.get(group_id)
        if kind is None and since is not None and time.monotonic() - since < _NOT_FOREIGN_TTL_S:
            return False
        found = await self.cluster_group(group_id)  # a streams group's state now, not as last seen
        if found is None:
            return False
        kind, state = found
        if kind == "streams" and state == "Empty":
            self.foreign.pop(group_id, None)  # the joining group takes the id over, here as in Kafka
            return False
        return True

    async def cluster_group(self, group_id: str) -> tuple[str, str] | None:
        """(type, state) of the cluster's share or streams group of this id, asked of its coordinator
        (ListGroups v5 filtered on those types); None when it has none."""
        try:
            v = self.forward.version(ApiKey.LIST_GROUPS, 5)
            if v < 5:
                return None  # a cluster without ListGroups v5 has no share or streams groups either
            req = codec.REQUESTS[ApiKey.LIST_GROUPS][v](types_filter=list(FOREIGN_TYPES))
            r = await self.forward.to_coordinator(group_id, ApiKey.LIST_GROUPS, v, req, lambda r: r.error_code)
        except UpstreamError as e:
            if getattr(e, "error_code", None) == Errors.GROUP_AUTHORIZATION_FAILED:
                warn_missing(
                    self.principal, "DESCRIBE",
                    f"group {group_id}", "the gateway cannot tell whether the cluster has a share or streams "
                    "group of a managed group's id", group_id=group_id,
                )
            log.info("upstream group type lookup failed", group_id=group_id, error=str(e))
            return None
        found = None
        for g in r.groups:
            if g.group_type in FOREIGN_TYPES:
                self.foreign[g.group_id] = g.group_type
                if g.group_id == group_id:
                    found = (str(g.group_type), str(g.group_state))
        if found is None:
            self.foreign.pop(group_id, None)
            if len(self._not_foreign) > 10_000:
                self._not_foreign.clear()
            self._not_foreign[group_id] = time.monotonic()
        return found

    # --- clients bypassing the gateway -----------------------------------------------------------------

    def bypass_suspected(self, group_id: str, reason: str) -> None:
        """An upstream answer implies the group has members on the upstream coordinator: check now."""
        self.counters["bypass_suspected"] += 1
        self.spawn(self.check_upstream_members(group_id, reason))

    async def check_upstream_members(self, group_id: str, reason: str = "periodic check") -> bool:
        """Warn (loudly) when the upstream coordinator has live members in a group the gateway manages."""
        members = 0
        try:
            v = self.client.version(ApiKey.DESCRIBE_GROUPS, 5)
            req = codec.REQUESTS[ApiKey.DESCRIBE_GROUPS][v](groups=[group_id])
            r = await self.client.to_coordinator(group_id, ApiKey.DESCRIBE_GROUPS, v, req, lambda r: r.groups[0].error_code)
            if r.groups[0].error_code == Errors.NONE:
                members += len(r.groups[0].members)
            if self.client.supports(ApiKey.CONSUMER_GROUP_DESCRIBE):
                v = self.client.version(ApiKey.CONSUMER_GROUP_DESCRIBE, 1)
                req = codec.REQUESTS[ApiKey.CONSUMER_GROUP_DESCRIBE][v](group_ids=[group_id])
                r = await self.client.to_coordinator(
                    group_id, ApiKey.CONSUMER_GROUP_DESCRIBE, v, req, lambda r: r.groups[0].error_code
                )
                if r.groups[0].error_code == Errors.NONE:
                    members += len(r.groups[0].members)
        except UpstreamError as e:
            log.info("upstream group check failed", group_id=group_id, error=str(e))
            return False
        if members:
            self.counters["bypass_detected"] += 1
            log.warning(
                "managed group has live members on the upstream coordinator: clients bypass the gateway",
                group_id=group_id,
                upstream_members=members,
                reason=reason,
                counters=dict(self.counters),
            )
            return True
        return False

    async def check_forever(self, interval_s: float, group_ids: Callable[[], list[str]]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            for gid in group_ids():
                await self.check_upstream_members(gid)
            if self.counters:
                log.info("group coordinator counters", **dict(self.counters))


# A managed id the gateway holds no state for, as the cluster holds it: its offsets, and perhaps members
# that clients left on the cluster's coordinator before the gateway took the id over (adoption removes
# them; they are not the group's members any more). Kafka shows a group whose consumers have all left as
# Empty with protocol type "consumer": so does the gateway, also where only its own simple commits made
# the group upstream (no protocol type). Share and streams groups are shown as the cluster shows them.


def classic_as_offsets_only(g: Any) -> None:
    """A DescribeGroups entry (a non-classic or unknown group is Dead at v0-5, an error at v6)."""
    if g.error_code != Errors.NONE or g.group_state == "Dead":
        return
    g.group_state = "Empty"
    g.protocol_type = g.protocol_type or "consumer"
    g.protocol_data = ""
    g.members = []


def consumer_as_offsets_only(g: Any) -> None:
    """A ConsumerGroupDescribe entry."""
    if g.error_code == Errors.NONE and g.members:
        g.group_state = "Empty"
        g.members = []


def listed_as_offsets_only(g: Any, version: int) -> None:
    """A ListGroups entry (state from v4, type from v5)."""
    if version >= 5 and g.group_type not in ("classic", "consumer"):
        return
    if version >= 4 and g.group_state != "Dead":
        g.group_state = "Empty"
    g.protocol_type = g.protocol_type or "consumer"


__all__ = [
    "FOREIGN_TYPES", "ROUTED_MANY", "ROUTED_ONE", "ClusterGroups", "classic_as_offsets_only",
    "consumer_as_offsets_only", "listed_as_offsets_only",
]
