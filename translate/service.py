"""The classic protocol front's single entry point: routes classic requests and timers.

A JoinGroup / SyncGroup / Heartbeat / LeaveGroup goes to the consumer group's per-member
translation when the group is a consumer group (KIP-848 "Supporting Online Consumer Group
Upgrade"), and to the classic group coordinator otherwise - including for a group that does not
exist yet, which JoinGroup creates as a classic group, as Kafka does. It does not convert groups
between the two types: the gateway's entry point is ``translate.group_service.GroupService``,
which adds the online upgrade / downgrade, the migration policy, the ``translate`` mode, the new
protocol's requests, the admin APIs and replay.

Timers come back through ``on_timer``: classic group kinds, classic member kinds, and the
coordinator's own (session / rebalance) are dispatched to their owner.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.service import ConsumerGroupCoordinator
from coordinator.timers import TimerKey
from translate.classic_coordinator import ClassicGroupCoordinator
from translate.classic_member import (
    CLASSIC_MEMBER_JOIN_TIMER,
    CLASSIC_MEMBER_SYNC_TIMER,
    ClassicMemberTranslator,
)
from translate.classic_messages import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest
from translate.classic_rebalance import ClassicGroupConfig
from translate.result import HEARTBEAT_TIMER, JOIN_TIMER, SYNC_TIMER, RequestKey, Result

_CLASSIC_GROUP_TIMERS = frozenset({JOIN_TIMER, SYNC_TIMER, HEARTBEAT_TIMER})
_CLASSIC_MEMBER_TIMERS = frozenset({CLASSIC_MEMBER_JOIN_TIMER, CLASSIC_MEMBER_SYNC_TIMER})


class ClassicFront:
    def __init__(
        self,
        coordinator: ConsumerGroupCoordinator,
        new_member_id: Callable[[str], str],
        config: ClassicGroupConfig | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.classic_groups = ClassicGroupCoordinator(new_member_id, config)
        self.classic_members = ClassicMemberTranslator(coordinator, new_member_id, config)

    def _in_consumer_group(self, group_id: str) -> bool:
        return self.classic_groups.group(group_id) is None and self.coordinator.group(group_id) is not None

    def join_group(self, request: JoinGroupRequest, request_key: RequestKey, now_ms: int) -> Result:
        if self._in_consumer_group(request.group_id):
            return self.classic_members.join_group(request, request_key, now_ms)
        return self.classic_groups.join_group(request, request_key, now_ms)

    def sync_group(self, request: SyncGroupRequest, request_key: RequestKey, now_ms: int) -> Result:
        if self._in_consumer_group(request.group_id):
            return self.classic_members.sync_group(request, request_key, now_ms)
        return self.classic_groups.sync_group(request, request_key, now_ms)

    def heartbeat(self, request: HeartbeatRequest, request_key: RequestKey, now_ms: int) -> Result:
        if self._in_consumer_group(request.group_id):
            return self.classic_members.heartbeat(request, request_key, now_ms)
        return self.classic_groups.heartbeat(request, request_key, now_ms)

    def leave_group(self, request: LeaveGroupRequest, request_key: RequestKey, now_ms: int) -> Result:
        if self._in_consumer_group(request.group_id):
            return self.classic_members.leave_group(request, request_key, now_ms)
        return self.classic_groups.leave_group(request, request_key, now_ms)

    def on_timer(self, key: TimerKey, now_ms: int) -> Result:
        kind = key[0]
        if kind in _CLASSIC_GROUP_TIMERS:
            return self.classic_groups.on_timer(key, now_ms)
        if kind in _CLASSIC_MEMBER_TIMERS:
            return self.classic_members.on_timer(key, now_ms)
        fired = self.coordinator.on_timer(key, now_ms)
        out = Result()
        out.records.extend(fired.records)
        out.timers.extend(fired.timers)
        if fired.records:
            # A fenced classic member must not leave its join/sync timers armed.
            self.classic_members.cancel_member_timers(out, key[1], key[2])
        return out
