"""What the group coordinator behind an endpoint says about one group, asked over raw requests.

The group's type comes from ListGroups v5 (KIP-848 added GroupType: "classic" or "consumer"); its members
from ConsumerGroupDescribe (consumer groups) or DescribeGroups (classic groups). Each request goes to the
coordinator FindCoordinator names, as a client would, so through the gateway this sees the gateway's own
coordinator and straight to a broker it sees the broker's.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.admin import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)

from compat_tests.harness.probe import find_coordinator_endpoints, roundtrip
from gateway.wire.protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse

TP = tuple[str, int]
RETRIABLE = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


@dataclass(frozen=True, slots=True)
class MemberView:
    member_id: str
    instance_id: str | None
    member_epoch: int  # -1 for classic members (DescribeGroups has no epochs)
    assignment: frozenset[TP]


@dataclass(frozen=True, slots=True)
class GroupView:
    group_type: str  # "classic", "consumer", or "" when ListGroups does not list the group
    state: str  # as the coordinator spells it: "Stable", "STABLE", "Empty", ...
    members: dict[str, MemberView] = field(default_factory=dict)
    group_epoch: int = -1  # consumer groups only

    @property
    def stable(self) -> bool:
        return self.state.lower() == "stable"

    def assigned(self) -> list[TP]:
        return sorted(tp for m in self.members.values() for tp in m.assignment)


def coordinator(bootstrap: str, group: str) -> str:
    ep = find_coordinator_endpoints(bootstrap, group, 3)[0]
    return ep.address


def list_group(bootstrap: str, group: str) -> tuple[str, str]:
    """(group type, state) as ListGroups v5 reports them; ("", "") when the group is not listed."""
    address = coordinator(bootstrap, group)
    resp = roundtrip(address, ListGroupsRequest[5](states_filter=[], types_filter=[]), ListGroupsResponse, 5)
    if resp.error_code in RETRIABLE:
        raise _NotReady(f"ListGroups v5 error {resp.error_code}")
    assert resp.error_code == 0, f"ListGroups v5 error {resp.error_code}"
    for g in resp.groups:
        if g.group_id == group:
            return g.group_type, g.group_state
    return "", ""


def describe(bootstrap: str, group: str, timeout_s: float = 15.0) -> GroupView:
    """Type from ListGroups, then the members from the describe API that matches the type."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return _describe_once(bootstrap, group)
        except _NotReady:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


class _NotReady(AssertionError):
    pass


def _describe_once(bootstrap: str, group: str) -> GroupView:
    group_type, state = list_group(bootstrap, group)
    address = coordinator(bootstrap, group)
    if group_type == "consumer":
        describe_v0: Any = ConsumerGroupDescribeRequest[0]  # type: ignore[misc]
        req = describe_v0(group_ids=[group], include_authorized_operations=False)
        resp = roundtrip(address, req, ConsumerGroupDescribeResponse, 0)
        g = resp.groups[0]
        if g.error_code in RETRIABLE:
            raise _NotReady(f"ConsumerGroupDescribe error {g.error_code}")
        assert g.error_code == 0, f"ConsumerGroupDescribe error {g.error_code} {g.error_message}"
        members = {
            m.member_id: MemberView(
                m.member_id,
                m.instance_id,
                m.member_epoch,
                frozenset((t.topic_name, p) for t in m.assignment.topic_partitions for p in t.partitions),
            )
            for m in g.members
        }
        return GroupView(group_type, g.group_state, members, g.group_epoch)
    req5 = DescribeGroupsRequest[5](groups=[group], include_authorized_operations=False)
    resp5 = roundtrip(address, req5, DescribeGroupsResponse, 5)
    d = resp5.groups[0]
    if d.error_code in RETRIABLE:
        raise _NotReady(f"DescribeGroups error {d.error_code}")
    assert d.error_code == 0, f"DescribeGroups error {d.error_code}"
    members = {
        m.member_id: MemberView(
            m.member_id, m.group_instance_id, -1, frozenset(decode_assignment(m.member_assignment))
        )
        for m in d.members
    }
    return GroupView(group_type or "classic", d.group_state or state, members)


def decode_assignment(data: bytes | None) -> list[TP]:
    """A classic consumer's assignment (consumer embedded protocol): version, [topic, [partition]]."""
    if not data:
        return []
    buf = memoryview(bytes(data))
    off = 2  # int16 version; every version starts with the same topic list
    (n_topics,) = struct.unpack_from(">i", buf, off)
    off += 4
    out: list[TP] = []
    for _ in range(max(n_topics, 0)):
        (n,) = struct.unpack_from(">h", buf, off)
        off += 2
        topic = bytes(buf[off : off + n]).decode()
        off += n
        (n_parts,) = struct.unpack_from(">i", buf, off)
        off += 4
        for _ in range(max(n_parts, 0)):
            (p,) = struct.unpack_from(">i", buf, off)
            off += 4
            out.append((topic, p))
    return out
