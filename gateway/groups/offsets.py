"""Offsets of managed groups: validated by the gateway's coordinator, stored in the real cluster.

The gateway coordinates the group but the offsets stay in the upstream's __consumer_offsets, so
tools and consumers that read them directly (or a gateway that is switched off) see the truth.
Every OffsetCommit / TxnOffsetCommit is first checked against the group state (GroupService's
OffsetCommitCheck: a zombie with a stale generation or member epoch, or an unknown member, is
fenced here), then written through to the group's upstream coordinator as a *simple* commit:
generation -1 and an empty member id, which Kafka accepts for a group without members (the
upstream never sees the members, they live in the gateway). OffsetFetch is checked locally when a
v9+ request names its member (KIP-848 member epoch check) and answered by the upstream
(gateway/groups/offset_fetch.py).

OffsetCommit and OffsetFetch v10 and TxnOffsetCommit v6 (KIP-1319) name topics by id: the gateway
resolves them through its topic image (a topic id it cannot resolve gets UNKNOWN_TOPIC_ID, as Kafka
answers) and answers with ids again.

An upstream that refuses a simple commit with a membership error has members of its own: clients
that bypass the gateway. That is logged loudly and counted (ClusterGroups.bypass_suspected).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from coordinator.errors import Errors
from gateway.authz.groups import READ
from gateway.groups.commit_batch import CommitWrites
from gateway.groups.offset_fetch import CLUSTER_UNREACHABLE, TOPIC_ID_VERSION, OffsetFetches, _refused
from gateway.logging import get_logger
from gateway.net.upstream import UpstreamError
from gateway.net.upstream_client import COORDINATOR_MOVED
from gateway.wire import codec
from gateway.wire import group_codec as gc
from gateway.wire.api_keys import ApiKey
from translate.group_messages import OffsetCheckResponse, OffsetCommitCheck

if TYPE_CHECKING:
    import collections

    from gateway.groups.adoption import UpstreamLeaver
    from gateway.groups.metadata_watch import MetadataWatch
    from gateway.groups.requests import RequestContext
    from gateway.groups.runtime import CoordinatorRuntime
    from gateway.net.upstream_client import UpstreamClient

log = get_logger("gateway.groups.offsets")

# Upstream answers to a simple commit that only a group with live upstream members gives.
_MEMBERSHIP_ERRORS = frozenset(
    {
        Errors.ILLEGAL_GENERATION, Errors.UNKNOWN_MEMBER_ID, Errors.REBALANCE_IN_PROGRESS, Errors.FENCED_INSTANCE_ID,
        Errors.FENCED_MEMBER_EPOCH, Errors.STALE_MEMBER_EPOCH,
    }
)  # fmt: skip


# The first version of each commit API that names topics by id (OffsetCommit: KIP-848; TxnOffsetCommit: KIP-1319).
_BY_ID_FROM: dict[int, int] = {ApiKey.OFFSET_COMMIT: TOPIC_ID_VERSION, ApiKey.TXN_OFFSET_COMMIT: 6}

# (topic name, topic id or None, [(partition, error code)]) per committed topic.
CommitResults = list[tuple[str, "uuid.UUID | None", list[tuple[int, int]]]]


def _partition_errors(topics: Any, error: int) -> CommitResults:
    return [(t.name, getattr(t, "topic_id", None), [(p.partition_index, error) for p in t.partitions]) for t in topics]


def _committed(msg: Any) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    """The (topic name, partitions) an OffsetCommit / TxnOffsetCommit writes; None when it names
    topics by id only (OffsetCommit v10+ without names): then only the exact epoch is accepted."""
    out = []
    for t in getattr(msg, "topics", None) or ():
        name = getattr(t, "name", None)
        if not name:
            return None
        out.append((name, tuple(p.partition_index for p in t.partitions)))
    return tuple(out)


def _commit_response(api_key: int, prefix: str, version: int, results: CommitResults) -> Any:
    """An OffsetCommit / TxnOffsetCommit response (same shape, message-specific class names). Each
    topic carries its name and its id: the encoder writes the one the version has (ids from v10)."""
    cls = gc.response_cls(api_key)
    topic_cls = getattr(cls, f"{prefix}Topic")
    partition_cls = getattr(topic_cls, f"{prefix}Partition")
    topics = []
    for name, topic_id, parts in results:
        topics.append(topic_cls(name=name, topic_id=topic_id, partitions=[partition_cls(partition_index=p, error_code=e) for p, e in parts]))
    return cls[version](topics=topics)


class OffsetBridge(OffsetFetches):
    """Offset APIs of managed groups: validated by the group's shard, written to and read from the cluster."""

    def __init__(
        self,
        client: UpstreamClient,
        *,
        watch: MetadataWatch,
        groups: CoordinatorRuntime,
        managed: Callable[[str], bool],
        adoption: UpstreamLeaver,
        bypass_suspected: Callable[[str, str], None],
        counters: collections.Counter[str],
        leave_abandoned: bool,
    ) -> None:
        self.client = client
        self.watch = watch
        self.groups = groups
        self.managed = managed
        self.adoption = adoption
        self.bypass_suspected = bypass_suspected
        self.counters = counters
        self.leave_abandoned = leave_abandoned  # coordinator.leave_abandoned_upstream_members
        self.writes = CommitWrites(self._send_commit, spawn=lambda coro: self.groups.spawn(coro))

    async def _send_commit(self, gid: str, version: int, msg: Any, lane: int) -> Any:
        """One (merged) simple commit to the group's upstream coordinator, at most once. Its parts are
        clients' requests the group layer checked for nulls when it decoded them (dispatch.handle), and
        the fields set here (member id "", no instance id) are not null where the schema forbids it."""
        return await self.client.to_coordinator(
            gid, ApiKey.OFFSET_COMMIT, version, msg, _moved_error, idempotent=False, lane=lane, checked=True
        )

    # --- commits ---------------------------------------------------------------------------------------

    async def _named(self, api_key: int, version: int, msg: Any) -> CommitResults:
        """Name every topic of a commit by id, for the validation and the upstream write; ids nobody knows
        are dropped from ``msg`` and returned as UNKNOWN_TOPIC_ID, not committed (what Kafka does)."""
        unknown: CommitResults = []
        if version < _BY_ID_FROM[api_key]:
            return unknown
        names = await self._topic_names({t.topic_id for t in msg.topics})
        known = []
        for t in msg.topics:
            name = names.get(t.topic_id)
            if name is None:
                unknown.extend(_partition_errors([t], Errors.UNKNOWN_TOPIC_ID))
            else:
                t.name = name
                known.append(t)
        msg.topics = known
        return unknown

    async def offset_commit(self, ctx: RequestContext, msg: Any) -> Any:
        version = ctx.api_version
        unknown = await self._named(ApiKey.OFFSET_COMMIT, version, msg)
        denied = await _unauthorized_commit_topics(ctx, msg)
        check = OffsetCommitCheck(
            group_id=msg.group_id,
            member_id=msg.member_id if version >= 1 else "",
            generation_id=msg.generation_id_or_member_epoch if version >= 1 else -1,
            group_instance_id=msg.group_instance_id if version >= 7 else None,
            api_version=version,
            partitions=_committed(msg),
        )
        # As Kafka: when no topic is left to commit, the group is not asked.
        results = (
            await self._commit(check, ApiKey.OFFSET_COMMIT, version, msg, ctx) if msg.topics or not (unknown or denied) else []
        )
        return _commit_response(ApiKey.OFFSET_COMMIT, "OffsetCommitResponse", version, denied + unknown + results)

    async def txn_offset_commit(self, ctx: RequestContext, msg: Any) -> Any:
        version = ctx.api_version
        unknown = await self._named(ApiKey.TXN_OFFSET_COMMIT, version, msg)
        denied = await _unauthorized_commit_topics(ctx, msg)
        check = OffsetCommitCheck(
            group_id=msg.group_id,
            member_id=msg.member_id if version >= 3 else "",
            generation_id=msg.generation_id_or_member_epoch if version >= 3 else -1,
            group_instance_id=msg.group_instance_id if version >= 3 else None,
            api_version=version,
            is_transactional=True,
            partitions=_committed(msg),
        )
        results = (
            await self._commit(check, ApiKey.TXN_OFFSET_COMMIT, version, msg, ctx) if msg.topics or not (unknown or denied) else []
        )
        return _commit_response(ApiKey.TXN_OFFSET_COMMIT, "TxnOffsetCommitResponse", version, denied + unknown + results)

    async def _commit(
        self, check: OffsetCommitCheck, api_key: int, version: int, msg: Any, ctx: RequestContext | None = None
    ) -> CommitResults:
        gid = check.group_id
        if not self.managed(gid):
            # A group the gateway does not coordinate, here only because the client's version is newer
            # than the upstream's (dispatch.claims): the upstream validates it, at a version it has.
            return await self._forward_commit(gid, api_key, version, msg)
        # Read before the call: while the check waits for its answer to be durable, another member's
        # JoinGroup may create the group, and the group being known then says nothing of the check.
        known_before = self._known(gid)
        reply: OffsetCheckResponse = await self.groups.call(gid, check)
        error = int(reply.error_code)
        if check.member_id and (error == Errors.GROUP_ID_NOT_FOUND or (error == Errors.ILLEGAL_GENERATION and not known_before)):
            # A member of a group the gateway did not have: one the cluster coordinated before the group
            # became managed here (docs/operations.md, "Adopting a live group"). Kafka answers
            # GROUP_ID_NOT_FOUND from v9 (ILLEGAL_GENERATION before); classic clients take the former
            # as a fatal commit error. UNKNOWN_MEMBER_ID makes them drop the old id and join here.
            self.counters["commits_unknown_group"] += 1
            error = Errors.UNKNOWN_MEMBER_ID
        if error == Errors.UNKNOWN_MEMBER_ID:
            self.adoption.abandoned(gid, check.member_id)
        if error != 0:
            self.counters["commits_fenced"] += 1
            if ctx is not None:
                classic = self.groups.group_kind(gid) == "classic"
                kind = f"{_API_NAMES[api_key]}-refused:{_error_name(error)}"
                ctx.refuse(kind, _refusal_reason(check, error, classic))
            return _partition_errors(msg.topics, error)
        # A simple commit upstream: the members exist only in the gateway's coordinator.
        wanted = min(version, gc.LOCAL_API[api_key][1])
        try:
            v = self.client.version(api_key, wanted)
        except UpstreamError:
            self.counters["commits_failed"] += 1
            return _partition_errors(msg.topics, Errors.COORDINATOR_NOT_AVAILABLE)
        msg.generation_id_or_member_epoch = -1
        msg.member_id = ""
        msg.group_instance_id = None
        try:
            # At most once: a commit lost in flight is answered CLUSTER_UNREACHABLE (retriable; never
            # acknowledged unless the cluster wrote it) and the client sends it again in its own order.
            if api_key == ApiKey.OFFSET_COMMIT:
                # Merged with the group's other commits waiting at the same time (gateway/groups/commit_batch.py).
                out = await self.writes.commit(gid, v, msg)
            else:
                r = await self.client.to_coordinator(gid, api_key, v, msg, _first_partition_error, idempotent=False)
                out = _answer_of(r, msg, v >= _BY_ID_FROM[api_key])
        except UpstreamError as e:
            log.warning("offset commit could not reach the upstream coordinator", group_id=gid, error=str(e))
            self.counters["commits_failed"] += 1
            return _partition_errors(msg.topics, CLUSTER_UNREACHABLE)
        if v < _BY_ID_FROM[api_key]:
            # The upstream named topics only: their ids, for a client that speaks ids.
            ids = self._topic_ids()
            out = [(name, ids.get(name), parts) for name, _, parts in out]
        errors = {e for _, _, parts in out for _, e in parts}
        if errors & _MEMBERSHIP_ERRORS:
            log.warning(
                "upstream refused a simple commit of a managed group: it has members of its own",
                group_id=gid,
                errors=sorted(errors),
            )
            self.bypass_suspected(gid, "commit refused by the upstream coordinator")
            held = self._refused_upstream_error(gid)
            if held is not None:
                out = [(t, i, [(p, held if e in _MEMBERSHIP_ERRORS else e) for p, e in ps]) for t, i, ps in out]
        self.counters["commits"] += 1
        return out

    async def _forward_commit(self, gid: str, api_key: int, version: int, msg: Any) -> CommitResults:
        try:
            v = self.client.version(api_key, version)
            # At most once, as above; an unmanaged group's client is told what its own coordinator would say.
            r = await self.client.to_coordinator(gid, api_key, v, msg, _first_partition_error, idempotent=False)
        except UpstreamError as e:
            log.warning("offset commit could not reach the upstream coordinator", group_id=gid, error=str(e))
            return _partition_errors(msg.topics, Errors.COORDINATOR_NOT_AVAILABLE)
        names = {getattr(t, "topic_id", None): t.name for t in msg.topics}
        ids = self._topic_ids()
        return [
            (t.name or names.get(getattr(t, "topic_id", None), ""), getattr(t, "topic_id", None) or ids.get(t.name),
             [(p.partition_index, p.error_code) for p in t.partitions])
            for t in r.topics
        ]

    def _refused_upstream_error(self, group_id: str) -> int | None:
        """What a member of the gateway's own group is told when the cluster refused its commit because
        the cluster's group still has members (an adoption under way, or a client bypassing the gateway).

        The committer passed the gateway's own check, so it IS a member: the upstream's UNKNOWN_MEMBER_ID
        would make it drop that membership or fail the commit for good. A classic group's member is told
        REBALANCE_IN_PROGRESS (it keeps its id, rejoins and commits again); a consumer group's member,
        KIP-848 or classic, COORDINATOR_LOAD_IN_PROGRESS, which the Java clients retry within the same
        commitSync and librdkafka retries, until the gateway has removed the cluster's old members
        (gateway/groups/adoption.py). None: a group the gateway does not hold (the upstream's answer stands)."""
        kind = self.groups.group_kind(group_id)
        if kind == "classic":
            return Errors.REBALANCE_IN_PROGRESS
        return Errors.COORDINATOR_LOAD_IN_PROGRESS if kind is not None else None

    def _known(self, group_id: str) -> bool:
        return self.groups.group_kind(group_id) is not None

    # --- deletes ---------------------------------------------------------------------------------------

    async def offset_delete(self, ctx: RequestContext, msg: Any) -> Any:
        version = ctx.api_version
        cls = gc.response_cls(ApiKey.OFFSET_DELETE)
        refused = []
        unauthorized: list[Any] = []
        if ctx.access.enabled:
            allowed = await ctx.access.topics(READ, [t.name for t in msg.topics])
            unauthorized = [t for t in msg.topics if t.name not in allowed]
            if unauthorized:
                _refused(ctx, "TOPIC_AUTHORIZATION_FAILED")
                msg.topics = [t for t in msg.topics if t.name in allowed]
        if self.managed(msg.group_id):
            subscribed = self.groups.subscribed_topics(msg.group_id)  # KIP-496
            refused = [t for t in msg.topics if t.name in subscribed]
            msg.topics = [t for t in msg.topics if t.name not in subscribed]
        refused_topics = [
            cls.OffsetDeleteResponseTopic(
                name=t.name,
                partitions=[
                    cls.OffsetDeleteResponseTopic.OffsetDeleteResponsePartition(
                        partition_index=p.partition_index, error_code=Errors.GROUP_SUBSCRIBED_TO_TOPIC
                    )
                    for p in t.partitions
                ],
            )
            for t in refused
        ] + [
            cls.OffsetDeleteResponseTopic(
                name=t.name,
                partitions=[
                    cls.OffsetDeleteResponseTopic.OffsetDeleteResponsePartition(
                        partition_index=p.partition_index, error_code=Errors.TOPIC_AUTHORIZATION_FAILED
                    )
                    for p in t.partitions
                ],
            )
            for t in unauthorized
        ]
        if not msg.topics:
            return cls[version](topics=refused_topics)
        try:
            r = await self.client.to_coordinator(
                msg.group_id, ApiKey.OFFSET_DELETE, version, msg, lambda r: r.error_code
            )
        except UpstreamError as e:
            log.warning("OffsetDelete could not reach the upstream coordinator", group_id=msg.group_id, error=str(e))
            return gc.response(ApiKey.OFFSET_DELETE, version, error_code=Errors.COORDINATOR_NOT_AVAILABLE)
        if r.error_code != 0 and unauthorized:
            # Kafka answers a group error alone (GROUP_ID_NOT_FOUND, ...), without the refused topics.
            refused_topics = refused_topics[: len(refused_topics) - len(unauthorized)]
        r.topics = list(r.topics) + refused_topics
        return r

    async def delete_upstream_group(self, gid: str) -> int:
        """Delete the group (its offsets) on the upstream; its error code."""
        client = self.client
        try:
            v = client.version(ApiKey.DELETE_GROUPS, 2)
            req = codec.REQUESTS[ApiKey.DELETE_GROUPS][v](groups_names=[gid])
            # At most once: sent again after a lost link, a delete that was applied would answer
            # GROUP_ID_NOT_FOUND; the client's retry after COORDINATOR_NOT_AVAILABLE tells the truth.
            r = await client.to_coordinator(
                gid, ApiKey.DELETE_GROUPS, v, req, lambda r: r.results[0].error_code, idempotent=False
            )
            return int(r.results[0].error_code)
        except UpstreamError as e:
            log.warning("DeleteGroups could not reach the upstream coordinator", group_id=gid, error=str(e))
            return Errors.COORDINATOR_NOT_AVAILABLE


_API_NAMES: dict[int, str] = {ApiKey.OFFSET_COMMIT: "offset-commit", ApiKey.TXN_OFFSET_COMMIT: "txn-offset-commit"}

async def _unauthorized_commit_topics(ctx: RequestContext, msg: Any) -> CommitResults:
    """Kafka's READ check of each committed topic: the topics the principal may not read leave ``msg``
    and are answered TOPIC_AUTHORIZATION_FAILED on each partition; the others are committed."""
    if not ctx.access.enabled or not msg.topics:
        return []
    allowed = await ctx.access.topics(READ, [t.name for t in msg.topics])
    denied = [t for t in msg.topics if t.name not in allowed]
    if not denied:
        return []
    _refused(ctx, "TOPIC_AUTHORIZATION_FAILED")
    msg.topics = [t for t in msg.topics if t.name in allowed]
    return _partition_errors(denied, Errors.TOPIC_AUTHORIZATION_FAILED)


def _error_name(error: int) -> str:
    try:
        return Errors(error).name
    except ValueError:
        return str(error)


def _refusal_reason(check: OffsetCommitCheck, error: int, classic_group: bool) -> str:
    """Why the gateway's coordinator refused a commit, in words an operator can act on."""
    who = f"member {check.member_id!r} of group {check.group_id!r} at generation/epoch {check.generation_id}"
    if error == Errors.ILLEGAL_GENERATION and classic_group:
        return f"{who}: not the classic group's current generation"
    if error in (Errors.ILLEGAL_GENERATION, Errors.STALE_MEMBER_EPOCH):
        return (
            f"{who}: not the member's current epoch, nor (KIP-1251) an older one at which it already held "
            "every committed partition"
        )
    if error == Errors.UNKNOWN_MEMBER_ID:
        return f"{who}: no such member in the gateway's group"
    if error == Errors.FENCED_INSTANCE_ID:
        return f"{who}: instance id {check.group_instance_id!r} belongs to another member"
    if error == Errors.REBALANCE_IN_PROGRESS:
        return f"{who}: the group is between JoinGroup and SyncGroup"
    if error == Errors.UNSUPPORTED_VERSION:
        return f"{who}: consumer-protocol members commit with OffsetCommit v9 or later (this was v{check.api_version})"
    return f"{who}: {_error_name(error)}"


def _answer_of(r: Any, msg: Any, by_id: bool) -> CommitResults:
    """A commit response as (topic name, topic id, [(partition, error)]); names from the request when the
    response names topics by id only."""
    if by_id:
        names = {t.topic_id: t.name for t in msg.topics}
        return [
            (names.get(t.topic_id, ""), t.topic_id, [(p.partition_index, p.error_code) for p in t.partitions])
            for t in r.topics
        ]
    return [(t.name, None, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics]


def _moved_error(r: Any) -> int:
    """A merged commit's error for the retry decision: the coordinator's own (NOT_COORDINATOR and the like)
    wherever it shows, since the partitions ahead of it may carry one client's topic error (a topic the
    cluster does not have is answered before the coordinator is asked)."""
    first = None
    for t in r.topics:
        for p in t.partitions:
            if p.error_code in COORDINATOR_MOVED:
                return int(p.error_code)
            if first is None:
                first = int(p.error_code)
    return first or 0


def _first_partition_error(r: Any) -> int:
    for t in r.topics:
        for p in t.partitions:
            return int(p.error_code)
    return 0
