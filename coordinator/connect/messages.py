"""Decoded ConnectGroupHeartbeat, ConnectGroupPrepareAssignment and ConnectGroupInstallAssignment
requests and responses, independent of any wire codec. ``None`` means null on the wire ("unchanged").

Besides the draft's fields, a heartbeat carries the worker's ``worker_url`` (the draft's data model
keeps one per worker but its request schema has no field for it; docs/connect.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from coordinator.connect.model import ClassicWorkerMetadata, ConnectAssignment, TaskId

JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class AssignorSpec:
    name: str
    minimum_version: int
    maximum_version: int
    reason: int = 0
    version: int = 0
    metadata: bytes = b""


@dataclass(frozen=True, slots=True)
class ConnectorsAndTasks:
    connectors: Sequence[str] = ()
    tasks: Sequence[TaskId] = ()

    def assignment(self) -> ConnectAssignment:
        return ConnectAssignment(frozenset(self.connectors), frozenset(self.tasks))

    @staticmethod
    def of(a: ConnectAssignment) -> ConnectorsAndTasks:
        return ConnectorsAndTasks(sorted(a.connectors), sorted(a.tasks))


@dataclass(slots=True)
class ConnectGroupHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int = -1
    instance_id: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    client_assignors: Sequence[AssignorSpec] | None = None
    owned: ConnectorsAndTasks | None = None  # ConnectorsAndTasks on the wire
    worker_url: str | None = None
    # Not on the wire: the client's identity.
    client_id: str = ""
    client_host: str = ""
    # Not on the wire: set when the heartbeat translates a classic worker's JoinGroup (kept otherwise).
    classic: ClassicWorkerMetadata | None = None


@dataclass(slots=True)
class HeartbeatAssignment:
    error: int
    assigned: ConnectorsAndTasks
    version: int
    metadata: bytes


@dataclass(slots=True)
class ConnectGroupHeartbeatResponse:
    error_code: int = 0
    error_message: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: HeartbeatAssignment | None = None
    throttle_time_ms: int = 0


@dataclass(slots=True)
class ConnectGroupPrepareAssignmentRequest:
    group_id: str
    member_id: str
    member_epoch: int


@dataclass(frozen=True, slots=True)
class PreparedWorker:
    member_id: str
    member_epoch: int
    instance_id: str | None
    url: str
    version: int
    reason: int
    metadata: bytes
    assigned: ConnectorsAndTasks  # what the worker runs now (assigned and still pending revocation)
    target: ConnectorsAndTasks  # its part of the current target


@dataclass(slots=True)
class ConnectGroupPrepareAssignmentResponse:
    error_code: int = 0
    error_message: str | None = None
    group_epoch: int = 0
    assignor_name: str = ""
    members: list[PreparedWorker] = field(default_factory=list)
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class InstalledWorker:
    member_id: str
    assigned: ConnectorsAndTasks
    error: int = 0
    version: int = 0
    metadata: bytes = b""


@dataclass(slots=True)
class ConnectGroupInstallAssignmentRequest:
    group_id: str
    member_id: str
    member_epoch: int
    group_epoch: int
    error: int = 0
    members: Sequence[InstalledWorker] = ()


@dataclass(slots=True)
class ConnectGroupInstallAssignmentResponse:
    error_code: int = 0
    error_message: str | None = None
    throttle_time_ms: int = 0
