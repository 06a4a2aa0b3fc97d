"""The rebalance machinery of classic groups: the join barrier, generations, assignment
propagation, member removal and the timers behind them.

One ``Rebalancer`` serves every classic group of a coordinator. It owns the timer deadlines so
that a timer that fires after it was replaced or cancelled is recognised and ignored; each
operation appends what it produces (responses, records, timer changes) to the ``Outcome`` given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from coordinator.errors import Errors
from coordinator.outcome import MemberRemoved, Outcome, RebalanceStarted
from coordinator.timers import TimerKey
from translate.classic_group import ClassicGroup, ClassicGroupMember, ClassicGroupState
from translate.classic_messages import UNKNOWN_MEMBER_ID, JoinGroupResponse, SyncGroupResponse
from translate.group_records import (
    DEFAULT_VALUE_VERSION,
    GroupMetadataMember,
    GroupMetadataRecord,
    GroupMetadataValue,
)
from translate.result import HEARTBEAT_TIMER, JOIN_TIMER, SYNC_TIMER, Cancel, Schedule, timer_key

State = ClassicGroupState


@dataclass(slots=True)
class ClassicGroupConfig:
    """Broker settings for classic groups, with Kafka's defaults."""

    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    # A new member whose JoinGroup stays parked this long is dropped; it will retry if alive.
    new_member_join_timeout_ms: int = 300_000
    max_size: int = 2**31 - 1  # group.max.size
    metadata_value_version: int = DEFAULT_VALUE_VERSION
    # Translate mode (groupgate's own): how long a translated classic member is left to notice a change
    # of its topics itself (a deleted topic, a grown or new one) before it is told to rejoin; a classic
    # group on Kafka leaves that to the clients' metadata refreshes.
    topic_change_grace_ms: int = 3000


class Rebalancer:
    def __init__(self, config: ClassicGroupConfig, new_member_id: Callable[[str], str]) -> None:
        self.config = config
        self.new_member_id = new_member_id
        self.deadlines: dict[TimerKey, int] = {}

    # ---- timers ------------------------------------------------------------------------------
    def schedule(self, out: Outcome, key: TimerKey, deadline_ms: int) -> None:
        self.deadlines[key] = deadline_ms
        out.timers.append(Schedule(key, deadline_ms))

    def cancel(self, out: Outcome, key: TimerKey) -> None:
        if self.deadlines.pop(key, None) is not None:
            out.timers.append(Cancel(key))

    def take_due(self, out: Outcome, key: TimerKey, now_ms: int) -> bool:
        """Whether a fired timer is still current; consumes it if so. One that fired before its deadline
        by this clock is scheduled again for it: the driver's timers may run on a coarser clock than
        ``now_ms`` (uvloop's is libuv's, cached per turn of the loop in whole milliseconds), and a timer
        dropped as early would never fire again (a silent member would never expire)."""
        deadline = self.deadlines.get(key)
        if deadline is None:
            return False
        if now_ms < deadline:
            out.timers.append(Schedule(key, deadline))
            return False
        del self.deadlines[key]
        return True

    def reschedule_heartbeat(
        self, out: Outcome, group: ClassicGroup, member: ClassicGroupMember, now_ms: int, timeout_ms: int | None = None
    ) -> None:
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self.schedule(out, timer_key(HEARTBEAT_TIMER, group.group_id, member.member_id), now_ms + timeout)

    def cancel_heartbeat(self, out: Outcome, group: ClassicGroup, member_id: str) -> None:
        self.cancel(out, timer_key(HEARTBEAT_TIMER, group.group_id, member_id))

    # ---- records -----------------------------------------------------------------------------
    def group_record(self, group: ClassicGroup) -> GroupMetadataRecord:
        """The group's state as persisted: each member's metadata for the selected protocol and its
        current assignment (written when a generation completes or the group empties)."""
        members = []
        for m in group.members.values():
            subscription = m.metadata(group.protocol_name) if group.protocol_name is not None else b""
            members.append(
                GroupMetadataMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    subscription=subscription,
                    assignment=m.assignment,
                )
            )
        value = GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=group.protocol_name,
            leader=group.leader_id,
            current_state_timestamp=group.state_timestamp_ms,
            members=members,
        )
        return GroupMetadataRecord(group.group_id, value, self.config.metadata_value_version)

    # ---- the join phase ----------------------------------------------------------------------
    def maybe_prepare_rebalance_or_complete_join(self, out: Outcome, group: ClassicGroup, now_ms: int) -> None:
        if group.can_rebalance():
            self.prepare_rebalance(out, group, now_ms)
        else:
            self.maybe_complete_join_phase(out, group, now_ms)

    def prepare_rebalance(self, out: Outcome, group: ClassicGroup, now_ms: int) -> None:
        # Members parked in SyncGroup belong to a generation that will never be synced.
        if group.is_in(State.COMPLETING_REBALANCE):
            self.reset_and_propagate_assignment_error(out, group, Errors.REBALANCE_IN_PROGRESS, now_ms)
        self.cancel(out, timer_key(SYNC_TIMER, group.group_id))
        group.pending_sync_members.clear()

        join_key = timer_key(JOIN_TIMER, group.group_id)
        is_initial = group.is_in(State.EMPTY)
        if is_initial:
            # Let a starting group gather its members before the first generation instead of
            # rebalancing once per arriving consumer (group.initial.rebalance.delay.ms).
            rebalance_timeout = group.rebalance_timeout_ms()
            delay = min(self.config.initial_rebalance_delay_ms, rebalance_timeout)
            group.initial_delay_ms = delay
            group.initial_remaining_ms = max(rebalance_timeout - self.config.initial_rebalance_delay_ms, 0)
            group.new_member_added = False
            self.schedule(out, join_key, now_ms + delay)
        else:
            group.initial_delay_ms = -1
            group.initial_remaining_ms = -1
            self.schedule(out, join_key, now_ms + group.rebalance_timeout_ms())
        group.transition_to(State.PREPARING_REBALANCE, now_ms)
        out.changes.append(RebalanceStarted(group.group_id))  # no record until the group settles
        if not is_initial:
            self.maybe_complete_join_phase(out, group, now_ms)

    def maybe_complete_join_phase(self, out: Outcome, group: ClassicGroup, now_ms: int) -> None:
        # The barrier: every known member has a JoinGroup parked and no MEMBER_ID_REQUIRED member
        # is still expected. The initial rebalance always waits out its delay.
        if group.is_in(State.PREPARING_REBALANCE) and group.all_members_joined() and not group.in_initial_delay():
            self.complete_join(out, group, now_ms)

    def on_join_timer(self, out: Outcome, group: ClassicGroup, now_ms: int) -> None:
        if not group.is_in(State.PREPARING_REBALANCE):
            return
        if group.in_initial_delay() and group.new_member_added and group.initial_remaining_ms > 0:
            # Someone joined during the delay: wait once more, within the rebalance timeout.
            group.new_member_added = False
            previous_delay = group.initial_delay_ms
            delay = min(self.config.initial_rebalance_delay_ms, group.initial_remaining_ms)
            group.initial_remaining_ms = max(group.initial_remaining_ms - previous_delay, 0)
            group.initial_delay_ms = delay
            self.schedule(out, timer_key(JOIN_TIMER, group.group_id), now_ms + delay)
            return
        self.complete_join(out, group, now_ms)

    def complete_join(self, out: Outcome, group: ClassicGroup, now_ms: int) -> None:
        self.cancel(out, timer_key(JOIN_TIMER, group.group_id))
        group.initial_delay_ms = -1
        group.initial_remaining_ms = -1
        if not group.is_in(State.PREPARING_REBALANCE):
            return
        # Dynamic members that did not rejoin in time are gone. Static members stay until their
        # session expires (KIP-345): a bouncing static member must not cost a rebalance.
        for member in group.not_yet_rejoined():
            if not member.is_static:
                self._drop(out, group, member)
        if not self._maybe_elect_joined_leader(group) and group.members:
            # Only static members that have not rejoined remain: keep waiting until they rejoin
            # or their sessions remove them.
            self.schedule(out, timer_key(JOIN_TIMER, group.group_id), now_ms + group.rebalance_timeout_ms())
            return

        self._init_next_generation(group, now_ms)
        if group.is_in(State.EMPTY):
            out.records.append(self.group_record(group))
            return
        for member in list(group.members.values()):
            is_leader = group.is_leader(member.member_id)
            pending = member.awaiting_join
            if pending is not None:
                group.set_awaiting_join(member, None)
                out.respond(
                    pending.request_key,
                    JoinGroupResponse(
                        error_code=Errors.NONE,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=group.leader_id or "",
                        skip_assignment=False,
                        member_id=member.member_id,
                        members=group.current_member_metadata() if is_leader else [],
                    ),
                )
            self.reschedule_heartbeat(out, group, member, now_ms)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        # Members that never send SyncGroup must not hold the group hostage.
        self.schedule(out, timer_key(SYNC_TIMER, group.group_id), now_ms + group.rebalance_timeout_ms())

    def _maybe_elect_joined_leader(self, group: ClassicGroup) -> bool:
        if group.leader_id is None:
            return False
        leader = group.members.get(group.leader_id)
        if leader is not None and leader.awaiting_join is not None:
            return True
        for member in group.members.values():
            if member.awaiting_join is not None:
                group.leader_id = member.member_id
                return True
        return False

    def _init_next_generation(self, group: ClassicGroup, now_ms: int) -> None:
        group.generation_id += 1
        group.pending_sync_members.clear()
        if group.members:
            group.protocol_name = group.select_protocol()
            group.transition_to(State.COMPLETING_REBALANCE, now_ms)
        else:
            group.protocol_name = None
            group.transition_to(State.EMPTY, now_ms)

    # ---- the sync phase ----------------------------------------------------------------------
    def propagate_assignment(self, out: Outcome, group: ClassicGroup, error: Errors, now_ms: int) -> None:
        for member in group.members.values():
            pending = member.awaiting_sync
            if pending is None:
                continue
            member.awaiting_sync = None
            out.respond(
                pending.request_key,
                SyncGroupResponse(
                    error_code=error,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    assignment=member.assignment if error is Errors.NONE else b"",
                ),
            )
            # The session restarts once the member has its answer: while parked it could not
            # heartbeat, and an expiry during that time was ignored.
            self.reschedule_heartbeat(out, group, member, now_ms)

    def reset_and_propagate_assignment_error(
        self, out: Outcome, group: ClassicGroup, error: Errors, now_ms: int
    ) -> None:
        for member in group.members.values():
            member.assignment = b""
        self.propagate_assignment(out, group, error, now_ms)

    def on_sync_timer(self, out: Outcome, group: ClassicGroup, now_ms: int) -> None:
        if not group.is_in(State.COMPLETING_REBALANCE, State.STABLE) or not group.pending_sync_members:
            return
        for member_id in sorted(group.pending_sync_members):
            member = group.members.get(member_id)
            if member is not None:
                self._drop(out, group, member)
        self.prepare_rebalance(out, group, now_ms)

    # ---- removal -----------------------------------------------------------------------------
    def _drop(self, out: Outcome, group: ClassicGroup, member: ClassicGroupMember) -> None:
        """Take a member out of the group, answering whatever it has parked."""
        if member.awaiting_join is not None:
            # It may simply have timed out while parked; UNKNOWN_MEMBER_ID makes a live client
            # rejoin from scratch.
            out.respond(
                member.awaiting_join.request_key,
                JoinGroupResponse(error_code=Errors.UNKNOWN_MEMBER_ID, member_id=UNKNOWN_MEMBER_ID),
            )
        if member.awaiting_sync is not None:
            out.respond(member.awaiting_sync.request_key, SyncGroupResponse(error_code=Errors.UNKNOWN_MEMBER_ID))
            member.awaiting_sync = None
        group.remove(member.member_id)
        out.changes.append(MemberRemoved(group.group_id, member.member_id))  # no record until the group settles
        self.cancel_heartbeat(out, group, member.member_id)

    def remove_member_and_update_group(
        self, out: Outcome, group: ClassicGroup, member: ClassicGroupMember, now_ms: int
    ) -> None:
        self._drop(out, group, member)
        if group.is_in(State.STABLE, State.COMPLETING_REBALANCE):
            self.maybe_prepare_rebalance_or_complete_join(out, group, now_ms)
        elif group.is_in(State.PREPARING_REBALANCE) and group.all_members_joined():
            self.complete_join(out, group, now_ms)

    def remove_pending_member(self, out: Outcome, group: ClassicGroup, member_id: str, now_ms: int) -> None:
        group.pending_members.discard(member_id)
        self.cancel_heartbeat(out, group, member_id)
        self.maybe_complete_join_phase(out, group, now_ms)
