"""Delivery and ownership invariants, checked over an EventLog after (or during) a scenario.

- at least once: every produced record was consumed by some consumer;
- at most once in a clean run (no crash, no forced rebalance mid-batch): no record consumed twice;
- exclusive ownership: no partition held by two consumers at the same instant, replaying each consumer's
  assigned/revoked/lost/stopped events as intervals. Classic eager rebalances revoke before rejoining and
  KIP-848 reconciliation revokes before the partition is given to another member, so an overlap means the
  group coordinator handed a partition out twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from .events import EventLog, ProducedRecord

Position = tuple[str, int, int]
INFINITY = float("inf")


def missing(produced: Iterable[ProducedRecord], log: EventLog) -> list[Position]:
    seen = log.distinct_positions()
    return sorted(p.position for p in produced if p.position not in seen)


def duplicates(log: EventLog) -> dict[Position, int]:
    counts = Counter(r.position for r in log.records)
    return {pos: n for pos, n in sorted(counts.items()) if n > 1}


@dataclass(frozen=True, slots=True)
class Tenure:
    consumer: str
    partition: tuple[str, int]
    start_ms: float
    end_ms: float


@dataclass(frozen=True, slots=True)
class Overlap:
    partition: tuple[str, int]
    first: Tenure
    second: Tenure


def tenures(log: EventLog) -> list[Tenure]:
    """Each consumer's holding of each partition as a [start, end) interval; open ones end at infinity."""
    open_since: dict[tuple[str, tuple[str, int]], float] = {}
    out: list[Tenure] = []
    for e in sorted(log.ownership, key=lambda ev: ev.at_ms):
        if e.kind == "assigned":
            for tp in e.partitions:
                open_since.setdefault((e.consumer, tp), e.at_ms)
            continue
        if e.kind == "stopped":
            ending = [key for key in open_since if key[0] == e.consumer]
        else:
            ending = [(e.consumer, tp) for tp in e.partitions if (e.consumer, tp) in open_since]
        for key in ending:
            out.append(Tenure(key[0], key[1], open_since.pop(key), e.at_ms))
    out.extend(Tenure(c, tp, start, INFINITY) for (c, tp), start in open_since.items())
    return out


def overlaps(log: EventLog) -> list[Overlap]:
    by_partition: dict[tuple[str, int], list[Tenure]] = {}
    for t in tenures(log):
        by_partition.setdefault(t.partition, []).append(t)
    found: list[Overlap] = []
    for tp, ts in sorted(by_partition.items()):
        ts.sort(key=lambda t: t.start_ms)
        for i, a in enumerate(ts):
            for b in ts[i + 1 :]:
                if b.start_ms >= a.end_ms:
                    continue
                if a.consumer != b.consumer:
                    found.append(Overlap(tp, a, b))
    return found


def assert_all_consumed(produced: list[ProducedRecord], log: EventLog) -> None:
    gone = missing(produced, log)
    assert not gone, f"{len(gone)} of {len(produced)} produced records never consumed, e.g. {gone[:10]}"


def assert_none_twice(log: EventLog) -> None:
    dup = duplicates(log)
    assert not dup, f"{len(dup)} records consumed more than once, e.g. {list(dup.items())[:10]}"


def assert_exclusive_ownership(log: EventLog) -> None:
    found = overlaps(log)
    assert not found, f"{len(found)} partitions owned by two consumers at once, e.g. {found[:5]}"


def assert_clean_run(produced: list[ProducedRecord], log: EventLog) -> None:
    """The three invariants of a run without faults."""
    assert_all_consumed(produced, log)
    assert_none_twice(log)
    assert_exclusive_ownership(log)
