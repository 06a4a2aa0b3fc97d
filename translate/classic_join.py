"""JoinGroup for classic groups: new members, rejoining members and static members (KIP-345).

A JoinGroup is usually parked until the join phase completes (see classic_rebalance.py); the
cases answered at once are errors, MEMBER_ID_REQUIRED (KIP-394), a follower rejoining unchanged
while the group is CompletingRebalance or Stable, and a static member that restarts without
changing the group's protocol.
"""

from __future__ import annotations

from coordinator.errors import ApiError, Errors
from coordinator.outcome import MemberRemoved, Outcome, RequestKey
from translate.classic_group import ClassicGroup, ClassicGroupMember, PendingJoin
from translate.classic_group import ClassicGroupState as State
from translate.classic_messages import (
    MEMBER_ID_REQUIRED_VERSION,
    SKIP_ASSIGNMENT_VERSION,
    UNKNOWN_MEMBER_ID,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupResponse,
)
from translate.classic_rebalance import Rebalancer
from translate.result import HEARTBEAT_TIMER, timer_key


def join_error(error: Errors, member_id: str = UNKNOWN_MEMBER_ID) -> JoinGroupResponse:
    return JoinGroupResponse(error_code=error, member_id=member_id, generation_id=-1)


class ClassicJoin:
    def __init__(self, rebalancer: Rebalancer, groups: dict[str, ClassicGroup]) -> None:
        self.rb = rebalancer
        self.groups = groups

    def join_group(self, request: JoinGroupRequest, request_key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        existed = request.group_id in self.groups
        try:
            self._join(out, request, request_key, now_ms)
        except ApiError as exc:
            out.respond(request_key, join_error(exc.error, request.member_id))
            group = self.groups.get(request.group_id)
            if not existed and group is not None and not group.members and not group.pending_members:
                # A refused first JoinGroup leaves no empty group behind.
                del self.groups[request.group_id]
        return out

    def _join(self, out: Outcome, request: JoinGroupRequest, key: RequestKey, now_ms: int) -> None:
        config = self.rb.config
        if not request.group_id:
            raise ApiError(Errors.INVALID_GROUP_ID)
        if not config.min_session_timeout_ms <= request.session_timeout_ms <= config.max_session_timeout_ms:
            raise ApiError(Errors.INVALID_SESSION_TIMEOUT)
        if request.api_version == 0 or request.rebalance_timeout_ms < 0:
            # JoinGroup v0 has no rebalance timeout: the session timeout bounds the rebalance too.
            request.rebalance_timeout_ms = request.session_timeout_ms

        group = self.groups.get(request.group_id)
        if group is None:
            if request.member_id != UNKNOWN_MEMBER_ID:
                # A member id the coordinator never handed out (or a group that is gone).
                raise ApiError(Errors.UNKNOWN_MEMBER_ID)
            group = ClassicGroup(request.group_id, state_timestamp_ms=now_ms)
            self.groups[request.group_id] = group
        if group.is_in(State.DEAD):
            raise ApiError(Errors.COORDINATOR_NOT_AVAILABLE)
        if not self._accepts_joining_member(group, request.member_id):
            raise ApiError(Errors.GROUP_MAX_SIZE_REACHED)
        if request.member_id == UNKNOWN_MEMBER_ID:
            self._join_new_member(out, group, request, key, now_ms)
        else:
            self._join_existing_member(out, group, request, key, now_ms)

    def _accepts_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self.rb.config.max_size
        if group.is_in(State.EMPTY, State.DEAD):
            return True
        if group.is_in(State.PREPARING_REBALANCE):
            # Counting parked joins (not members) lets a shrunken max size shed the last rejoiners.
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join is not None) or group.num_awaiting_join < max_size
        return member_id in group.members or len(group.members) < max_size

    # ---- new members -------------------------------------------------------------------------
    def _join_new_member(
        self, out: Outcome, group: ClassicGroup, request: JoinGroupRequest, key: RequestKey, now_ms: int
    ) -> None:
        if not group.supports_protocols(request.protocol_type, request.protocols):
            raise ApiError(Errors.INCONSISTENT_GROUP_PROTOCOL)
        new_member_id = self.rb.new_member_id(request.client_id)
        if request.group_instance_id is not None:
            old_member_id = group.static_member_id(request.group_instance_id)
            if old_member_id is not None:
                self._replace_static_member(out, group, request, old_member_id, new_member_id, key, now_ms)
            else:
                self._add_member(out, group, request, new_member_id, key, now_ms)
        elif request.api_version >= MEMBER_ID_REQUIRED_VERSION:
            # KIP-394: hand out the id first, so a client that times out and retries does not
            # leave an orphan member behind. The id waits one session for the rejoin.
            group.pending_members.add(new_member_id)
            self.rb.schedule(
                out,
                timer_key(HEARTBEAT_TIMER, group.group_id, new_member_id),
                now_ms + request.session_timeout_ms,
            )
            out.respond(key, join_error(Errors.MEMBER_ID_REQUIRED, new_member_id))
        else:
            self._add_member(out, group, request, new_member_id, key, now_ms)

    def _add_member(
        self,
        out: Outcome,
        group: ClassicGroup,
        request: JoinGroupRequest,
        member_id: str,
        key: RequestKey,
        now_ms: int,
    ) -> None:
        member = ClassicGroupMember(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            supported_protocols=list(request.protocols),
            is_new=True,
        )
        if group.in_initial_delay():
            group.new_member_added = True
        group.add(member, PendingJoin(key, request.api_version))
        # A parked new member cannot heartbeat and a lost connection goes unnoticed; if the
        # rebalance drags on past this timeout the member is dropped and expected to retry.
        self.rb.reschedule_heartbeat(out, group, member, now_ms, self.rb.config.new_member_join_timeout_ms)
        self.rb.maybe_prepare_rebalance_or_complete_join(out, group, now_ms)

    def _replace_static_member(
        self,
        out: Outcome,
        group: ClassicGroup,
        request: JoinGroupRequest,
        old_member_id: str,
        new_member_id: str,
        key: RequestKey,
        now_ms: int,
    ) -> None:
        """KIP-345: a static member that restarts (empty member id, known instance id) takes over
        its old identity under a new member id; the old incarnation is fenced."""
        instance_id = request.group_instance_id
        assert instance_id is not None
        old = group.members[old_member_id]
        if old.awaiting_join is not None:
            out.respond(old.awaiting_join.request_key, join_error(Errors.FENCED_INSTANCE_ID, old_member_id))
            group.set_awaiting_join(old, None)
        if old.awaiting_sync is not None:
            out.respond(old.awaiting_sync.request_key, SyncGroupResponse(error_code=Errors.FENCED_INSTANCE_ID))
            old.awaiting_sync = None
        was_leader = group.is_leader(old_member_id)
        leader_before = group.leader_id
        self.rb.cancel_heartbeat(out, group, old_member_id)
        member = group.replace_static_member(instance_id, old_member_id, new_member_id)
        out.changes.append(MemberRemoved(group.group_id, old_member_id))
        self.rb.reschedule_heartbeat(out, group, member, now_ms)
        group.update_member(
            member,
            request.protocols,
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            PendingJoin(key, request.api_version),
        )

        if group.is_in(State.STABLE):
            if group.select_protocol() == group.protocol_name:
                # Nothing the assignment depends on changed: persist the new member id and hand
                # the member back its place; its SyncGroup returns its old assignment.
                out.records.append(self.rb.group_record(group))
                group.set_awaiting_join(member, None)
                # KIP-814: from v9 a restarted leader is told it leads (its new id) but must skip the
                # assignment, so it keeps watching topic metadata as the leader; older clients get
                # the leader id from before the replacement and act as followers, as Kafka answers.
                skip = was_leader and request.api_version >= SKIP_ASSIGNMENT_VERSION
                out.respond(
                    key,
                    JoinGroupResponse(
                        error_code=Errors.NONE,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=(group.leader_id if skip else leader_before) or "",
                        skip_assignment=skip,
                        member_id=new_member_id,
                        members=group.current_member_metadata() if skip else [],
                    ),
                )
            else:
                self.rb.maybe_prepare_rebalance_or_complete_join(out, group, now_ms)
        elif group.is_in(State.COMPLETING_REBALANCE):
            # The leader may already be assigning to the old member id: start over.
            self.rb.prepare_rebalance(out, group, now_ms)
        else:
            self.rb.maybe_complete_join_phase(out, group, now_ms)

    # ---- known members -----------------------------------------------------------------------
    def _join_existing_member(
        self, out: Outcome, group: ClassicGroup, request: JoinGroupRequest, key: RequestKey, now_ms: int
    ) -> None:
        member_id = request.member_id
        if not group.supports_protocols(request.protocol_type, request.protocols):
            raise ApiError(Errors.INCONSISTENT_GROUP_PROTOCOL)
        if member_id in group.pending_members:
            # The rejoin KIP-394 asked for: now the member really joins.
            self._add_member(out, group, request, member_id, key, now_ms)
            return
        validate_member(group, member_id, request.group_instance_id)
        member = group.members[member_id]
        if group.is_in(State.PREPARING_REBALANCE):
            self._update_member_and_rebalance(out, group, member, request, key, now_ms)
        elif group.is_in(State.COMPLETING_REBALANCE):
            if member.matches(request.protocols):
                # A retried JoinGroup whose answer was lost: answer again for this generation.
                self._respond_current_generation(
                    out, group, member, key, with_members=group.is_leader(member_id)
                )
            else:
                self._update_member_and_rebalance(out, group, member, request, key, now_ms)
        elif group.is_in(State.STABLE):
            if group.is_leader(member_id) or not member.matches(request.protocols):
                # A leader's JoinGroup forces a rebalance: that is how a consumer leader reacts to
                # changes the coordinator cannot see (e.g. new partitions of subscribed topics).
                self._update_member_and_rebalance(out, group, member, request, key, now_ms)
            else:
                self._respond_current_generation(out, group, member, key, with_members=False)
        else:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID)

    def _update_member_and_rebalance(
        self,
        out: Outcome,
        group: ClassicGroup,
        member: ClassicGroupMember,
        request: JoinGroupRequest,
        key: RequestKey,
        now_ms: int,
    ) -> None:
        if member.awaiting_join is not None:
            # A second JoinGroup supersedes the first; the first still gets an answer so the
            # connection it came on is not left waiting.
            out.respond(member.awaiting_join.request_key, join_error(Errors.REBALANCE_IN_PROGRESS, member.member_id))
        group.update_member(
            member,
            request.protocols,
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            PendingJoin(key, request.api_version),
        )
        self.rb.maybe_prepare_rebalance_or_complete_join(out, group, now_ms)

    def _respond_current_generation(
        self, out: Outcome, group: ClassicGroup, member: ClassicGroupMember, key: RequestKey, with_members: bool
    ) -> None:
        out.respond(
            key,
            JoinGroupResponse(
                error_code=Errors.NONE,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader=group.leader_id or "",
                member_id=member.member_id,
                members=group.current_member_metadata() if with_members else [],
            ),
        )


def validate_member(group: ClassicGroup, member_id: str, instance_id: str | None) -> None:
    """The identity check shared by JoinGroup, SyncGroup, Heartbeat and OffsetCommit."""
    if instance_id is None:
        if member_id not in group.members:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID)
        return
    owner = group.static_member_id(instance_id)
    if owner is None:
        raise ApiError(Errors.UNKNOWN_MEMBER_ID)
    if owner != member_id:
        # KIP-345: another incarnation of this instance holds it now; this one is a zombie.
        raise ApiError(Errors.FENCED_INSTANCE_ID)

