"""What a call into the group layers returns: the one outcome type of coordinator/ and translate/.

An ``Outcome`` holds what a call produced (Kafka's CoordinatorResult: records and a response):

- ``response``: the direct answer of a call that answers itself (the consumer-group core's calls: a
  ConsumerGroupHeartbeat response, a delete's error code, the groups an expiry removed);
- ``responses``: the responses a call releases to requests, each tagged with the opaque request key of the
  request it answers (a parked JoinGroup or SyncGroup is answered by a later call, another member's
  request or a timer);
- ``records``: what to make durable before any of those responses is released (write-ahead), in order;
- ``timers``: the timer changes to apply (``coordinator.timers.apply_timer_changes``);
- ``changes``: what happened to a group that its records do not say (``Change``): a consumer group's
  records describe every change of its state, a classic group's GroupMetadata record only each settled
  generation, so a classic member's removal and a classic rebalance's start are told here, and a
  conversion between the two types (whose records are the old type's tombstones and the new type's
  records) names itself. Nothing in the group layers reads them; the rebalance event log does
  (translate/rebalance_events.py).

A caller gathering several calls' outcomes into one ``take``s their records, timers, changes and tagged responses;
a taken ``response`` is the caller's to place (it knows which request it answers).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from coordinator.timers import TimerChange

RequestKey = Hashable
if TYPE_CHECKING:  # PEP 696 default (Python 3.13's typing): a bare ``Outcome()`` is an Outcome[None]
    from typing_extensions import TypeVar as DefaultingTypeVar

    R = DefaultingTypeVar("R", default=None)
else:
    R = TypeVar("R")


@dataclass(slots=True)
class Reply:
    """A response body and the key of the request it answers."""

    request_key: RequestKey
    body: Any


@dataclass(frozen=True, slots=True)
class MemberRemoved:
    """A classic group's member left the group (LeaveGroup, session or join expiry, a static member's
    new incarnation taking its place)."""

    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class RebalanceStarted:
    """A classic group entered PreparingRebalance."""

    group_id: str


@dataclass(frozen=True, slots=True)
class GroupConverted:
    """A group with members changed type (KIP-848 online upgrade / downgrade): "classic" / "consumer"."""

    group_id: str
    from_type: str
    to_type: str


@dataclass(frozen=True, slots=True)
class ConversionRefused:
    """A group with members could not change type: nothing changed, the joining member was answered with
    an error. ``reason`` is a short stable word (policy, protocol_type, group_max_size, member_metadata,
    assignment_userdata) for counting; the client's error message says more."""

    group_id: str
    from_type: str
    to_type: str
    reason: str


@dataclass(frozen=True, slots=True)
class StrategyFallback:
    """A translated classic group's common protocol is a strategy the server cannot compute (a custom
    client-side assignor): the server assignor ``assignor`` assigns it instead, for ``reason``."""

    group_id: str
    protocol: str
    assignor: str
    reason: str


Change = MemberRemoved | RebalanceStarted | GroupConverted | ConversionRefused | StrategyFallback


@dataclass(slots=True)
class Outcome(Generic[R]):
    response: R = None  # type: ignore[assignment]  # None for calls that answer only through ``responses``
    responses: list[Reply] = field(default_factory=list)
    # Classic groups' GroupMetadata records and the consumer groups' records, in the order to persist.
    records: list[Any] = field(default_factory=list)
    timers: list[TimerChange] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)

    def respond(self, request_key: RequestKey, body: Any) -> None:
        self.responses.append(Reply(request_key, body))

    def response_to(self, request_key: RequestKey) -> Any:
        for reply in self.responses:
            if reply.request_key == request_key:
                return reply.body
        return None

    def take(self, other: Outcome[Any]) -> None:
        """Another outcome's tagged responses, records, timers and changes, after this one's."""
        self.responses.extend(other.responses)
        self.records.extend(other.records)
        self.timers.extend(other.timers)
        self.changes.extend(other.changes)


__all__ = [
    "Change", "ConversionRefused", "GroupConverted", "MemberRemoved", "Outcome", "RebalanceStarted", "Reply", "RequestKey",
    "StrategyFallback",
]
