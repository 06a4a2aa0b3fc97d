"""The ``uniform`` assignor for overlapping, differing subscriptions (KIP-848 "Assignor", uniform).

Three steps, as in the KIP's description of a balanced, sticky assignor:

1. every member keeps the partitions of its current target that are still valid (a subscribed,
   existing topic; in range; not already kept by an earlier member in member-id order);
2. the partitions nobody holds are handed out topic by topic, the topics with the fewest subscribers
   first (they have the fewest choices), each partition to the least loaded subscriber;
3. a balancing phase moves partitions one at a time from the most loaded holder of a topic to its least
   loaded subscriber while they differ by two or more. Each move lowers the sum of squared member loads,
   so the phase ends; it is bounded by a pass limit anyway.

At the end no member could take a partition of a topic it subscribes to from a member holding two or
more partitions more than itself (unless the pass limit was hit, which needs pathological inputs).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from coordinator.assignors._homogeneous import topic_order
from coordinator.assignors.api import Assignment, MemberSpec, TopicId

MAX_BALANCE_PASSES = 1000


def assign_general(
    member_ids: Sequence[str],
    members: Mapping[str, MemberSpec],
    num_partitions: Mapping[TopicId, int],
    out: dict[str, Assignment],
) -> None:
    """Assign every subscribed topic of ``member_ids`` (sorted) into ``out``."""
    n_members = len(member_ids)
    subscribers: dict[TopicId, list[int]] = {}
    for i, mid in enumerate(member_ids):
        for tid in members[mid].subscribed_topic_ids:
            if tid in num_partitions:
                subscribers.setdefault(tid, []).append(i)
    topics = sorted(subscribers, key=topic_order)

    # Step 1: keep what is still valid.
    held: list[dict[TopicId, set[int]]] = [{} for _ in range(n_members)]
    counts = [0] * n_members
    taken: dict[TopicId, set[int]] = {tid: set() for tid in topics}
    for i, mid in enumerate(member_ids):
        spec = members[mid]
        for tid, fs in spec.assigned.items():
            if not fs or tid not in spec.subscribed_topic_ids or tid not in taken:
                continue
            n = num_partitions[tid]
            seen = taken[tid]
            keep = {p for p in fs if 0 <= p < n and p not in seen}
            if keep:
                seen.update(keep)
                held[i][tid] = keep
                counts[i] += len(keep)

    # Step 2: hand out the free partitions, most constrained topics first.
    for tid in sorted(topics, key=lambda t: (len(subscribers[t]), t.int)):
        n = num_partitions[tid]
        seen = taken[tid]
        if len(seen) == n:
            continue
        heap = [(counts[i], i) for i in subscribers[tid]]
        heapq.heapify(heap)
        for p in range(n):
            if p in seen:
                continue
            c, i = heap[0]
            held[i].setdefault(tid, set()).add(p)
            counts[i] = c + 1
            heapq.heapreplace(heap, (c + 1, i))
        seen.update(range(n))

    # Step 3: balance.
    for _ in range(MAX_BALANCE_PASSES):
        moved = False
        for tid in topics:
            subs = subscribers[tid]
            if len(subs) < 2:
                continue
            while True:
                lo = min(subs, key=counts.__getitem__)
                holders = [i for i in subs if held[i].get(tid)]
                hi = max(holders, key=counts.__getitem__, default=lo)
                if counts[hi] - counts[lo] < 2:
                    break
                src = held[hi][tid]
                p = max(src)
                src.discard(p)
                held[lo].setdefault(tid, set()).add(p)
                counts[hi] -= 1
                counts[lo] += 1
                moved = True
        if not moved:
            break

    for i, mid in enumerate(member_ids):
        current = members[mid].assigned
        new = {tid: frozenset(ps) for tid, ps in held[i].items() if ps}
        out[mid] = current if _same(current, new) else new


def _same(current: Assignment, new: Mapping[TopicId, frozenset[int]]) -> bool:
    """True when ``current`` and ``new`` hold the same partitions (empty topic entries ignored)."""
    # dict equality reuses the stored key hashes: no UUID.__hash__ call per topic.
    if current == new:
        return True
    if len(current) > len(new):
        return {tid: fs for tid, fs in current.items() if fs} == new
    return False
