"""The ``uniform`` server-side assignor (KIP-848 "Assignor": the default, balanced and sticky).

Members are grouped by subscription. When the groups' topic sets do not overlap (always the case for a
homogeneous group, and the common shape of heterogeneous ones) each group is an independent balanced,
sticky problem solved by the homogeneous core; otherwise the general heterogeneous algorithm runs.

Incremental use: when the delta only adds or removes members, the topics are unchanged and the removed
members' previous targets are supplied (``AssignmentDelta.removed_assigned``), each subscription group
is rebalanced from member counts and the freed partitions alone, and unchanged members keep their
mapping objects. A group whose counts do not add up to its partitions (the previous target was not
complete) and overlapping subscriptions fall back to the full algorithm.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from operator import attrgetter

from coordinator.assignors import _heterogeneous, _homogeneous
from coordinator.assignors._homogeneous import topic_order
from coordinator.assignors.api import (
    EMPTY_ASSIGNMENT,
    Assignment,
    AssignmentDelta,
    GroupSpec,
    MemberSpec,
    SubscriptionType,
    TopicId,
    TopicMetadata,
)


class UniformAssignor:
    name = "uniform"

    def assign(self, spec: GroupSpec, delta: AssignmentDelta | None = None) -> dict[str, Assignment]:
        members = spec.members
        if not members:
            return {}
        topics = spec.topics
        out: dict[str, Assignment] = {}
        groups = _subscription_groups(members, spec.subscription_type, topics)
        if groups is None:
            num_partitions = {tid: t.num_partitions for tid, t in topics.items()}
            _heterogeneous.assign_general(sorted(members), members, num_partitions, out)
            return out
        if delta is not None and _incremental(members, groups, topics, delta, out):
            return out
        out.clear()
        shared = _homogeneous.SharedSets()
        for subscribed, member_ids in groups:
            if not subscribed:
                for mid in member_ids:
                    out[mid] = _empty(members[mid])
                continue
            if len(subscribed) == len(topics):  # every topic: no lookup (and UUID hash) per topic
                sizes = [t.num_partitions for t in topics.values()]
                if sizes.count(sizes[0]) == len(sizes):  # one size for all: only the ids need sorting
                    topic_ids = sorted(topics, key=topic_order)
                else:
                    metas = sorted(topics.values(), key=_META_ORDER)
                    topic_ids = [t.topic_id for t in metas]
                    sizes = [t.num_partitions for t in metas]
            else:
                topic_ids = sorted(subscribed, key=topic_order)
                sizes = [topics[t].num_partitions for t in topic_ids]
            _homogeneous.assign_full(sorted(member_ids), members, topic_ids, sizes, out, shared)
        return out


SubscriptionGroups = list[tuple[frozenset[TopicId], list[str]]]
_META_ORDER = attrgetter("topic_id.int")  # the same order as topic_order, from TopicMetadata
_SUBSCRIBED = attrgetter("subscribed_topic_ids")


def _subscription_groups(
    members: Mapping[str, MemberSpec], kind: SubscriptionType, topics: Mapping[TopicId, TopicMetadata]
) -> SubscriptionGroups | None:
    """Members by (existing) subscribed topics, or None when two different subscriptions overlap."""
    # set(dict) and set-to-set comparisons reuse stored hashes: no UUID.__hash__ calls.
    existing = set(topics)
    if kind is SubscriptionType.HOMOGENEOUS:
        first = next(iter(members.values()))
        return [(_existing(first.subscribed_topic_ids, existing), list(members))]
    # Grouped in C: one list per distinct subscription (in order of first appearance, frozensets keep
    # their hash), then every member id appended to its list by map(), without a Python step per member.
    subs = list(map(_SUBSCRIBED, members.values()))
    by_sub: dict[frozenset[TopicId], list[str]] = {sub: [] for sub in dict.fromkeys(subs)}
    deque(map(list.append, map(by_sub.__getitem__, subs), members), maxlen=0)
    groups: dict[frozenset[TopicId], list[str]] = {}
    for sub, mids in by_sub.items():
        groups.setdefault(_existing(sub, existing), []).extend(mids)
    union: set[TopicId] = set()
    size = 0
    for subscribed in groups:
        union.update(subscribed)
        size += len(subscribed)
    if size != len(union):
        return None
    return list(groups.items())


def _existing(subscribed: frozenset[TopicId], existing: set[TopicId]) -> frozenset[TopicId]:
    return subscribed if subscribed <= existing else subscribed & existing


def _empty(member: MemberSpec) -> Assignment:
    return EMPTY_ASSIGNMENT if any(member.assigned.values()) else member.assigned


def _incremental(
    members: Mapping[str, MemberSpec],
    groups: SubscriptionGroups,
    topics: Mapping[TopicId, TopicMetadata],
    delta: AssignmentDelta,
    out: dict[str, Assignment],
) -> bool:
    """The join/leave fast path; False when the full algorithm must run instead."""
    if delta.topics_changed or delta.changed:
        return False
    if any(mid not in delta.removed_assigned for mid in delta.removed):
        return False
    # Which subscription group each freed partition belongs to.
    group_of_topic: dict[TopicId, int] = {}
    if delta.removed:
        for gi, (subscribed, _) in enumerate(groups):
            for tid in subscribed:
                group_of_topic[tid] = gi
    freed: dict[int, list[tuple[TopicId, frozenset[int]]]] = {}
    freed_count: dict[int, int] = {}
    for mid in delta.removed:
        for tid, fs in delta.removed_assigned[mid].items():
            gi_ = group_of_topic.get(tid)
            if gi_ is not None and fs:
                freed.setdefault(gi_, []).append((tid, fs))
                freed_count[gi_] = freed_count.get(gi_, 0) + len(fs)
    for gi, (subscribed, member_ids) in enumerate(groups):
        if not subscribed:
            for mid in member_ids:
                out[mid] = _empty(members[mid])
            continue
        if len(subscribed) == len(topics):  # every topic: sum without a UUID hash per topic
            total = sum(t.num_partitions for t in topics.values())
        else:
            total = sum(topics[t].num_partitions for t in subscribed)
        if not _homogeneous.assign_incremental(
            member_ids, members, total, freed.get(gi, []), freed_count.get(gi, 0), out
        ):
            return False
    return True
