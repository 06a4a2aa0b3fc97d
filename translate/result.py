"""What a call into the classic front returns: responses, records and timer changes.

JoinGroup and SyncGroup are parked until the group reaches its barrier, so a call may answer
requests other than the one it was given; every response is tagged with the opaque request key
the caller passed in with the request it answers. Records must be durable before any response of
the same Result is released (write-ahead).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from translate.classic_messages import ClassicResponse
from translate.group_records import GroupMetadataRecord

RequestKey = Hashable


@dataclass(frozen=True, slots=True)
class TimerKey:
    """A timer of one classic group; ``member_id`` is empty for group-wide timers."""

    kind: str  # one of the *_TIMER constants
    group_id: str
    member_id: str = ""


# The join barrier: initial delay, then the rebalance timeout (completes PreparingRebalance).
JOIN_TIMER = "classic-join"
# Members that joined but never sent SyncGroup are removed after the rebalance timeout.
SYNC_TIMER = "classic-sync"
# A member's session (or a new member's join timeout, or a pending member's wait).
HEARTBEAT_TIMER = "classic-heartbeat"


@dataclass(frozen=True, slots=True)
class Schedule:
    key: TimerKey
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class Cancel:
    key: TimerKey


TimerChange = Schedule | Cancel


@dataclass(slots=True)
class Response:
    request_key: RequestKey
    body: ClassicResponse


@dataclass(slots=True)
class Result:
    responses: list[Response] = field(default_factory=list)
    records: list[GroupMetadataRecord] = field(default_factory=list)
    timers: list[TimerChange] = field(default_factory=list)

    def respond(self, request_key: RequestKey, body: ClassicResponse) -> None:
        self.responses.append(Response(request_key, body))

    def extend(self, other: Result) -> None:
        self.responses.extend(other.responses)
        self.records.extend(other.records)
        self.timers.extend(other.timers)
