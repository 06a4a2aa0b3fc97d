"""Read-only views of connect groups, as ``coordinator.describe`` gives of consumer groups: a describe
(state, epochs, the assignor of the target and the worker computing the next one, and per worker its
URL, epoch, state, what it runs and its target) and ListGroups entries of group type ``connect``.
The gateway will map them to the wire (ConnectGroupDescribe, ListGroups v5) when the API is wired.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from coordinator.connect.messages import ConnectorsAndTasks
from coordinator.connect.model import NO_TARGET, ConnectGroup
from coordinator.errors import Errors

CONNECT_GROUP_TYPE = "connect"
CONNECT_PROTOCOL_TYPE = "connect"


@dataclass(slots=True)
class DescribedWorker:
    member_id: str
    url: str
    instance_id: str | None
    client_id: str
    client_host: str
    member_epoch: int
    state: str
    assignment: ConnectorsAndTasks  # what it runs: assigned and still pending revocation
    target_assignment: ConnectorsAndTasks
    assignors: list[str]


@dataclass(slots=True)
class DescribedConnectGroup:
    group_id: str
    error_code: int = 0
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignment_error: int = 0
    assignor_name: str = ""
    computing_member_id: str | None = None
    workers: list[DescribedWorker] = field(default_factory=list)


@dataclass(slots=True)
class ListedConnectGroup:
    group_id: str
    protocol_type: str
    group_state: str
    group_type: str


def describe_group(groups: dict[str, ConnectGroup], group_id: str) -> DescribedConnectGroup:
    group = groups.get(group_id)
    if group is None:
        return DescribedConnectGroup(group_id, int(Errors.GROUP_ID_NOT_FOUND), f"Group {group_id} not found.")
    out = DescribedConnectGroup(
        group_id, 0, None, group.state().value, group.group_epoch, group.assignment_epoch, group.assignment_error,
        group.assignor or "", group.computing.member_id if group.computing is not None else None,
    )
    for mid in sorted(group.workers):
        w = group.workers[mid]
        out.workers.append(
            DescribedWorker(
                mid, w.url, w.instance_id, w.client_id, w.client_host, w.member_epoch, w.state.name,
                ConnectorsAndTasks.of(w.assigned | w.pending_revocation),
                ConnectorsAndTasks.of(group.target.get(mid, NO_TARGET).assignment),
                [a.name for a in w.assignors],
            )
        )
    return out


def list_groups(
    groups: dict[str, ConnectGroup], states: Iterable[str] = (), types: Iterable[str] = ()
) -> list[ListedConnectGroup]:
    """ListGroups v5's filters, case-insensitive; empty filters match everything."""
    want_states = {s.lower() for s in states}
    want_types = {t.lower() for t in types}
    if want_types and CONNECT_GROUP_TYPE not in want_types:
        return []
    out = []
    for gid in sorted(groups):
        state = groups[gid].state().value
        if want_states and state.lower() not in want_states:
            continue
        out.append(ListedConnectGroup(gid, CONNECT_PROTOCOL_TYPE, state, CONNECT_GROUP_TYPE))
    return out
