"""A timer the service armed has fired: routed by its kind to the classic groups, to the classic
members inside consumer groups, to the connect groups' coordinator or to the consumer groups'.

Timer keys are ``(kind, group id, member id)`` for all three (translate/result.py,
translate/classic_member.py, translate/classic_member_gathering.py, coordinator/timers.py). A
consumer-protocol member whose session or rebalance timeout expires may be the last one of its protocol:
then the group is downgraded to a classic group (translate/conversion.py) instead of fencing the member.
"""

from __future__ import annotations

from coordinator.connect.service import TIMER_KINDS as CONNECT_TIMER_KINDS
from coordinator.model import MemberState
from coordinator.outcome import Outcome
from coordinator.timers import REBALANCE, SESSION, TimerKey
from translate import connect_routing
from translate.classic_member import CLASSIC_MEMBER_JOIN_TIMER, CLASSIC_MEMBER_SYNC_TIMER
from translate.classic_member_gathering import CLASSIC_MEMBER_GATHER_TIMER
from translate.connect_classic_worker import TIMER_KINDS as CONNECT_CLASSIC_TIMER_KINDS
from translate.connect_conversion import new_protocol_workers
from translate.group_parts import GroupParts, after_membership_change, consumer_group, forget_if_unwritten
from translate.result import HEARTBEAT_TIMER, JOIN_TIMER, SYNC_TIMER

_CLASSIC_GROUP_TIMERS = frozenset({JOIN_TIMER, SYNC_TIMER, HEARTBEAT_TIMER})
_CLASSIC_MEMBER_TIMERS = frozenset({CLASSIC_MEMBER_JOIN_TIMER, CLASSIC_MEMBER_SYNC_TIMER, CLASSIC_MEMBER_GATHER_TIMER})


def on_timer(svc: GroupParts, key: TimerKey, now_ms: int) -> Outcome:
    out = Outcome()
    kind, gid, member_id = key
    if kind in _CLASSIC_GROUP_TIMERS:
        out.take(svc.classic_groups.on_timer(key, now_ms))
        return out
    if kind in CONNECT_TIMER_KINDS or kind in CONNECT_CLASSIC_TIMER_KINDS:
        before = new_protocol_workers(svc.connect.group(gid))
        if kind in CONNECT_CLASSIC_TIMER_KINDS:
            out.take(svc.connect_workers.on_timer(key, now_ms))
        else:
            out.take(svc.connect.on_timer(key, now_ms))
            cgroup = svc.connect.group(gid)
            if cgroup is None or member_id not in cgroup.workers:
                svc.connect_workers.forget(out, gid, member_id)  # a classic worker's session ran out
        connect_routing.downgrade_if_classic_only(svc, gid, before, out, now_ms)
        return out
    if kind in _CLASSIC_MEMBER_TIMERS:
        out.take(svc.classic_members.on_timer(key, now_ms))
        if kind == CLASSIC_MEMBER_GATHER_TIMER:
            forget_if_unwritten(svc, gid)
        else:
            after_membership_change(svc, gid, out, now_ms)
        return out
    group = consumer_group(svc, gid)
    member = group.members.get(member_id) if group is not None else None
    if group is None or member is None:
        return out
    expired = kind == SESSION or (kind == REBALANCE and member.state is MemberState.UNREVOKED_PARTITIONS)
    if expired and svc.converter.should_downgrade(group, [member_id]):
        result = Outcome()
        svc.converter.downgrade(group, [member_id], now_ms, result)
        out.take(result)
        return out
    fired = svc.coordinator.on_timer(key, now_ms)
    out.take(fired)
    if fired.records:
        # A fenced classic member must not leave its join/sync timers armed.
        result = Outcome()
        svc.classic_members.cancel_member_timers(result, gid, member_id)
        out.take(result)
        after_membership_change(svc, gid, out, now_ms)
    return out
