"""Read-only views across the group types: DescribeGroups (the classic API), ListGroups (v5,
with group types "classic", "consumer" and "connect"), ConsumerGroupDescribe's word on a classic group, and what
the gateway may know of a group without reaching into the state (its type, member count, subscribed
topics).

DescribeGroups describes classic groups as Kafka does: a Stable group lists each member with its
metadata for the group's protocol and its assignment; in other states members come without them
and the protocol is empty. A group it does not know - including a consumer group, which Kafka's
DescribeGroups does not describe (ConsumerGroupDescribe does) - is Dead, with GROUP_ID_NOT_FOUND
from v6 (KIP-1043). ``GroupServiceConfig.describe_consumer_groups_as_classic`` (on by default in
``translate`` mode) instead gives consumer groups a classic view (protocol type ``consumer``, states mapped Assigning ->
PreparingRebalance, Reconciling -> CompletingRebalance) for tools that only speak DescribeGroups.
"""

from __future__ import annotations

import uuid

from coordinator.describe import ListedGroup
from coordinator.errors import Errors
from coordinator.model import ConsumerGroup, GroupState, subscribed_topic_names
from translate.classic_group import ClassicGroupState
from translate.classic_strategies import common_protocol
from translate.embedded import (
    CONSUMER_PROTOCOL_TYPE,
    HIGHEST_VERSION,
    ConsumerProtocolAssignment,
    MalformedEmbeddedProtocol,
    TopicPartitions,
    announced_version,
    decode_subscription,
    encode_assignment,
)
from translate.group_messages import (
    CLASSIC_GROUP_TYPE,
    DESCRIBE_GROUPS_NOT_FOUND_VERSION,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DescribedClassicGroup,
    DescribedClassicMember,
    DescribeGroupsRequest,
    ListGroupsRequest,
)
from translate.group_parts import GroupParts

_DEAD = ClassicGroupState.DEAD.value
_CLASSIC_STATE_OF: dict[GroupState, str] = {
    GroupState.EMPTY: ClassicGroupState.EMPTY.value,
    GroupState.ASSIGNING: ClassicGroupState.PREPARING_REBALANCE.value,
    GroupState.RECONCILING: ClassicGroupState.COMPLETING_REBALANCE.value,
    GroupState.STABLE: ClassicGroupState.STABLE.value,
    GroupState.DEAD: _DEAD,
}


def describe_groups(svc: GroupParts, request: DescribeGroupsRequest) -> list[DescribedClassicGroup]:
    out = []
    for gid in request.group_ids:
        classic = svc.classic_groups.group(gid)
        consumer = svc.coordinator.group(gid) if classic is None else None
        connect = svc.connect.group(gid) is not None
        if classic is not None and not classic.is_in(ClassicGroupState.DEAD):
            stable = classic.is_in(ClassicGroupState.STABLE) and classic.protocol_name is not None
            described = DescribedClassicGroup(
                gid,
                group_state=classic.state.value,
                protocol_type=classic.protocol_type or "",
                protocol_data=(classic.protocol_name or "") if stable else "",
            )
            for m in classic.members.values():
                dm = DescribedClassicMember(m.member_id, m.group_instance_id, m.client_id, m.client_host)
                if stable:
                    assert classic.protocol_name is not None
                    dm.member_metadata = m.metadata(classic.protocol_name)
                    dm.member_assignment = m.assignment
                described.members.append(dm)
            out.append(described)
        elif consumer is not None and svc.config.classic_view_of_consumer_groups:
            out.append(_consumer_group_as_classic(svc, consumer))
        elif request.api_version >= DESCRIBE_GROUPS_NOT_FOUND_VERSION:
            # Kafka 4.3's texts: a consumer group exists, but not for DescribeGroups.
            held = consumer is not None or connect
            message = f"Group {gid} is not a classic group." if held else f"Group {gid} not found."
            out.append(DescribedClassicGroup(gid, int(Errors.GROUP_ID_NOT_FOUND), message, group_state=_DEAD))
        else:
            out.append(DescribedClassicGroup(gid, group_state=_DEAD))
    return out


def _consumer_group_as_classic(svc: GroupParts, group: ConsumerGroup) -> DescribedClassicGroup:
    state = group.state()
    stable = state is GroupState.STABLE
    names: dict[uuid.UUID, str] = {meta.topic_id: name for name, meta in svc.coordinator.state.topics.items()}
    # A purely classic group shows its common protocol, as Kafka's classic group shows the one it selected;
    # otherwise the server assignor's name.
    protocol = common_protocol(group) or svc.coordinator.describe([group.group_id])[0].assignor_name
    described = DescribedClassicGroup(
        group.group_id,
        group_state=_CLASSIC_STATE_OF[state],
        protocol_type=CONSUMER_PROTOCOL_TYPE,
        protocol_data=protocol if stable else "",
    )
    for m in group.members.values():
        dm = DescribedClassicMember(m.member_id, m.instance_id, m.client_id, m.client_host)
        if stable:
            cm = m.classic_metadata
            version = HIGHEST_VERSION
            if cm is not None and cm.supported_protocols:
                dm.member_metadata = dict(cm.supported_protocols).get(protocol, cm.supported_protocols[0][1])
                version = announced_version(dm.member_metadata)
            tps = sorted(
                (TopicPartitions(names[t], tuple(sorted(p))) for t, p in m.assigned_partitions.items() if p and t in names),
                key=lambda tp: tp.topic,
            )
            dm.member_assignment = encode_assignment(ConsumerProtocolAssignment(tps, None, version))
        described.members.append(dm)
    return described


def list_groups(svc: GroupParts, request: ListGroupsRequest) -> list[ListedGroup]:
    """Every group type; filters are case-insensitive and empty filters match everything."""
    states = {s.lower() for s in request.states_filter}
    types = {t.lower() for t in request.types_filter}
    out: list[ListedGroup] = []
    if not types or CLASSIC_GROUP_TYPE in types:
        for gid, g in svc.classic_groups.groups.items():
            if g.is_in(ClassicGroupState.DEAD):
                continue
            if states and g.state.value.lower() not in states:
                continue
            out.append(ListedGroup(gid, g.protocol_type or "", g.state.value, CLASSIC_GROUP_TYPE))
    out.extend(svc.coordinator.list_groups(request.states_filter, request.types_filter))
    out.extend(
        ListedGroup(g.group_id, g.protocol_type, g.group_state, g.group_type)
        for g in svc.connect.list_groups(request.states_filter, request.types_filter)
    )
    return out


def describe_consumer_groups(svc: GroupParts, request: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
    described = svc.coordinator.describe(request.group_ids)
    for d in described:
        classic = svc.classic_groups.group(d.group_id)
        other = (classic is not None and not classic.is_in(ClassicGroupState.DEAD)) or svc.connect.group(d.group_id) is not None
        if d.error_code == Errors.GROUP_ID_NOT_FOUND and other:
            d.error_message = f"Group {d.group_id} is not a consumer group."  # Kafka 4.3's text
    return ConsumerGroupDescribeResponse(described)


# ---- reads (what the gateway may know of a group without reaching into the state) ----------------


def group_kind(svc: GroupParts, group_id: str) -> str | None:
    """"classic", "consumer" (a consumer group, converted ones too) or "connect" while the group exists,
    else None."""
    if svc.classic_groups.group(group_id) is not None:
        return "classic"
    if group_id in svc.coordinator.state.groups:
        return "consumer"
    if group_id in svc.connect.state.groups:
        return "connect"
    return None


def group_ids(svc: GroupParts) -> list[str]:
    """Every group held (classic, consumer and connect)."""
    return [*svc.classic_groups.groups, *svc.coordinator.state.groups, *svc.connect.state.groups]


def group_count(svc: GroupParts) -> int:
    return len(svc.classic_groups.groups) + len(svc.coordinator.state.groups) + len(svc.connect.state.groups)


def member_count(svc: GroupParts, group_id: str) -> tuple[int, str]:
    """(members, "classic" | "consumer" | "connect") of a group; (0, "consumer") when there is none."""
    classic = svc.classic_groups.groups.get(group_id)
    if classic is not None:
        return len(classic.members), "classic"
    consumer = svc.coordinator.state.groups.get(group_id)
    if consumer is not None:
        return len(consumer.members), "consumer"
    connect = svc.connect.state.groups.get(group_id)
    if connect is not None:
        return len(connect.workers), "connect"
    return 0, "consumer"


def subscribed_topics(svc: GroupParts, group_id: str) -> frozenset[str]:
    """Topics the group's members subscribe to: KIP-496 refuses deleting their offsets."""
    classic = svc.classic_groups.group(group_id)
    if classic is not None:
        if classic.protocol_type != CONSUMER_PROTOCOL_TYPE or not classic.protocol_name:
            return frozenset()
        topics: set[str] = set()
        for m in classic.members.values():
            try:
                topics.update(decode_subscription(m.metadata(classic.protocol_name)).topics)
            except (MalformedEmbeddedProtocol, ValueError):
                continue  # a member whose subscription cannot be read protects nothing
        return frozenset(topics)
    group = svc.coordinator.group(group_id)
    if group is None:
        return frozenset()
    return frozenset().union(*(subscribed_topic_names(group, m) for m in group.members.values()))
