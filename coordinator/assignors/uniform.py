"""The ``uniform`` server-side assignor (KIP-848 "Assignor": the default, balanced and sticky).

Members are grouped by subscription. When the groups' topic sets do not overlap (always the case for a
homogeneous group, and the common shape of heterogeneous ones) each group is an independent balanced,
sticky problem solved by the homogeneous core; otherwise the general heterogeneous algorithm runs.

Incremental use: when the delta only adds or removes members, the topics are unchanged and the removed
members' previous targets are supplied, each affected subscription group is rebalanced from member
counts and the freed partitions alone; the other groups' members keep their mapping objects untouched.
"""

from __future__ import annotations

from collections.abc import Mapping

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
)


class UniformAssignor:
    name = "uniform"

    def assign(self, spec: GroupSpec, delta: AssignmentDelta | None = None) -> dict[str, Assignment]:
        members = spec.members
        if not members:
            return {}
        num_partitions = {tid: t.num_partitions for tid, t in spec.topics.items()}
        out: dict[str, Assignment] = {}
        groups = _subscription_groups(members, spec.subscription_type, num_partitions)
        if groups is None:
            _heterogeneous.assign_general(sorted(members), members, num_partitions, out)
            return out
        if delta is not None and _incremental(members, groups, num_partitions, delta, out):
            return out
        out.clear()
        for topics, member_ids in groups:
            if not topics:
                for mid in member_ids:
                    out[mid] = _empty(members[mid])
                continue
            _homogeneous.assign_full(
                sorted(member_ids), members, sorted(topics, key=topic_order), num_partitions, out
            )
        return out


SubscriptionGroups = list[tuple[frozenset[TopicId], list[str]]]


def _subscription_groups(
    members: Mapping[str, MemberSpec], kind: SubscriptionType, num_partitions: Mapping[TopicId, int]
) -> SubscriptionGroups | None:
    """Members by (existing) subscribed topics, or None when two different subscriptions overlap."""
    if kind is SubscriptionType.HOMOGENEOUS:
        first = next(iter(members.values()))
        return [(_existing(first.subscribed_topic_ids, num_partitions), list(members))]
    by_sub: dict[frozenset[TopicId], list[str]] = {}
    for mid, m in members.items():
        group = by_sub.get(m.subscribed_topic_ids)
        if group is None:
            by_sub[m.subscribed_topic_ids] = [mid]
        else:
            group.append(mid)
    groups: dict[frozenset[TopicId], list[str]] = {}
    for sub, mids in by_sub.items():
        groups.setdefault(_existing(sub, num_partitions), []).extend(mids)
    union: set[TopicId] = set()
    size = 0
    for topics in groups:
        union.update(topics)
        size += len(topics)
    if size != len(union):
        return None
    return list(groups.items())


def _existing(topics: frozenset[TopicId], num_partitions: Mapping[TopicId, int]) -> frozenset[TopicId]:
    if all(t in num_partitions for t in topics):
        return topics
    return frozenset(t for t in topics if t in num_partitions)


def _empty(member: MemberSpec) -> Assignment:
    return EMPTY_ASSIGNMENT if any(member.assigned.values()) else member.assigned


def _incremental(
    members: Mapping[str, MemberSpec],
    groups: SubscriptionGroups,
    num_partitions: Mapping[TopicId, int],
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
        for gi, (topics, _) in enumerate(groups):
            for tid in topics:
                group_of_topic[tid] = gi
    freed: dict[int, list[tuple[TopicId, frozenset[int]]]] = {}
    freed_count: dict[int, int] = {}
    for mid in delta.removed:
        for tid, fs in delta.removed_assigned[mid].items():
            gi_ = group_of_topic.get(tid)
            if gi_ is not None and fs:
                freed.setdefault(gi_, []).append((tid, fs))
                freed_count[gi_] = freed_count.get(gi_, 0) + len(fs)
    for gi, (topics, member_ids) in enumerate(groups):
        if not topics:
            for mid in member_ids:
                out[mid] = _empty(members[mid])
            continue
        total = sum(num_partitions[t] for t in topics)
        if not _homogeneous.assign_incremental(
            member_ids, members, total, freed.get(gi, []), freed_count.get(gi, 0), out
        ):
            return False
    return True
