"""The in-memory model of connect groups (the draft's "Data Model": worker group, workers, target and
current assignments).

What is assigned is a set of connectors (by name) and a set of tasks (connector name, task number):
``ConnectAssignment``. Assignments are frozen values; a change builds a new one. State changes only
through ``coordinator.connect.records.apply``; what records do not hold (the owner index, the pending
assignment computation) is derived or transient.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

# The metadata versions of Connect's assignors (Connect's ``connect.protocol``): eager, compatible and
# sessioned. The coordinator does not interpret them beyond their ranges.
EAGER = 0
COMPATIBLE = 1
SESSIONED = 2

# An assignor's reason (int8). Any change of it bumps the group epoch except a return to NONE: a
# worker whose scheduled rebalance delay ran out sets SCHEDULED_REBALANCE to ask for a new target,
# then goes back to NONE once it ran the assignment (docs/connect.md, "Scheduled rebalance delay").
REASON_NONE = 0
REASON_SCHEDULED_REBALANCE = 1

TaskId = tuple[str, int]  # (connector name, task number)


@dataclass(frozen=True, slots=True)
class ConnectAssignment:
    connectors: frozenset[str] = frozenset()
    tasks: frozenset[TaskId] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.connectors or self.tasks)

    def __or__(self, other: ConnectAssignment) -> ConnectAssignment:
        return ConnectAssignment(self.connectors | other.connectors, self.tasks | other.tasks)

    def __and__(self, other: ConnectAssignment) -> ConnectAssignment:
        return ConnectAssignment(self.connectors & other.connectors, self.tasks & other.tasks)

    def __sub__(self, other: ConnectAssignment) -> ConnectAssignment:
        return ConnectAssignment(self.connectors - other.connectors, self.tasks - other.tasks)

    def issubset(self, other: ConnectAssignment) -> bool:
        return self.connectors <= other.connectors and self.tasks <= other.tasks

    def isdisjoint(self, other: ConnectAssignment) -> bool:
        return self.connectors.isdisjoint(other.connectors) and self.tasks.isdisjoint(other.tasks)

    def canon(self) -> tuple[tuple[str, ...], tuple[TaskId, ...]]:
        return tuple(sorted(self.connectors)), tuple(sorted(self.tasks))


NOTHING = ConnectAssignment()


@dataclass(frozen=True, slots=True)
class ClientAssignor:
    """A client-side assignor a worker offers, with the metadata it encoded for it."""

    name: str
    minimum_version: int
    maximum_version: int
    reason: int = REASON_NONE
    version: int = 0
    metadata: bytes = b""

    def covers(self, other: ClientAssignor) -> bool:
        return self.minimum_version <= other.minimum_version and self.maximum_version >= other.maximum_version


class WorkerState(enum.IntEnum):
    """A worker's reconciliation state (as a consumer group member's)."""

    STABLE = 0
    UNREVOKED = 1  # must stop connectors / tasks before it moves to the target epoch
    UNRELEASED = 2  # at the target epoch, waiting for connectors / tasks other workers still run


class ConnectGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class WorkerTarget:
    """One worker's part of the target assignment, as the assignor installed it."""

    assignment: ConnectAssignment = NOTHING
    error: int = 0
    version: int = 0
    metadata: bytes = b""


NO_TARGET = WorkerTarget()


@dataclass(frozen=True, slots=True)
class ClassicWorkerMetadata:
    """A worker speaking the classic protocol (JoinGroup / SyncGroup / Heartbeat), translated per
    worker (translate/connect_classic_worker.py): the session timeout and protocols (name, metadata)
    of its last JoinGroup, as Kafka keeps ClassicMemberMetadata for classic members of consumer groups."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]


@dataclass(slots=True)
class ConnectWorker:
    member_id: str
    # Metadata (member record).
    url: str = ""
    instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    assignors: tuple[ClientAssignor, ...] = ()  # in the worker's order of preference
    classic: ClassicWorkerMetadata | None = None  # set for a worker speaking the classic protocol
    # Current assignment (current-assignment record).
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: WorkerState = WorkerState.STABLE
    assigned: ConnectAssignment = NOTHING
    pending_revocation: ConnectAssignment = NOTHING
    error: int = 0  # the assignment error the worker was last given
    version: int = 0
    metadata: bytes = b""

    def assignor(self, name: str) -> ClientAssignor | None:
        for a in self.assignors:
            if a.name == name:
                return a
        return None


@dataclass(slots=True)
class AssignmentRequest:
    """The computation the coordinator asked of one worker (transient, as consumer groups' offloaded jobs):
    the group epoch it is for, the workers it covers and when it is given up."""

    member_id: str
    group_epoch: int
    assignor: str
    workers: frozenset[str]
    deadline_ms: int
    prepared: bool = False


@dataclass(slots=True)
class ConnectGroup:
    group_id: str
    group_epoch: int = 0
    workers: dict[str, ConnectWorker] = field(default_factory=dict)
    # Target assignment (target metadata record + one record per worker).
    assignment_epoch: int = 0
    assignment_error: int = 0
    assignor: str | None = None  # the assignor that computed the current target
    target: dict[str, WorkerTarget] = field(default_factory=dict)
    # Derived: who runs each connector / task (assigned or pending revocation).
    connector_owners: dict[str, str] = field(default_factory=dict)
    task_owners: dict[TaskId, str] = field(default_factory=dict)
    # Transient: the assignment computation in flight; the worker that ran the last one (stickiness).
    computing: AssignmentRequest | None = None
    last_computer: str | None = None
    dead: bool = False

    def state(self) -> ConnectGroupState:
        if self.dead:
            return ConnectGroupState.DEAD
        if not self.workers:
            return ConnectGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConnectGroupState.ASSIGNING
        for w in self.workers.values():
            if w.member_epoch != self.assignment_epoch or w.state is not WorkerState.STABLE:
                return ConnectGroupState.RECONCILING
        return ConnectGroupState.STABLE

    def snapshot(self) -> tuple[object, ...]:
        """A canonical view of everything persisted (to check replay)."""
        workers = tuple(
            sorted(
                (
                    w.member_id, w.url, w.instance_id, w.client_id, w.client_host, w.rebalance_timeout_ms,
                    w.assignors, w.member_epoch, w.previous_member_epoch, int(w.state), w.assigned.canon(),
                    w.pending_revocation.canon(), w.error, w.version, w.metadata, w.classic,
                )
                for w in self.workers.values()
            )
        )
        target = tuple(
            sorted((m, t.assignment.canon(), t.error, t.version, t.metadata) for m, t in self.target.items())
        )
        return (
            self.group_id, self.group_epoch, workers, self.assignment_epoch, self.assignment_error,
            self.assignor, target,
        )
