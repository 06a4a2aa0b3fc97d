"""Classic members inside a consumer group: KIP-848 "Supporting Online Consumer Group Upgrade".

A legacy consumer keeps speaking JoinGroup / SyncGroup / Heartbeat / LeaveGroup while its group is
a consumer group run by coordinator/. Each classic request is translated for that one member - no
group-wide barrier: JoinGroup is the member's "heartbeat with a full subscription" (epoch moves,
target computed, reconciliation against the partitions it reports owning); SyncGroup hands back its
current assignment; Heartbeat tells it to rejoin when the group has moved on. Every classic member
is a follower (leader "", no member list): the server assignor decides. In translate mode joins may
wait for each other first (translate/classic_member_gathering.py); the stateless checks and reads are
translate/classic_member_checks.py.

Timers: the coordinator's session timer for the member, plus a sync timer (JoinGroup answered but
no SyncGroup) and a join timer (told to rejoin but did not), both of rebalance-timeout length;
their expiry fences the member like a session expiry.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from coordinator.errors import ApiError, Errors
from coordinator.membership import replace_static_member
from coordinator.model import (
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
from translate.classic_member_checks import (
    classic_member,
    lookup,
    must_rejoin,
    named,
    owned_partitions,
    protocols_supported,
    rebalance_timeout,
)
from translate.classic_member_gathering import CLASSIC_MEMBER_GATHER_TIMER, Admitted, JoinGatherings
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
    announced_version,
    decode_subscription,
    encode_assignment,
)
from translate.result import Cancel as _cancel
from translate.result import Schedule as _schedule
from translate.result import timer_key

log = logging.getLogger(__name__)
_MAX_WARNED = 10_000

# A classic member told to rejoin (or answered JoinGroup) has one rebalance timeout to do so.
CLASSIC_MEMBER_JOIN_TIMER = "classic-member-join"
CLASSIC_MEMBER_SYNC_TIMER = "classic-member-sync"


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
        self.gathering = JoinGatherings(self)
        # (group, protocol) pairs already warned about (a custom strategy falling back).
        self.fallbacks_warned: set[tuple[str, str]] = set()
        # group -> ((group epoch, member count), its common protocol), for the JoinGroup answers.
        self.common_protocols: dict[str, tuple[tuple[int, int], str | None]] = {}
        # (group, member) -> when it was first seen holding partitions of a deleted topic.
        self.deletion_seen: dict[tuple[str, str], int] = {}
        # group -> (the epoch its members were current at, the epoch topic image changes moved it to,
        # when the first of them was seen): a purely classic group bumped by the image alone.
        self.image_change_seen: dict[str, tuple[int, int, int]] = {}

    # ---- JoinGroup ---------------------------------------------------------------------------
    def join_group(self, request: JoinGroupRequest, request_key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        # A member rejoining ends the group's grace for an image change: on Kafka that rejoin is the
        # rebalance every member is then told of.
        self.image_change_seen.pop(request.group_id, None)
        if self.gathering.gather(out, request, request_key, now_ms):
            return out
        try:
            self._join(out, request, request_key, now_ms)
        except ApiError as exc:
            out.respond(request_key, join_error(exc.error, request.member_id))
        return out

    def _join(self, out: Outcome, request: JoinGroupRequest, key: RequestKey, now_ms: int) -> None:
        group = self.coordinator.group(request.group_id)
        epoch = group.group_epoch if group is not None else 0
        admitted = self.admit(out, request, key, now_ms)
        if admitted is None:
            return
        if self.gathering.opens_barrier(request, admitted, epoch):
            self.gathering.hold(out, admitted, now_ms)
        else:
            self.answer(out, admitted, now_ms)

    def admit(self, out: Outcome, request: JoinGroupRequest, key: RequestKey, now_ms: int) -> Admitted | None:
        """Validate the join and write the member (its subscription); None when already answered."""
        config = self.config
        if not config.min_session_timeout_ms <= request.session_timeout_ms <= config.max_session_timeout_ms:
            raise ApiError(Errors.INVALID_SESSION_TIMEOUT)
        rebalance_timeout_ms = rebalance_timeout(request)
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

        existing, replaced = lookup(group, request.member_id, member_id, instance_id)
        if existing is None and replaced is None:
            limit = self.coordinator.state.config.max_group_size
            if limit is not None and len(group.members) >= limit:
                raise ApiError(Errors.GROUP_MAX_SIZE_REACHED)
        if request.protocol_type != CONSUMER_PROTOCOL_TYPE or not protocols_supported(group, request, existing):
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
            rebalance_timeout_ms=rebalance_timeout_ms,
            server_assignor=self.server_assignor(request),
            classic_metadata=ClassicMemberMetadata(
                request.session_timeout_ms, tuple((p.name, p.metadata) for p in request.protocols)
            ),
        )
        self.coordinator.upsert_member(tx, group.group_id, updated, now_ms)
        self.common_protocols.pop(group.group_id, None)
        self.take_tx(out, tx)
        owned = owned_partitions(self.coordinator.state.topics, subscription.owned_partitions)
        return Admitted(request, key, member_id, owned, rebalance_timeout_ms)

    def answer(self, out: Outcome, admitted: Admitted, now_ms: int) -> None:
        """Reconcile an admitted member against the (possibly new) target and answer its join."""
        request, member_id = admitted.request, admitted.member_id
        group_id = request.group_id
        tx = self.coordinator.begin()
        member = self.coordinator.reconcile_member(tx, group_id, member_id, admitted.owned, now_ms)
        tx.schedule(session_key(group_id, member_id), now_ms + request.session_timeout_ms)
        self.take_tx(out, tx)
        self.cancel(out, timer_key(CLASSIC_MEMBER_JOIN_TIMER, group_id, member_id))
        self.schedule(
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

    def check_barrier(self, group_id: str, now_ms: int) -> Outcome:
        """End the group's join barrier once every classic member is waiting at it (translate mode)."""
        return self.gathering.check_barrier(group_id, now_ms)

    # ---- the protocol and assignor a classic member is given ---------------------------------
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
        # A member's protocols change only in admit, which drops the entry.
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

    # ---- SyncGroup ---------------------------------------------------------------------------
    def sync_group(self, request: SyncGroupRequest, request_key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        try:
            group, member = classic_member(
                self.coordinator.group(request.group_id), request.member_id, request.group_instance_id
            )
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
            self.cancel(out, timer_key(CLASSIC_MEMBER_SYNC_TIMER, group.group_id, member.member_id))
            # The leader's assignment (there is none: every classic member is a follower) is
            # ignored; the member gets what the coordinator has given it so far.
            chosen = supported.get(request.protocol_name or "")
            if chosen is None and metadata.supported_protocols:
                chosen = metadata.supported_protocols[0][1]
            version = announced_version(chosen) if chosen is not None else 0
            assignment = ConsumerProtocolAssignment(
                named(self.coordinator.state.topics, member.assigned_partitions), None, version
            )
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

    # ---- Heartbeat ---------------------------------------------------------------------------
    def heartbeat(self, request: HeartbeatRequest, request_key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        error = Errors.NONE
        try:
            group, member = classic_member(
                self.coordinator.group(request.group_id), request.member_id, request.group_instance_id
            )
            if request.generation_id != member.member_epoch:
                # Classic members never see FENCED_MEMBER_EPOCH: generations are their epochs.
                raise ApiError(Errors.ILLEGAL_GENERATION)
            metadata = member.classic_metadata
            assert metadata is not None
            out.timers.append(_schedule(session_key(group.group_id, member.member_id), now_ms + metadata.session_timeout_ms))
            if (
                must_rejoin(group, member)
                and not self._client_may_notice_deletion(group, member, now_ms)
                and not self._client_may_notice_image_change(group, member, now_ms)
            ):
                self._expect_rejoin(out, group, member, now_ms)
                error = Errors.REBALANCE_IN_PROGRESS
        except ApiError as exc:
            error = exc.error
        out.respond(request_key, HeartbeatResponse(error_code=error))
        return out

    def _client_may_notice_deletion(self, group: ConsumerGroup, member: ConsumerGroupMember, now_ms: int) -> bool:
        """Translate mode: a member still holding partitions of a topic that was deleted is not told to
        rejoin for ``topic_change_grace_ms`` after that is first seen at its heartbeat. A classic group on
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
        return now_ms - since < self.config.topic_change_grace_ms

    def image_changed(self, group_id: str, before: int, after: int, now_ms: int) -> None:
        """Translate mode: the topic image alone moved a purely classic group from epoch ``before`` to
        ``after`` (a subscribed topic grew, appeared or went). Further image changes within the grace
        keep the first one's epoch and time."""
        seen = self.image_change_seen.get(group_id)
        if seen is not None and seen[1] == before and now_ms - seen[2] < self.config.topic_change_grace_ms:
            self.image_change_seen[group_id] = (seen[0], after, seen[2])
            return
        if len(self.image_change_seen) >= _MAX_WARNED:
            self.image_change_seen.clear()
        self.image_change_seen[group_id] = (before, after, now_ms)

    def _client_may_notice_image_change(
        self, group: ConsumerGroup, member: ConsumerGroupMember, now_ms: int
    ) -> bool:
        """Translate mode: a member that was current when the topic image alone moved its group on is
        not told to rejoin for ``topic_change_grace_ms``. On Kafka a classic client finds a subscribed
        topic grown or created in its own metadata and rejoins knowing it; told first, it rejoins with its
        old metadata, is given the new partitions, learns of them from its next refresh and rejoins once
        more (librdkafka: a second rebalance, a full one with an eager strategy). Anything else that
        moves the group (a member joining or leaving) ends the grace: the member is told at once."""
        seen = self.image_change_seen.get(group.group_id)
        if seen is None:
            return False
        base, bumped, since = seen
        if group.group_epoch != bumped or now_ms - since >= self.config.topic_change_grace_ms:
            del self.image_change_seen[group.group_id]
            return False
        return member.member_epoch == base and member.state is MemberState.STABLE

    def _expect_rejoin(self, out: Outcome, group: ConsumerGroup, member: ConsumerGroupMember, now_ms: int) -> None:
        key = timer_key(CLASSIC_MEMBER_JOIN_TIMER, group.group_id, member.member_id)
        if key not in self.deadlines:
            self.schedule(out, key, now_ms + max(member.rebalance_timeout_ms, 0))

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
            return self.gathering.end(group_id, now_ms)
        group = self.coordinator.group(group_id)
        if group is None or member_id not in group.members:
            return out
        tx = self.coordinator.begin()
        self.coordinator.remove_member(tx, group_id, member_id, now_ms)
        self.cancel_member_timers(out, group_id, member_id)
        self.take_tx(out, tx)
        return out

    # ---- helpers -----------------------------------------------------------------------------
    def take_tx(self, out: Outcome, tx: Tx) -> None:
        out.records.extend(tx.records)
        out.timers.extend(tx.timers)

    def schedule(self, out: Outcome, key: tuple[str, str, str], deadline_ms: int) -> None:
        self.deadlines[key] = deadline_ms
        out.timers.append(_schedule(key, deadline_ms))

    def cancel(self, out: Outcome, key: tuple[str, str, str]) -> None:
        if self.deadlines.pop(key, None) is not None:
            out.timers.append(_cancel(key))

    def cancel_member_timers(self, out: Outcome, group_id: str, member_id: str) -> None:
        self.deletion_seen.pop((group_id, member_id), None)
        for kind in (CLASSIC_MEMBER_JOIN_TIMER, CLASSIC_MEMBER_SYNC_TIMER):
            self.cancel(out, timer_key(kind, group_id, member_id))

