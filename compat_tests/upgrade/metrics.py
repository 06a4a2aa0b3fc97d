"""Figures of a finished rolling upgrade, from the clients' own events (for bench/upgrade.py).

- unavailability: for each partition, the time inside a window during which no consumer held it, summed
  over partitions (a partition between a revocation and the next assignment is not being consumed);
- rebalances per consumer: how many times each fleet slot's consumers were handed an assignment (one
  onPartitionsAssigned callback = one rebalance the member took part in), averaged over slots.
"""

from __future__ import annotations

from compat_tests.harness.invariants import tenures

from .scenario import RollingUpgrade


def unavailable_seconds(run: RollingUpgrade, start_ms: float, end_ms: float) -> float:
    """Summed partition-seconds without an owner inside [start_ms, end_ms]."""
    covered: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for t in tenures(run.log):
        lo, hi = max(t.start_ms, start_ms), min(t.end_ms, end_ms)
        if hi > lo:
            covered.setdefault(t.partition, []).append((lo, hi))
    total = 0.0
    for p in range(run.partitions):
        spans = sorted(covered.get((run.topic, p), []))
        held = 0.0
        cur_lo, cur_hi = None, None
        for lo, hi in spans:
            if cur_hi is None or lo > cur_hi:
                if cur_hi is not None and cur_lo is not None:
                    held += cur_hi - cur_lo
                cur_lo, cur_hi = lo, hi
            else:
                cur_hi = max(cur_hi, hi)
        if cur_hi is not None and cur_lo is not None:
            held += cur_hi - cur_lo
        total += (end_ms - start_ms) - held
    return total / 1000.0


def rebalances_per_consumer(run: RollingUpgrade, start_ms: float, end_ms: float) -> dict[int, int]:
    """Per fleet slot: assignment callbacks its incarnations saw inside the window."""
    slot_of = {m.name: int(m.name[1:].split(".")[0]) for m in run.all_members()}
    out = {slot: 0 for slot in set(slot_of.values())}
    for e in run.log.ownership:
        if e.kind == "assigned" and start_ms <= e.at_ms <= end_ms and e.consumer in slot_of:
            out[slot_of[e.consumer]] += 1
    return out
