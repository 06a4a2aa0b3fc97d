"""Decoded admin-side group requests and responses the group service answers, independent of the
wire codec: DescribeGroups (v0-v6), ListGroups (v0-v5), ConsumerGroupDescribe, DeleteGroups, and
the OffsetCommit / OffsetFetch checks (the gateway reads and writes the offsets themselves).

Like the classic messages, each request carries the fields of its highest version plus its API
version; the gateway fills what the wire has.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coordinator.describe import DescribedGroup, ListedGroup
from coordinator.errors import Errors

# DescribeGroups v6 (KIP-1043) answers an unknown group with GROUP_ID_NOT_FOUND instead of Dead.
DESCRIBE_GROUPS_NOT_FOUND_VERSION = 6
CLASSIC_GROUP_TYPE = "classic"
CONSUMER_GROUP_TYPE = "consumer"


@dataclass(slots=True)
class DescribeGroupsRequest:
    group_ids: list[str]
    api_version: int = 6


@dataclass(slots=True)
class DescribedClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    # Only for a Stable group: the member's metadata for the group's protocol and its assignment.
    member_metadata: bytes = b""
    member_assignment: bytes = b""


@dataclass(slots=True)
class DescribedClassicGroup:
    group_id: str
    error_code: int = 0
    error_message: str | None = None
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: list[DescribedClassicMember] = field(default_factory=list)


@dataclass(slots=True)
class DescribeGroupsResponse:
    groups: list[DescribedClassicGroup]


@dataclass(slots=True)
class ListGroupsRequest:
    states_filter: list[str] = field(default_factory=list)  # v4+
    types_filter: list[str] = field(default_factory=list)  # v5+
    api_version: int = 5


@dataclass(slots=True)
class ListGroupsResponse:
    groups: list[ListedGroup]
    error_code: int = 0


@dataclass(slots=True)
class ConsumerGroupDescribeRequest:
    group_ids: list[str]
    api_version: int = 1


@dataclass(slots=True)
class ConsumerGroupDescribeResponse:
    groups: list[DescribedGroup]


@dataclass(slots=True)
class DeleteGroupsRequest:
    group_ids: list[str]
    api_version: int = 2


@dataclass(slots=True)
class DeletableGroupResult:
    group_id: str
    error_code: int


@dataclass(slots=True)
class DeleteGroupsResponse:
    results: list[DeletableGroupResult]


@dataclass(slots=True)
class OffsetCommitCheck:
    """May this OffsetCommit / TxnOffsetCommit write? ``generation_id`` is the member epoch for
    consumer-protocol members (the field is called GenerationIdOrMemberEpoch on the wire)."""

    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None
    api_version: int = 9
    is_transactional: bool = False
    # topic name -> partitions being committed (KIP-1251 validation); None when unknown
    partitions: tuple[tuple[str, tuple[int, ...]], ...] | None = None


@dataclass(slots=True)
class OffsetFetchCheck:
    """May this OffsetFetch (v9+ carries member id and epoch) read the group's offsets?"""

    group_id: str
    member_id: str | None = None
    member_epoch: int = -1


@dataclass(slots=True)
class OffsetCheckResponse:
    error_code: Errors
