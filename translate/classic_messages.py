"""Decoded classic group requests and responses (JoinGroup v0-9, SyncGroup v0-5, Heartbeat v0-4,
LeaveGroup v0-5), independent of the wire codec.

Each type carries the fields of the highest version; the gateway fills what the wire version has
and drops what it cannot encode. Besides the wire fields a request carries its API version and the
client's identity from the request header and the connection, as Kafka's request context does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The member id a client sends before it has one.
UNKNOWN_MEMBER_ID = ""
# JoinGroup v4+: a dynamic member with an empty id is answered MEMBER_ID_REQUIRED (KIP-394).
MEMBER_ID_REQUIRED_VERSION = 4
# JoinGroup v9 adds SkipAssignment (KIP-814).
SKIP_ASSIGNMENT_VERSION = 9
# LeaveGroup v3 turns the single member id into a batch of members (KIP-345).
BATCH_LEAVE_VERSION = 3


@dataclass(slots=True)
class JoinGroupRequestProtocol:
    name: str
    metadata: bytes


@dataclass(slots=True)
class JoinGroupRequest:
    group_id: str
    session_timeout_ms: int
    member_id: str = UNKNOWN_MEMBER_ID
    protocol_type: str = "consumer"
    protocols: list[JoinGroupRequestProtocol] = field(default_factory=list)
    rebalance_timeout_ms: int = -1  # v1+; v0 uses the session timeout
    group_instance_id: str | None = None  # v5+
    reason: str | None = None  # v8+
    api_version: int = 9
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class JoinGroupResponseMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(slots=True)
class JoinGroupResponse:
    error_code: int = 0
    generation_id: int = -1
    protocol_type: str | None = None  # v7+
    protocol_name: str | None = None  # nullable from v7; older versions encode None as ""
    leader: str = ""
    skip_assignment: bool = False  # v9+
    member_id: str = UNKNOWN_MEMBER_ID
    members: list[JoinGroupResponseMember] = field(default_factory=list)
    throttle_time_ms: int = 0


@dataclass(slots=True)
class SyncGroupRequestAssignment:
    member_id: str
    assignment: bytes


@dataclass(slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None  # v3+
    protocol_type: str | None = None  # v5+
    protocol_name: str | None = None  # v5+
    assignments: list[SyncGroupRequestAssignment] = field(default_factory=list)
    api_version: int = 5
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class SyncGroupResponse:
    error_code: int = 0
    protocol_type: str | None = None  # v5+
    protocol_name: str | None = None  # v5+
    assignment: bytes = b""
    throttle_time_ms: int = 0


@dataclass(slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None  # v3+
    api_version: int = 4
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class HeartbeatResponse:
    error_code: int = 0
    throttle_time_ms: int = 0


@dataclass(slots=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None  # v5+


@dataclass(slots=True)
class LeaveGroupRequest:
    group_id: str
    # v0-2 carry one member id; the gateway puts it here as a one-element batch.
    members: list[MemberIdentity] = field(default_factory=list)
    api_version: int = 5
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class MemberResponse:
    member_id: str
    group_instance_id: str | None
    error_code: int


@dataclass(slots=True)
class LeaveGroupResponse:
    # For v0-2 the gateway answers with the single member's error when this is NONE.
    error_code: int = 0
    members: list[MemberResponse] = field(default_factory=list)  # v3+
    throttle_time_ms: int = 0


ClassicResponse = JoinGroupResponse | SyncGroupResponse | HeartbeatResponse | LeaveGroupResponse
