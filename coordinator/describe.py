"""Read-only views: ConsumerGroupDescribe (v0, v1 with MemberType) and ListGroups (v5, group types).

Plain dataclasses the gateway maps to the wire. Assignments carry topic names resolved from the
topic metadata image (falling back to the group's partition metadata).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from coordinator.errors import Errors
from coordinator.model import Assignment, ConsumerGroup, GroupState
from coordinator.state import CoordinatorState
from coordinator.target import select_assignor

CONSUMER_PROTOCOL_TYPE = "consumer"
CONSUMER_GROUP_TYPE = "consumer"


@dataclass(slots=True)
class DescribedTopicPartitions:
    topic_id: uuid.UUID
    topic_name: str
    partitions: list[int]


@dataclass(slots=True)
class DescribedMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    assignment: list[DescribedTopicPartitions]
    target_assignment: list[DescribedTopicPartitions]
    member_type: int  # v1: -1 unknown, 0 classic, 1 consumer


@dataclass(slots=True)
class DescribedGroup:
    group_id: str
    error_code: int = 0
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: list[DescribedMember] = field(default_factory=list)


@dataclass(slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str
    group_type: str


def _topics(st: CoordinatorState, group: ConsumerGroup, a: Assignment) -> list[DescribedTopicPartitions]:
    names = {t.topic_id: t.name for t in st.topics.values()}
    for t in group.subscription_metadata.values():
        names.setdefault(t.topic_id, t.name)
    return [
        DescribedTopicPartitions(t, names.get(t, ""), sorted(a[t])) for t in sorted(a, key=lambda u: u.bytes) if a[t]
    ]


def describe_group(st: CoordinatorState, group_id: str) -> DescribedGroup:
    group = st.groups.get(group_id)
    if group is None:
        return DescribedGroup(group_id, int(Errors.GROUP_ID_NOT_FOUND), f"Group {group_id} not found.")
    name, _ = select_assignor(st.config, group)
    out = DescribedGroup(
        group_id, 0, None, group.state().value, group.group_epoch, group.assignment_epoch, name,
    )
    for m in group.members.values():
        out.members.append(
            DescribedMember(
                m.member_id, m.instance_id, m.rack_id, m.member_epoch, m.client_id, m.client_host,
                sorted(m.subscribed_topic_names), m.subscribed_topic_regex,
                _topics(st, group, m.assigned_partitions),
                _topics(st, group, group.target_assignment.get(m.member_id, {})),
                int(m.member_type),
            )
        )
    return out


def list_groups(st: CoordinatorState, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[ListedGroup]:
    """ListGroups v5: filters are case-insensitive; empty filters match everything."""
    want_states = {s.lower() for s in states}
    want_types = {t.lower() for t in types}
    if want_types and CONSUMER_GROUP_TYPE not in want_types:
        return []
    out = []
    for gid, g in st.groups.items():
        state: GroupState = g.state()
        if want_states and state.value.lower() not in want_states:
            continue
        out.append(ListedGroup(gid, CONSUMER_PROTOCOL_TYPE, state.value, CONSUMER_GROUP_TYPE))
    return out
