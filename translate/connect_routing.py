"""Connect groups (coordinator/connect/) held by the group service beside classic and consumer groups.

A group id names one group of one type. Between the types the service answers as Kafka's coordinator
answers between consumer, share and streams groups: a ConnectGroupHeartbeat, PrepareAssignment or
InstallAssignment of an id held by a consumer group, or by a classic group of another protocol type than
``connect``, is GROUP_ID_NOT_FOUND ("is not a connect group"); a ConsumerGroupHeartbeat of a connect group's
id is GROUP_ID_NOT_FOUND ("is not a consumer group").

Kafka Connect's classic workers and the connect group type meet here (translate/connect_conversion.py):
a joining ConnectGroupHeartbeat (epoch 0) for an id held by a classic group converts it (or deletes it when
empty), and JoinGroup / SyncGroup / Heartbeat / LeaveGroup of a connect group's id are classic workers
translated per worker (translate/connect_classic_worker.py). When the last worker on the connect protocol
leaves or is fenced while classic workers remain, the group goes back to a classic group.
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
from coordinator.connect.service import ConnectGroupCoordinator, validate_heartbeat
from coordinator.errors import ApiError, Errors
from coordinator.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from coordinator.outcome import ConversionRefused, Outcome, Reply, RequestKey
from translate.classic_messages import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest
from translate.connect_conversion import new_protocol_workers
from translate.group_parts import GroupParts

CONNECT_REQUESTS = (
    ConnectGroupHeartbeatRequest,
    ConnectGroupPrepareAssignmentRequest,
    ConnectGroupInstallAssignmentRequest,
)


CLASSIC_REQUESTS = (JoinGroupRequest, SyncGroupRequest, HeartbeatRequest, LeaveGroupRequest)


def other_type_holds(svc: GroupParts, group_id: str) -> bool:
    """Whether a classic or consumer group holds the id."""
    return svc.classic_groups.group(group_id) is not None or svc.coordinator.group(group_id) is not None


def _refusal(request: Any, code: int, message: str | None) -> object:
    if isinstance(request, ConnectGroupHeartbeatRequest):
        return ConnectGroupHeartbeatResponse(error_code=code, error_message=message, member_epoch=-1)
    if isinstance(request, ConnectGroupPrepareAssignmentRequest):
        return ConnectGroupPrepareAssignmentResponse(error_code=code, error_message=message)
    return ConnectGroupInstallAssignmentResponse(error_code=code, error_message=message)


def _convert(svc: GroupParts, request: ConnectGroupHeartbeatRequest, out: Outcome, now_ms: int) -> None:
    """A joining worker for an id a classic group holds: delete the group when empty, else convert it
    (ApiError, nothing changed, when it may not be)."""
    gid = request.group_id
    classic = svc.classic_groups.group(gid)
    assert classic is not None
    if not classic.members:
        svc.converter.delete_empty_classic_group(classic, now_ms, out)
        return
    validate_heartbeat(request)  # an invalid join converts nothing
    refusal = svc.connect_converter.upgrade_refusal(classic)
    if refusal is None:
        refusal = svc.connect_converter.joiner_refusal(classic, request)
    if refusal is not None:
        reason = getattr(refusal, "reason", None)
        if reason is not None:
            out.changes.append(ConversionRefused(gid, "classic", "connect", reason))
        raise refusal
    svc.connect_converter.upgrade(classic, now_ms, out)


def holds(connect: ConnectGroupCoordinator, group_id: str) -> bool:
    return connect.group(group_id) is not None


def handle(svc: GroupParts, connect: ConnectGroupCoordinator, request: Any, request_key: RequestKey, now_ms: int) -> Outcome:
    """One connect group request: a classic group converted first by a joining worker; refused when
    another group type holds its id."""
    out = Outcome()
    gid = request.group_id
    joining = isinstance(request, ConnectGroupHeartbeatRequest) and request.member_epoch == 0
    if joining and svc.classic_groups.group(gid) is not None and svc.coordinator.group(gid) is None:
        try:
            _convert(svc, request, out, now_ms)
        except ApiError as exc:
            out.responses.append(Reply(request_key, _refusal(request, int(exc.error), exc.message)))
            return out
    if other_type_holds(svc, gid):
        out.responses.append(Reply(request_key, _refusal(request, int(Errors.GROUP_ID_NOT_FOUND), f"Group {gid} is not a connect group.")))
        return out
    before = new_protocol_workers(connect.group(gid))
    if isinstance(request, ConnectGroupHeartbeatRequest):
        res: Outcome[Any] = connect.connect_group_heartbeat(request, now_ms)
    elif isinstance(request, ConnectGroupPrepareAssignmentRequest):
        res = connect.prepare_assignment(request, now_ms)
    else:
        res = connect.install_assignment(request, now_ms)
    out.take(res)
    out.responses.append(Reply(request_key, res.response))
    downgrade_if_classic_only(svc, gid, before, out, now_ms)
    return out


def downgrade_if_classic_only(svc: GroupParts, group_id: str, new_protocol_before: int, out: Outcome, now_ms: int) -> None:
    """The connect group goes back to a classic group when its last worker on the connect protocol is gone."""
    group = svc.connect.group(group_id)
    if group is not None and svc.connect_converter.should_downgrade(group, new_protocol_before):
        svc.connect_converter.downgrade(group, now_ms, out)


def classic_request(svc: GroupParts, request: Any, request_key: RequestKey, now_ms: int) -> Outcome:
    """JoinGroup / SyncGroup / Heartbeat / LeaveGroup of a connect group's id: a classic worker."""
    workers = svc.connect_workers
    if isinstance(request, JoinGroupRequest):
        return workers.join_group(request, request_key, now_ms)
    if isinstance(request, SyncGroupRequest):
        return workers.sync_group(request, request_key, now_ms)
    if isinstance(request, HeartbeatRequest):
        return workers.heartbeat(request, request_key, now_ms)
    return workers.leave_group(request, request_key, now_ms)


def refusal_of_other_type(connect: ConnectGroupCoordinator, request: object, request_key: RequestKey) -> Outcome | None:
    """The answer to a ConsumerGroupHeartbeat of a connect group's id; None otherwise."""
    if isinstance(request, ConsumerGroupHeartbeatRequest) and holds(connect, request.group_id):
        out = Outcome()
        out.responses.append(Reply(request_key, ConsumerGroupHeartbeatResponse(
            error_code=int(Errors.GROUP_ID_NOT_FOUND), error_message=f"Group {request.group_id} is not a consumer group.",
            member_epoch=-1,
        )))  # fmt: skip
        return out
    return None
