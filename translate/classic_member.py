"""Classic members inside a consumer group: KIP-848 "Supporting Online Consumer Group Upgrade".

A legacy consumer keeps speaking JoinGroup / SyncGroup / Heartbeat / LeaveGroup while its group is
a consumer group run by coordinator/. Each classic request is translated for that one member - no
group-wide barrier: JoinGroup is the member's "heartbeat with a full subscription" (epoch moves,
target computed, reconciliation against the partitions it reports owning); SyncGroup hands back its
current assignment; Heartbeat tells it to rejoin when the group has moved on. Every classic member
is a follower (leader "", no member list): the server assignor decides.

Timers: the coordinator's session timer for the member, plus a sync timer (JoinGroup answered but
no SyncGroup) and a join timer (told to rejoin but did not), both of rebalance-timeout length;
their expiry fences the member like a session expiry.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable

from coordinator.errors import ApiError, Errors
from coordinator.membership import replace_static_member
from coordinator.model import (
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from coordinator.outcome import Outcome, RequestKey, StrategyFallback
from coordinator.service import ConsumerGroupCoordinator
from coordinator.state import Tx
from coordinator.target import select_assignor
from coordinator.timers import session_key
from translate.classic_join import join_error
from translate.classic_messages import (
    MEMBER_ID_REQUIRED_VERSION,
    UNKNOWN_MEMBER_ID,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from translate.classic_rebalance import ClassicGroupConfig
from translate.classic_strategies import FALLBACK_REASON, STRATEGIES, common_protocol
from translate.embedded import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerProtocolAssignment,
    MalformedEmbeddedProtocol,
    TopicPartitions,
    announced_version,
    decode_subscription,
    encode_assignment,
)
from translate.result import Cancel as _cancel
from translate.result import Schedule as _schedule
from translate.result import timer_key

log = logging.getLogger(__name__)
_MAX_WARNED = 10_000
# How long a translated classic member holding partitions of a deleted topic is left to notice it itself
# (and report them lost) before it is told to rejoin: a few of its metadata refreshes or fetch retries.
DELETED_TOPIC_GRACE_MS = 3_000

# A classic member told to rejoin (or answered JoinGroup) has one rebalance timeout to do so.
CLASSIC_MEMBER_JOIN_TIMER = "classic-member-join"
CLASSIC_MEMBER_SYNC_TIMER = "classic-member-sync"
# A translated group without members holds its first joins (group.initial.rebalance.delay.ms).
CLASSIC_MEMBER_GATHER_TIMER = "classic-member-gather"


@dataclasses.dataclass(slots=True)
class _Gathering:
    deadline_ms: int  # when the parked joins are answered
    limit_ms: int  # newcomers extend the deadline up to here (the first joiner's rebalance timeout)
    # Initial gathering: joins held before their members are added.
    parked: list[tuple[JoinGroupRequest, RequestKey]] = dataclasses.field(default_factory=list)
    # Rejoin barrier: members already added (the group epoch moved), answers held.
    admitted: list[_Admitted] = dataclasses.field(default_factory=list)
    barrier: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class _Admitted:
    request: JoinGroupRequest
    request_key: RequestKey
    member_id: str
    owned: Assignment
    rebalance_timeout_ms: int

# A classic consumer's ``partition.assignment.strategy`` (its preferred protocol name) -> the server
# assignor it asks for in KIP-848's selection. Used where a group's assignor is chosen as KIP-848 does
# (a translated group with consumer-protocol members, or whose common protocol is a custom strategy);
# a purely classic translated group gets its common protocol's own layout (translate/classic_strategies.py).
STRATEGY_ASSIGNORS = {
    "range": "range",
    "sticky": "uniform",
    "cooperative-sticky": "uniform",
    "roundrobin": "uniform",
}


class ClassicMemberTranslator:
    def __init__(
        self,
        coordinator: ConsumerGroupCoordinator,
        new_member_id: Callable[[str], str],
        config: ClassicGroupConfig | None = None,
        translate: bool = False,
    ) -> None:
        self.coordinator = coordinator
        self.new_member_id = new_member_id
        self.config = config or ClassicGroupConfig()
        # ``classic_groups = translate``: the group exists for its classic members, so their
        # client-side strategies choose its server assignor. In a group being migrated (native
        # mode) classic members choose none, as in Kafka.
        self.translate = translate
        self.deadlines: dict[tuple[str, str, str], int] = {}
        self.gatherings: dict[str, _Gathering] = {}
        # (group, protocol) pairs already warned about (a custom strategy falling back).
        self.fallbacks_warned: set[tuple[str, str]] = set()
        # group -> ((group epoch, member count), its common protocol), for the JoinGroup answers.
        self.common_protocols: dict[str, tuple[tuple[int, int], str | None]] = {}
        # (group, member) -> when it was first seen holding partitions of a deleted topic.
        self.deletion_seen: dict[tuple[str, str], int] = {}

    # ---- JoinGroup ---------------------------------------------------------------------------
    def join_group(self, request: JoinGroupRequest, request_key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        if self._gather(out, request, request_key, now_ms):
            return out
        try:
            self._join(out, request, request_key, now_ms)
        except ApiError as exc:
            out.respond(request_key, join_error(exc.error, request.member_id))
        return out

    def _join(self, out: Outcome, request: JoinGroupRequest, key: RequestKey, now_ms: int) -> None:
        group = self.coordinator.group(request.group_id)
        epoch = group.group_epoch if group is not None else 0
        admitted = self._admit(out, request, key, now_ms)
        if admitted is None:
            return
        if self._opens_barrier(request, admitted, epoch):
            self._hold(out, admitted, now_ms)
        else:
            self._answer(out, admitted, now_ms)

    @staticmethod
    def _rebalance_timeout(request: JoinGroupRequest) -> int:
        if request.api_version == 0 or request.rebalance_timeout_ms < 0:
            return request.session_timeout_ms
        return request.rebalance_timeout_ms

    def _admit(self, out: Outcome, request: JoinGroupRequest, key: RequestKey, now_ms: int) -> _Admitted | None:
        """Validate the join and write the member (its subscription); None when already answered."""
        config = self.config
        if not config.min_session_timeout_ms <= request.session_timeout_ms <= config.max_session_timeout_ms:
            raise ApiError(Errors.INVALID_SESSION_TIMEOUT)
        rebalance_timeout = self._rebalance_timeout(request)
        group = self.coordinator.group(request.group_id)
        if group is None:
            raise ApiError(Errors.GROUP_ID_NOT_FOUND)
        member_id = request.member_id
        instance_id = request.group_instance_id
        if member_id == UNKNOWN_MEMBER_ID:
            member_id = self.new_member_id(request.client_id)
            if instance_id is None and request.api_version >= MEMBER_ID_REQUIRED_VERSION:
                # KIP-394, as for classic groups; nothing is persisted or remembered.
                out.respond(key, join_error(Errors.MEMBER_ID_REQUIRED, member_id))
                return None

        existing, replaced = self._lookup(group, request.member_id, member_id, instance_id)
        if existing is None and replaced is None:
            limit = self.coordinator.state.config.max_group_size
            if limit is not None and len(group.members) >= limit:
                raise ApiError(Errors.GROUP_MAX_SIZE_REACHED)
        if request.protocol_type != CONSUMER_PROTOCOL_TYPE or not self._protocols_supported(group, request, existing):
            raise ApiError(Errors.INCONSISTENT_GROUP_PROTOCOL)
        try:
            # The subscription is the first (preferred) protocol's metadata.
            subscription = decode_subscription(request.protocols[0].metadata)
        except MalformedEmbeddedProtocol as exc:
            raise ApiError(Errors.INCONSISTENT_GROUP_PROTOCOL, str(exc)) from exc

        tx = self.coordinator.begin()
        if replaced is not None:
            # KIP-345 in a consumer group: the restarted static member inherits the old one's
            # target and assignment under its new id.
            existing = replace_static_member(tx, group, replaced, member_id)
            self.cancel_member_timers(out, group.group_id, replaced.member_id)
        base = existing if existing is not None else ConsumerGroupMember(member_id)
        updated = dataclasses.replace(
            base,
            instance_id=instance_id,
            rack_id=subscription.rack_id,
            client_id=request.client_id,
            client_host=request.client_host,
            subscribed_topic_names=frozenset(subscription.topics),
            subscribed_topic_regex=None,
            rebalance_timeout_ms=rebalance_timeout,
            server_assignor=self.server_assignor(request),
            classic_metadata=ClassicMemberMetadata(
                request.session_timeout_ms, tuple((p.name, p.metadata) for p in request.protocols)
            ),
        )
        self.coordinator.upsert_member(tx, group.group_id, updated, now_ms)
        self.common_protocols.pop(group.group_id, None)
        self._take_tx(out, tx)
        owned = self._owned_partitions(subscription.owned_partitions)
        return _Admitted(request, key, member_id, owned, rebalance_timeout)

    def _answer(self, out: Outcome, admitted: _Admitted, now_ms: int) -> None:
        """Reconcile an admitted member against the (possibly new) target and answer its join."""
        request, member_id = admitted.request, admitted.member_id
        group_id = request.group_id
        tx = self.coordinator.begin()
        member = self.coordinator.reconcile_member(tx, group_id, member_id, admitted.owned, now_ms)
        tx.schedule(session_key(group_id, member_id), now_ms + request.session_timeout_ms)
        self._take_tx(out, tx)
        self._cancel(out, timer_key(CLASSIC_MEMBER_JOIN_TIMER, group_id, member_id))
        self._schedule(
            out, timer_key(CLASSIC_MEMBER_SYNC_TIMER, group_id, member_id), now_ms + admitted.rebalance_timeout_ms
        )
        out.respond(
            admitted.request_key,
            JoinGroupResponse(
                error_code=Errors.NONE,
                # Eager members (owning nothing) move to the new epoch at once; cooperative members
                # still holding revoked partitions stay at their epoch until they rejoin without them.
                generation_id=member.member_epoch,
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocol_name=self._protocol_name(out, group_id, request),
                leader="",
                skip_assignment=False,
                member_id=member_id,
                members=[],
            ),
        )

    # ---- gathering ---------------------------------------------------------------------------
    def _gather(self, out: Outcome, request: JoinGroupRequest, key: RequestKey, now_ms: int) -> bool:
        """Park a join that arrives while its group gathers (or opens the gathering); True if parked.

        A classic group waits ``group.initial.rebalance.delay.ms`` before its first rebalance so that
        consumers started together are assigned once. A translated group does the same when it has no
        members: the joins are held, each newcomer extending the wait by the delay up to the first
        joiner's rebalance timeout (Kafka's initial delayed join), then all are added before any is
        assigned, so the first one does not take every partition only to hand most back."""
        delay = self.config.initial_rebalance_delay_ms
        if not self.translate or delay <= 0:
            return False
        if (
            request.member_id == UNKNOWN_MEMBER_ID
            and request.group_instance_id is None
            and request.api_version >= MEMBER_ID_REQUIRED_VERSION
        ):
            return False  # answered MEMBER_ID_REQUIRED at once, as a classic group does
        gid = request.group_id
        timer = timer_key(CLASSIC_MEMBER_GATHER_TIMER, gid)
        gathering = self.gatherings.get(gid)
        if gathering is not None and gathering.barrier:
            self._at_barrier(out, gathering, request, key, now_ms)
            return True
        if gathering is None:
            group = self.coordinator.group(gid)
            if group is not None and group.members:
                return False
            timeout = max(self._rebalance_timeout(request), 0)
            gathering = self.gatherings[gid] = _Gathering(now_ms + min(delay, timeout), now_ms + timeout)
            self._schedule(out, timer, gathering.deadline_ms)
        else:
            deadline = min(now_ms + delay, gathering.limit_ms)
            if deadline > gathering.deadline_ms:
                gathering.deadline_ms = deadline
                self._schedule(out, timer, deadline)
            if request.member_id != UNKNOWN_MEMBER_ID:
                # The same member joining again while parked: the newer request stands.
                for i, (parked, parked_key) in enumerate(gathering.parked):
                    if parked.member_id == request.member_id:
                        del gathering.parked[i]
                        out.respond(parked_key, join_error(Errors.REBALANCE_IN_PROGRESS, request.member_id))
                        break
        gathering.parked.append((request, key))
        return True

    def _opens_barrier(self, request: JoinGroupRequest, admitted: _Admitted, epoch_before: int) -> bool:
        """A join that moved the group epoch (a new member, a changed subscription such as a new
        pattern match) while other classic members are in the group: as a classic group's join
        barrier, its answer waits for them to rejoin (they are told to at their next heartbeat),
        so that the new target is handed out once instead of member by member."""
        if not self.translate or self.config.initial_rebalance_delay_ms <= 0:
            return False
        group = self.coordinator.group(request.group_id)
        if group is None or group.group_epoch == epoch_before:
            return False
        return any(m.uses_classic_protocol and mid != admitted.member_id for mid, m in group.members.items())

    def _hold(self, out: Outcome, admitted: _Admitted, now_ms: int) -> None:
        """Open the rejoin barrier with this member's answer held. It lasts until every classic
        member has rejoined, at most the joiner's session timeout (a live member heartbeats, and so
        learns it must rejoin, well within it) bounded by its rebalance timeout."""
        request = admitted.request
        gid = request.group_id
        deadline = now_ms + max(min(admitted.rebalance_timeout_ms, request.session_timeout_ms), 0)
        self.gatherings[gid] = _Gathering(deadline, deadline, admitted=[admitted], barrier=True)
        self._schedule(out, timer_key(CLASSIC_MEMBER_GATHER_TIMER, gid), deadline)
        self._keep_alive(out, admitted, deadline)

    def _keep_alive(self, out: Outcome, admitted: _Admitted, until_ms: int) -> None:
        # A member waiting at the barrier sends no heartbeats: its session counts from the answer.
        key = session_key(admitted.request.group_id, admitted.member_id)
        out.timers.append(_schedule(key, until_ms + admitted.request.session_timeout_ms))

    def _at_barrier(self, out: Outcome, gathering: _Gathering, request: JoinGroupRequest, key: RequestKey,
                    now_ms: int) -> None:
        """A join while the barrier is up: the member is added (or updated) now, answered with the rest."""
        try:
            admitted = self._admit(out, request, key, now_ms)
        except ApiError as exc:
            out.respond(key, join_error(exc.error, request.member_id))
            return
        if admitted is None:
            return
        for i, held in enumerate(gathering.admitted):
            if held.member_id == admitted.member_id:
                del gathering.admitted[i]
                out.respond(held.request_key, join_error(Errors.REBALANCE_IN_PROGRESS, held.member_id))
                break
        gathering.admitted.append(admitted)
        self._keep_alive(out, admitted, gathering.deadline_ms)
        out.take(self.check_barrier(request.group_id, now_ms))

    def check_barrier(self, group_id: str, now_ms: int) -> Outcome:
        """End the group's join barrier once every classic member in the group is waiting at it
        (after a join, or when a member it waited for left, expired or stopped being classic)."""
        gathering = self.gatherings.get(group_id)
        if gathering is None or not gathering.barrier:
            return Outcome()
        group = self.coordinator.group(group_id)
        waiting = {a.member_id for a in gathering.admitted}
        if group is not None and any(
            m.uses_classic_protocol and mid not in waiting for mid, m in group.members.items()
        ):
            return Outcome()
        out = Outcome()
        self._cancel(out, timer_key(CLASSIC_MEMBER_GATHER_TIMER, group_id))
        out.take(self._end_gathering(group_id, now_ms))
        return out

    def _end_gathering(self, group_id: str, now_ms: int) -> Outcome:
        """Add every parked joiner, then assign: one target for all of them."""
        out = Outcome()
        gathering = self.gatherings.pop(group_id, None)
        if gathering is None:
            return out
        self.coordinator.get_or_create_group(group_id)
        admitted: list[_Admitted] = []
        for request, key in gathering.parked:
            try:
                one = self._admit(out, request, key, now_ms)
            except ApiError as exc:
                out.respond(key, join_error(exc.error, request.member_id))
                continue
            if one is not None:
                admitted.append(one)
        group = self.coordinator.group(group_id)

        def still_classic(one: _Admitted) -> bool:
            # A member that left, expired, or was taken over by a consumer-protocol member under
            # the same id (an upgrade) while it waited is not this join's member any more.
            member = group.members.get(one.member_id) if group is not None else None
            return member is not None and member.uses_classic_protocol

        waiting = [one for one in gathering.admitted + admitted if still_classic(one)]
        # Everyone reports what it owns first, so that partitions given up by any of them are free
        # for all (an earlier answer must not miss what a later member releases).
        tx = self.coordinator.begin()
        for one in waiting:
            self.coordinator.reconcile_member(tx, group_id, one.member_id, one.owned, now_ms)
        self._take_tx(out, tx)
        for one in gathering.admitted + admitted:
            if not still_classic(one):
                # Fenced or gone while it waited (session, LeaveGroup): it must join again.
                out.respond(one.request_key, join_error(Errors.UNKNOWN_MEMBER_ID, one.member_id))
                continue
            self._answer(out, one, now_ms)
        return out

    def _protocol_name(self, out: Outcome, group_id: str, request: JoinGroupRequest) -> str:
        """The protocol a joiner is told the group uses. Translate mode, a purely classic group: the
        common protocol, chosen as Kafka's classic group chooses it, whose layout the server computes
        (its client runs that strategy's callbacks). Otherwise, as Kafka answers a classic member of a
        consumer group: the member's own first protocol."""
        own = request.protocols[0].name
        group = self.coordinator.group(group_id)
        if not self.translate or group is None:
            return own
        # Cached per group epoch and size: a rebalance answers every member, and the vote reads them all.
        # A member's protocols change only in _admit, which drops the entry.
        key = (group.group_epoch, len(group.members))
        cached = self.common_protocols.get(group_id)
        if cached is not None and cached[0] == key:
            common = cached[1]
        else:
            common = common_protocol(group)
            if len(self.common_protocols) >= _MAX_WARNED:
                self.common_protocols.clear()
            self.common_protocols[group_id] = (key, common)
        if common is None:
            return own
        if common not in STRATEGIES:
            self._warn_fallback(out, group, common)
        return common

    def _warn_fallback(self, out: Outcome, group: ConsumerGroup, protocol: str) -> None:
        """A custom strategy the server cannot compute: warned once per group and name."""
        key = (group.group_id, protocol)
        if key in self.fallbacks_warned:
            return
        if len(self.fallbacks_warned) >= _MAX_WARNED:
            self.fallbacks_warned.clear()
        self.fallbacks_warned.add(key)
        assignor, _ = select_assignor(self.coordinator.state.config, group)
        reason = FALLBACK_REASON.format(protocol=protocol, assignor=assignor)
        out.changes.append(StrategyFallback(group.group_id, protocol, assignor, reason))
        log.warning("classic strategy not computed by the gateway: group %s: %s", group.group_id, reason)

    def server_assignor(self, request: JoinGroupRequest) -> str | None:
        """The server assignor standing in for the member's preferred client-side strategy, when one
        matches and is configured (``group.consumer.assignors``); the group's assignor is then
        chosen among its members' as KIP-848 does (the one most members ask for)."""
        if not self.translate or not request.protocols:
            return None
        name = STRATEGY_ASSIGNORS.get(request.protocols[0].name)
        return name if name is not None and name in self.coordinator.state.config.assignors else None

    def _lookup(
        self, group: ConsumerGroup, requested_id: str, member_id: str, instance_id: str | None
    ) -> tuple[ConsumerGroupMember | None, ConsumerGroupMember | None]:
        """(the member rejoining, or the static member being replaced)."""
        if instance_id is not None:
            owner = group.static_members.get(instance_id)
            if requested_id == UNKNOWN_MEMBER_ID:
                return None, group.members[owner] if owner is not None else None
            if owner is None:
                raise ApiError(Errors.UNKNOWN_MEMBER_ID)
            if owner != member_id:
                raise ApiError(Errors.FENCED_INSTANCE_ID)
            return self._classic(group.members[owner]), None
        existing = group.members.get(member_id)
        # A dynamic member with an id the group forgot is simply created again.
        return (self._classic(existing) if existing is not None else None), None

    @staticmethod
    def _classic(member: ConsumerGroupMember) -> ConsumerGroupMember:
        if not member.uses_classic_protocol:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID, f"member {member.member_id} uses the consumer protocol")
        return member

    @staticmethod
    def _protocols_supported(
        group: ConsumerGroup, request: JoinGroupRequest, joining: ConsumerGroupMember | None
    ) -> bool:
        """At least one of the joiner's protocols must be supported by every other classic member."""
        names = {p.name for p in request.protocols}
        for member in group.members.values():
            if member.classic_metadata is None or (joining is not None and member.member_id == joining.member_id):
                continue
            names &= {name for name, _ in member.classic_metadata.supported_protocols}
            if not names:
                return False
        return bool(names)

    def _owned_partitions(self, owned: list[TopicPartitions]) -> Assignment:
        topics = self.coordinator.state.topics
        result: dict[uuid.UUID, frozenset[int]] = {}
        for tp in owned:
            meta = topics.get(tp.topic)
            if meta is not None and tp.partitions:
                result[meta.topic_id] = result.get(meta.topic_id, frozenset()) | frozenset(tp.partitions)
        return result

    # ---- SyncGroup ---------------------------------------------------------------------------
    def sync_group(self, request: SyncGroupRequest, request_key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        try:
            group, member = self._member(request.group_id, request.member_id, request.group_instance_id)
            if request.generation_id != member.member_epoch:
                raise ApiError(Errors.ILLEGAL_GENERATION)
            metadata = member.classic_metadata
            assert metadata is not None
            if request.protocol_type is not None and request.protocol_type != CONSUMER_PROTOCOL_TYPE:
                raise ApiError(Errors.INCONSISTENT_GROUP_PROTOCOL)
            # As Kafka checks a classic member of a consumer group: any protocol the member supports (in
            # translate mode it was told the group's common protocol, not necessarily its first).
            supported = dict(metadata.supported_protocols)
            if request.protocol_name is not None and request.protocol_name not in supported:
                raise ApiError(Errors.INCONSISTENT_GROUP_PROTOCOL)
            if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
                self._expect_rejoin(out, group, member, now_ms)
                raise ApiError(Errors.REBALANCE_IN_PROGRESS)
            self._cancel(out, timer_key(CLASSIC_MEMBER_SYNC_TIMER, group.group_id, member.member_id))
            # The leader's assignment (there is none: every classic member is a follower) is
            # ignored; the member gets what the coordinator has given it so far.
            chosen = supported.get(request.protocol_name or "")
            if chosen is None and metadata.supported_protocols:
                chosen = metadata.supported_protocols[0][1]
            version = announced_version(chosen) if chosen is not None else 0
            assignment = ConsumerProtocolAssignment(self._named(member.assigned_partitions), None, version)
            out.respond(
                request_key,
                SyncGroupResponse(
                    protocol_type=request.protocol_type,
                    protocol_name=request.protocol_name,
                    assignment=encode_assignment(assignment),
                ),
            )
        except ApiError as exc:
            out.respond(request_key, SyncGroupResponse(error_code=exc.error))
        return out

    def _named(self, assignment: Assignment) -> list[TopicPartitions]:
        names = {meta.topic_id: name for name, meta in self.coordinator.state.topics.items()}
        result = [
            TopicPartitions(names[topic_id], tuple(sorted(partitions)))
            for topic_id, partitions in assignment.items()
            if partitions and topic_id in names
        ]
        return sorted(result, key=lambda tp: tp.topic)

    # ---- Heartbeat ---------------------------------------------------------------------------
    def heartbeat(self, request: HeartbeatRequest, request_key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        error = Errors.NONE
        try:
            group, member = self._member(request.group_id, request.member_id, request.group_instance_id)
            if request.generation_id != member.member_epoch:
                # Classic members never see FENCED_MEMBER_EPOCH: generations are their epochs.
                raise ApiError(Errors.ILLEGAL_GENERATION)
            metadata = member.classic_metadata
            assert metadata is not None
            out.timers.append(_schedule(session_key(group.group_id, member.member_id), now_ms + metadata.session_timeout_ms))
            if self._must_rejoin(group, member) and not self._client_may_notice_deletion(group, member, now_ms):
                self._expect_rejoin(out, group, member, now_ms)
                error = Errors.REBALANCE_IN_PROGRESS
        except ApiError as exc:
            error = exc.error
        out.respond(request_key, HeartbeatResponse(error_code=error))
        return out

    def _must_rejoin(self, group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """A classic member's epoch only moves on JoinGroup, so it is sent back to JoinGroup when
        the group moved on, when it must give partitions up, or when partitions it waits for were
        released by their previous owners."""
        if member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS:
            return True
        if member.state is MemberState.UNRELEASED_PARTITIONS:
            target = group.target_assignment.get(member.member_id, {})
            for topic_id, partitions in target.items():
                have = member.assigned_partitions.get(topic_id, frozenset())
                for partition in partitions - have:
                    if group.owner_of(topic_id, partition) is None:
                        return True
        return False

    def _client_may_notice_deletion(self, group: ConsumerGroup, member: ConsumerGroupMember, now_ms: int) -> bool:
        """Translate mode: a member still holding partitions of a topic that was deleted is not told to
        rejoin for DELETED_TOPIC_GRACE_MS after that is first seen at its heartbeat. A classic group on
        Kafka does not rebalance by itself when a topic goes: the client finds out from its metadata
        (librdkafka then reports those partitions lost, not revoked) and rejoins; told first, it would
        rejoin still holding them and see them revoked. A client that does not notice is told after the
        grace."""
        key = (group.group_id, member.member_id)
        if not self.translate:
            return False
        live = {t.topic_id for t in group.subscription_metadata.values()}
        if not any(ps and tid not in live for tid, ps in member.assigned_partitions.items()):
            self.deletion_seen.pop(key, None)
            return False
        if len(self.deletion_seen) >= _MAX_WARNED:
            self.deletion_seen.clear()
        since = self.deletion_seen.setdefault(key, now_ms)
        return now_ms - since < DELETED_TOPIC_GRACE_MS

    def _expect_rejoin(self, out: Outcome, group: ConsumerGroup, member: ConsumerGroupMember, now_ms: int) -> None:
        key = timer_key(CLASSIC_MEMBER_JOIN_TIMER, group.group_id, member.member_id)
        if key not in self.deadlines:
            self._schedule(out, key, now_ms + max(member.rebalance_timeout_ms, 0))

    # ---- timers ------------------------------------------------------------------------------
    def on_timer(self, key: tuple[str, str, str], now_ms: int) -> Outcome:
        """The join and sync timers of classic members; an expiry fences the member."""
        out = Outcome()
        deadline = self.deadlines.get(key)
        if deadline is None:
            return out
        if now_ms < deadline:
            # Fired early by this clock (the loop's timers may run on a coarser one): again at its deadline.
            out.timers.append(_schedule(key, deadline))
            return out
        del self.deadlines[key]
        kind, group_id, member_id = key
        if kind == CLASSIC_MEMBER_GATHER_TIMER:
            return self._end_gathering(group_id, now_ms)
        group = self.coordinator.group(group_id)
        if group is None or member_id not in group.members:
            return out
        tx = self.coordinator.begin()
        self.coordinator.remove_member(tx, group_id, member_id, now_ms)
        self.cancel_member_timers(out, group_id, member_id)
        self._take_tx(out, tx)
        return out

    # ---- helpers -----------------------------------------------------------------------------
    def _member(
        self, group_id: str, member_id: str, instance_id: str | None
    ) -> tuple[ConsumerGroup, ConsumerGroupMember]:
        group = self.coordinator.group(group_id)
        if group is None or not group.members:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID)
        if instance_id is not None:
            owner = group.static_members.get(instance_id)
            if owner is None:
                raise ApiError(Errors.UNKNOWN_MEMBER_ID)
            if owner != member_id:
                raise ApiError(Errors.FENCED_INSTANCE_ID)
        member = group.members.get(member_id)
        if member is None or not member.uses_classic_protocol:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID)
        return group, member

    def _take_tx(self, out: Outcome, tx: Tx) -> None:
        out.records.extend(tx.records)
        out.timers.extend(tx.timers)

    def _schedule(self, out: Outcome, key: tuple[str, str, str], deadline_ms: int) -> None:
        self.deadlines[key] = deadline_ms
        out.timers.append(_schedule(key, deadline_ms))

    def _cancel(self, out: Outcome, key: tuple[str, str, str]) -> None:
        if self.deadlines.pop(key, None) is not None:
            out.timers.append(_cancel(key))

    def cancel_member_timers(self, out: Outcome, group_id: str, member_id: str) -> None:
        self.deletion_seen.pop((group_id, member_id), None)
        for kind in (CLASSIC_MEMBER_JOIN_TIMER, CLASSIC_MEMBER_SYNC_TIMER):
            self._cancel(out, timer_key(kind, group_id, member_id))

