"""The classic front's timers; what its calls return is the one ``Outcome`` (coordinator/outcome.py).

JoinGroup and SyncGroup are parked until the group reaches its barrier, so a call may answer
requests other than the one it was given; every response is tagged with the opaque request key
the caller passed in with the request it answers. Records must be durable before any response of
the same Outcome is released (write-ahead).
"""

from __future__ import annotations

from coordinator.timers import CancelTimer, ScheduleTimer, TimerKey


def timer_key(kind: str, group_id: str, member_id: str = "") -> TimerKey:
    """Timer keys share the coordinator's shape, (kind, group id, member id), so the gateway runs
    one timer wheel; ``member_id`` is empty for group-wide timers."""
    return (kind, group_id, member_id)


# The join barrier: initial delay, then the rebalance timeout (completes PreparingRebalance).
JOIN_TIMER = "classic-join"
# Members that joined but never sent SyncGroup are removed after the rebalance timeout.
SYNC_TIMER = "classic-sync"
# A member's session (or a new member's join timeout, or a pending member's wait).
HEARTBEAT_TIMER = "classic-heartbeat"


# The coordinator's timer changes: Schedule replaces any timer with the same key.
Schedule = ScheduleTimer
Cancel = CancelTimer


__all__ = ["HEARTBEAT_TIMER", "JOIN_TIMER", "SYNC_TIMER", "Cancel", "Schedule", "timer_key"]
