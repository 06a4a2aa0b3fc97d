"""Building assignor inputs and checking the properties every assignment must have."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from coordinator.assignors.api import (
    Assignment,
    GroupSpec,
    MemberSpec,
    SubscriptionType,
    TopicId,
    TopicMetadata,
)


def tid(i: int) -> TopicId:
    return uuid.UUID(int=i + 1)


def topics(*sizes: int) -> dict[TopicId, TopicMetadata]:
    return {tid(i): TopicMetadata(tid(i), f"t{i}", n) for i, n in enumerate(sizes)}


def member(
    mid: str,
    subscribed: Iterable[TopicId],
    assigned: Mapping[TopicId, Iterable[int]] | None = None,
    instance_id: str | None = None,
) -> MemberSpec:
    held = {t: frozenset(ps) for t, ps in (assigned or {}).items()}
    return MemberSpec(mid, instance_id, None, frozenset(subscribed), held)


def group(members: Iterable[MemberSpec], topic_meta: Mapping[TopicId, TopicMetadata]) -> GroupSpec:
    ms = {m.member_id: m for m in members}
    subs = {m.subscribed_topic_ids for m in ms.values()}
    kind = SubscriptionType.HOMOGENEOUS if len(subs) <= 1 else SubscriptionType.HETEROGENEOUS
    return GroupSpec(ms, dict(topic_meta), kind)


def with_targets(spec: GroupSpec, result: Mapping[str, Assignment], *, drop: Iterable[str] = (),
                 add: Iterable[MemberSpec] = ()) -> GroupSpec:
    """The next input: every remaining member's target is its ``result``; ``add`` joins, ``drop`` leaves."""
    gone = set(drop)
    ms = [MemberSpec(m.member_id, m.instance_id, m.rack_id, m.subscribed_topic_ids, result[m.member_id])
          for m in spec.members.values() if m.member_id not in gone]
    return group([*ms, *add], spec.topics)


def counts(result: Mapping[str, Assignment]) -> dict[str, int]:
    return {m: sum(len(fs) for fs in a.values()) for m, a in result.items()}


def owners(result: Mapping[str, Assignment]) -> dict[tuple[TopicId, int], str]:
    out: dict[tuple[TopicId, int], str] = {}
    for m, a in result.items():
        for t, fs in a.items():
            for p in fs:
                assert (t, p) not in out, f"{t}:{p} assigned to both {out[(t, p)]} and {m}"
                out[(t, p)] = m
    return out


def assert_valid(spec: GroupSpec, result: Mapping[str, Assignment]) -> None:
    """Every member gets an entry; every subscribed partition is assigned exactly once, to a subscriber."""
    assert set(result) == set(spec.members)
    own = owners(result)
    for (t, p), m in own.items():
        assert t in spec.members[m].subscribed_topic_ids, f"{m} holds {t}:{p} without subscribing"
        assert 0 <= p < spec.topics[t].num_partitions
    subscribed = set().union(*(m.subscribed_topic_ids for m in spec.members.values())) & set(spec.topics)
    expected = {(t, p) for t in subscribed for p in range(spec.topics[t].num_partitions)}
    assert set(own) == expected


def assert_balanced(spec: GroupSpec, result: Mapping[str, Assignment]) -> None:
    """No member could take a partition of a topic it subscribes to from a member holding 2+ more."""
    c = counts(result)
    holders: dict[TopicId, set[str]] = {}
    for m, a in result.items():
        for t, fs in a.items():
            if fs:
                holders.setdefault(t, set()).add(m)
    for m, spec_m in spec.members.items():
        for t in spec_m.subscribed_topic_ids:
            for h in holders.get(t, ()):
                assert c[h] - c[m] <= 1, f"{m} ({c[m]}) could take {t} from {h} ({c[h]})"
    if spec.subscription_type is SubscriptionType.HOMOGENEOUS and c:
        assert max(c.values()) - min(c.values()) <= 1


def moved(before: Mapping[str, Assignment], after: Mapping[str, Assignment]) -> int:
    """Partitions held by a member present in both that now belong to someone else."""
    prev = owners({m: a for m, a in before.items() if m in after})
    now = owners(after)
    return sum(1 for tp, m in prev.items() if now.get(tp) != m)


def minimum_moves(before_counts: Iterable[int], total: int, members: int) -> int:
    """Fewest partitions existing holders must give up to reach a balanced (q / q+1) assignment."""
    q, extra = divmod(total, members)
    cs = sorted(before_counts, reverse=True)
    kept = 0
    for c in cs:
        if c > q and extra:
            kept += min(c, q + 1)
            extra -= 1
        else:
            kept += min(c, q)
    return sum(cs) - kept
