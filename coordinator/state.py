"""The coordinator's whole state and the write transaction every state change goes through.

``CoordinatorState`` holds the consumer groups, the topic metadata image fed by the caller, and the
configuration. ``Tx`` collects what one call produces: records (each applied to the state as it is
emitted, so state == replay(records)) and timer changes. ``Result`` is what the public API returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from coordinator.assignors.api import TopicMetadata
from coordinator.config import CoordinatorConfig
from coordinator.model import ConsumerGroup
from coordinator.records import Record
from coordinator.replay import apply
from coordinator.target import AssignmentJob
from coordinator.timers import CancelTimer, ScheduleTimer, TimerChange, TimerKey

R = TypeVar("R")

NO_RECORDS: tuple[Record, ...] = ()
NO_TIMERS: tuple[TimerChange, ...] = ()


@dataclass(slots=True)
class Result(Generic[R]):
    """What a call produced: the response (if any), the records to persist before releasing it, the
    timer changes to make."""

    response: R
    records: list[Record] | tuple[Record, ...] = NO_RECORDS
    timers: list[TimerChange] | tuple[TimerChange, ...] = NO_TIMERS


@dataclass(slots=True)
class CoordinatorState:
    config: CoordinatorConfig
    groups: dict[str, ConsumerGroup] = field(default_factory=dict)
    # The topic metadata image: topic name -> metadata; fed by on_metadata.
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    metadata_version: int = 0
    # Offloaded target computations (KIP-1263): the one in flight per group, and those not yet taken
    # by the driver. Transient: a reloaded state has none, and a result for a job not in ``assigning``
    # is discarded.
    assigning: dict[str, AssignmentJob] = field(default_factory=dict)
    jobs: list[AssignmentJob] = field(default_factory=list)


class Tx:
    __slots__ = ("state", "records", "timers")

    def __init__(self, state: CoordinatorState) -> None:
        self.state = state
        self.records: list[Record] = []
        self.timers: list[TimerChange] = []

    def emit(self, record: Record) -> None:
        self.records.append(record)
        apply(self.state.groups, record)

    def schedule(self, key: TimerKey, deadline_ms: int) -> None:
        self.timers.append(ScheduleTimer(key, deadline_ms))

    def cancel(self, key: TimerKey) -> None:
        self.timers.append(CancelTimer(key))

    def result(self, response: R) -> Result[R]:
        return Result(response, self.records, self.timers)
