"""The classic group coordinator: the sans-I/O entry point for JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, offset validation, timers and record replay of classic groups.

Every call takes the decoded request, an opaque ``request_key`` and the current time and returns a
``Outcome`` (responses tagged with the key of the request they answer, records to persist before
any response is released, timer changes). Timers come back through ``on_timer``. Member ids come
from the injected ``new_member_id(client_id)``.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.errors import ApiError, Errors
from coordinator.outcome import GroupConverted, Outcome, RequestKey
from coordinator.timers import TimerKey
from translate.classic_group import ClassicGroup, ClassicGroupMember, PendingSync
from translate.classic_group import ClassicGroupState as State
from translate.classic_join import ClassicJoin, join_error, validate_member
from translate.classic_messages import (
    BATCH_LEAVE_VERSION,
    UNKNOWN_MEMBER_ID,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from translate.classic_rebalance import ClassicGroupConfig, Rebalancer
from translate.group_records import GroupMetadataRecord
from translate.result import HEARTBEAT_TIMER, JOIN_TIMER, SYNC_TIMER, timer_key

# OffsetCommit v9+ answers GROUP_ID_NOT_FOUND for a missing group; older versions expect
# ILLEGAL_GENERATION.
OFFSET_COMMIT_GROUP_ID_NOT_FOUND_VERSION = 9
TXN_OFFSET_COMMIT_GROUP_ID_NOT_FOUND_VERSION = 6  # KIP-1319


class ClassicGroupCoordinator:
    def __init__(
        self, new_member_id: Callable[[str], str], config: ClassicGroupConfig | None = None
    ) -> None:
        self.groups: dict[str, ClassicGroup] = {}
        self.rebalancer = Rebalancer(config or ClassicGroupConfig(), new_member_id)
        self._join = ClassicJoin(self.rebalancer, self.groups)

    def group(self, group_id: str) -> ClassicGroup | None:
        return self.groups.get(group_id)

    # ---- JoinGroup ---------------------------------------------------------------------------
    def join_group(self, request: JoinGroupRequest, request_key: RequestKey, now_ms: int) -> Outcome:
        return self._join.join_group(request, request_key, now_ms)

    # ---- SyncGroup ---------------------------------------------------------------------------
    def sync_group(self, request: SyncGroupRequest, request_key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        try:
            self._sync(out, request, request_key, now_ms)
        except ApiError as exc:
            out.respond(request_key, SyncGroupResponse(error_code=exc.error))
        return out

    def _sync(self, out: Outcome, request: SyncGroupRequest, key: RequestKey, now_ms: int) -> None:
        group = self._existing_group(request.group_id)
        validate_member(group, request.member_id, request.group_instance_id)
        if request.generation_id != group.generation_id:
            raise ApiError(Errors.ILLEGAL_GENERATION)
        if request.protocol_type is not None and request.protocol_type != group.protocol_type:
            raise ApiError(Errors.INCONSISTENT_GROUP_PROTOCOL)
        if request.protocol_name is not None and request.protocol_name != group.protocol_name:
            raise ApiError(Errors.INCONSISTENT_GROUP_PROTOCOL)
        if group.is_in(State.EMPTY):
            raise ApiError(Errors.UNKNOWN_MEMBER_ID)
        if group.is_in(State.PREPARING_REBALANCE):
            raise ApiError(Errors.REBALANCE_IN_PROGRESS)
        member = group.members[request.member_id]
        group.pending_sync_members.discard(member.member_id)
        if group.is_in(State.STABLE):
            # Late or repeated SyncGroup (or a leader's, which is not needed any more): the
            # assignment of the current generation is already known.
            self.rebalancer.reschedule_heartbeat(out, group, member, now_ms)
            out.respond(
                key,
                SyncGroupResponse(
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    assignment=member.assignment,
                ),
            )
            self._maybe_cancel_sync_timer(out, group)
            return
        # CompletingRebalance: park until the leader's assignment arrives.
        if member.awaiting_sync is not None:
            out.respond(member.awaiting_sync.request_key, SyncGroupResponse(error_code=Errors.REBALANCE_IN_PROGRESS))
        member.awaiting_sync = PendingSync(key, request.api_version)
        if group.is_leader(member.member_id):
            assignments = {a.member_id: a.assignment for a in request.assignments}
            # Members the leader left out get an empty assignment; unknown ids are ignored.
            for m in group.members.values():
                m.assignment = m.synced_assignment = assignments.get(m.member_id, b"")
            group.transition_to(State.STABLE, now_ms)
            out.records.append(self.rebalancer.group_record(group))
            self.rebalancer.propagate_assignment(out, group, Errors.NONE, now_ms)
        self._maybe_cancel_sync_timer(out, group)

    def _maybe_cancel_sync_timer(self, out: Outcome, group: ClassicGroup) -> None:
        if not group.pending_sync_members:
            self.rebalancer.cancel(out, timer_key(SYNC_TIMER, group.group_id))

    # ---- Heartbeat ---------------------------------------------------------------------------
    def heartbeat(self, request: HeartbeatRequest, request_key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        error = Errors.NONE
        try:
            group = self._existing_group(request.group_id)
            validate_member(group, request.member_id, request.group_instance_id)
            if request.generation_id != group.generation_id:
                raise ApiError(Errors.ILLEGAL_GENERATION)
            if group.is_in(State.EMPTY):
                raise ApiError(Errors.UNKNOWN_MEMBER_ID)
            self.rebalancer.reschedule_heartbeat(out, group, group.members[request.member_id], now_ms)
            if group.is_in(State.PREPARING_REBALANCE):
                # The heartbeat is how members learn they must rejoin.
                error = Errors.REBALANCE_IN_PROGRESS
            # CompletingRebalance: a member that got its JoinGroup answer may heartbeat before
            # SyncGroup; that is a normal heartbeat.
        except ApiError as exc:
            error = exc.error
        out.respond(request_key, HeartbeatResponse(error_code=error))
        return out

    # ---- LeaveGroup --------------------------------------------------------------------------
    def leave_group(self, request: LeaveGroupRequest, request_key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        try:
            group = self._existing_group(request.group_id)
        except ApiError as exc:
            out.respond(request_key, LeaveGroupResponse(error_code=exc.error))
            return out
        results: list[MemberResponse] = []
        for identity in request.members:
            error = self._leave_one(out, group, identity.member_id, identity.group_instance_id, now_ms)
            results.append(MemberResponse(identity.member_id, identity.group_instance_id, error))
        response = LeaveGroupResponse(members=results)
        if request.api_version < BATCH_LEAVE_VERSION and results:
            # v0-2 have no per-member results: the one member's error is the response's error.
            response.error_code = results[0].error_code
        out.respond(request_key, response)
        return out

    def _leave_one(
        self, out: Outcome, group: ClassicGroup, member_id: str, instance_id: str | None, now_ms: int
    ) -> Errors:
        if instance_id is None:
            if member_id in group.pending_members:
                self.rebalancer.remove_pending_member(out, group, member_id, now_ms)
                return Errors.NONE
            member = group.members.get(member_id)
            if member is None:
                return Errors.UNKNOWN_MEMBER_ID
        else:
            owner = group.static_member_id(instance_id)
            if owner is None:
                return Errors.UNKNOWN_MEMBER_ID
            if member_id != UNKNOWN_MEMBER_ID and member_id != owner:
                return Errors.FENCED_INSTANCE_ID
            member = group.members[owner]
        self.rebalancer.remove_member_and_update_group(out, group, member, now_ms)
        return Errors.NONE

    # ---- timers ------------------------------------------------------------------------------
    def on_timer(self, key: TimerKey, now_ms: int) -> Outcome:
        out = Outcome()
        if not self.rebalancer.take_due(out, key, now_ms):
            return out  # replaced or cancelled: nothing to do; early: scheduled again for its deadline
        group = self.groups.get(key[1])
        if group is None or group.is_in(State.DEAD):
            return out
        if key[0] == JOIN_TIMER:
            self.rebalancer.on_join_timer(out, group, now_ms)
        elif key[0] == SYNC_TIMER:
            self.rebalancer.on_sync_timer(out, group, now_ms)
        elif key[0] == HEARTBEAT_TIMER:
            self._on_session_expired(out, group, key[2], now_ms)
        return out

    def _on_session_expired(self, out: Outcome, group: ClassicGroup, member_id: str, now_ms: int) -> None:
        if member_id in group.pending_members:
            # The id handed out with MEMBER_ID_REQUIRED was never used.
            self.rebalancer.remove_pending_member(out, group, member_id, now_ms)
            return
        member = group.members.get(member_id)
        if member is not None and not member.has_satisfied_heartbeat():
            self.rebalancer.remove_member_and_update_group(out, group, member, now_ms)

    # ---- offsets -----------------------------------------------------------------------------
    def validate_offset_commit(
        self,
        group_id: str,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        api_version: int,
        now_ms: int,
        is_transactional: bool = False,
    ) -> Errors:
        """Whether an OffsetCommit (or TxnOffsetCommit) may write offsets for this classic group."""
        group = self.groups.get(group_id)
        if group is None:
            if generation_id < 0:
                # Admin tools and consumers that assign partitions themselves commit outside any
                # generation: a "simple" group exists from then on to hold the offsets.
                self.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=now_ms)
                return Errors.NONE
            if api_version >= (TXN_OFFSET_COMMIT_GROUP_ID_NOT_FOUND_VERSION if is_transactional
                               else OFFSET_COMMIT_GROUP_ID_NOT_FOUND_VERSION):
                return Errors.GROUP_ID_NOT_FOUND
            return Errors.ILLEGAL_GENERATION
        if group.is_in(State.DEAD):
            return Errors.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_in(State.EMPTY):
            return Errors.NONE
        try:
            if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
                validate_member(group, member_id, group_instance_id)
                if generation_id != group.generation_id:
                    return Errors.ILLEGAL_GENERATION
            elif not is_transactional and not group.is_in(State.EMPTY):
                # No member id and no generation: only allowed while nobody owns the partitions.
                return Errors.UNKNOWN_MEMBER_ID
        except ApiError as exc:
            return exc.error
        if not is_transactional and group.is_in(State.COMPLETING_REBALANCE):
            # The member knows the new generation but has no assignment yet; it retries after
            # SyncGroup.
            return Errors.REBALANCE_IN_PROGRESS
        return Errors.NONE

    def offset_committed(self, group_id: str, member_id: str, now_ms: int) -> Outcome:
        """An accepted OffsetCommit of a member of a Stable or PreparingRebalance classic group counts as
        a heartbeat, as in Kafka (its coordinator reschedules the member's session on a commit); a
        TxnOffsetCommit does not."""
        out = Outcome()
        group = self.groups.get(group_id)
        if group is not None and group.is_in(State.STABLE, State.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            if member is not None:
                self.rebalancer.reschedule_heartbeat(out, group, member, now_ms)
        return out

    def validate_offset_fetch(self, group_id: str) -> Errors:
        """Classic groups let anyone read their offsets; only a deleted group refuses."""
        group = self.groups.get(group_id)
        if group is not None and group.is_in(State.DEAD):
            return Errors.GROUP_ID_NOT_FOUND
        return Errors.NONE

    # ---- deletion ----------------------------------------------------------------------------
    def delete_group(self, group_id: str, now_ms: int) -> tuple[Errors, Outcome]:
        out = Outcome()
        group = self.groups.get(group_id)
        if group is None or group.is_in(State.DEAD):
            return Errors.GROUP_ID_NOT_FOUND, out
        if not group.is_in(State.EMPTY):
            return Errors.NON_EMPTY_GROUP, out
        group.transition_to(State.DEAD, now_ms)
        del self.groups[group_id]
        for kind in (JOIN_TIMER, SYNC_TIMER):
            self.rebalancer.cancel(out, timer_key(kind, group_id))
        for member_id in sorted(group.pending_members):
            self.rebalancer.cancel_heartbeat(out, group, member_id)
        out.records.append(GroupMetadataRecord(group_id, None))
        return Errors.NONE, out

    # ---- expiry ------------------------------------------------------------------------------
    def expire_empty_groups(self, now_ms: int, retention_ms: int) -> tuple[list[str], Outcome]:
        """Delete the groups Empty for ``retention_ms`` (``offsets.retention.minutes``), as Kafka's
        cleanup does once their offsets expired: for an Empty classic group Kafka expires them all
        retention after CurrentStateTimestamp, the time the group became Empty, which the group
        record carries and replay restores. A group whose record has no timestamp (value v0/v1) is
        stamped now. A group with a member id handed out (MEMBER_ID_REQUIRED) that has not joined
        yet is left for a later check: that member is on its way in."""
        out = Outcome()
        expired: list[str] = []
        for group in list(self.groups.values()):
            if not group.is_in(State.EMPTY) or group.pending_members:
                continue
            if group.state_timestamp_ms < 0:
                group.state_timestamp_ms = now_ms
                out.records.append(self.rebalancer.group_record(group))
            elif now_ms - group.state_timestamp_ms >= retention_ms:
                _, deleted = self.delete_group(group.group_id, now_ms)  # the tombstone
                out.take(deleted)
                expired.append(group.group_id)
        return expired, out

    # ---- replay ------------------------------------------------------------------------------
    def retire(self, out: Outcome, group: ClassicGroup, new_type: str) -> list[str]:
        """Hand a classic group over to another group type: every parked JoinGroup / SyncGroup is answered
        REBALANCE_IN_PROGRESS (its member rejoins the new group), the group's timers stop, it is removed and
        tombstoned. Returns the members whose requests were parked, in the group's order."""
        gid = group.group_id
        parked: list[str] = []
        for m in group.members.values():
            if m.awaiting_join is not None or m.awaiting_sync is not None:
                parked.append(m.member_id)
            if m.awaiting_join is not None:
                out.respond(m.awaiting_join.request_key, join_error(Errors.REBALANCE_IN_PROGRESS, m.member_id))
                group.set_awaiting_join(m, None)
            if m.awaiting_sync is not None:
                out.respond(m.awaiting_sync.request_key, SyncGroupResponse(error_code=Errors.REBALANCE_IN_PROGRESS))
                m.awaiting_sync = None
        for kind in (JOIN_TIMER, SYNC_TIMER):
            self.rebalancer.cancel(out, timer_key(kind, gid))
        for member_id in [*group.members, *sorted(group.pending_members)]:
            self.rebalancer.cancel(out, timer_key(HEARTBEAT_TIMER, gid, member_id))
        del self.groups[gid]
        out.records.append(GroupMetadataRecord(gid, None))
        out.changes.append(GroupConverted(gid, "classic", new_type))
        return parked

    def replay(self, record: GroupMetadataRecord) -> None:
        """Rebuild a group from its last persisted state. Records are written at the end of a
        generation or when the group empties, so the result is Stable or Empty; a rebalance that
        was under way is forgotten and its members simply heartbeat or rejoin, as after a Kafka
        coordinator failover."""
        value = record.value
        if value is None:
            self.groups.pop(record.group_id, None)
            return
        group = ClassicGroup(
            record.group_id,
            protocol_type=value.protocol_type or None,
            protocol_name=value.protocol,
            generation_id=value.generation,
            state_timestamp_ms=value.current_state_timestamp,
        )
        for m in value.members:
            protocols = [JoinGroupRequestProtocol(value.protocol, m.subscription)] if value.protocol else []
            group.add(
                ClassicGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    protocol_type=value.protocol_type,
                    supported_protocols=protocols,
                    assignment=m.assignment,
                    # Written when a generation's assignment is installed: the last synced one.
                    synced_assignment=m.assignment,
                )
            )
        group.leader_id = value.leader if value.leader in group.members else group.leader_id
        if group.members:
            group.previous_state = State.COMPLETING_REBALANCE
            group.state = State.STABLE
        self.groups[record.group_id] = group

    def on_loaded(self, now_ms: int) -> Outcome:
        """After replay: every member's session starts now (a member that is gone expires)."""
        out = Outcome()
        for group in self.groups.values():
            for member in group.members.values():
                self.rebalancer.reschedule_heartbeat(out, group, member, now_ms)
        return out

    # ---- helpers -----------------------------------------------------------------------------
    def _existing_group(self, group_id: str) -> ClassicGroup:
        group = self.groups.get(group_id)
        if group is None:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID)
        if group.is_in(State.DEAD):
            raise ApiError(Errors.COORDINATOR_NOT_AVAILABLE)
        return group
