"""Wire <-> dataclass mapping of the connect group APIs (docs/connect.md): ConnectGroupHeartbeat,
ConnectGroupPrepareAssignment and ConnectGroupInstallAssignment requests decoded into the core's
messages (coordinator/connect/messages.py), and the core's answers built as the wire's responses. Each
API has version 0 only. Nothing here does I/O."""

from __future__ import annotations

from typing import Any

from coordinator.connect.messages import (
    AssignorSpec,
    ConnectGroupHeartbeatRequest,
    ConnectGroupHeartbeatResponse,
    ConnectGroupInstallAssignmentRequest,
    ConnectGroupInstallAssignmentResponse,
    ConnectGroupPrepareAssignmentRequest,
    ConnectGroupPrepareAssignmentResponse,
    ConnectorsAndTasks,
    InstalledWorker,
)
from gateway.wire.protocol import connect_messages as wire

CONNECT_API: dict[int, tuple[int, int]] = {
    wire.CONNECT_GROUP_HEARTBEAT: (0, 0),
    wire.CONNECT_GROUP_PREPARE_ASSIGNMENT: (0, 0),
    wire.CONNECT_GROUP_INSTALL_ASSIGNMENT: (0, 0),
}


def _units(m: Any) -> ConnectorsAndTasks:
    return ConnectorsAndTasks(list(m.connectors or ()), [(t.connector, t.task) for t in m.tasks or ()])


def _wire_units(cls: Any, a: ConnectorsAndTasks) -> Any:
    return cls(connectors=list(a.connectors), tasks=[cls.ConnectorTaskId(connector=c, task=t) for c, t in a.tasks])


def heartbeat_request(m: Any, client_id: str, client_host: str) -> ConnectGroupHeartbeatRequest:
    assignors = (
        None
        if m.client_assignors is None
        else [
            AssignorSpec(a.name, a.minimum_version, a.maximum_version, a.reason, a.metadata_version, bytes(a.metadata))
            for a in m.client_assignors
        ]
    )
    return ConnectGroupHeartbeatRequest(
        group_id=m.group_id,
        member_id=m.member_id,
        member_epoch=m.member_epoch,
        instance_id=m.instance_id,
        rebalance_timeout_ms=m.rebalance_timeout_ms,
        server_assignor=m.server_assignor,
        client_assignors=assignors,
        owned=None if m.connectors_and_tasks is None else _units(m.connectors_and_tasks),
        worker_url=m.worker_url,
        client_id=client_id,
        client_host=client_host,
    )


def heartbeat_response(r: ConnectGroupHeartbeatResponse) -> Any:
    cls: Any = wire.ConnectGroupHeartbeatResponse  # versioned by index (kafka-python's ApiMessage)
    assignment = None
    if r.assignment is not None:
        a = r.assignment
        assignment = cls.Assignment(
            error=a.error, connectors_and_tasks=_wire_units(cls.Assignment.ConnectorsAndTasks, a.assigned),
            metadata_version=a.version, metadata=a.metadata,
        )
    return cls[0](
        throttle_time_ms=r.throttle_time_ms, error_code=r.error_code, error_message=r.error_message,
        member_epoch=r.member_epoch, heartbeat_interval_ms=r.heartbeat_interval_ms, assignment=assignment,
    )


def prepare_request(m: Any) -> ConnectGroupPrepareAssignmentRequest:
    return ConnectGroupPrepareAssignmentRequest(m.group_id, m.member_id, m.member_epoch)


def prepare_response(r: ConnectGroupPrepareAssignmentResponse) -> Any:
    cls: Any = wire.ConnectGroupPrepareAssignmentResponse  # versioned by index (kafka-python's ApiMessage)
    m = cls.Member
    return cls[0](
        throttle_time_ms=r.throttle_time_ms, error_code=r.error_code, error_message=r.error_message,
        group_epoch=r.group_epoch, assignor_name=r.assignor_name,
        members=[
            m(
                member_id=w.member_id, member_epoch=w.member_epoch, instance_id=w.instance_id, worker_url=w.url,
                assignor=m.Assignor(metadata_version=w.version, reason=w.reason, metadata=w.metadata),
                owned=_wire_units(m.ConnectorsAndTasks, w.assigned), target=_wire_units(m.ConnectorsAndTasks, w.target),
            )
            for w in r.members
        ],
    )


def install_request(m: Any) -> ConnectGroupInstallAssignmentRequest:
    return ConnectGroupInstallAssignmentRequest(
        group_id=m.group_id, member_id=m.member_id, member_epoch=m.member_epoch, group_epoch=m.group_epoch,
        error=m.error,
        members=[
            InstalledWorker(x.member_id, _units(x.assigned), x.error, x.metadata_version, bytes(x.metadata))
            for x in m.members or ()
        ],
    )


def install_response(r: ConnectGroupInstallAssignmentResponse) -> Any:
    cls: Any = wire.ConnectGroupInstallAssignmentResponse  # versioned by index (kafka-python's ApiMessage)
    return cls[0](
        throttle_time_ms=r.throttle_time_ms, error_code=r.error_code, error_message=r.error_message
    )
