"""Connect groups (coordinator/connect/) held by the group service beside classic and consumer groups.

A group id names one group of one type. Between the types the service answers as Kafka's coordinator
answers between consumer, share and streams groups: a ConnectGroupHeartbeat, PrepareAssignment or
InstallAssignment of an id held by a classic or consumer group is GROUP_ID_NOT_FOUND ("is not a connect
group"); a ConsumerGroupHeartbeat of a connect group's id is GROUP_ID_NOT_FOUND ("is not a consumer
group") and a JoinGroup of it INCONSISTENT_GROUP_PROTOCOL. The other classic APIs (SyncGroup, Heartbeat,
LeaveGroup) find no classic group of that id and answer as for any unknown group. An empty connect group
keeps its id until connect groups can be deleted (docs/connect.md).
"""

from __future__ import annotations

from typing import Any

from coordinator.connect.messages import (
    ConnectGroupHeartbeatRequest,
    ConnectGroupHeartbeatResponse,
    ConnectGroupInstallAssignmentRequest,
    ConnectGroupInstallAssignmentResponse,
    ConnectGroupPrepareAssignmentRequest,
    ConnectGroupPrepareAssignmentResponse,
)
from coordinator.connect.service import ConnectGroupCoordinator
from coordinator.errors import Errors
from coordinator.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from coordinator.outcome import Outcome, Reply, RequestKey
from translate.classic_messages import JoinGroupRequest, JoinGroupResponse
from translate.group_parts import GroupParts

CONNECT_REQUESTS = (
    ConnectGroupHeartbeatRequest,
    ConnectGroupPrepareAssignmentRequest,
    ConnectGroupInstallAssignmentRequest,
)


def other_type_holds(svc: GroupParts, group_id: str) -> bool:
    """Whether a classic or consumer group holds the id."""
    return svc.classic_groups.group(group_id) is not None or svc.coordinator.group(group_id) is not None


def holds(connect: ConnectGroupCoordinator, group_id: str) -> bool:
    return connect.group(group_id) is not None


def handle(svc: GroupParts, connect: ConnectGroupCoordinator, request: Any, request_key: RequestKey, now_ms: int) -> Outcome:
    """One connect group request, refused when another group type holds its id."""
    out = Outcome()
    if other_type_holds(svc, request.group_id):
        message = f"Group {request.group_id} is not a connect group."
        code = int(Errors.GROUP_ID_NOT_FOUND)
        body: object
        if isinstance(request, ConnectGroupHeartbeatRequest):
            body = ConnectGroupHeartbeatResponse(error_code=code, error_message=message, member_epoch=-1)
        elif isinstance(request, ConnectGroupPrepareAssignmentRequest):
            body = ConnectGroupPrepareAssignmentResponse(error_code=code, error_message=message)
        else:
            body = ConnectGroupInstallAssignmentResponse(error_code=code, error_message=message)
        out.responses.append(Reply(request_key, body))
        return out
    if isinstance(request, ConnectGroupHeartbeatRequest):
        res: Outcome[Any] = connect.connect_group_heartbeat(request, now_ms)
    elif isinstance(request, ConnectGroupPrepareAssignmentRequest):
        res = connect.prepare_assignment(request, now_ms)
    else:
        res = connect.install_assignment(request, now_ms)
    out.take(res)
    out.responses.append(Reply(request_key, res.response))
    return out


def refusal_of_other_type(connect: ConnectGroupCoordinator, request: object, request_key: RequestKey) -> Outcome | None:
    """The answer to a JoinGroup or ConsumerGroupHeartbeat of a connect group's id; None otherwise."""
    if isinstance(request, JoinGroupRequest) and holds(connect, request.group_id):
        out = Outcome()
        out.responses.append(Reply(request_key, JoinGroupResponse(
            error_code=int(Errors.INCONSISTENT_GROUP_PROTOCOL), member_id=request.member_id,
        )))  # fmt: skip
        return out
    if isinstance(request, ConsumerGroupHeartbeatRequest) and holds(connect, request.group_id):
        out = Outcome()
        out.responses.append(Reply(request_key, ConsumerGroupHeartbeatResponse(
            error_code=int(Errors.GROUP_ID_NOT_FOUND), error_message=f"Group {request.group_id} is not a consumer group.",
            member_epoch=-1,
        )))  # fmt: skip
        return out
    return None
