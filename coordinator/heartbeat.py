"""ConsumerGroupHeartbeat v0/v1 handling (KIP-848 "ConsumerGroupHeartbeat API", as Kafka 4.x ships it).

``heartbeat(state, request, now_ms) -> Result[ConsumerGroupHeartbeatResponse]``. Order of work:
validation -> leave (-1 / static -2) -> member lookup and fencing -> subscription update (epoch bump)
-> target assignment -> reconciliation -> session timer -> response. The steady-state heartbeat (a
member at the target epoch with nothing to change) takes a short path with no records.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence

from coordinator import records as rec
from coordinator import regex as rx
from coordinator.errors import ApiError, Errors
from coordinator.membership import (
    maybe_update_target,
    reconcile_member,
    remove_member,
    replace_static_member,
    upsert_member,
)
from coordinator.messages import (
    CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION,
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from coordinator.model import Assignment, ConsumerGroup, ConsumerGroupMember, MemberState
from coordinator.state import NO_RECORDS, CoordinatorState, Result, Tx
from coordinator.timers import SESSION, ScheduleTimer, rebalance_key, session_key

_STABLE = MemberState.STABLE


def _empty(s: str | None) -> bool:
    return s is not None and not s.strip()


def validate(st: CoordinatorState, req: ConsumerGroupHeartbeatRequest) -> None:
    """Kafka's request validation, in its order (INVALID_REQUEST / UNSUPPORTED_ASSIGNOR / regex)."""
    epoch = req.member_epoch
    if req.api_version >= CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
        if req.member_id is None or not req.member_id.strip():
            raise ApiError(Errors.INVALID_REQUEST, "MemberId can't be empty.")
    if req.group_id is None or not req.group_id.strip():
        raise ApiError(Errors.INVALID_REQUEST, "GroupId can't be empty.")
    if _empty(req.instance_id):
        raise ApiError(Errors.INVALID_REQUEST, "InstanceId can't be empty.")
    if _empty(req.rack_id):
        raise ApiError(Errors.INVALID_REQUEST, "RackId can't be empty.")
    if epoch == JOIN_GROUP_MEMBER_EPOCH:
        if req.rebalance_timeout_ms == -1:
            raise ApiError(Errors.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
        if req.topic_partitions is None or len(req.topic_partitions) != 0:
            raise ApiError(Errors.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise ApiError(
                Errors.INVALID_REQUEST,
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
            )
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.instance_id is None:
            raise ApiError(Errors.INVALID_REQUEST, "InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise ApiError(Errors.INVALID_REQUEST, "MemberEpoch is invalid.")
    if req.server_assignor is not None and req.server_assignor not in st.config.assignors:
        raise ApiError(
            Errors.UNSUPPORTED_ASSIGNOR,
            f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
            f"{', '.join(st.config.assignors)}.",
        )
    if req.subscribed_topic_regex:
        rx.compile_regex(req.subscribed_topic_regex)


def error_response(e: ApiError) -> ConsumerGroupHeartbeatResponse:
    return ConsumerGroupHeartbeatResponse(error_code=int(e.error), error_message=e.message)


def owned_from_request(tps: Sequence[TopicPartitions] | None) -> Assignment | None:
    if tps is None:
        return None
    out: dict[uuid.UUID, frozenset[int]] = {}
    for tp in tps:
        if tp.partitions:
            out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return out


def _is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    for t, parts in owned.items():
        if parts and not parts <= assigned.get(t, frozenset()):
            return False
    return True


def check_member_epoch(member: ConsumerGroupMember, received: int, owned: Assignment | None) -> None:
    """KIP-848 "Fencing", with the tolerance of a lost response: the previous epoch is accepted when
    the member owns a subset of its assigned partitions."""
    if received > member.member_epoch:
        raise ApiError(
            Errors.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a greater member epoch ({received}) than the one known by the "
            f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )
    if received < member.member_epoch:
        if received != member.previous_member_epoch or not _is_subset(owned, member.assigned_partitions):
            raise ApiError(
                Errors.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a smaller member epoch ({received}) than the one known by the "
                f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
            )


def assignment_of(member: ConsumerGroupMember) -> list[TopicPartitions]:
    a = member.assigned_partitions
    return [TopicPartitions(t, sorted(a[t])) for t in sorted(a, key=lambda u: u.bytes) if a[t]]


def session_timeout_of(st: CoordinatorState, member: ConsumerGroupMember, group_id: str) -> int:
    """A classic member's own session timeout; else the group's ``consumer.session.timeout.ms``
    (or the broker's ``group.consumer.session.timeout.ms``)."""
    cm = member.classic_metadata
    return st.config.session_timeout_for(group_id) if cm is None else cm.session_timeout_ms


def heartbeat(st: CoordinatorState, req: ConsumerGroupHeartbeatRequest, now_ms: int) -> Result[ConsumerGroupHeartbeatResponse]:
    epoch = req.member_epoch
    # Steady state: a known member at the group's target epoch, nothing to change.
    if (
        epoch > 0
        and req.subscribed_topic_names is None
        and req.subscribed_topic_regex is None
        and req.server_assignor is None
        and req.topic_partitions is None
        and req.rack_id is None
        and req.rebalance_timeout_ms == -1
    ):
        group = st.groups.get(req.group_id)
        if group is not None:
            mid = req.member_id
            member = group.members.get(mid)
            if (
                member is not None
                and member.member_epoch == epoch
                and member.state is _STABLE
                and group.assignment_epoch == epoch
                and group.group_epoch == epoch
                and req.instance_id == member.instance_id
                and req.client_id == member.client_id
                and req.client_host == member.client_host
                and req.group_id  # validation: a non-empty group id
                and mid
            ):
                return Result(
                    ConsumerGroupHeartbeatResponse(0, None, mid, epoch, st.config.heartbeat_interval_for(req.group_id)),
                    NO_RECORDS,
                    (ScheduleTimer((SESSION, req.group_id, mid), now_ms + session_timeout_of(st, member, req.group_id)),),
                )
    try:
        validate(st, req)
        if epoch == LEAVE_GROUP_MEMBER_EPOCH or epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            return _leave(st, req, now_ms)
        return _heartbeat(st, req, now_ms)
    except ApiError as e:
        return Result(error_response(e))


def _leave(st: CoordinatorState, req: ConsumerGroupHeartbeatRequest, now_ms: int) -> Result[ConsumerGroupHeartbeatResponse]:
    group = st.groups.get(req.group_id)
    if group is None:
        raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
    tx = Tx(st)
    if req.instance_id is None:
        member = group.members.get(req.member_id)
        if member is None:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {req.group_id}.")
    else:
        sid = group.static_members.get(req.instance_id)
        if sid is None:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if sid != req.member_id:
            raise ApiError(
                Errors.FENCED_INSTANCE_ID,
                f"Static member {req.member_id} with instance id {req.instance_id} was fenced by member {sid}.",
            )
        member = group.members[sid]
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # KIP-848 "Static Membership": a temporary leave keeps the assignment until the session
            # expires or a new member with the same instance id takes it over.
            left = dataclasses.replace(
                member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, partitions_pending_revocation={}
            )
            tx.emit(rec.current_assignment(group.group_id, left))
            tx.cancel(rebalance_key(group.group_id, member.member_id))
            return tx.result(
                ConsumerGroupHeartbeatResponse(member_id=member.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
            )
    remove_member(tx, group, member.member_id, now_ms)
    return tx.result(ConsumerGroupHeartbeatResponse(member_id=member.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH))


def _lookup(
    st: CoordinatorState, group: ConsumerGroup, req: ConsumerGroupHeartbeatRequest, owned: Assignment | None
) -> tuple[ConsumerGroupMember | None, ConsumerGroupMember | None, str]:
    """(existing member or None, static member to replace or None, member id)."""
    mid = req.member_id
    epoch = req.member_epoch
    joining = epoch == JOIN_GROUP_MEMBER_EPOCH
    if joining and not mid:
        mid = st.config.member_id_generator()  # v0: the coordinator names the member (KIP-848 "Member ID")
    if req.instance_id is not None:
        sid = group.static_members.get(req.instance_id)
        if joining:
            if sid is None or sid == mid:
                return group.members.get(mid), None, mid
            old = group.members[sid]
            # A classic member is replaced at once (online upgrade); a consumer-protocol one only after
            # it left temporarily (epoch -2).
            if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH and not old.uses_classic_protocol:
                raise ApiError(
                    Errors.UNRELEASED_INSTANCE_ID,
                    f"Static member {sid} with instance id {req.instance_id} is not released yet.",
                )
            return None, old, mid
        if sid is None:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if sid != mid:
            raise ApiError(
                Errors.FENCED_INSTANCE_ID,
                f"Static member {mid} with instance id {req.instance_id} was fenced by member {sid}.",
            )
    member = group.members.get(mid)
    if joining:
        return member, None, mid
    if member is None:
        raise ApiError(Errors.UNKNOWN_MEMBER_ID, f"Member {mid} is not a member of group {group.group_id}.")
    check_member_epoch(member, epoch, owned)
    return member, None, mid


def _heartbeat(st: CoordinatorState, req: ConsumerGroupHeartbeatRequest, now_ms: int) -> Result[ConsumerGroupHeartbeatResponse]:
    epoch = req.member_epoch
    group = st.groups.get(req.group_id)
    if group is None:
        if epoch != JOIN_GROUP_MEMBER_EPOCH:
            raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
        group = ConsumerGroup(req.group_id)
    owned = owned_from_request(req.topic_partitions)
    member, replaced, mid = _lookup(st, group, req, owned)
    if member is None and replaced is None:
        limit = st.config.max_group_size
        if limit is not None and len(group.members) >= limit:
            raise ApiError(Errors.GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its maximum capacity of {limit} members.")
    # No error can happen past this point: the group becomes visible once records are written.
    st.groups.setdefault(group.group_id, group)
    tx = Tx(st)
    if replaced is not None:
        member = replace_static_member(tx, group, replaced, mid)
    base = member if member is not None else ConsumerGroupMember(mid)
    updated = dataclasses.replace(
        base,
        instance_id=req.instance_id if req.instance_id is not None else base.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else base.rack_id,
        client_id=req.client_id,
        client_host=req.client_host,
        subscribed_topic_names=(
            frozenset(req.subscribed_topic_names) if req.subscribed_topic_names is not None else base.subscribed_topic_names
        ),
        subscribed_topic_regex=(
            req.subscribed_topic_regex if req.subscribed_topic_regex is not None else base.subscribed_topic_regex
        ),
        rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else base.rebalance_timeout_ms,
        server_assignor=req.server_assignor if req.server_assignor is not None else base.server_assignor,
        classic_metadata=None,  # whoever sends ConsumerGroupHeartbeat speaks the consumer protocol
    )
    upsert_member(tx, group, updated, now_ms)
    maybe_update_target(tx, group, now_ms, offload=True)
    current = group.members[mid]
    before = current.assigned_partitions
    reconcile_member(tx, group, current, owned, now_ms)
    current = group.members[mid]
    tx.schedule(session_key(group.group_id, mid), now_ms + session_timeout_of(st, current, group.group_id))
    response = ConsumerGroupHeartbeatResponse(
        member_id=mid,
        member_epoch=current.member_epoch,
        heartbeat_interval_ms=st.config.heartbeat_interval_for(group.group_id),
    )
    # The assignment goes out on a full request (join, or a client resending everything after an
    # error) or when the assigned partitions changed (KIP-848 "Response Handling").
    full = epoch == JOIN_GROUP_MEMBER_EPOCH or (
        req.rebalance_timeout_ms != -1
        and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
        and req.topic_partitions is not None
    )
    if full or (current.assigned_partitions is not before and current.assigned_partitions != before):
        response.assignment = assignment_of(current)
    return tx.result(response)
