"""What a call into the group layers returns, the one outcome type below translate/ and coordinator/.

An ``Outcome`` holds the responses a call releases (each tagged with the opaque request key of the
request it answers: a parked JoinGroup or SyncGroup is answered by a later call, another member's request
or a timer), the records to make durable before any of those responses is released (write-ahead), and
the timer changes to apply (``coordinator.timers.apply_timer_changes``). The consumer-group core's own
transactions return ``coordinator.state.Result`` (one response, like Kafka's CoordinatorResult); the
classic front and the group service gather those into an Outcome with ``take_coordinator``.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from coordinator.timers import TimerChange

if TYPE_CHECKING:
    from coordinator.state import Result

RequestKey = Hashable


@dataclass(slots=True)
class Reply:
    """A response body and the key of the request it answers."""

    request_key: RequestKey
    body: Any


@dataclass(slots=True)
class Outcome:
    responses: list[Reply] = field(default_factory=list)
    # Classic groups' GroupMetadata records and the consumer groups' records, in the order to persist.
    records: list[Any] = field(default_factory=list)
    timers: list[TimerChange] = field(default_factory=list)

    def respond(self, request_key: RequestKey, body: Any) -> None:
        self.responses.append(Reply(request_key, body))

    def response_to(self, request_key: RequestKey) -> Any:
        for reply in self.responses:
            if reply.request_key == request_key:
                return reply.body
        return None

    def extend(self, other: Outcome) -> None:
        self.responses.extend(other.responses)
        self.records.extend(other.records)
        self.timers.extend(other.timers)

    take = extend

    def take_coordinator(self, other: Result[Any]) -> None:
        """A consumer-group transaction's records and timers (its response is the caller's to place)."""
        self.records.extend(other.records)
        self.timers.extend(other.timers)


__all__ = ["Outcome", "Reply", "RequestKey"]
