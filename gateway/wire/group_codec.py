"""Wire <-> dataclass mapping of the group APIs the gateway answers itself.

Decoding turns a kafka-python request message (any version the gateway advertises) into the
translate/coordinator dataclasses the group service takes; encoding builds the kafka-python
response message for the request's version. Fields a version lacks are left at their defaults on
decode and dropped by the encoder (kafka-python skips fields outside a version), so one builder
serves every version. Nothing here does I/O.
"""

from __future__ import annotations

from typing import Any

from coordinator.describe import DescribedGroup, DescribedTopicPartitions, ListedGroup
from coordinator.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey
from gateway.wire.connect_codec import CONNECT_API
from translate.classic_messages import (
    BATCH_LEAVE_VERSION,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from translate.group_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedClassicGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)

# The versions the gateway's handlers speak (ApiVersions advertises exactly these). The maxima are
# Kafka 4.4.0's (docs/gateway.md lists them side by side); the minima reach further back where the
# gateway still speaks versions Kafka 4 dropped (OffsetCommit v0-1, OffsetFetch v0). Newest additions:
# OffsetCommit / OffsetFetch v10 name topics by id (KIP-848), DescribeGroups v6 answers an unknown
# group GROUP_ID_NOT_FOUND with a message (KIP-1043), TxnOffsetCommit v5 also adds the offsets to a
# V2 transaction (KIP-890 part 2), which the upstream does: commits are written through at the client's
# version (the highest the upstream has); TxnOffsetCommit v6 names topics by id and answers a consumer
# member's stale epoch STALE_MEMBER_EPOCH, an unknown group GROUP_ID_NOT_FOUND (KIP-1319); DeleteGroups
# v3 adds a per-group ErrorMessage.
LOCAL_API: dict[int, tuple[int, int]] = {
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.OFFSET_COMMIT: (0, 10),
    ApiKey.OFFSET_FETCH: (0, 10),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.TXN_OFFSET_COMMIT: (0, 6),
    ApiKey.DELETE_GROUPS: (0, 3),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    # The connect group type (docs/connect.md): groupgate's own keys, 10000-10002, version 0.
    **CONNECT_API,
}

# FindCoordinator KeyType (KIP-98): 0 = group, 1 = transaction.
KEY_TYPE_GROUP = 0


def request_cls(api_key: int) -> Any:
    return codec.REQUESTS[api_key]


def response_cls(api_key: int) -> Any:
    return codec.RESPONSES[api_key]


def response(api_key: int, version: int, **fields: Any) -> Any:
    return codec.response_class(api_key, version)(**fields)


# --- classic group protocol ------------------------------------------------------------------------


def join_group_request(m: Any, version: int, client_id: str, client_host: str) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=m.group_id,
        session_timeout_ms=m.session_timeout_ms,
        member_id=m.member_id,
        protocol_type=m.protocol_type,
        protocols=[JoinGroupRequestProtocol(p.name, bytes(p.metadata)) for p in m.protocols],
        # v0 has no rebalance timeout: the session timeout serves as both (Kafka does the same).
        rebalance_timeout_ms=m.rebalance_timeout_ms if version >= 1 else m.session_timeout_ms,
        group_instance_id=m.group_instance_id if version >= 5 else None,
        reason=m.reason if version >= 8 else None,
        api_version=version,
        client_id=client_id,
        client_host=client_host,
    )


def join_group_response(r: JoinGroupResponse, version: int) -> Any:
    cls = response_cls(ApiKey.JOIN_GROUP)
    protocol_name = r.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""  # nullable only from v7
    return cls[version](
        throttle_time_ms=r.throttle_time_ms,
        error_code=r.error_code,
        generation_id=r.generation_id,
        protocol_type=r.protocol_type,
        protocol_name=protocol_name,
        leader=r.leader,
        skip_assignment=r.skip_assignment,
        member_id=r.member_id,
        members=[
            cls.JoinGroupResponseMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata
            )
            for m in r.members
        ],
    )


def sync_group_request(m: Any, version: int, client_id: str, client_host: str) -> SyncGroupRequest:
    return SyncGroupRequest(
        group_id=m.group_id,
        generation_id=m.generation_id,
        member_id=m.member_id,
        group_instance_id=m.group_instance_id if version >= 3 else None,
        protocol_type=m.protocol_type if version >= 5 else None,
        protocol_name=m.protocol_name if version >= 5 else None,
        assignments=[SyncGroupRequestAssignment(a.member_id, bytes(a.assignment)) for a in m.assignments],
        api_version=version,
        client_id=client_id,
        client_host=client_host,
    )


def sync_group_response(r: SyncGroupResponse, version: int) -> Any:
    return response(
        ApiKey.SYNC_GROUP,
        version,
        throttle_time_ms=r.throttle_time_ms,
        error_code=r.error_code,
        protocol_type=r.protocol_type,
        protocol_name=r.protocol_name,
        assignment=r.assignment,
    )


def heartbeat_request(m: Any, version: int, client_id: str, client_host: str) -> HeartbeatRequest:
    return HeartbeatRequest(
        group_id=m.group_id,
        generation_id=m.generation_id,
        member_id=m.member_id,
        group_instance_id=m.group_instance_id if version >= 3 else None,
        api_version=version,
        client_id=client_id,
        client_host=client_host,
    )


def heartbeat_response(r: HeartbeatResponse, version: int) -> Any:
    return response(ApiKey.HEARTBEAT, version, throttle_time_ms=r.throttle_time_ms, error_code=r.error_code)


def leave_group_request(m: Any, version: int, client_id: str, client_host: str) -> LeaveGroupRequest:
    if version < BATCH_LEAVE_VERSION:
        members = [MemberIdentity(m.member_id)]
    else:
        members = [
            MemberIdentity(x.member_id, x.group_instance_id, x.reason if version >= 5 else None)
            for x in m.members
        ]
    return LeaveGroupRequest(
        group_id=m.group_id,
        members=members,
        api_version=version,
        client_id=client_id,
        client_host=client_host,
    )


def leave_group_response(r: LeaveGroupResponse, version: int) -> Any:
    cls = response_cls(ApiKey.LEAVE_GROUP)
    error = r.error_code
    if version < BATCH_LEAVE_VERSION and error == 0 and r.members:
        error = r.members[0].error_code
    return cls[version](
        throttle_time_ms=r.throttle_time_ms,
        error_code=error,
        members=[
            cls.MemberResponse(
                member_id=x.member_id, group_instance_id=x.group_instance_id, error_code=x.error_code
            )
            for x in r.members
        ],
    )


# --- KIP-848 consumer group protocol ---------------------------------------------------------------


def consumer_group_heartbeat_request(
    m: Any, version: int, client_id: str, client_host: str
) -> ConsumerGroupHeartbeatRequest:
    tps = m.topic_partitions
    return ConsumerGroupHeartbeatRequest(
        group_id=m.group_id,
        member_id=m.member_id,
        member_epoch=m.member_epoch,
        instance_id=m.instance_id,
        rack_id=m.rack_id,
        rebalance_timeout_ms=m.rebalance_timeout_ms,
        subscribed_topic_names=None if m.subscribed_topic_names is None else list(m.subscribed_topic_names),
        subscribed_topic_regex=m.subscribed_topic_regex if version >= 1 else None,
        server_assignor=m.server_assignor,
        topic_partitions=None
        if tps is None
        else [TopicPartitions(t.topic_id, list(t.partitions)) for t in tps],
        api_version=version,
        client_id=client_id,
        client_host=client_host,
    )


def consumer_group_heartbeat_response(r: ConsumerGroupHeartbeatResponse, version: int) -> Any:
    cls = response_cls(ApiKey.CONSUMER_GROUP_HEARTBEAT)
    assignment = None
    if r.assignment is not None:
        assignment = cls.Assignment(
            topic_partitions=[
                cls.Assignment.TopicPartitions(topic_id=t.topic_id, partitions=list(t.partitions))
                for t in r.assignment
            ]
        )
    return codec.response_class(ApiKey.CONSUMER_GROUP_HEARTBEAT, version)(
        throttle_time_ms=r.throttle_time_ms,
        error_code=r.error_code,
        error_message=r.error_message,
        member_id=r.member_id,
        member_epoch=r.member_epoch,
        heartbeat_interval_ms=r.heartbeat_interval_ms,
        assignment=assignment,
    )


def consumer_group_describe_request(m: Any, version: int) -> ConsumerGroupDescribeRequest:
    return ConsumerGroupDescribeRequest(group_ids=list(m.group_ids), api_version=version)


def _described_assignment(cls: Any, parts: list[DescribedTopicPartitions]) -> Any:
    return cls(
        topic_partitions=[
            cls.TopicPartitions(topic_id=t.topic_id, topic_name=t.topic_name, partitions=list(t.partitions))
            for t in parts
        ]
    )


def described_group(g: DescribedGroup) -> Any:
    """One ConsumerGroupDescribe group entry (version independent)."""
    gcls = response_cls(ApiKey.CONSUMER_GROUP_DESCRIBE).DescribedGroup
    mcls = gcls.Member
    return gcls(
        error_code=g.error_code,
        error_message=g.error_message,
        group_id=g.group_id,
        group_state=g.group_state,
        group_epoch=g.group_epoch,
        assignment_epoch=g.assignment_epoch,
        assignor_name=g.assignor_name,
        members=[
            mcls(
                member_id=x.member_id,
                instance_id=x.instance_id,
                rack_id=x.rack_id,
                member_epoch=x.member_epoch,
                client_id=x.client_id,
                client_host=x.client_host,
                subscribed_topic_names=list(x.subscribed_topic_names),
                subscribed_topic_regex=x.subscribed_topic_regex,
                assignment=_described_assignment(mcls.Assignment, x.assignment),
                target_assignment=_described_assignment(mcls.Assignment, x.target_assignment),
                member_type=x.member_type,
            )
            for x in g.members
        ],
    )


def consumer_group_describe_response(r: ConsumerGroupDescribeResponse, version: int) -> Any:
    return response(ApiKey.CONSUMER_GROUP_DESCRIBE, version, groups=[described_group(g) for g in r.groups])


# --- admin-side group APIs -------------------------------------------------------------------------


def describe_groups_request(m: Any, version: int) -> DescribeGroupsRequest:
    return DescribeGroupsRequest(group_ids=list(m.groups), api_version=version)


def described_classic_group(g: DescribedClassicGroup) -> Any:
    gcls = response_cls(ApiKey.DESCRIBE_GROUPS).DescribedGroup
    return gcls(
        error_code=g.error_code,
        error_message=g.error_message,
        group_id=g.group_id,
        group_state=g.group_state,
        protocol_type=g.protocol_type,
        protocol_data=g.protocol_data,
        members=[
            gcls.DescribedGroupMember(
                member_id=x.member_id,
                group_instance_id=x.group_instance_id,
                client_id=x.client_id,
                client_host=x.client_host,
                member_metadata=x.member_metadata,
                member_assignment=x.member_assignment,
            )
            for x in g.members
        ],
    )


def describe_groups_response(r: DescribeGroupsResponse, version: int) -> Any:
    return response(ApiKey.DESCRIBE_GROUPS, version, groups=[described_classic_group(g) for g in r.groups])


def list_groups_request(m: Any, version: int) -> ListGroupsRequest:
    return ListGroupsRequest(
        states_filter=list(m.states_filter) if version >= 4 else [],
        types_filter=list(m.types_filter) if version >= 5 else [],
        api_version=version,
    )


def listed_group(g: ListedGroup) -> Any:
    return response_cls(ApiKey.LIST_GROUPS).ListedGroup(
        group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.group_state, group_type=g.group_type
    )


def list_groups_response(r: ListGroupsResponse, version: int) -> Any:
    return response(
        ApiKey.LIST_GROUPS, version, error_code=int(r.error_code), groups=[listed_group(g) for g in r.groups]
    )


def delete_groups_request(m: Any, version: int) -> DeleteGroupsRequest:
    return DeleteGroupsRequest(group_ids=list(m.groups_names), api_version=version)


def delete_groups_response(r: DeleteGroupsResponse, version: int) -> Any:
    cls = response_cls(ApiKey.DELETE_GROUPS)
    return cls[version](
        results=[
            cls.DeletableGroupResult(group_id=x.group_id, error_code=int(x.error_code)) for x in r.results
        ]
    )


# --- FindCoordinator -------------------------------------------------------------------------------


def find_coordinator_keys(m: Any, version: int) -> tuple[int, list[str]]:
    """(key type, keys) of a FindCoordinator request; v4+ batches keys (KIP-699)."""
    key_type = m.key_type if version >= 1 else KEY_TYPE_GROUP
    keys = list(m.coordinator_keys) if version >= 4 else [m.key]
    return key_type, keys


def find_coordinator_response(version: int, answers: list[tuple[str, int, str, int, int, str | None]]) -> Any:
    """``answers``: (key, node id, host, port, error code, error message) per key, in request order."""
    cls = response_cls(ApiKey.FIND_COORDINATOR)
    if version >= 4:
        return cls[version](
            coordinators=[
                cls.Coordinator(key=k, node_id=n, host=h, port=p, error_code=e, error_message=msg)
                for k, n, h, p, e, msg in answers
            ]
        )
    _, n, h, p, e, msg = answers[0]
    return cls[version](error_code=e, error_message=msg if version >= 1 else None, node_id=n, host=h, port=p)


def refusal(api_key: int, version: int, m: Any, error: int, message: str | None = None) -> Any | None:
    """A response refusing the whole request ``m`` with ``error`` where the API has no top-level error
    code: the error repeated on every group / topic partition the request names (a null name reads as
    ""). None when the API does have a top-level error code (``codec.error_response`` says it)."""
    cls = response_cls(api_key)

    def names(items: Any) -> list[Any]:
        return list(items or ())

    if api_key in (ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT):
        prefix = "OffsetCommitResponse" if api_key == ApiKey.OFFSET_COMMIT else "TxnOffsetCommitResponse"
        tcls = getattr(cls, f"{prefix}Topic")
        pcls = getattr(tcls, f"{prefix}Partition")
        # OffsetCommit v10 and TxnOffsetCommit v6 name topics by id: the answer carries the ids back.
        return cls[version](
            topics=[
                tcls(
                    name=t.name or "",
                    topic_id=getattr(t, "topic_id", None),
                    partitions=[pcls(partition_index=p.partition_index, error_code=error) for p in names(t.partitions)],
                )
                for t in names(m.topics)
            ]
        )
    if api_key == ApiKey.OFFSET_FETCH and version >= 8:
        gcls = cls.OffsetFetchResponseGroup
        return cls[version](groups=[gcls(group_id=g.group_id or "", error_code=error, topics=[]) for g in names(m.groups)])
    if api_key == ApiKey.DESCRIBE_GROUPS:
        return cls[version](
            groups=[described_classic_group(DescribedClassicGroup(g or "", error, message)) for g in names(m.groups)]
        )
    if api_key == ApiKey.CONSUMER_GROUP_DESCRIBE:
        return cls[version](
            groups=[
                cls.DescribedGroup(group_id=g or "", error_code=error, error_message=message)
                for g in names(m.group_ids)
            ]
        )
    if api_key == ApiKey.DELETE_GROUPS:
        rcls = cls.DeletableGroupResult
        return cls[version](results=[rcls(group_id=g or "", error_code=error) for g in names(m.groups_names)])
    if api_key == ApiKey.FIND_COORDINATOR and version >= 4:
        keys = names(m.coordinator_keys)
        return find_coordinator_response(version, [(k or "", -1, "", -1, error, message) for k in keys])
    return None


def group_ids(api_key: int, version: int, msg: Any) -> list[str]:
    """The group ids a request names (FindCoordinator: its GROUP keys only)."""
    if api_key == ApiKey.FIND_COORDINATOR:
        key_type, keys = find_coordinator_keys(msg, version)
        return keys if key_type == KEY_TYPE_GROUP else []
    if api_key == ApiKey.DESCRIBE_GROUPS:
        return list(msg.groups)
    if api_key == ApiKey.DELETE_GROUPS:
        return list(msg.groups_names)
    if api_key in (ApiKey.CONSUMER_GROUP_DESCRIBE, ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.STREAMS_GROUP_DESCRIBE):
        return list(msg.group_ids)
    if api_key == ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS:
        return [g.group_id for g in msg.groups]
    if api_key == ApiKey.OFFSET_FETCH and version >= 8:
        return [g.group_id for g in msg.groups]
    if api_key == ApiKey.LIST_GROUPS:
        return []
    return [msg.group_id]
