"""The ``sticky`` and ``cooperative-sticky`` strategies of classic consumers, computed on the server.

The layout rules of Kafka's sticky assignors (Java's ``AbstractStickyAssignor``; librdkafka's
cooperative-sticky follows the same rules): balanced first, then as sticky as balance allows. The
stickiness input is each member's current target (what it owns, or is about to own, on the gateway):
the classic client sends its owned partitions for the same purpose. Both names give the same layout;
they differ only in how the client gives partitions up (all at once or only those that move), and the
coordinator's reconciliation already revokes before it reassigns.

Identical subscriptions (Kafka's "constrained" assignment). With ``P`` partitions over ``N`` members
each member gets ``P // N`` or ``P // N + 1`` and exactly ``P % N`` members get the extra one:

1. members, in their sorted order (static first by instance id, then member id), keep what they own:
   all of it up to ``P // N``; up to ``P // N + 1`` while fewer than ``P % N`` members have kept that
   many; the rest is given up. Owned partitions are kept in the order (partition number, topic name),
   so a member holding one partition of each of several topics keeps the same numbers of each;
2. the partitions nobody kept, topics by name and partitions by number, are dealt in turn to the
   members below ``P // N`` (in member order, round and round), then one each to members at
   ``P // N`` until ``P % N`` members have the extra one.

A fresh group is therefore dealt round-robin over all its topics: two members on two topics of two
partitions each get partition 0 of both topics and partition 1 of both topics, and a member joining a
balanced group takes partitions from the members above the new quota only.

Different subscriptions (Kafka's "general" assignment): every member keeps what it owns of the topics
it still subscribes to; the rest is handed out, partitions with the fewest possible owners first, each
to the subscribed member with the fewest partitions; then partitions move, one at a time, from a member
to a subscribed member holding at least two fewer, until no such move is left.

Where Kafka breaks ties by the iteration order of a hash map of member ids, this breaks them by the
sorted member order (deterministic across restarts and replay). Rack awareness (KIP-881) is not
modelled: the gateway's classic members do not report their rack to the assignors.
"""

from __future__ import annotations

from coordinator.assignors._classic import TP, as_result, sorted_members, subscribed_topics
from coordinator.assignors.api import Assignment, AssignmentDelta, GroupSpec, MemberSpec, TopicId


class StickyAssignor:
    def __init__(self, name: str = "cooperative-sticky") -> None:
        self.name = name

    def assign(self, spec: GroupSpec, delta: AssignmentDelta | None = None) -> dict[str, Assignment]:
        members = spec.members
        if not members:
            return {}
        order = sorted_members(members)
        topics = subscribed_topics(spec)
        name = {t: spec.topics[t].name for t in topics}
        owned = {mid: _valid_owned(spec, members[mid], name) for mid in order}
        subscriptions = {frozenset(m.subscribed_topic_ids & spec.topics.keys()) for m in members.values()}
        if len(subscriptions) == 1:
            lists = _constrained(spec, order, topics, owned)
        else:
            lists = _general(spec, order, topics, owned)
        return as_result(spec, lists)


def _valid_owned(spec: GroupSpec, m: MemberSpec, name: dict[TopicId, str]) -> list[TP]:
    """What the member holds of the topics it subscribes to that still exist, by (partition, topic)."""
    out = [
        (t, p)
        for t, ps in m.assigned.items()
        if t in m.subscribed_topic_ids and t in name
        for p in ps
        if p < spec.topics[t].num_partitions
    ]
    out.sort(key=lambda tp: (tp[1], name[tp[0]], tp[0].bytes))
    return out


def _constrained(spec: GroupSpec, order: list[str], topics: list[TopicId], owned: dict[str, list[TP]]) -> dict[str, list[TP]]:
    n = len(order)
    total = sum(spec.topics[t].num_partitions for t in topics)
    min_quota, extra = divmod(total, n)
    max_quota = min_quota + (1 if extra else 0)
    over = 0  # members holding max_quota where max_quota > min_quota
    lists: dict[str, list[TP]] = {mid: [] for mid in order}
    under: list[str] = []  # members below min_quota
    at_min: list[str] = []  # members at min_quota that may still take one more
    taken: set[TP] = set()
    for mid in order:
        mine = owned[mid]
        if len(mine) < min_quota:
            keep = mine
            under.append(mid)
        elif len(mine) >= max_quota and over < extra:
            keep = mine[:max_quota]
            over += 1
            if over == extra:
                at_min.clear()
        else:
            keep = mine[:min_quota]
            if over < extra:
                at_min.append(mid)
        lists[mid].extend(keep)
        taken.update(keep)
    remaining = [(t, p) for t in topics for p in range(spec.topics[t].num_partitions) if (t, p) not in taken]
    i = 0
    for tp in remaining:
        if under:
            if i >= len(under):
                i = 0
            mid = under[i]
        elif at_min:
            mid = at_min.pop(0)
        else:  # cannot happen: the quotas add up to the partitions
            break
        lists[mid].append(tp)
        count = len(lists[mid])
        if mid in under and count == min_quota:
            under.pop(i)
            at_min.append(mid)
        elif count == max_quota and max_quota > min_quota:
            over += 1
            if mid in under:
                under.pop(i)
        elif mid in under:
            i += 1
    return lists


def _general(spec: GroupSpec, order: list[str], topics: list[TopicId], owned: dict[str, list[TP]]) -> dict[str, list[TP]]:
    members = spec.members
    rank = {mid: i for i, mid in enumerate(order)}
    subscribers = {t: [mid for mid in order if t in members[mid].subscribed_topic_ids] for t in topics}
    owner: dict[TP, str] = {}
    count = {mid: 0 for mid in order}
    for mid in order:
        for tp in owned[mid]:
            if tp not in owner:
                owner[tp] = mid
                count[mid] += 1
    name = {t: spec.topics[t].name for t in topics}
    every = [(t, p) for t in topics for p in range(spec.topics[t].num_partitions)]
    loose = sorted((tp for tp in every if tp not in owner), key=lambda tp: (len(subscribers[tp[0]]), name[tp[0]], tp[1]))
    for tp in loose:
        subs = subscribers[tp[0]]
        if not subs:
            continue
        mid = min(subs, key=lambda m: (count[m], rank[m]))
        owner[tp] = mid
        count[mid] += 1
    moved = True
    while moved:
        moved = False
        for tp in every:
            holder = owner.get(tp)
            if holder is None:
                continue
            to = min(subscribers[tp[0]], key=lambda m: (count[m], rank[m]))
            if count[to] + 1 < count[holder]:
                owner[tp] = to
                count[holder] -= 1
                count[to] += 1
                moved = True
    lists: dict[str, list[TP]] = {mid: [] for mid in order}
    for tp in every:
        holder = owner.get(tp)
        if holder is not None:
            lists[holder].append(tp)
    return lists
