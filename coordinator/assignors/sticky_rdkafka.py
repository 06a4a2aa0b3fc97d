"""The ``sticky`` / ``cooperative-sticky`` layout as librdkafka computes it, on the server.

librdkafka's sticky assignors implement KIP-54's original algorithm, not the quota-based one Java's
``AbstractStickyAssignor`` uses for identical subscriptions (coordinator/assignors/sticky.py). Both are
balanced and keep what they can, but they give up different partitions: a member holding every
partition of two 2-partition topics keeps one partition of each under Java's rules and one whole topic
under librdkafka's. The algorithm, as documented by KIP-54:

1. every member keeps what it owns of the topics it still subscribes to;
2. the partitions are put in an order: with identical subscriptions, taken one at a time from the
   members holding most (ties: the greater member id), each time the first of that member's partitions
   (by topic name, then number), then the partitions nobody holds (by topic, number); with different
   subscriptions, by how few members could take them, then by topic and number;
3. each partition nobody holds goes, in that order, to the member with the fewest partitions (ties: the
   lower member id) among those subscribed to its topic;
4. balancing: going through the partitions nobody held, then through all of them in that order, a
   partition moves to the least loaded subscribed member whenever its holder has more than one partition
   more than some other member subscribed to its topic; this repeats until the assignment is balanced
   (no member could take a partition from a member holding more) or nothing moves;
5. if balancing made the assignment no better than before it (the sum of the count differences of all
   pairs of members), what the members held is kept.

So a fresh group is dealt in turn (two members on two topics of two partitions: partition 0 of both
topics and partition 1 of both), and a newcomer takes the partitions that come first in step 2's order
from the members holding most.

Not modelled: the previous generation's owners (the client's userData), which librdkafka prefers as the
destination of a partition that moves, and rack awareness.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque

from coordinator.assignors._classic import TP, as_result, subscribed_topics
from coordinator.assignors.api import Assignment, AssignmentDelta, GroupSpec, TopicId


class RdkafkaStickyAssignor:
    def __init__(self, name: str = "cooperative-sticky") -> None:
        self.name = name

    def assign(self, spec: GroupSpec, delta: AssignmentDelta | None = None) -> dict[str, Assignment]:
        members = spec.members
        if not members:
            return {}
        order = sorted(members)  # librdkafka compares member ids as byte strings
        topics = subscribed_topics(spec)
        name = {t: spec.topics[t].name for t in topics}
        every = sorted(
            ((t, p) for t in topics for p in range(spec.topics[t].num_partitions)), key=lambda tp: (name[tp[0]], tp[1])
        )
        potential = {t: [mid for mid in order if t in members[mid].subscribed_topic_ids] for t in topics}
        current: dict[str, list[TP]] = {}
        owner: dict[TP, str] = {}
        for mid in order:
            m = members[mid]
            held = sorted(
                (
                    (t, p)
                    for t, ps in m.assigned.items()
                    if t in name and t in m.subscribed_topic_ids
                    for p in ps
                    if p < spec.topics[t].num_partitions
                ),
                key=lambda tp: (name[tp[0]], tp[1]),
            )
            current[mid] = [tp for tp in held if tp not in owner]
            for tp in current[mid]:
                owner[tp] = mid
        identical = len({frozenset(m.subscribed_topic_ids & spec.topics.keys()) for m in members.values()}) == 1
        ordered = _partition_order(current, every, potential, name, identical)
        unassigned = [tp for tp in ordered if tp not in owner]
        initializing = not owner
        loads = _Loads({mid: len(held) for mid, held in current.items()})

        def least_loaded(tp: TP) -> str | None:
            if identical:
                return loads.least()
            eligible = potential[tp[0]]
            return min(eligible, key=lambda mid: (loads.count[mid], mid)) if eligible else None

        def give(tp: TP, to: str) -> None:
            was = owner.get(tp)
            if was is not None:
                current[was].remove(tp)
                loads.add(was, -1)
            current[to].append(tp)
            loads.add(to, 1)
            owner[tp] = to

        for tp in unassigned:
            to = least_loaded(tp)
            if to is not None:
                give(tp, to)
        before = {mid: list(held) for mid, held in current.items()}
        before_owner = dict(owner)

        def balanced() -> bool:
            low, high = loads.extremes()
            if low >= high - 1:
                return True
            if identical:
                return False
            for mid in order:
                mine = loads.count[mid]
                for t in topics:
                    if mid not in potential[t]:
                        continue
                    for p in range(spec.topics[t].num_partitions):
                        other = owner.get((t, p))
                        if other is not None and other != mid and mine < loads.count[other]:
                            return False
            return True

        def can_give(holder: str, tp: TP) -> bool:
            if identical:
                return loads.count[holder] > loads.extremes()[0] + 1
            return any(loads.count[holder] > loads.count[o] + 1 for o in potential[tp[0]] if o != holder)

        def reassign(partitions: list[TP]) -> bool:
            performed = False
            modified = True
            while modified:
                modified = False
                for tp in partitions:
                    if balanced():
                        break
                    holder = owner.get(tp)
                    if holder is None or len(potential[tp[0]]) < 2:
                        continue
                    if can_give(holder, tp):
                        to = least_loaded(tp)
                        assert to is not None
                        give(tp, to)
                        performed = modified = True
            return performed

        if unassigned:
            reassign(unassigned)
        performed = reassign(ordered)
        if not initializing and performed and _score(current) >= _score(before):
            current, owner = before, before_owner
        return as_result(spec, current)


def _partition_order(
    current: dict[str, list[TP]], every: list[TP], potential: dict[TopicId, list[str]],
    name: dict[TopicId, str], identical: bool,
) -> list[TP]:
    if not identical:
        return sorted(every, key=lambda tp: (len(potential[tp[0]]), name[tp[0]], tp[1]))
    # Repeatedly the member holding most of what is left to list (ties: the greater member id), the
    # first of its partitions.
    remaining = {mid: deque(held) for mid, held in current.items() if held}
    heap = [(-len(held), _Desc(mid)) for mid, held in remaining.items()]
    heapq.heapify(heap)
    out: list[TP] = []
    while heap:
        _, mid = heapq.heappop(heap)
        left = remaining[mid]
        out.append(left.popleft())
        if left:
            heapq.heappush(heap, (-len(left), mid))
    listed = set(out)
    out.extend(tp for tp in every if tp not in listed)
    return out


class _Desc(str):
    """A member id that sorts in reverse (for a min-heap that yields the greatest id first)."""

    def __lt__(self, other: str) -> bool:
        return str.__gt__(self, other)


class _Loads:
    """Each member's partition count, with the least loaded member (ties: the lower id) and the lowest
    and highest counts at hand as counts move one at a time."""

    def __init__(self, count: dict[str, int]) -> None:
        self.count = count
        self.heap = [(c, mid) for mid, c in count.items()]
        heapq.heapify(self.heap)
        self.hist = Counter(count.values())
        self.low = min(count.values())
        self.high = max(count.values())

    def add(self, mid: str, delta: int) -> None:
        old = self.count[mid]
        new = old + delta
        self.count[mid] = new
        self.hist[old] -= 1
        self.hist[new] += 1
        heapq.heappush(self.heap, (new, mid))
        if new < self.low:
            self.low = new
        while self.hist[self.low] == 0:
            self.low += 1
        if new > self.high:
            self.high = new
        while self.hist[self.high] == 0:
            self.high -= 1

    def least(self) -> str:
        heap = self.heap
        while heap[0][0] != self.count[heap[0][1]]:
            heapq.heappop(heap)  # a stale entry
        return heap[0][1]

    def extremes(self) -> tuple[int, int]:
        return self.low, self.high


def _score(assignment: dict[str, list[TP]]) -> int:
    sizes = sorted(len(held) for held in assignment.values())
    return sum(abs(a - b) for i, a in enumerate(sizes) for b in sizes[i + 1 :])
