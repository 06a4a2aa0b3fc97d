"""The ``range`` server-side assignor (KIP-848 "Assignor": range).

Stateless: each topic's partitions are split into contiguous ranges over the topic's subscribers, sorted
static members first (by instance id) then dynamic ones (by member id); with ``n`` partitions and ``s``
subscribers the first ``n % s`` subscribers get ``n // s + 1`` partitions, the others ``n // s``.
Because the order of the subscribers is the same for every topic, members with identical subscriptions
get the same partition numbers of every topic with the same partition count: co-partitioned topics can
be joined locally.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import repeat

from coordinator.assignors._homogeneous import chunked, first_numbers, topic_order
from coordinator.assignors.api import (
    Assignment,
    AssignmentDelta,
    GroupSpec,
    MemberSpec,
    SubscriptionType,
    TopicId,
)


class RangeAssignor:
    name = "range"

    def assign(self, spec: GroupSpec, delta: AssignmentDelta | None = None) -> dict[str, Assignment]:
        # The delta is of no use: the result depends on the current members and topics only.
        members = spec.members
        if not members:
            return {}
        topics = spec.topics
        # Members by subscription: members of one class subscribe to the very same topics.
        classes: list[list[str]] = []
        class_topics: list[frozenset[TopicId]] = []
        if spec.subscription_type is SubscriptionType.HOMOGENEOUS:
            classes.append(list(members))
            class_topics.append(next(iter(members.values())).subscribed_topic_ids)
        else:
            index: dict[frozenset[TopicId], int] = {}
            for mid, m in members.items():
                ci = index.get(m.subscribed_topic_ids)
                if ci is None:
                    ci = index[m.subscribed_topic_ids] = len(classes)
                    classes.append([])
                    class_topics.append(m.subscribed_topic_ids)
                classes[ci].append(mid)
        # Topics with the same size and the same subscribers get the same ranges: one pass per such
        # bunch, whose per-member entries are built with dict.fromkeys (no per-entry key hashing).
        topic_classes: dict[TopicId, list[int]] = {}
        for ci, tids in enumerate(class_topics):
            for tid in tids:
                if tid in topics:
                    topic_classes.setdefault(tid, []).append(ci)
        bunches: dict[tuple[int, tuple[int, ...]], list[TopicId]] = {}
        for tid, cis in topic_classes.items():
            bunches.setdefault((topics[tid].num_partitions, tuple(cis)), []).append(tid)

        new: dict[str, dict[TopicId, frozenset[int]]] = {}
        ordered: dict[tuple[int, ...], list[str]] = {}
        cache: dict[tuple[int, int], list[frozenset[int]]] = {}
        for (n, subscribing), bunch in bunches.items():
            subs = ordered.get(subscribing)
            if subs is None:
                subs = _sorted_members([mid for ci in subscribing for mid in classes[ci]], members)
                ordered[subscribing] = subs
            ranges = cache.get((n, len(subs)))
            if ranges is None:
                ranges = cache[(n, len(subs))] = _ranges(n, len(subs))
            keys = dict.fromkeys(sorted(bunch, key=topic_order))
            # dict.fromkeys on a dict reuses its stored key hashes (no UUID.__hash__ per entry).
            per_member = map(dict.fromkeys, repeat(keys), ranges)
            if not new:
                new = dict(zip(subs, per_member, strict=False))
                continue
            for mid, d in zip(subs, per_member, strict=False):
                held = new.get(mid)
                if held is None:
                    new[mid] = d
                else:
                    held.update(d)
        out: dict[str, Assignment] = {}
        for mid, m in members.items():
            current = m.assigned
            assigned = new.get(mid)
            if not current:
                out[mid] = current if assigned is None else assigned
            elif assigned is None:
                out[mid] = current if not any(current.values()) else {}
            else:
                out[mid] = current if _same(current, assigned) else assigned
        return out


def _sorted_members(member_ids: list[str], members: Mapping[str, MemberSpec]) -> list[str]:
    """Static members first, by instance id (then member id); then dynamic members by member id."""
    static = [mid for mid in member_ids if members[mid].instance_id is not None]
    if not static:
        return sorted(member_ids)  # plain string sort: no key tuples
    dynamic = sorted(mid for mid in member_ids if members[mid].instance_id is None)
    static.sort(key=lambda mid: (members[mid].instance_id or "", mid))
    return static + dynamic


def _ranges(n: int, s: int) -> list[frozenset[int]]:
    """The non-empty contiguous ranges of ``n`` partitions over ``s`` subscribers, in subscriber order."""
    q, extra = divmod(n, s)
    numbers = first_numbers(n)  # shared int objects: no int allocated per partition
    out = list(chunked(numbers[: extra * (q + 1)], q + 1))
    if q:
        out.extend(chunked(numbers[extra * (q + 1) : n], q))
    return out


def _same(current: Assignment, new: Mapping[TopicId, frozenset[int]]) -> bool:
    """True when ``current`` and ``new`` hold the same partitions (empty topic entries ignored)."""
    # dict equality reuses the stored key hashes: no UUID.__hash__ call per topic.
    if current == new:
        return True
    if len(current) > len(new):
        return {tid: fs for tid, fs in current.items() if fs} == new
    return False
