"""What consumers did, in one shared log: partition ownership changes and records consumed.

Every client wrapper (and the Java VerifiableConsumer adapter) writes here in the same shape, so the
invariants in invariants.py do not care which client produced the events. Times are wall-clock
milliseconds because the Java tools stamp their events with the JVM's wall clock on the same host.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from .java import JavaTool, PartitionsAssigned, PartitionsRevoked, RecordsConsumed

OwnershipKind = Literal["assigned", "revoked", "lost", "stopped"]


@dataclass(frozen=True, slots=True)
class OwnershipEvent:
    """``assigned`` adds partitions to the consumer; ``revoked``/``lost`` remove them; ``stopped`` removes all."""

    consumer: str
    kind: OwnershipKind
    partitions: tuple[tuple[str, int], ...]
    at_ms: float


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    consumer: str
    topic: str
    partition: int
    offset: int
    value: bytes | None
    at_ms: float

    @property
    def position(self) -> tuple[str, int, int]:
        return (self.topic, self.partition, self.offset)


@dataclass(frozen=True, slots=True)
class ProducedRecord:
    topic: str
    partition: int
    offset: int
    value: bytes | None

    @property
    def position(self) -> tuple[str, int, int]:
        return (self.topic, self.partition, self.offset)


def now_ms() -> float:
    return time.time() * 1000.0


@dataclass
class EventLog:
    """Thread-safe; shared by all consumers of one test."""

    ownership: list[OwnershipEvent] = field(default_factory=list)
    records: list[ConsumedRecord] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition, repr=False)

    def owned(self, consumer: str, kind: OwnershipKind, partitions: Iterable[tuple[str, int]],
              at_ms: float | None = None) -> None:
        event = OwnershipEvent(consumer, kind, tuple(sorted(partitions)), now_ms() if at_ms is None else at_ms)
        with self._cond:
            self.ownership.append(event)
            self._cond.notify_all()

    def consumed(self, consumer: str, topic: str, partition: int, offset: int, value: bytes | None,
                 at_ms: float | None = None) -> None:
        rec = ConsumedRecord(consumer, topic, partition, offset, value, now_ms() if at_ms is None else at_ms)
        with self._cond:
            self.records.append(rec)
            self._cond.notify_all()

    def count(self, consumer: str | None = None) -> int:
        with self._cond:
            return sum(1 for r in self.records if consumer is None or r.consumer == consumer)

    def distinct_positions(self) -> set[tuple[str, int, int]]:
        with self._cond:
            return {r.position for r in self.records}

    def current_owners(self) -> dict[tuple[str, int], set[str]]:
        """Who holds which partition right now, replaying the ownership events in order."""
        held: dict[str, set[tuple[str, int]]] = {}
        with self._cond:
            events = list(self.ownership)
        for e in events:
            mine = held.setdefault(e.consumer, set())
            if e.kind == "assigned":
                mine.update(e.partitions)
            elif e.kind == "stopped":
                mine.clear()
            else:
                mine.difference_update(e.partitions)
        owners: dict[tuple[str, int], set[str]] = {}
        for consumer, parts in held.items():
            for tp in parts:
                owners.setdefault(tp, set()).add(consumer)
        return owners

    def settled(self, topic: str, partitions: int, consumers: Iterable[str]) -> bool:
        """Every partition of ``topic`` held by exactly one consumer, and every named consumer holds some."""
        owners = self.current_owners()
        names = set(consumers)
        holders: set[str] = set()
        for p in range(partitions):
            who = owners.get((topic, p), set())
            if len(who) != 1:
                return False
            holders |= who
        return holders == names

    def covers(self, produced: Iterable[ProducedRecord]) -> bool:
        seen = self.distinct_positions()
        return all(p.position in seen for p in produced)

    def wait_until(self, predicate: Callable[[EventLog], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"timed out after {timeout_s}s waiting for {what}: {len(self.records)} records, "
                        f"ownership events {self.ownership[-6:]}"
                    )
                self._cond.wait(min(remaining, 0.5))


def ingest_verifiable_consumer(log: EventLog, name: str, tool: JavaTool) -> None:
    """Copy a finished (or running) VerifiableConsumer's events into ``log`` under the consumer ``name``.

    Without --verbose the tool reports consumed offsets as per-partition ranges; each range is expanded to
    its offsets, which is exact for the plain (non-transactional, non-compacted) topics the suites use.
    """
    for e in list(tool.events):
        if isinstance(e, PartitionsAssigned):
            log.owned(name, "assigned", ((tp.topic, tp.partition) for tp in e.partitions), e.timestamp_ms)
        elif isinstance(e, PartitionsRevoked):
            log.owned(name, "revoked", ((tp.topic, tp.partition) for tp in e.partitions), e.timestamp_ms)
        elif isinstance(e, RecordsConsumed):
            for r in e.ranges:
                for off in range(r.min_offset, r.max_offset + 1):
                    log.consumed(name, r.partition.topic, r.partition.partition, off, None, e.timestamp_ms)
        elif e.name == "shutdown_complete":
            log.owned(name, "stopped", (), e.timestamp_ms)


def merged_with_java(log: EventLog, name: str, tool: JavaTool | None) -> EventLog:
    """A new log holding ``log``'s events so far and, when ``tool`` is set, its VerifiableConsumer's as
    consumer ``name``: the Python clients and a Java consumer of one group checked as one fleet."""
    out = EventLog()
    for o in list(log.ownership):
        out.owned(o.consumer, o.kind, o.partitions, o.at_ms)
    for r in list(log.records):
        out.consumed(r.consumer, r.topic, r.partition, r.offset, r.value, r.at_ms)
    if tool is not None:
        ingest_verifiable_consumer(out, name, tool)
    return out
