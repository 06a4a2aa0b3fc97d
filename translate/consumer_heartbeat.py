"""ConsumerGroupHeartbeat at the service: the conversions a join or a leave triggers, then the
consumer groups' coordinator (coordinator/heartbeat.py) answers it.

Epoch 0 (a join) upgrades a classic group to a consumer group (KIP-848 "Supporting Online Consumer
Group Upgrade", translate/conversion.py) or takes over a classic static member's place; epoch -1 (a
leave) of the last consumer-protocol member downgrades the group back to classic when the migration
policy allows it.
"""

from __future__ import annotations

import dataclasses

from coordinator import records as rec
from coordinator.errors import ApiError, Errors
from coordinator.heartbeat import error_response, validate
from coordinator.membership import refresh_subscriptions
from coordinator.messages import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from coordinator.outcome import ConversionRefused, Outcome, Reply, RequestKey
from translate.conversion import classic_target_is_complete
from translate.group_parts import GroupParts, consumer_group


def consumer_group_heartbeat(
    svc: GroupParts, request: ConsumerGroupHeartbeatRequest, request_key: RequestKey, now_ms: int
) -> Outcome:
    out = Outcome()
    try:
        validate(svc.coordinator.state, request)
        if request.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            request = _before_join(svc, out, request, now_ms)
        elif request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH and _leave_downgrades(
            svc, out, request, request_key, now_ms
        ):
            return out
    except ApiError as exc:
        out.responses.append(Reply(request_key, error_response(exc)))
        return out
    res = svc.coordinator.consumer_group_heartbeat(request, now_ms)
    out.take(res)
    out.responses.append(Reply(request_key, res.response))
    return out


def _before_join(
    svc: GroupParts, out: Outcome, request: ConsumerGroupHeartbeatRequest, now_ms: int
) -> ConsumerGroupHeartbeatRequest:
    """Epoch 0: convert a classic group, or take over a classic static member's place."""
    gid = request.group_id
    classic = svc.classic_groups.group(gid)
    result = Outcome()
    converted = False
    if classic is not None:
        if not classic.members:
            svc.converter.delete_empty_classic_group(classic, now_ms, result)
        else:
            replaces = request.instance_id is not None and classic.static_member_id(request.instance_id) is not None
            refusal = svc.converter.upgrade_refusal_of(classic, replaces)
            if refusal is not None:
                out.changes.append(ConversionRefused(gid, "classic", "consumer", refusal[0]))
                raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {gid}: {refusal[1]}.")
            limit = svc.coordinator.state.config.max_group_size
            if not replaces and limit is not None and len(classic.members) >= limit:
                out.changes.append(ConversionRefused(gid, "classic", "consumer", "group_max_size"))
                raise ApiError(
                    Errors.GROUP_MAX_SIZE_REACHED,
                    f"The consumer group has reached its maximum capacity of {limit} members.",
                )
            svc.converter.upgrade(classic, now_ms, result, replaces)
            converted = True
    group = svc.coordinator.group(gid)
    if group is not None and request.instance_id is not None:
        owner = group.static_members.get(request.instance_id)
        old = group.members.get(owner) if owner is not None else None
        if old is not None and old.uses_classic_protocol:
            # A consumer-protocol member takes a classic static member's place: it inherits its
            # target assignment at epoch 0 (no UNRELEASED_INSTANCE_ID across protocols).
            member_id = request.member_id or svc.coordinator.state.config.member_id_generator()
            tx = svc.coordinator.begin()
            new = svc.coordinator.replace_static_member(tx, gid, old.member_id, member_id)
            tx.emit(rec.member_metadata(gid, dataclasses.replace(new, classic_metadata=None)))
            if (
                converted
                and refresh_subscriptions(tx, group, now_ms, reresolve=False)
                and not classic_target_is_complete(group)
            ):
                # The converted group has no partition metadata yet and a takeover changes no
                # subscription, so nothing else would recompute its target (the classic
                # assignment, maybe short of partitions added since or withheld by a
                # cooperative assignor, or reset by a rebalance). Kafka refreshes the metadata
                # on the first heartbeat after the conversion and bumps the epoch because it
                # differs. We bump only when the classic assignment is not already a complete
                # target with nothing to move (which keeps KIP-848's "Online Migration" tables).
                svc.coordinator.bump_group_epoch(tx, gid, now_ms)
            result.records.extend(tx.records)
            result.timers.extend(tx.timers)
            svc.classic_members.cancel_member_timers(result, gid, old.member_id)
            request = dataclasses.replace(request, member_id=member_id)
    out.take(result)
    return request


def _leave_downgrades(
    svc: GroupParts, out: Outcome, request: ConsumerGroupHeartbeatRequest, request_key: RequestKey, now_ms: int
) -> bool:
    group = consumer_group(svc, request.group_id)
    if group is None:
        return False
    member = group.members.get(request.member_id)
    if member is None or (request.instance_id is not None and group.static_members.get(request.instance_id) != member.member_id):
        return False  # the coordinator answers the identity errors
    if not svc.converter.should_downgrade(group, [member.member_id]):
        return False
    result = Outcome()
    svc.converter.downgrade(group, [member.member_id], now_ms, result)
    out.take(result)
    out.responses.append(
        Reply(request_key, ConsumerGroupHeartbeatResponse(member_id=member.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH))
    )
    return True
