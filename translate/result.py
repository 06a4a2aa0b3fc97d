"""What a call into the classic front returns: responses, records and timer changes.

JoinGroup and SyncGroup are parked until the group reaches its barrier, so a call may answer
requests other than the one it was given; every response is tagged with the opaque request key
the caller passed in with the request it answers. Records must be durable before any response of
the same Result is released (write-ahead).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from coordinator.records import Record as ConsumerGroupRecord
from coordinator.timers import CancelTimer, ScheduleTimer, TimerChange, TimerKey
from translate.classic_messages import ClassicResponse
from translate.group_records import GroupMetadataRecord

RequestKey = Hashable


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


@dataclass(slots=True)
class Response:
    request_key: RequestKey
    body: ClassicResponse


@dataclass(slots=True)
class Result:
    responses: list[Response] = field(default_factory=list)
    # Classic groups write GroupMetadata records; classic members of consumer groups write the
    # coordinator's records. Persist them in order.
    records: list[GroupMetadataRecord | ConsumerGroupRecord] = field(default_factory=list)
    timers: list[TimerChange] = field(default_factory=list)

    def respond(self, request_key: RequestKey, body: ClassicResponse) -> None:
        self.responses.append(Response(request_key, body))

    def extend(self, other: Result) -> None:
        self.responses.extend(other.responses)
        self.records.extend(other.records)
        self.timers.extend(other.timers)


__all__ = [
    "HEARTBEAT_TIMER", "JOIN_TIMER", "SYNC_TIMER", "Cancel", "RequestKey", "Response", "Result", "Schedule",
    "TimerChange", "TimerKey", "timer_key",
]
