"""Rebalance events of the groups a GroupService runs, derived from what its calls return (sans-I/O).

``RebalanceEventDeriver`` wraps a ``GroupService``: the caller hands it the calls it would make on the
service (``handle``, ``on_timer``, ``on_metadata``, ``on_loaded``, ``expire_empty_groups``), gets the
same ``Outcome`` back, and every rebalance event the call implies goes to ``sink`` as a plain dict
with the field names of the rehearsal event schema (docs/rehearsal-events.md, "Events written by the
gateway", says when each is written; ``rehearsal/events.py`` validates them; this module does not import
``rehearsal``: the schema is the contract, and the tests check the dicts against it).

Events come from each call's inputs (the request, the timer's key) and its ``Outcome``, never from a
comparison of the group's state before and after:

- responses: ``member_joined`` (a member id's first successful JoinGroup / ConsumerGroupHeartbeat
  response), ``assignment_sent`` (a heartbeat response's assignment, a successful SyncGroup response),
  ``member_left`` / ``member_fenced`` answered to a consumer member (epoch -1 / -2; FENCED_MEMBER_EPOCH,
  UNKNOWN_MEMBER_ID), and acknowledged ownership: ``partitions_assigned`` / ``partitions_revoked`` from
  a consumer member's ``ownedTopicPartitions`` (null = unchanged; topic ids named through the topic
  image), a classic member's JoinGroup OwnedPartitions (an eager member reports none) and what its
  SyncGroup response assigned. A member that leaves or is fenced loses everything without a revocation.
- records (a consumer group's state is the replay of its records, so they show every change of it): a
  member metadata tombstone removes a member (``member_left`` / ``member_fenced``, the reason from the
  call: LeaveGroup's, ``replaced`` for a static member's new incarnation, the timer's kind), a group
  epoch record above the epoch the group had is ``rebalance_started``, a partition metadata record
  declares ``topic_metadata`` (a replayed group's topics are declared at ``on_metadata`` / ``on_loaded``).
- ``Outcome.changes`` (coordinator/outcome.py), for what a classic group's records do not say, emitted by
  translate/ where it happens: ``MemberRemoved``, ``RebalanceStarted`` (PreparingRebalance) and
  ``GroupConverted`` (``group_converted``, classic <-> consumer).
- ``group_stable``: a group the call changed (a record or a change) is Stable and was not at that epoch.
- ``timer_expired``: a timer whose call returned anything.

A removed member still in the group after the call (a conversion tombstones its consumer records) stays.
The deriver reads the group's current state only for what an event reports (an epoch, the partitions of
a Stable group) and keeps, per group, its members' acknowledged partitions and the group's type, epoch
and Stable flag as of the last call that changed it.

``client_mix`` cannot be known for sure by a coordinator: it is inferred from the group's state when
its first event is written, then kept (``client_mixes`` seeds it from an existing log of the run); the
rules are in docs/rehearsal-events.md ("Events written by the gateway") and ``_infer_mix``.

Cost: O(records + changes) of the call, plus O(members) to check whether a group it changed is Stable.
A consumer group member's heartbeat that wrote no record costs its acknowledgement alone, a classic
group's Heartbeat nothing. ``ts_ms`` is the caller's ``now_ms``; ``seq`` numbers the dicts from
``first_seq``; ``run`` is fixed.

After a restart (``on_loaded``) replayed members are known without a new ``member_joined``; each gets one
``partitions_assigned`` of what the coordinator holds for it (a no-op for what it already owned).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from coordinator.connect.service import TIMER_KINDS as CONNECT_TIMER_KINDS
from coordinator.errors import Errors
from coordinator.messages import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from coordinator.model import Assignment, ConsumerGroup, GroupState
from coordinator.outcome import Outcome, RequestKey
from coordinator.timers import TimerKey
from translate.classic_group import ClassicGroup, ClassicGroupState
from translate.classic_messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from translate.embedded import (
    CONSUMER_PROTOCOL_TYPE,
    MalformedEmbeddedProtocol,
    decode_assignment,
    decode_subscription,
)
from translate.group_config import ClassicGroupsMode
from translate.group_messages import DeleteGroupsRequest
from translate.group_service import GroupService
from translate.rebalance_seen import TP, GroupMemo, MemberMemo, Seen, mix_of_protocol, touched, tps

EventSink = Callable[[dict[str, Any]], None]

CLASSIC = "classic"
CONSUMER = "consumer"
# Parked JoinGroup / SyncGroup requests remembered until their response is released; a bound so that
# requests the service never answers (it answers all of them) cannot grow the map without end.
_MAX_PENDING = 100_000
_FENCING_ERRORS = {
    int(Errors.FENCED_MEMBER_EPOCH): "fenced member epoch",
    int(Errors.UNKNOWN_MEMBER_ID): "unknown member id",
}
_GROUP_REQUESTS = (JoinGroupRequest, SyncGroupRequest, HeartbeatRequest, LeaveGroupRequest, ConsumerGroupHeartbeatRequest)


class RebalanceEventDeriver:
    def __init__(
        self,
        service: GroupService,
        sink: EventSink,
        run: str = "gateway",
        *,
        first_seq: int = 0,
        client_mixes: Mapping[str, str] | None = None,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self.service = service
        self.on_error = on_error
        self.failures = 0
        self.sink = sink
        self.run = run
        self.seq = first_seq
        self.mixes: dict[str, str] = dict(client_mixes or {})
        self.groups: dict[str, GroupMemo] = {}
        self._pending: dict[RequestKey, JoinGroupRequest | SyncGroupRequest] = {}
        self._names: dict[uuid.UUID, str] = {}
        self._now = 0
        self._out: list[tuple[str, str, str | None, str, dict[str, Any]]] = []

    # ---- the wrapped calls -----------------------------------------------------------------------
    def handle(self, request: object, request_key: RequestKey, now_ms: int) -> Outcome:
        if isinstance(request, _GROUP_REQUESTS):
            gids = [request.group_id]
        elif isinstance(request, DeleteGroupsRequest):
            gids = list(request.group_ids)
        else:
            return self.service.handle(request, request_key, now_ms)  # reads and offset checks: no rebalance
        if isinstance(request, HeartbeatRequest) and self._consumer(request.group_id) is None:
            return self.service.handle(request, request_key, now_ms)  # classic: re-arms a timer, changes nothing
        self._begin(now_ms)
        if isinstance(request, JoinGroupRequest | SyncGroupRequest):  # answered later: remember the request
            self._guarded(lambda: self._join_request(request, request_key))
        result = self.service.handle(request, request_key, now_ms)
        self._guarded(lambda: self._after_request(request, request_key, result, gids))
        return result

    def on_timer(self, key: TimerKey, now_ms: int) -> Outcome:
        if key[0] in CONNECT_TIMER_KINDS:
            return self.service.on_timer(key, now_ms)  # connect groups have no rebalance events yet
        result = self.service.on_timer(key, now_ms)
        self._begin(now_ms)
        if result.records or result.responses or result.changes:  # else a stale timer: nothing happened
            self._guarded(lambda: self._after_timer(key, result))
        return result

    def on_metadata(self, topics: Mapping[str, tuple[uuid.UUID, int]], now_ms: int) -> Outcome:
        current = {n: (m.topic_id, m.num_partitions) for n, m in self.service.coordinator.state.topics.items()}
        if dict(topics) == current:
            return self.service.on_metadata(topics, now_ms)  # nothing changes
        result = self.service.on_metadata(topics, now_ms)
        self._names = {}
        self._begin(now_ms)
        # Every group's subscribed topics are declared (replayed groups are first seen here, before on_loaded).
        self._guarded(lambda: self._after_changes(Seen(result), result, "topic metadata changed", self._all_groups()))
        return result

    def on_loaded(self, now_ms: int) -> Outcome:
        """After replay: take the replayed members as known, then arm the service's timers."""
        self._begin(now_ms)
        gids = self._all_groups()
        self._guarded(lambda: self._restore(gids))
        result = self.service.on_loaded(now_ms)
        seen = Seen(result)
        seen.groups.update(dict.fromkeys(gids))  # a replayed group: its topics and state are news
        seen.metadata.update(gids)
        self._guarded(lambda: self._after_changes(seen, result, "loaded", gids))
        return result

    def expire_empty_groups(self, now_ms: int) -> Outcome:
        """Expired groups were Empty: no event (nobody rebalances); they are forgotten here too, and
        their client_mix stays fixed for the run."""
        result = self.service.expire_empty_groups(now_ms)
        if result.records:
            live = set(self._all_groups())
            for gid in [g for g in self.groups if g not in live]:
                del self.groups[gid]
        return result

    def _guarded(self, derive: Callable[[], object]) -> None:
        """Derive and write events. The service call already happened: a failure here must not lose
        its result, so it is handed to ``on_error`` (re-raised when there is none, as in tests)."""
        try:
            derive()
            self._flush()
        except Exception as exc:
            self._out = []
            self.failures += 1
            if self.on_error is None:
                raise
            self.on_error(exc)

    def _after_request(self, request: object, request_key: RequestKey, result: Outcome, gids: list[str]) -> None:
        heartbeat = request if isinstance(request, ConsumerGroupHeartbeatRequest) else None
        if heartbeat is not None:
            self._heartbeat_before(heartbeat, result.response_to(request_key))
        seen = Seen(result)
        order = touched(seen, gids)  # none for a steady heartbeat: it wrote no record, nothing changed
        for gid in order:
            self._group_changes(gid, seen, self._departure_reason(request), type(request).__name__)
        if heartbeat is not None:
            self._heartbeat_after(heartbeat, result.response_to(request_key))
        self._responses(result)
        for gid in order:
            self._stable(gid)
        for gid in gids:
            group = self.groups.get(gid)
            if group is not None and not group.members and self._kind(gid) is None:
                del self.groups[gid]  # deleted; its client_mix stays fixed for the run

    def _after_timer(self, key: TimerKey, result: Outcome) -> None:
        kind, gid, member_id = key
        known = self.groups.get(gid)
        member = known.members.get(member_id) if known is not None and member_id else None
        was = known.kind if known is not None else None  # the group's type before the call
        protocol = member.protocol if member is not None else (was or self._kind(gid) or CONSUMER)
        self._emit("timer_expired", gid, member_id or None, protocol, kind=kind)
        seen = Seen(result)
        order = touched(seen, [gid])
        for g in order:
            self._group_changes(g, seen, ("member_fenced", kind), f"{kind} timer")
        self._responses(result)
        for g in order:
            self._stable(g)

    def _after_changes(self, seen: Seen, result: Outcome, cause: str, declaring: list[str]) -> None:
        for gid in sorted(set(seen.groups).union(declaring)):
            if gid in seen.groups:
                self._group_changes(gid, seen, ("member_fenced", cause), cause)
                self._stable(gid)
            else:
                self._declare_topics(gid)
        self._responses(result)

    # ---- state views -----------------------------------------------------------------------------
    def _all_groups(self) -> list[str]:
        return sorted(set(self.service.classic_groups.groups) | set(self.service.coordinator.state.groups))

    def _classic(self, gid: str) -> ClassicGroup | None:
        return self.service.classic_groups.group(gid)

    def _consumer(self, gid: str) -> ConsumerGroup | None:
        if self.service.classic_groups.group(gid) is not None:
            return None
        return self.service.coordinator.group(gid)

    def _kind(self, gid: str) -> str | None:
        if self._classic(gid) is not None:
            return CLASSIC
        return CONSUMER if self.service.coordinator.group(gid) is not None else None

    def _present(self, gid: str, member_id: str) -> bool:
        classic = self._classic(gid)
        if classic is not None:
            return member_id in classic.members
        group = self.service.coordinator.group(gid)
        return group is not None and member_id in group.members

    def _epoch(self, gid: str) -> int:
        classic = self._classic(gid)
        group = self.service.coordinator.group(gid)
        return classic.generation_id if classic is not None else group.group_epoch if group is not None else 0

    def _is_stable(self, gid: str) -> bool:
        classic = self._classic(gid)
        if classic is not None:
            return classic.is_in(ClassicGroupState.STABLE)
        group = self.service.coordinator.group(gid)
        return group is not None and group.state() is GroupState.STABLE  # O(members): only after a change

    def _name_of(self, topic_id: uuid.UUID, gid: str) -> str | None:
        """The topic's name in the service's topic image, else in the group's own subscription metadata
        (persisted with the group, so known right after a replay, before the image is loaded)."""
        name = self._names.get(topic_id)
        if name is None:
            topics = self.service.coordinator.state.topics
            if len(self._names) != len(topics):
                self._names = {m.topic_id: n for n, m in topics.items()}
                name = self._names.get(topic_id)
        if name is None:
            group = self.service.coordinator.group(gid)
            if group is not None:
                name = next((n for n, m in group.subscription_metadata.items() if m.topic_id == topic_id), None)
        return name

    def _named(self, items: Iterable[TopicPartitions], gid: str) -> set[TP]:
        out: set[TP] = set()
        for item in items:
            name = self._name_of(item.topic_id, gid)
            if name is not None:
                out.update((name, p) for p in item.partitions)
        return out

    def _named_assignment(self, assignment: Assignment, gid: str) -> set[TP]:
        return self._named((TopicPartitions(t, sorted(p)) for t, p in assignment.items()), gid)

    @staticmethod
    def _decoded(blob: bytes) -> set[TP] | None:
        try:
            assignment = decode_assignment(blob)
        except MalformedEmbeddedProtocol:
            return None
        return {(tp.topic, p) for tp in assignment.assigned_partitions for p in tp.partitions}

    def _infer_mix(self, gid: str, protocol: str) -> str:
        classic = self._classic(gid)
        if classic is not None and classic.members:
            name = classic.protocol_name
            if name is None:
                first = next(iter(classic.members.values()))
                name = first.supported_protocols[0].name if first.supported_protocols else None
            return mix_of_protocol(name)
        group = self._consumer(gid)
        if group is not None and group.members:
            legacy = [m for m in group.members.values() if m.classic_metadata is not None]
            if not legacy:
                return "consumer"
            if self.service.config.mode is ClassicGroupsMode.TRANSLATE:
                return "translate"
            meta = legacy[0].classic_metadata
            protocols = meta.supported_protocols if meta is not None else ()
            return mix_of_protocol(protocols[0][0] if protocols else None)
        return "consumer" if protocol == CONSUMER else "classic-eager"

    # ---- emitting --------------------------------------------------------------------------------
    def _begin(self, now_ms: int) -> None:
        self._now = now_ms
        self._out = []

    def _emit(self, event_type: str, gid: str, member: str | None, protocol: str, **fields: Any) -> None:
        self._out.append((event_type, gid, member, protocol, fields))

    def _flush(self) -> None:
        out, self._out = self._out, []
        for event_type, gid, member, protocol, fields in out:
            mix = self.mixes.get(gid)
            if mix is None:
                mix = self.mixes[gid] = self._infer_mix(gid, protocol)
            event: dict[str, Any] = {
                "ts_ms": self._now, "seq": self.seq, "run": self.run, "group": gid,
                "protocol": protocol, "client_mix": mix, "event": event_type,
            }  # fmt: skip
            if member is not None:
                event["member"] = member
            event.update((k, v) for k, v in fields.items() if v is not None)
            self.seq += 1
            self.sink(event)

    def _group(self, gid: str) -> GroupMemo:
        group = self.groups.get(gid)
        if group is None:
            group = self.groups[gid] = GroupMemo()
        return group

    def _join(self, gid: str, member_id: str, protocol: str, epoch: int, instance_id: str | None) -> MemberMemo:
        group = self._group(gid)
        member = group.members.get(member_id)
        if member is None:
            member = group.members[member_id] = MemberMemo(protocol, epoch)
            self._emit("member_joined", gid, member_id, protocol, member_epoch=epoch, instance_id=instance_id)
        member.epoch = epoch
        return member

    def _gone(self, gid: str, member_id: str, kind: str, reason: str) -> None:
        group = self.groups.get(gid)
        member = group.members.pop(member_id, None) if group is not None else None
        if member is not None:
            self._emit(kind, gid, member_id, member.protocol, member_epoch=member.epoch, reason=reason)

    def _acknowledge(self, gid: str, member_id: str, member: MemberMemo, owned: set[TP], epoch: int | None) -> None:
        revoked = member.acked - owned
        assigned = owned - member.acked
        if revoked:
            self._emit("partitions_revoked", gid, member_id, member.protocol, member_epoch=epoch, partitions=tps(revoked))
        if assigned:
            self._emit("partitions_assigned", gid, member_id, member.protocol, member_epoch=epoch, partitions=tps(assigned))
        member.acked = set(owned)

    # ---- what requests and responses say ---------------------------------------------------------
    def _join_request(self, request: JoinGroupRequest | SyncGroupRequest, key: RequestKey) -> None:
        """A parked request is remembered; a known classic member rejoining says what it still owns."""
        self._pending[key] = request
        while len(self._pending) > _MAX_PENDING:
            del self._pending[next(iter(self._pending))]
        if not isinstance(request, JoinGroupRequest) or request.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return
        group = self.groups.get(request.group_id)
        member = group.members.get(request.member_id) if group is not None else None
        if member is None or member.protocol != CLASSIC or not request.protocols:
            return
        try:
            sub = decode_subscription(request.protocols[0].metadata)
        except MalformedEmbeddedProtocol:
            return
        owned = {(tp.topic, p) for tp in sub.owned_partitions for p in tp.partitions}
        self._acknowledge(request.group_id, request.member_id, member, owned, member.epoch)

    def _heartbeat_before(self, request: ConsumerGroupHeartbeatRequest, response: object) -> None:
        """Leaves and fencing answered to a consumer member (before the group changes they cause)."""
        if not isinstance(response, ConsumerGroupHeartbeatResponse):
            return
        member_id = response.member_id or request.member_id
        if response.error_code != Errors.NONE:
            reason = _FENCING_ERRORS.get(response.error_code)
            if reason is not None:
                self._gone(request.group_id, member_id, "member_fenced", reason)
            return
        if request.member_epoch < JOIN_GROUP_MEMBER_EPOCH:
            static = request.member_epoch != LEAVE_GROUP_MEMBER_EPOCH
            self._gone(request.group_id, member_id, "member_left", "static leave" if static else "leave")

    def _heartbeat_after(self, request: ConsumerGroupHeartbeatRequest, response: object) -> None:
        if not isinstance(response, ConsumerGroupHeartbeatResponse) or response.error_code != Errors.NONE:
            return
        if request.member_epoch < JOIN_GROUP_MEMBER_EPOCH or not response.member_id:
            return
        gid, member_id = request.group_id, response.member_id
        member = self._join(gid, member_id, CONSUMER, response.member_epoch, request.instance_id)
        if request.topic_partitions is not None:
            owned = self._named(request.topic_partitions, gid)
            self._acknowledge(gid, member_id, member, owned, request.member_epoch)
        if response.assignment is not None:
            told = self._named(response.assignment, gid)
            self._emit("assignment_sent", gid, member_id, CONSUMER, member_epoch=response.member_epoch, partitions=tps(told))

    def _responses(self, result: Outcome) -> None:
        """Parked JoinGroup / SyncGroup responses this result releases."""
        for reply in result.responses:
            request = self._pending.pop(reply.request_key, None)  # type: ignore[call-overload]
            if isinstance(request, JoinGroupRequest) and isinstance(reply.body, JoinGroupResponse):
                body = reply.body
                if body.error_code == Errors.NONE and body.member_id:
                    self._join(request.group_id, body.member_id, CLASSIC, body.generation_id, request.group_instance_id)
            elif isinstance(request, SyncGroupRequest) and isinstance(reply.body, SyncGroupResponse):
                self._synced(request, reply.body)

    def _synced(self, request: SyncGroupRequest, response: SyncGroupResponse) -> None:
        gid = request.group_id
        if response.error_code != Errors.NONE:
            return
        classic = self._classic(gid)
        if classic is not None and classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return  # not the consumer protocol (e.g. Connect): no partitions to read
        parts = self._decoded(response.assignment)
        if parts is None:
            return
        member = self._join(gid, request.member_id, CLASSIC, request.generation_id, request.group_instance_id)
        generation = request.generation_id
        self._emit("assignment_sent", gid, request.member_id, CLASSIC, member_epoch=generation, partitions=tps(parts))
        self._acknowledge(gid, request.member_id, member, parts, generation)

    # ---- what the group's state says -------------------------------------------------------------
    @staticmethod
    def _departure_reason(request: object) -> tuple[str, str]:
        if isinstance(request, LeaveGroupRequest):
            reasons = [m.reason for m in request.members if m.reason]
            return "member_left", reasons[0] if reasons else "LeaveGroup"
        if isinstance(request, JoinGroupRequest | ConsumerGroupHeartbeatRequest):
            return "member_left", "replaced"  # a static member's new incarnation took its place
        if isinstance(request, DeleteGroupsRequest):
            return "member_left", "group deleted"
        return "member_fenced", "removed"

    def _group_changes(self, gid: str, seen: Seen, how: tuple[str, str], cause: str) -> None:
        """Departures, conversion, a rebalance's start and the subscribed topics, as the call returned them."""
        group = self.groups.get(gid)
        removed = seen.removed.get(gid)
        if removed and group is not None and group.members:
            for member_id in [m for m in group.members if m in removed and not self._present(gid, m)]:
                self._gone(gid, member_id, *how)  # (a conversion's tombstones keep the member: still present)
        kind = self._kind(gid)
        if kind is None:
            return
        epoch = self._epoch(gid)
        converted = seen.converted.get(gid)
        if converted is not None:
            self._emit("group_converted", gid, None, kind, group_epoch=epoch, from_type=converted.from_type, to_type=kind)
        if kind == CLASSIC:
            if gid in seen.started:
                self._emit("rebalance_started", gid, None, CLASSIC, group_epoch=epoch, reason=cause)
        elif group is not None and group.kind == CONSUMER and epoch > group.epoch:
            self._emit("rebalance_started", gid, None, CONSUMER, group_epoch=epoch, reason=cause)
        if gid in seen.metadata:
            self._declare_topics(gid)

    def _declare_topics(self, gid: str) -> None:
        consumer = self._consumer(gid)
        if consumer is not None:
            declared = self._group(gid).topics
            for name, meta in sorted(consumer.subscription_metadata.items()):
                if declared.get(name) != meta.num_partitions and meta.num_partitions > 0:
                    declared[name] = meta.num_partitions
                    self._emit("topic_metadata", gid, None, CONSUMER, topic=name, num_partitions=meta.num_partitions)

    def _stable(self, gid: str) -> None:
        """group_stable when a group the call changed is Stable and was not at this epoch; then remember it."""
        kind = self._kind(gid)
        if kind is None:
            known = self.groups.get(gid)
            if known is not None:
                known.kind, known.epoch, known.stable = None, 0, False
            return
        known = self._group(gid)
        epoch, stable = self._epoch(gid), self._is_stable(gid)
        was_stable = known.stable and known.kind == kind and known.epoch == epoch
        known.kind, known.epoch, known.stable = kind, epoch, stable
        if not stable or was_stable:
            return
        partitions: set[TP] | None = set()
        classic = self._classic(gid)
        if classic is not None:
            if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
                partitions = None
            else:
                for m in classic.members.values():
                    parts = self._decoded(m.assignment)
                    if parts is None or partitions is None:
                        partitions = None
                    else:
                        partitions |= parts
        else:
            group = self._consumer(gid)
            assert group is not None
            for target in group.target_assignment.values():
                assert partitions is not None
                partitions |= self._named_assignment(target, gid)
        self._emit("group_stable", gid, None, kind, group_epoch=epoch,
                   partitions=None if partitions is None else tps(partitions))

    def _restore(self, gids: list[str]) -> None:
        for gid in gids:
            self._restore_group(gid)

    def _restore_group(self, gid: str) -> None:
        """A replayed group: its members are known, and own what the coordinator holds for them."""
        group = self._group(gid)
        classic = self._classic(gid)
        if classic is not None:
            consumer_protocol = classic.protocol_type == CONSUMER_PROTOCOL_TYPE
            for member_id, m in classic.members.items():
                known = group.members.setdefault(member_id, MemberMemo(CLASSIC, classic.generation_id))
                held = self._decoded(m.assignment or m.synced_assignment) if consumer_protocol else None
                if held:
                    self._acknowledge(gid, member_id, known, held, classic.generation_id)
            group.kind, group.epoch, group.stable = CLASSIC, classic.generation_id, classic.is_in(ClassicGroupState.STABLE)
            return
        consumer = self._consumer(gid)
        if consumer is None:
            return
        group.kind, group.epoch, group.stable = CONSUMER, consumer.group_epoch, consumer.state() is GroupState.STABLE
        for member_id, cm in consumer.members.items():
            protocol = CLASSIC if cm.uses_classic_protocol else CONSUMER
            known = group.members.setdefault(member_id, MemberMemo(protocol, cm.member_epoch))
            held = self._named_assignment(cm.assigned_partitions, gid) | self._named_assignment(
                cm.partitions_pending_revocation, gid
            )
            if held:
                self._acknowledge(gid, member_id, known, held, cm.member_epoch)


__all__ = ["EventSink", "RebalanceEventDeriver", "mix_of_protocol"]
