"""OffsetFetch of managed groups (gateway/groups/offsets.py): the member checked by the group's shard when a v9+
request names it (KIP-848 member epoch), the offsets read from the cluster's coordinator, and its answer
merged with the gateway's own refusals (unknown topic ids, topics the principal may not describe).

The cluster is always asked as a group without members (member id null, epoch -1): the members live in
the gateway. Versions before 8 ask for one group; from 8 a batch, each answered on its own; from v10
(KIP-848) topics are named by id and resolved through the topic image.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from coordinator.errors import Errors
from gateway.authz.groups import DESCRIBE, Access
from gateway.logging import get_logger
from gateway.net.upstream import UpstreamError
from gateway.wire import codec
from gateway.wire import group_codec as gc
from gateway.wire.api_keys import ApiKey
from translate.group_messages import OffsetCheckResponse, OffsetFetchCheck

if TYPE_CHECKING:
    import collections
    from collections.abc import Callable

    from gateway.groups.metadata_watch import MetadataWatch
    from gateway.groups.requests import RequestContext
    from gateway.groups.runtime import CoordinatorRuntime
    from gateway.net.upstream_client import UpstreamClient

log = get_logger("gateway.groups.offsets")

# OffsetCommit / OffsetFetch v10 (KIP-848) name topics by id only; the gateway speaks names upstream.
TOPIC_ID_VERSION = 10
# A commit or fetch of a managed group that could not reach the cluster (a broker outage, or a commit
# lost in flight with its link). The coordinator (the gateway) is fine: the Java consumer retries
# COORDINATOR_LOAD_IN_PROGRESS within the same commitSync / position lookup and librdkafka retries it,
# neither forgets its coordinator (COORDINATOR_NOT_AVAILABLE would make the Java client drop and
# reopen its coordinator connection). The commit is never acknowledged unless the cluster wrote it.
CLUSTER_UNREACHABLE = Errors.COORDINATOR_LOAD_IN_PROGRESS

# One OffsetFetch topic's answer: (name, [(partition, offset, leader epoch, metadata, error)]).
FetchedTopic = tuple[str, list[tuple[int, int, int, "str | None", int]]]


class OffsetFetches:
    """The OffsetFetch half of ``OffsetBridge`` (which sets these attributes), and the topic id <-> name
    lookups both halves use."""

    client: UpstreamClient
    watch: MetadataWatch
    groups: CoordinatorRuntime
    managed: Callable[[str], bool]
    counters: collections.Counter[str]
    leave_abandoned: bool

    async def _topic_names(self, ids: set[uuid.UUID]) -> dict[uuid.UUID, str]:
        """Topic id -> name from the topic image, refreshed once when an id is unknown."""
        watch = self.watch
        names = {tid: name for name, (tid, _) in watch.topics.items()}
        if ids - names.keys():
            try:
                await watch.refresh()
            except UpstreamError as e:
                log.warning("metadata refresh for topic ids failed", error=str(e))
            names = {tid: name for name, (tid, _) in watch.topics.items()}
        return names

    def _topic_ids(self) -> dict[str, uuid.UUID]:
        return {name: tid for name, (tid, _) in self.watch.topics.items()}

    async def offset_fetch(self, ctx: RequestContext, msg: Any) -> Any:
        version = ctx.api_version
        cls = gc.response_cls(ApiKey.OFFSET_FETCH)
        access = ctx.access
        got: list[FetchedTopic]
        if version < 8:
            topics = None if msg.topics is None else [(t.name, list(t.partition_indexes)) for t in msg.topics]
            if not await access.group(DESCRIBE, msg.group_id):
                _refused(ctx, "GROUP_AUTHORIZATION_FAILED")
                err, got = int(Errors.GROUP_AUTHORIZATION_FAILED), []
                if version < 2:  # no top-level error code before v2: on every partition asked
                    got = [(n, [(p, -1, -1, "", err) for p in ps]) for n, ps in topics or ()]
            else:
                topics, denied = await _split_fetch_topics(access, topics)
                if topics == [] and denied:
                    err, got = 0, []
                else:
                    err, got = await self._fetch_group(
                        msg.group_id, None, -1, topics, msg.require_stable if version >= 7 else False
                    )
                got = await _visible(access, topics, got)
                if err == 0:
                    got += denied
            fields = {"error_code": err} if version >= 2 else {}
            return cls[version](
                **fields,
                topics=[
                    cls.OffsetFetchResponseTopic(
                        name=name,
                        partitions=[
                            cls.OffsetFetchResponseTopic.OffsetFetchResponsePartition(
                                partition_index=p, committed_offset=o, committed_leader_epoch=le, metadata=md,
                                error_code=e,
                            )
                            for p, o, le, md, e in parts
                        ],
                    )
                    for name, parts in got
                ],
            )
        gcls = cls.OffsetFetchResponseGroup
        tcls = gcls.OffsetFetchResponseTopics
        pcls = tcls.OffsetFetchResponsePartitions
        by_id = version >= TOPIC_ID_VERSION
        names: dict[uuid.UUID, str] = {}
        if by_id:
            wanted = {t.topic_id for g in msg.groups for t in (g.topics or ())}
            names = await self._topic_names(wanted) if wanted else {}
        groups = []
        for g in msg.groups:
            wanted_topics: list[tuple[str, list[int]]] | None = None
            unknown: list[tuple[str, list[tuple[int, int, int, str | None, int]]]] = []
            unknown_ids: dict[str, uuid.UUID] = {}
            if g.topics is not None:
                wanted_topics = []
                for t in g.topics:
                    if not by_id:
                        wanted_topics.append((t.name, list(t.partition_indexes)))
                    elif t.topic_id in names:
                        wanted_topics.append((names[t.topic_id], list(t.partition_indexes)))
                    else:
                        # A topic id nobody knows: UNKNOWN_TOPIC_ID per partition, as Kafka answers.
                        key = f"\0{t.topic_id}"
                        unknown_ids[key] = t.topic_id
                        unknown.append((key, [(p, -1, -1, "", Errors.UNKNOWN_TOPIC_ID) for p in t.partition_indexes]))
            member_id = g.member_id if version >= 9 else None
            epoch = g.member_epoch if version >= 9 else -1
            if not await access.group(DESCRIBE, g.group_id):
                # Kafka answers this group alone so; the others of the batch are answered.
                _refused(ctx, "GROUP_AUTHORIZATION_FAILED")
                groups.append(gcls(group_id=g.group_id, error_code=Errors.GROUP_AUTHORIZATION_FAILED, topics=[]))
                continue
            wanted_topics, denied = await _split_fetch_topics(access, wanted_topics)
            if wanted_topics == [] and (unknown or denied):
                err, got = 0, []
            else:
                err, got = await self._fetch_group(g.group_id, member_id, epoch, wanted_topics, msg.require_stable)
            got = await _visible(access, wanted_topics, got)
            ids = self._topic_ids() if by_id else {}
            if by_id:
                # Answered with ids: a topic whose id the gateway cannot tell (deleted since) is left out.
                got = [(n, parts) for n, parts in got if n in ids]
                if err == 0:
                    got += unknown
            if err == 0:
                got += denied
            groups.append(
                gcls(
                    group_id=g.group_id,
                    error_code=err,
                    topics=[
                        tcls(
                            name=name,
                            topic_id=unknown_ids.get(name) or ids.get(name),
                            partitions=[
                                pcls(
                                    partition_index=p, committed_offset=o, committed_leader_epoch=le, metadata=md,
                                    error_code=e,
                                )
                                for p, o, le, md, e in parts
                            ],
                        )
                        for name, parts in got
                    ],
                )
            )
        return cls[version](groups=groups)

    async def _fetch_group(
        self,
        gid: str,
        member_id: str | None,
        member_epoch: int,
        topics: list[tuple[str, list[int]]] | None,
        require_stable: bool,
    ) -> tuple[int, list[tuple[str, list[tuple[int, int, int, str | None, int]]]]]:
        """(group error, [(topic, [(partition, offset, leader epoch, metadata, error)])]) from upstream."""
        if self.managed(gid) and member_id is not None:
            reply: OffsetCheckResponse = await self.groups.call(gid, OffsetFetchCheck(gid, member_id, member_epoch))
            error = int(reply.error_code)
            if error in (Errors.UNKNOWN_MEMBER_ID, Errors.GROUP_ID_NOT_FOUND) and self.leave_abandoned:
                # A member id the gateway does not know, typically one the client still holds from the
                # cluster's coordinator right after its group became managed here (docs/operations.md,
                # "Adopting a live group"). The Java consumer fails poll() for good on an OffsetFetch
                # answered UNKNOWN_MEMBER_ID; a fetch changes nothing, so it is answered as one without
                # a member, and the client's next heartbeat moves it to the gateway's group.
                self.counters["fetches_unknown_member"] += 1
            elif error != 0:
                return error, []
        client = self.client
        try:
            v = client.version(ApiKey.OFFSET_FETCH, 9)
            req_cls = codec.REQUESTS[ApiKey.OFFSET_FETCH]
            if v >= 8:
                gcls = req_cls.OffsetFetchRequestGroup
                req_topics = (
                    None
                    if topics is None
                    else [gcls.OffsetFetchRequestTopics(name=n, partition_indexes=ps) for n, ps in topics]
                )
                req = req_cls[v](
                    groups=[gcls(group_id=gid, member_id=None, member_epoch=-1, topics=req_topics)],
                    require_stable=require_stable,
                )
            else:
                req_topics = (
                    None
                    if topics is None
                    else [req_cls.OffsetFetchRequestTopic(name=n, partition_indexes=ps) for n, ps in topics]
                )
                req = req_cls[v](group_id=gid, topics=req_topics, require_stable=require_stable)
            r = await client.to_coordinator(gid, ApiKey.OFFSET_FETCH, v, req, lambda r: _fetch_error(r, v))
        except UpstreamError as e:
            log.warning("offset fetch could not reach the upstream coordinator", group_id=gid, error=str(e))
            return CLUSTER_UNREACHABLE, []
        if v >= 8:
            g = r.groups[0]
            err, rtopics = g.error_code, g.topics
        else:
            err, rtopics = r.error_code, r.topics
        return err, [
            (
                t.name,
                [(p.partition_index, p.committed_offset, p.committed_leader_epoch, p.metadata, p.error_code) for p in t.partitions],
            )
            for t in rtopics
        ]


def _refused(ctx: RequestContext, error: str) -> None:
    ctx.refuse(f"authorization:{error}", ctx.access.reason)


async def _split_fetch_topics(
    access: Access, topics: list[tuple[str, list[int]]] | None
) -> tuple[list[tuple[str, list[int]]] | None, list[FetchedTopic]]:
    """(topics that may be described, the others answered TOPIC_AUTHORIZATION_FAILED per partition)."""
    if not access.enabled or topics is None:
        return topics, []
    allowed = await access.topics(DESCRIBE, [n for n, _ in topics])
    denied: list[FetchedTopic] = [
        (n, [(p, -1, -1, "", int(Errors.TOPIC_AUTHORIZATION_FAILED)) for p in ps]) for n, ps in topics if n not in allowed
    ]
    return [(n, ps) for n, ps in topics if n in allowed], denied


async def _visible(access: Access, asked: list[tuple[str, list[int]]] | None, got: list[Any]) -> list[Any]:
    """An all-topics fetch shows only the topics the principal may describe (Kafka leaves the others out)."""
    if not access.enabled or asked is not None or not got:
        return got
    allowed = await access.topics(DESCRIBE, [n for n, _ in got])
    return [(n, parts) for n, parts in got if n in allowed]


def _fetch_error(r: Any, version: int) -> int:
    if version >= 8:
        return int(r.groups[0].error_code) if r.groups else 0
    return int(r.error_code) if version >= 2 else 0
