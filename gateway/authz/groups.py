"""Authorization of the group requests the gateway answers itself (docs/gateway.md, "Authorization of
what the gateway answers itself").

The cluster authorizes every request that reaches it under the client's own identity. The group requests
the gateway answers itself (and the answers it asks of the cluster under its own principal: merged
listings, offsets written through, share and streams groups forwarded) would escape that, so the gateway
applies the cluster's ACLs to them as Kafka 4.3's KafkaApis does, with the same checks and error codes:

| API | group | topics |
| --- | --- | --- |
| JoinGroup, SyncGroup, Heartbeat, LeaveGroup | READ, else GROUP_AUTHORIZATION_FAILED for the request | |
| ConsumerGroupHeartbeat | READ | DESCRIBE on every subscribed name, else TOPIC_AUTHORIZATION_FAILED for the request |
| OffsetCommit, TxnOffsetCommit (after WRITE on the transactional id) | READ | READ per topic, else TOPIC_AUTHORIZATION_FAILED on its partitions |
| OffsetDelete | DELETE | READ per topic, per partition as above |
| OffsetFetch | DESCRIBE per group (GROUP_AUTHORIZATION_FAILED for that group) | DESCRIBE per topic asked (per partition), or topics left out of an all-topics answer |
| DescribeGroups, ConsumerGroupDescribe | DESCRIBE per group; authorized operations when asked | ConsumerGroupDescribe: DESCRIBE on every assigned topic, else TOPIC_AUTHORIZATION_FAILED for that group |
| ListGroups | DESCRIBE on the cluster lists all, else only groups with DESCRIBE | |
| DeleteGroups | DELETE per group | |
| FindCoordinator | DESCRIBE per group key (transactional ids: DESCRIBE on the id) | |
| Share/StreamsGroupHeartbeat, AlterShareGroupOffsets (forwarded) | READ | Streams: DESCRIBE on every topology topic |
| DeleteShareGroupOffsets (forwarded) | DELETE | |
| offset APIs of streams groups (forwarded) | as above | a named topic refused refuses the request |
| Share/StreamsGroupDescribe, DescribeShareGroupOffsets | DESCRIBE per group | |

Decisions come from the cluster's ACLs as last read (gateway/authz/acls.py AclCache, translate/authorizer.py).
An allow is answered from that snapshot; a denial is confirmed against a fresh read first (once per
request, reads coalesced), so an ACL just granted takes effect at once, while one removed takes effect at
the next periodic read (``acl_refresh_interval_ms``). Without any snapshot (the first read has not
succeeded) everything is refused. In strict mode, so is everything while the decision could differ from
the cluster's: an authorizer on the brokers other than Kafka's own, one the gateway could not identify,
ACLs not read for three refresh intervals, or clients known by TLS certificate only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gateway.authz.acls import KNOWN_AUTHORIZERS, AclCache
from gateway.wire.api_keys import ApiKey
from translate.authorizer import GROUP_OPERATIONS, AclSnapshot, Operation, ResourceType

READ, DESCRIBE, DELETE, WRITE = Operation.READ, Operation.DESCRIBE, Operation.DELETE, Operation.WRITE
GROUP, TOPIC, CLUSTER, TRANSACTIONAL_ID = (
    ResourceType.GROUP, ResourceType.TOPIC, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID,
)
CLUSTER_NAME = "kafka-cluster"  # the one cluster resource's name in Kafka's ACLs

# The operation on the one group a request names, checked before anything else: refused whole with
# GROUP_AUTHORIZATION_FAILED (in the API's shape: top-level, or on every partition of a commit).
GROUP_OPERATION: dict[int, Operation] = {
    ApiKey.JOIN_GROUP: READ,
    ApiKey.SYNC_GROUP: READ,
    ApiKey.HEARTBEAT: READ,
    ApiKey.LEAVE_GROUP: READ,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: READ,
    # The connect group type's APIs, authorized as ConsumerGroupHeartbeat is: READ on the group.
    ApiKey.CONNECT_GROUP_HEARTBEAT: READ,
    ApiKey.CONNECT_GROUP_PREPARE_ASSIGNMENT: READ,
    ApiKey.CONNECT_GROUP_INSTALL_ASSIGNMENT: READ,
    ApiKey.OFFSET_COMMIT: READ,
    ApiKey.TXN_OFFSET_COMMIT: READ,
    ApiKey.OFFSET_DELETE: DELETE,
    ApiKey.SHARE_GROUP_HEARTBEAT: READ,
    ApiKey.STREAMS_GROUP_HEARTBEAT: READ,
    ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE: READ,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: READ,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: DELETE,
}
# The operation on each group of an API that answers per group (the others of the batch are answered).
PER_GROUP_OPERATION: dict[int, Operation] = {
    ApiKey.OFFSET_FETCH: DESCRIBE,
    ApiKey.DESCRIBE_GROUPS: DESCRIBE,
    ApiKey.CONSUMER_GROUP_DESCRIBE: DESCRIBE,
    ApiKey.DELETE_GROUPS: DELETE,
    ApiKey.FIND_COORDINATOR: DESCRIBE,
    ApiKey.SHARE_GROUP_DESCRIBE: DESCRIBE,
    ApiKey.STREAMS_GROUP_DESCRIBE: DESCRIBE,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: DESCRIBE,
}
# The operation on each topic a request commits, deletes or reads offsets of, or subscribes to.
TOPIC_OPERATION: dict[int, Operation] = {
    ApiKey.OFFSET_COMMIT: READ,
    ApiKey.TXN_OFFSET_COMMIT: READ,
    ApiKey.OFFSET_DELETE: READ,
    ApiKey.OFFSET_FETCH: DESCRIBE,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: DESCRIBE,
    ApiKey.CONSUMER_GROUP_DESCRIBE: DESCRIBE,
    ApiKey.STREAMS_GROUP_HEARTBEAT: DESCRIBE,
}
# Every group operation's bit: what a cluster without an authorizer allows.
GROUP_OPERATIONS_ALL = sum(1 << int(op) for op in GROUP_OPERATIONS)


_MEMO_MAX = 65_536


class GroupAuthorizer:
    """The gateway's authorizer: the ACL cache and the mode; ``access(principal, host)`` per request."""

    def __init__(
        self, cache: AclCache, *, strict: bool, refresh_interval_s: float, principals_known: bool = True
    ) -> None:
        self.cache = cache
        self.strict = strict
        # False: clients authenticate with TLS certificates (mutual TLS without SASL), whose principal the
        # brokers derive (ssl.principal.mapping.rules) and the gateway does not: it sees User:ANONYMOUS.
        self.principals_known = principals_known
        self.max_age_s = 3 * refresh_interval_s
        # Decisions of the current snapshot (a heartbeat asks the same question every few seconds, and
        # a decision walks every ACL); dropped with the snapshot, and when it grows past _MEMO_MAX.
        self._memo: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}
        self._memo_for: AclSnapshot | None = None

    def decide(self, snap: AclSnapshot, principal: str, host: str, op: Operation, rtype: ResourceType, name: str) -> bool:
        if snap is not self._memo_for or len(self._memo) >= _MEMO_MAX:
            self._memo, self._memo_for = {}, snap
        key = (principal, host, op, rtype, name)
        allowed = self._memo.get(key)
        if allowed is None:
            allowed = self._memo[key] = snap.authorize(principal, host, op, rtype, name)
        return allowed

    def access(self, principal: str, client_host: str) -> Access:
        # RequestContext.client_host is "/10.1.2.3" (Kafka's member host form); ACL hosts are bare addresses.
        return Access(self, principal, client_host.lstrip("/"))

    def unsure(self) -> str | None:
        """Why no decision can be made now (every request is refused), or None."""
        cache = self.cache
        if cache.snapshot is None and not cache.open:
            return "the cluster's ACLs have not been read yet" + (f" ({cache.last_error})" if cache.last_error else "")
        if not self.strict:
            return None
        if not self.principals_known:
            return "strict: clients authenticate with TLS certificates, whose principal the gateway does not derive"
        if cache.authorizer_class == "":
            return "strict: the brokers' authorizer.class.name could not be read"
        if cache.authorizer_class is not None and cache.authorizer_class not in KNOWN_AUTHORIZERS:
            return f"strict: the brokers run {cache.authorizer_class}, whose decisions the gateway cannot reproduce"
        age = cache.age_s()
        if age is not None and age > self.max_age_s:
            return f"strict: the cluster's ACLs were last read {age:.0f} s ago"
        return None


class Access:
    """One request's authorization (principal and client address). ``enabled`` False: everything allowed."""

    __slots__ = ("_confirmed", "authz", "host", "principal", "reason")

    def __init__(self, authz: GroupAuthorizer | None, principal: str, host: str) -> None:
        self.authz = authz
        self.principal = principal
        self.host = host
        self._confirmed = False  # a fresh read was made for this request's first denial
        self.reason = ""  # why the last denial was made, for the refusal log

    @property
    def enabled(self) -> bool:
        return self.authz is not None

    def _decide(self, op: Operation, rtype: ResourceType, name: str) -> bool:
        authz = self.authz
        assert authz is not None
        why = authz.unsure()
        if why is not None:
            self.reason = why
            return False
        if authz.cache.open:
            return True
        snap: AclSnapshot | None = authz.cache.snapshot
        assert snap is not None
        if authz.decide(snap, self.principal, self.host, op, rtype, name):
            return True
        self.reason = f"{self.principal} from {self.host} may not {op.name} {rtype.name} {name!r}"
        return False

    def now(self, op: Operation, rtype: ResourceType, name: str) -> bool:
        """The decision on the snapshot as last read, without a fresh read on a denial."""
        return self.authz is None or self._decide(op, rtype, name)

    async def allows(self, op: Operation, rtype: ResourceType, name: str) -> bool:
        if self.authz is None:
            return True
        if self._decide(op, rtype, name):
            return True
        if self._confirmed:
            return False
        # A denial is confirmed against the cluster's ACLs as they are now: a grant made since the last
        # periodic read counts at once (as on the brokers, which apply ACL changes as they come).
        self._confirmed = True
        await self.authz.cache.fresh()
        return self._decide(op, rtype, name)

    async def group(self, op: Operation, group_id: str) -> bool:
        return await self.allows(op, GROUP, group_id)

    async def topics(self, op: Operation, names: Iterable[str]) -> set[str]:
        """The names among ``names`` that the principal may ``op`` (all of them when authorization is off)."""
        wanted = set(names)
        if self.authz is None:
            return wanted
        return {n for n in wanted if await self.allows(op, TOPIC, n)}

    async def lists_all_groups(self) -> bool:
        """ListGroups: DESCRIBE on the cluster shows every group (Kafka keeps that for compatibility)."""
        if self.authz is None:
            return True
        # Not confirmed by a fresh read: most principals lack it and fall back to per-group checks.
        return self._decide(DESCRIBE, CLUSTER, CLUSTER_NAME)

    def group_operations(self, group_id: str) -> int | None:
        """The authorized-operations bit field of a describe answer (KIP-430); None when off."""
        authz = self.authz
        if authz is None:
            return None
        if authz.unsure() is not None:
            return 0
        if authz.cache.open:
            return GROUP_OPERATIONS_ALL
        snap = authz.cache.snapshot
        assert snap is not None
        return snap.group_authorized_operations(self.principal, self.host, group_id)


ALLOW_ALL = Access(None, "", "")


def streams_topology_topics(msg: Any) -> list[str]:
    """Every topic a StreamsGroupHeartbeat's topology names (Kafka checks DESCRIBE on all of them)."""
    topology = getattr(msg, "topology", None)
    if topology is None:
        return []
    out: list[str] = []
    for sub in topology.subtopologies or ():
        out.extend(sub.source_topics or ())
        out.extend(sub.repartition_sink_topics or ())
        out.extend(t.name for t in sub.repartition_source_topics or ())
        out.extend(t.name for t in sub.state_changelog_topics or ())
    return list(dict.fromkeys(out))


def subscribed_topics(api_key: int, msg: Any) -> list[str]:
    """The topics whose DESCRIBE a heartbeat needs before it reaches the coordinator."""
    if api_key == ApiKey.CONSUMER_GROUP_HEARTBEAT:
        return list(dict.fromkeys(msg.subscribed_topic_names or ()))
    if api_key == ApiKey.STREAMS_GROUP_HEARTBEAT:
        return streams_topology_topics(msg)
    return []


__all__ = [
    "ALLOW_ALL", "CLUSTER_NAME", "GROUP_OPERATION", "PER_GROUP_OPERATION", "TOPIC_OPERATION", "Access",
    "GroupAuthorizer", "streams_topology_topics", "subscribed_topics",
]
