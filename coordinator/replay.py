"""Records -> state. The coordinator changes its state only through ``apply``, so replaying the emitted
records from empty rebuilds an identical state (``ConsumerGroup.snapshot``).

``apply(groups, record)`` mutates the ``group id -> ConsumerGroup`` map; ``replay(records)`` builds a
new map. Derived indexes (static members, partition owners) are maintained here too.
"""

from __future__ import annotations

from collections.abc import Iterable

from coordinator.model import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    ResolvedRegex,
    Subscription,
)
from coordinator.records import (
    CurrentMemberAssignmentValue,
    GroupMetadataValue,
    MemberMetadataValue,
    PartitionMetadataValue,
    Record,
    RecordType,
    RegularExpressionValue,
    TargetAssignmentMemberValue,
    TargetAssignmentMetadataValue,
)


def _group(groups: dict[str, ConsumerGroup], group_id: str) -> ConsumerGroup:
    g = groups.get(group_id)
    if g is None:
        g = groups[group_id] = ConsumerGroup(group_id)
    return g


def _member(group: ConsumerGroup, member_id: str) -> ConsumerGroupMember:
    m = group.members.get(member_id)
    if m is None:
        m = group.members[member_id] = ConsumerGroupMember(member_id)
        _count(group, (m.subscribed_topic_names, m.subscribed_topic_regex), 1)
    return m


def _count(group: ConsumerGroup, sub: Subscription, n: int) -> None:
    subs = group.subscriptions
    left = subs.get(sub, 0) + n
    if left > 0:
        subs[sub] = left
    else:
        subs.pop(sub, None)


def _release(group: ConsumerGroup, member_id: str, a: Assignment) -> None:
    owners = group.partition_owners
    for t, parts in a.items():
        o = owners.get(t)
        if o is None:
            continue
        for p in parts:
            if o.get(p) == member_id:
                del o[p]
        if not o:
            del owners[t]


def _own(group: ConsumerGroup, member_id: str, a: Assignment) -> None:
    owners = group.partition_owners
    for t, parts in a.items():
        o = owners.get(t)
        if o is None:
            o = owners[t] = {}
        for p in parts:
            o[p] = member_id


def _set_assignment(group: ConsumerGroup, m: ConsumerGroupMember, v: CurrentMemberAssignmentValue | None) -> None:
    _release(group, m.member_id, m.assigned_partitions)
    _release(group, m.member_id, m.partitions_pending_revocation)
    previous_epochs = m.assignment_epochs
    m.assignment_epochs = {}
    if v is None:
        m.member_epoch = 0
        m.previous_member_epoch = 0
        m.state = MemberState.STABLE
        m.assigned_partitions = EMPTY_ASSIGNMENT
        m.partitions_pending_revocation = EMPTY_ASSIGNMENT
        return
    # Partitions pending revocation keep the epoch they were assigned at (Kafka's
    # pendingRevocationEpoch): the member may still commit them with that epoch until it releases them.
    for source in (v.assigned_partitions, v.partitions_pending_revocation):
        for t, parts in source.items():
            if not parts:
                continue
            since = previous_epochs.get(t)
            held = m.assignment_epochs.get(t)
            if since is None:
                epochs = dict.fromkeys(parts, v.member_epoch)
            elif held is None and since.keys() == parts:
                epochs = since  # unchanged partitions keep the epochs they were assigned at
            else:
                epochs = {p: since.get(p, v.member_epoch) for p in parts}
            if held is None:
                m.assignment_epochs[t] = epochs
            else:
                m.assignment_epochs[t] = {**held, **epochs}
    m.member_epoch = v.member_epoch
    m.previous_member_epoch = v.previous_member_epoch
    m.state = v.state
    m.assigned_partitions = v.assigned_partitions
    m.partitions_pending_revocation = v.partitions_pending_revocation
    _own(group, m.member_id, v.assigned_partitions)
    _own(group, m.member_id, v.partitions_pending_revocation)


def apply(groups: dict[str, ConsumerGroup], record: Record) -> None:
    rtype = record.type
    v = record.value
    gid = record.group_id
    if rtype is RecordType.GROUP_METADATA:
        if v is None:
            g = groups.pop(gid, None)
            if g is not None:
                g.dead = True
            return
        assert isinstance(v, GroupMetadataValue)
        g = _group(groups, gid)
        g.group_epoch = v.epoch
        g.empty_since_ms = v.empty_since_ms
    elif rtype is RecordType.CURRENT_MEMBER_ASSIGNMENT:
        g = _group(groups, gid)
        mid = record.sub_key
        assert mid is not None
        if v is None:
            m = g.members.get(mid)
            if m is not None:
                _set_assignment(g, m, None)
            return
        assert isinstance(v, CurrentMemberAssignmentValue)
        _set_assignment(g, _member(g, mid), v)
    elif rtype is RecordType.MEMBER_METADATA:
        g = _group(groups, gid)
        mid = record.sub_key
        assert mid is not None
        if v is None:
            m = g.members.pop(mid, None)
            if m is not None:
                _count(g, (m.subscribed_topic_names, m.subscribed_topic_regex), -1)
                _set_assignment(g, m, None)
                if m.instance_id is not None and g.static_members.get(m.instance_id) == mid:
                    del g.static_members[m.instance_id]
            return
        assert isinstance(v, MemberMetadataValue)
        m = _member(g, mid)
        if m.instance_id is not None and m.instance_id != v.instance_id and g.static_members.get(m.instance_id) == mid:
            del g.static_members[m.instance_id]
        m.instance_id = v.instance_id
        m.rack_id = v.rack_id
        m.client_id = v.client_id
        m.client_host = v.client_host
        names = frozenset(v.subscribed_topic_names)
        if names != m.subscribed_topic_names or v.subscribed_topic_regex != m.subscribed_topic_regex:
            _count(g, (m.subscribed_topic_names, m.subscribed_topic_regex), -1)
            _count(g, (names, v.subscribed_topic_regex), 1)
        m.subscribed_topic_names = names
        m.subscribed_topic_regex = v.subscribed_topic_regex
        m.rebalance_timeout_ms = v.rebalance_timeout_ms
        m.server_assignor = v.server_assignor
        m.classic_metadata = v.classic_metadata
        if v.instance_id is not None:
            g.static_members[v.instance_id] = mid
    elif rtype is RecordType.TARGET_ASSIGNMENT_MEMBER:
        g = _group(groups, gid)
        mid = record.sub_key
        assert mid is not None
        if v is None:
            g.target_assignment.pop(mid, None)
        else:
            assert isinstance(v, TargetAssignmentMemberValue)
            g.target_assignment[mid] = v.partitions
    elif rtype is RecordType.TARGET_ASSIGNMENT_METADATA:
        if v is None:
            return
        assert isinstance(v, TargetAssignmentMetadataValue)
        g = _group(groups, gid)
        g.assignment_epoch = v.assignment_epoch
        g.assignment_timestamp_ms = v.assignment_timestamp_ms
    elif rtype is RecordType.PARTITION_METADATA:
        if v is None:
            g2 = groups.get(gid)
            if g2 is not None:
                g2.subscription_metadata = {}
            return
        assert isinstance(v, PartitionMetadataValue)
        _group(groups, gid).subscription_metadata = {t.name: t for t in v.topics}
    elif rtype is RecordType.REGULAR_EXPRESSION:
        g = _group(groups, gid)
        regex = record.sub_key
        assert regex is not None
        if v is None:
            g.resolved_regexes.pop(regex, None)
        else:
            assert isinstance(v, RegularExpressionValue)
            g.resolved_regexes[regex] = ResolvedRegex(frozenset(v.topics), v.version, v.timestamp_ms)


def replay(records: Iterable[Record]) -> dict[str, ConsumerGroup]:
    groups: dict[str, ConsumerGroup] = {}
    for r in records:
        apply(groups, r)
    return groups
