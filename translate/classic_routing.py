"""The classic protocol's requests (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) routed to the group
type that holds the group id: a classic group (translate/classic_coordinator.py), or classic members
inside a consumer group (translate/classic_member.py).

A JoinGroup also decides the group's type when there is none yet (``translate`` mode makes a consumer
group of a ``consumer`` protocol group; an empty consumer group makes way for a classic group in
``native`` mode) and triggers KIP-848's downgrade when a classic static member replaces the last
consumer-protocol member. A LeaveGroup of the last consumer-protocol members downgrades the group.
"""

from __future__ import annotations

from coordinator.errors import Errors
from coordinator.model import ConsumerGroup
from coordinator.outcome import Outcome, RequestKey
from translate.classic_messages import (
    BATCH_LEAVE_VERSION,
    UNKNOWN_MEMBER_ID,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberResponse,
    SyncGroupRequest,
)
from translate.embedded import CONSUMER_PROTOCOL_TYPE
from translate.group_config import ClassicGroupsMode
from translate.group_parts import GroupParts, consumer_group, forget_if_unwritten


def join_group(svc: GroupParts, request: JoinGroupRequest, request_key: RequestKey, now_ms: int) -> Outcome:
    out = Outcome()
    gid = request.group_id
    if svc.classic_groups.group(gid) is not None:
        out.take(svc.classic_groups.join_group(request, request_key, now_ms))
        return out
    group = svc.coordinator.group(gid)
    translate = svc.config.mode is ClassicGroupsMode.TRANSLATE
    if group is not None and not group.members and not translate:
        # An empty consumer group makes way for a classic group (Kafka deletes it on JoinGroup).
        out.take(svc.coordinator.delete_group(gid))
        group = None
    if group is None and translate and request.protocol_type == CONSUMER_PROTOCOL_TYPE:
        svc.coordinator.get_or_create_group(gid)
        out.take(svc.classic_members.join_group(request, request_key, now_ms))
        forget_if_unwritten(svc, gid)
        return out
    if group is None:
        out.take(svc.classic_groups.join_group(request, request_key, now_ms))
        return out
    replaced = _replaced_by_static_join(svc, group, request)
    epoch = group.group_epoch
    out.take(svc.classic_members.join_group(request, request_key, now_ms))
    response = out.response_to(request_key)
    if replaced is not None and getattr(response, "error_code", None) == Errors.NONE:
        # The last consumer-protocol member was replaced by a classic one (KIP-848 downgrade).
        # The group stays Stable unless the joiner changed what the assignment depends on
        # (KAFKA-19546): then its members rebalance under the classic protocol.
        result = Outcome()
        svc.converter.downgrade(group, [], now_ms, result, rebalance=group.group_epoch != epoch)
        out.take(result)
    return out


def _replaced_by_static_join(svc: GroupParts, group: ConsumerGroup, request: JoinGroupRequest) -> str | None:
    if request.member_id != UNKNOWN_MEMBER_ID or request.group_instance_id is None:
        return None
    owner = group.static_members.get(request.group_instance_id)
    if owner is None or not svc.converter.should_downgrade_on_takeover(group, owner):
        return None
    return owner


def sync_group(svc: GroupParts, request: SyncGroupRequest, request_key: RequestKey, now_ms: int) -> Outcome:
    out = Outcome()
    if consumer_group(svc, request.group_id) is not None:
        out.take(svc.classic_members.sync_group(request, request_key, now_ms))
    else:
        out.take(svc.classic_groups.sync_group(request, request_key, now_ms))
    return out


def heartbeat(svc: GroupParts, request: HeartbeatRequest, request_key: RequestKey, now_ms: int) -> Outcome:
    out = Outcome()
    if consumer_group(svc, request.group_id) is not None:
        out.take(svc.classic_members.heartbeat(request, request_key, now_ms))
    else:
        out.take(svc.classic_groups.heartbeat(request, request_key, now_ms))
    return out


def leave_group(svc: GroupParts, request: LeaveGroupRequest, request_key: RequestKey, now_ms: int) -> Outcome:
    out = Outcome()
    group = consumer_group(svc, request.group_id)
    if group is None:
        out.take(svc.classic_groups.leave_group(request, request_key, now_ms))
        return out
    result = Outcome()
    leaving: list[str] = []
    members: list[MemberResponse] = []
    for identity in request.members:
        error = Errors.NONE
        member_id: str | None = None
        if identity.group_instance_id is None:
            member = group.members.get(identity.member_id)
            if member is None or not member.uses_classic_protocol:
                error = Errors.UNKNOWN_MEMBER_ID
            else:
                member_id = member.member_id
        else:
            # Static members (either protocol) may be removed by instance id, e.g. by an admin.
            owner = group.static_members.get(identity.group_instance_id)
            if owner is None:
                error = Errors.UNKNOWN_MEMBER_ID
            elif identity.member_id != UNKNOWN_MEMBER_ID and identity.member_id != owner:
                error = Errors.FENCED_INSTANCE_ID
            else:
                member_id = owner
        if member_id is not None and member_id not in leaving:
            leaving.append(member_id)
        members.append(MemberResponse(identity.member_id, identity.group_instance_id, error))
    if leaving:
        if svc.converter.should_downgrade(group, leaving):
            svc.converter.downgrade(group, leaving, now_ms, result)
        else:
            # One epoch bump for the whole batch, as Kafka does.
            tx = svc.coordinator.begin()
            svc.coordinator.remove_members(tx, group.group_id, leaving, now_ms)
            result.records.extend(tx.records)
            result.timers.extend(tx.timers)
            for member_id in leaving:
                svc.classic_members.cancel_member_timers(result, group.group_id, member_id)
    response = LeaveGroupResponse(members=members)
    if request.api_version < BATCH_LEAVE_VERSION and members:
        response.error_code = members[0].error_code
    result.respond(request_key, response)
    out.take(result)
    return out
