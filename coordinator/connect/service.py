"""``ConnectGroupCoordinator``: the sans-I/O entry point of the connect group type.

Built as ``coordinator.service.ConsumerGroupCoordinator``: every call takes ``now_ms`` and returns an
``Outcome`` (response, records to make durable first, timer changes); state changes only by records
applied as they are emitted (``ConnectTx.emit``), so ``replay`` of them rebuilds the same groups::

    coord = ConnectGroupCoordinator(ConnectConfig())
    for record in stored: coord.replay(record)
    coord.on_loaded(now_ms)                                   # after replay: arm timers
    res = coord.connect_group_heartbeat(ConnectGroupHeartbeatRequest(...), now_ms)
    res = coord.prepare_assignment(ConnectGroupPrepareAssignmentRequest(...), now_ms)
    res = coord.install_assignment(ConnectGroupInstallAssignmentRequest(...), now_ms)
    res = coord.on_timer(key, now_ms)

The rebalance, in the draft's terms:
- the group epoch is bumped when a worker joins, leaves or is fenced, and when a worker changes its
  assignors, their versions or metadata, or sets a reason (``model.REASON_*``);
- while the group epoch is ahead of the assignment epoch, the worker selected by ``assignors.select``
  is answered COMPUTE_ASSIGNMENT on its next heartbeat; it reads the group with PrepareAssignment and
  installs the target with InstallAssignment within its rebalance timeout (else it is asked again);
- an assignor error keeps every worker's target and only moves the assignment epoch;
- each worker reconciles on its own heartbeats (``reconcile``): revoke first, capped by its rebalance
  timeout (a worker that does not stop what it must is removed), then move to the target epoch, then
  get what others released.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from coordinator.connect import assignors as sel
from coordinator.connect import records as rec
from coordinator.connect.describe import (
    DescribedConnectGroup,
    ListedConnectGroup,
    describe_group,
    list_groups,
)
from coordinator.connect.messages import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    ConnectGroupHeartbeatRequest,
    ConnectGroupHeartbeatResponse,
    ConnectGroupInstallAssignmentRequest,
    ConnectGroupInstallAssignmentResponse,
    ConnectGroupPrepareAssignmentRequest,
    ConnectGroupPrepareAssignmentResponse,
    ConnectorsAndTasks,
    HeartbeatAssignment,
    PreparedWorker,
)
from coordinator.connect.model import (
    NO_TARGET,
    NOTHING,
    REASON_NONE,
    AssignmentRequest,
    ClientAssignor,
    ConnectAssignment,
    ConnectGroup,
    ConnectWorker,
    WorkerState,
    WorkerTarget,
)
from coordinator.connect.reconcile import reconcile
from coordinator.connect.records import ConnectRecord, apply
from coordinator.errors import ApiError, Errors
from coordinator.outcome import Outcome
from coordinator.timers import CancelTimer, ScheduleTimer, TimerChange, TimerKey

# Timer kinds of their own, so a driver holding both group types routes by kind.
CONNECT_SESSION = "connect-session"
CONNECT_REBALANCE = "connect-rebalance"  # the revocation deadline
CONNECT_ASSIGNMENT = "connect-assignment"  # the deadline of an asked assignment computation
TIMER_KINDS = (CONNECT_SESSION, CONNECT_REBALANCE, CONNECT_ASSIGNMENT)

R = TypeVar("R")


def session_key(group_id: str, member_id: str) -> TimerKey:
    return (CONNECT_SESSION, group_id, member_id)


def rebalance_key(group_id: str, member_id: str) -> TimerKey:
    return (CONNECT_REBALANCE, group_id, member_id)


def assignment_key(group_id: str, member_id: str) -> TimerKey:
    return (CONNECT_ASSIGNMENT, group_id, member_id)


@dataclass(slots=True)
class ConnectConfig:
    session_timeout_ms: int = 10_000  # Connect's session.timeout.ms default
    heartbeat_interval_ms: int = 3_000  # Connect's heartbeat.interval.ms default
    max_group_size: int | None = None


@dataclass(slots=True)
class ConnectState:
    config: ConnectConfig
    groups: dict[str, ConnectGroup] = field(default_factory=dict)


class ConnectTx:
    """What one call produces: records (applied as emitted) and timer changes."""

    __slots__ = ("state", "records", "timers")

    def __init__(self, state: ConnectState) -> None:
        self.state = state
        self.records: list[ConnectRecord] = []
        self.timers: list[TimerChange] = []

    def emit(self, record: ConnectRecord) -> None:
        self.records.append(record)
        apply(self.state.groups, record)

    def schedule(self, key: TimerKey, deadline_ms: int) -> None:
        self.timers.append(ScheduleTimer(key, deadline_ms))

    def cancel(self, key: TimerKey) -> None:
        self.timers.append(CancelTimer(key))

    def result(self, response: R) -> Outcome[R]:
        return Outcome(response, records=list(self.records), timers=list(self.timers))


def _blank(s: str | None) -> bool:
    return s is not None and not s.strip()


def validate_heartbeat(req: ConnectGroupHeartbeatRequest) -> None:
    """The draft's request validation, in its order (INVALID_REQUEST, then UNSUPPORTED_ASSIGNOR), plus
    what a join must carry here (docs/connect.md)."""
    if not req.group_id or not req.group_id.strip():
        raise ApiError(Errors.INVALID_REQUEST, "GroupId can't be empty.")
    if not req.member_id or not req.member_id.strip():
        raise ApiError(Errors.INVALID_REQUEST, "MemberId can't be empty.")
    if req.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        raise ApiError(Errors.INVALID_REQUEST, "MemberEpoch must be at least -1.")
    if _blank(req.instance_id):
        raise ApiError(Errors.INVALID_REQUEST, "InstanceId can't be empty.")
    if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
        if req.rebalance_timeout_ms <= 0:
            raise ApiError(Errors.INVALID_REQUEST, "RebalanceTimeoutMs must be larger than zero when joining.")
        if req.client_assignors is None and req.server_assignor is None:
            raise ApiError(Errors.INVALID_REQUEST, "ClientAssignors must be provided when joining.")
        if req.worker_url is None:
            raise ApiError(Errors.INVALID_REQUEST, "WorkerUrl must be provided when joining.")
        if req.owned is not None and req.owned.assignment():
            raise ApiError(Errors.INVALID_REQUEST, "ConnectorsAndTasks must be empty when joining.")
    if _blank(req.worker_url):
        raise ApiError(Errors.INVALID_REQUEST, "WorkerUrl can't be empty.")
    if req.server_assignor is not None and req.client_assignors is not None:
        raise ApiError(Errors.INVALID_REQUEST, "ServerAssignor and ClientAssignors can't be used together.")
    if req.client_assignors is not None:
        if not req.client_assignors and req.server_assignor is None:
            raise ApiError(Errors.INVALID_REQUEST, "ClientAssignors can't be empty.")
        seen: set[str] = set()
        for a in req.client_assignors:
            if not a.name or not a.name.strip():
                raise ApiError(Errors.INVALID_REQUEST, "Assignor.Name can't be empty.")
            if a.name in seen:
                raise ApiError(Errors.INVALID_REQUEST, f"Assignor {a.name} is listed twice.")
            seen.add(a.name)
            if a.minimum_version < -1:
                raise ApiError(Errors.INVALID_REQUEST, f"Assignor {a.name}: MinimumVersion must be at least -1.")
            if a.maximum_version < 0 or a.maximum_version < a.minimum_version:
                raise ApiError(
                    Errors.INVALID_REQUEST,
                    f"Assignor {a.name}: MaximumVersion must be at least 0 and at least MinimumVersion.",
                )
            if not a.minimum_version <= a.version <= a.maximum_version:
                raise ApiError(
                    Errors.INVALID_REQUEST, f"Assignor {a.name}: Version must be within MinimumVersion..MaximumVersion."
                )
    if req.server_assignor is not None:
        # Connect's assignors run on the workers: the coordinator has none of its own.
        raise ApiError(
            Errors.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported by connect groups."
        )


def _fenced(member_id: str, received: int, known: int) -> ApiError:
    return ApiError(
        Errors.FENCED_MEMBER_EPOCH,
        f"Worker {member_id} sent member epoch {received}, the coordinator knows {known}. The worker must stop "
        "all its connectors and tasks and rejoin.",
    )


def _assignors_differ(old: tuple[ClientAssignor, ...], new: tuple[ClientAssignor, ...]) -> bool:
    """Whether an assignor change asks for a new target: any change of names, ranges, versions or
    metadata, or a reason set to something other than REASON_NONE (a return to NONE asks nothing)."""
    def plain(a: tuple[ClientAssignor, ...]) -> tuple[ClientAssignor, ...]:
        return tuple(dataclasses.replace(x, reason=REASON_NONE) for x in a)

    if plain(old) != plain(new):
        return True
    return any(n.reason != o.reason and n.reason != REASON_NONE for o, n in zip(old, new, strict=True))


class ConnectGroupCoordinator:
    def __init__(self, config: ConnectConfig | None = None) -> None:
        self.state = ConnectState(config or ConnectConfig())

    # -- requests --------------------------------------------------------------------------------

    def connect_group_heartbeat(self, req: ConnectGroupHeartbeatRequest, now_ms: int) -> Outcome[ConnectGroupHeartbeatResponse]:
        tx = ConnectTx(self.state)
        try:
            validate_heartbeat(req)
            if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                return self._leave(tx, req, now_ms)
            return self._heartbeat(tx, req, now_ms)
        except ApiError as e:
            # A fenced worker's removal is kept: its records and timers go with the error.
            return tx.result(ConnectGroupHeartbeatResponse(error_code=int(e.error), error_message=e.message))

    def prepare_assignment(self, req: ConnectGroupPrepareAssignmentRequest, now_ms: int) -> Outcome[ConnectGroupPrepareAssignmentResponse]:
        try:
            group, _ = self._chosen(req.group_id, req.member_id, req.member_epoch)
        except ApiError as e:
            return Outcome(ConnectGroupPrepareAssignmentResponse(error_code=int(e.error), error_message=e.message))
        job = group.computing
        assert job is not None
        # The snapshot the computation works from: the group as it is now.
        job.group_epoch = group.group_epoch
        job.workers = frozenset(group.workers)
        job.prepared = True
        members = []
        for mid in sorted(group.workers):
            w = group.workers[mid]
            a = w.assignor(job.assignor)
            assert a is not None
            members.append(
                PreparedWorker(
                    mid, w.member_epoch, w.instance_id, w.url, a.version, a.reason, a.metadata,
                    ConnectorsAndTasks.of(w.assigned | w.pending_revocation),
                    ConnectorsAndTasks.of(group.target.get(mid, NO_TARGET).assignment),
                )
            )
        return Outcome(ConnectGroupPrepareAssignmentResponse(group_epoch=group.group_epoch, assignor_name=job.assignor, members=members))

    def install_assignment(self, req: ConnectGroupInstallAssignmentRequest, now_ms: int) -> Outcome[ConnectGroupInstallAssignmentResponse]:
        tx = ConnectTx(self.state)
        try:
            group, job = self._chosen(req.group_id, req.member_id, req.member_epoch)
            self._install(tx, group, job, req)
        except ApiError as e:
            return tx.result(ConnectGroupInstallAssignmentResponse(error_code=int(e.error), error_message=e.message))
        return tx.result(ConnectGroupInstallAssignmentResponse())

    # -- time --------------------------------------------------------------------------------------

    def on_timer(self, key: TimerKey, now_ms: int) -> Outcome[None]:
        """An expired session removes the worker; an expired revocation deadline removes a worker still
        revoking; an expired computation is given up (the next heartbeat asks again)."""
        kind, group_id, member_id = key
        tx = ConnectTx(self.state)
        group = self.state.groups.get(group_id)
        worker = group.workers.get(member_id) if group is not None else None
        if group is None or worker is None:
            return tx.result(None)
        if kind == CONNECT_SESSION or (kind == CONNECT_REBALANCE and worker.state is WorkerState.UNREVOKED):
            self._remove(tx, group, member_id)
        elif kind == CONNECT_ASSIGNMENT and group.computing is not None and group.computing.member_id == member_id:
            group.computing = None
        return tx.result(None)

    def on_loaded(self, now_ms: int) -> Outcome[None]:
        """After replay: every worker's session timer, and the revocation timer of those revoking."""
        tx = ConnectTx(self.state)
        for group in self.state.groups.values():
            for w in group.workers.values():
                tx.schedule(session_key(group.group_id, w.member_id), now_ms + self.state.config.session_timeout_ms)
                if w.state is WorkerState.UNREVOKED:
                    tx.schedule(rebalance_key(group.group_id, w.member_id), now_ms + max(w.rebalance_timeout_ms, 0))
        return tx.result(None)

    # -- persistence -------------------------------------------------------------------------------

    def replay(self, record: ConnectRecord) -> None:
        apply(self.state.groups, record)

    def describe(self, group_ids: Iterable[str]) -> list[DescribedConnectGroup]:
        return [describe_group(self.state.groups, g) for g in group_ids]

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[ListedConnectGroup]:
        return list_groups(self.state.groups, states, types)

    def group(self, group_id: str) -> ConnectGroup | None:
        return self.state.groups.get(group_id)

    def snapshot(self) -> dict[str, tuple[object, ...]]:
        return {gid: g.snapshot() for gid, g in self.state.groups.items()}

    # -- internals ---------------------------------------------------------------------------------

    def _leave(self, tx: ConnectTx, req: ConnectGroupHeartbeatRequest, now_ms: int) -> Outcome[ConnectGroupHeartbeatResponse]:
        group = self.state.groups.get(req.group_id)
        if group is None:
            raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
        if req.member_id not in group.workers:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID, f"Worker {req.member_id} is not a member of group {req.group_id}.")
        self._remove(tx, group, req.member_id)
        return tx.result(ConnectGroupHeartbeatResponse(member_epoch=LEAVE_GROUP_MEMBER_EPOCH))

    def _heartbeat(self, tx: ConnectTx, req: ConnectGroupHeartbeatRequest, now_ms: int) -> Outcome[ConnectGroupHeartbeatResponse]:
        st = self.state
        epoch = req.member_epoch
        joining = epoch == JOIN_GROUP_MEMBER_EPOCH
        group = st.groups.get(req.group_id)
        if group is None:
            if not joining:
                raise ApiError(Errors.UNKNOWN_MEMBER_ID, f"Worker {req.member_id} is not a member of group {req.group_id}.")
            group = ConnectGroup(req.group_id)
        owned = req.owned.assignment() if req.owned is not None else None
        worker = group.workers.get(req.member_id)
        if worker is None and not joining:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID, f"Worker {req.member_id} is not a member of group {req.group_id}.")
        if worker is not None and not joining and epoch != worker.member_epoch:
            lost_response = (
                epoch == worker.previous_member_epoch and owned is not None and owned.issubset(worker.assigned)
            )
            if not lost_response:
                self._remove(tx, group, worker.member_id)
                raise _fenced(worker.member_id, epoch, worker.member_epoch)
        if worker is None:
            limit = st.config.max_group_size
            if limit is not None and len(group.workers) >= limit:
                raise ApiError(Errors.GROUP_MAX_SIZE_REACHED, f"The connect group has reached its maximum of {limit} workers.")
        base = worker if worker is not None else ConnectWorker(req.member_id)
        assignors = (
            tuple(
                ClientAssignor(a.name, a.minimum_version, a.maximum_version, a.reason, a.version, bytes(a.metadata))
                for a in req.client_assignors
            )
            if req.client_assignors is not None
            else base.assignors
        )
        updated = dataclasses.replace(
            base,
            url=req.worker_url if req.worker_url is not None else base.url,
            instance_id=req.instance_id if req.instance_id is not None else base.instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else base.rebalance_timeout_ms,
            assignors=assignors,
            classic=req.classic if req.classic is not None else base.classic,
        )
        if worker is None or assignors != worker.assignors:
            others = [w for w in group.workers.values() if w.member_id != updated.member_id]
            if sel.select([*others, updated], None) is None:
                raise ApiError(
                    Errors.UNSUPPORTED_ASSIGNOR,
                    "The worker's client assignors and their version ranges do not overlap with the group's: "
                    f"it offers {', '.join(f'{a.name} [{a.minimum_version}-{a.maximum_version}]' for a in assignors)}.",
                )
        # No error past this point: the group becomes visible once records are written.
        st.groups.setdefault(group.group_id, group)
        gid = group.group_id
        if joining and worker is not None and (worker.assigned or worker.pending_revocation or worker.member_epoch):
            # A known worker rejoining has stopped everything (it joins with nothing owned).
            tx.emit(rec.current_assignment(gid, dataclasses.replace(
                worker, member_epoch=0, previous_member_epoch=0, state=WorkerState.STABLE, assigned=NOTHING,
                pending_revocation=NOTHING,
            )))
            tx.cancel(rebalance_key(gid, worker.member_id))
            owned = NOTHING
        bump = worker is None or _assignors_differ(worker.assignors, updated.assignors)
        if worker is None or updated != worker:
            tx.emit(rec.member_metadata(gid, updated))
        if bump:
            tx.emit(rec.group_epoch(gid, group.group_epoch + 1))
        current = group.workers[req.member_id]
        before = current.assigned
        self._reconcile(tx, group, current, owned, now_ms)
        current = group.workers[req.member_id]
        tx.schedule(session_key(gid, current.member_id), now_ms + st.config.session_timeout_ms)
        response = ConnectGroupHeartbeatResponse(
            member_epoch=current.member_epoch, heartbeat_interval_ms=st.config.heartbeat_interval_ms
        )
        if self._ask_computation(tx, group, current, now_ms):
            response.error_code = int(Errors.COMPUTE_ASSIGNMENT)
            response.error_message = f"Compute the target assignment of group epoch {group.group_epoch}."
        full = joining or (req.client_assignors is not None and req.rebalance_timeout_ms != -1 and req.owned is not None)
        if full or current.assigned != before:
            target = group.target.get(current.member_id, NO_TARGET)
            response.assignment = HeartbeatAssignment(
                group.assignment_error or current.error, ConnectorsAndTasks.of(current.assigned),
                target.version, target.metadata,
            )
        return tx.result(response)

    def _reconcile(
        self, tx: ConnectTx, group: ConnectGroup, worker: ConnectWorker, owned: ConnectAssignment | None, now_ms: int
    ) -> None:
        target = group.target.get(worker.member_id, NO_TARGET)
        nxt = reconcile(
            worker, group.assignment_epoch, target.assignment, owned, group.connector_owners, group.task_owners
        )
        if nxt is None:
            return
        was_revoking = worker.state is WorkerState.UNREVOKED
        moved = nxt.member_epoch != worker.member_epoch
        updated = dataclasses.replace(
            worker,
            member_epoch=nxt.member_epoch,
            previous_member_epoch=nxt.previous_member_epoch,
            state=nxt.state,
            assigned=nxt.assigned,
            pending_revocation=nxt.pending_revocation,
            error=group.assignment_error if moved else worker.error,
            version=target.version if moved else worker.version,
            metadata=target.metadata if moved else worker.metadata,
        )
        tx.emit(rec.current_assignment(group.group_id, updated))
        key = rebalance_key(group.group_id, worker.member_id)
        if nxt.state is WorkerState.UNREVOKED:
            # The draft's cap on revocation: the worker's rebalance timeout, then it is removed.
            tx.schedule(key, now_ms + max(worker.rebalance_timeout_ms, 0))
        elif was_revoking:
            tx.cancel(key)

    def _ask_computation(self, tx: ConnectTx, group: ConnectGroup, worker: ConnectWorker, now_ms: int) -> bool:
        """Whether this heartbeat's answer asks ``worker`` to compute the target (COMPUTE_ASSIGNMENT)."""
        if group.group_epoch <= group.assignment_epoch:
            return False
        if group.computing is not None:
            return False  # one computation in flight; a new epoch is handled after it is installed
        choice = sel.select(group.workers.values(), group.last_computer)
        if choice is None or choice[1] != worker.member_id:
            return False  # the selected worker is told on its own next heartbeat
        assignor, mid = choice
        deadline = now_ms + max(worker.rebalance_timeout_ms, 0)
        group.computing = AssignmentRequest(mid, group.group_epoch, assignor, frozenset(group.workers), deadline)
        tx.schedule(assignment_key(group.group_id, mid), deadline)
        return True

    def _chosen(self, group_id: str, member_id: str, member_epoch: int) -> tuple[ConnectGroup, AssignmentRequest]:
        """The checks PrepareAssignment and InstallAssignment share, in the draft's order."""
        if not group_id or not group_id.strip():
            raise ApiError(Errors.INVALID_REQUEST, "GroupId can't be empty.")
        if not member_id or not member_id.strip():
            raise ApiError(Errors.INVALID_REQUEST, "MemberId can't be empty.")
        if member_epoch < 0:
            raise ApiError(Errors.INVALID_REQUEST, "MemberEpoch must be at least 0.")
        group = self.state.groups.get(group_id)
        if group is None:
            raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        worker = group.workers.get(member_id)
        if worker is None:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID, f"Worker {member_id} is not a member of group {group_id}.")
        if member_epoch != worker.member_epoch:
            raise _fenced(member_id, member_epoch, worker.member_epoch)
        job = group.computing
        if job is None or job.member_id != member_id:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID, f"Worker {member_id} was not asked to compute the assignment.")
        return group, job

    def _install(
        self, tx: ConnectTx, group: ConnectGroup, job: AssignmentRequest, req: ConnectGroupInstallAssignmentRequest
    ) -> None:
        if not job.prepared or req.group_epoch != job.group_epoch:
            raise ApiError(
                Errors.INVALID_ASSIGNMENT,
                f"The assignment is for group epoch {req.group_epoch}; the prepared one is {job.group_epoch}.",
            )
        gid = group.group_id
        if req.error:
            # The assignor could not compute: every worker keeps its target; the epoch moves on.
            targets = {mid: group.target.get(mid, NO_TARGET) for mid in group.workers}
        else:
            targets = self._validated(job, req)
        for mid in group.workers:
            t = targets.get(mid, NO_TARGET)
            if group.target.get(mid) != t:
                tx.emit(rec.target_member(gid, mid, t))
        tx.emit(rec.target_metadata(gid, job.group_epoch, req.error, job.assignor))
        group.computing = None
        group.last_computer = job.member_id
        tx.cancel(assignment_key(gid, job.member_id))

    @staticmethod
    def _validated(job: AssignmentRequest, req: ConnectGroupInstallAssignmentRequest) -> dict[str, WorkerTarget]:
        """The draft's invariants, against the workers the computation was prepared with: each worker
        once and known to it, each connector and task given once (INVALID_ASSIGNMENT). Leaving
        connectors or tasks out is allowed: it is how a scheduled rebalance delay holds them back."""
        out: dict[str, WorkerTarget] = {}
        connectors: set[str] = set()
        tasks: set[tuple[str, int]] = set()
        for m in req.members:
            if m.member_id not in job.workers:
                raise ApiError(Errors.INVALID_ASSIGNMENT, f"Worker {m.member_id} is not in the prepared group.")
            if m.member_id in out:
                raise ApiError(Errors.INVALID_ASSIGNMENT, f"Worker {m.member_id} is assigned twice.")
            a = m.assigned.assignment()
            if len(a.connectors) != len(m.assigned.connectors) or len(a.tasks) != len(m.assigned.tasks):
                raise ApiError(Errors.INVALID_ASSIGNMENT, f"Worker {m.member_id} lists a connector or task twice.")
            twice = (a.connectors & connectors) or (a.tasks & tasks)
            if twice:
                raise ApiError(Errors.INVALID_ASSIGNMENT, f"{sorted(twice)[0]} is assigned to more than one worker.")
            connectors |= a.connectors
            tasks |= a.tasks
            out[m.member_id] = WorkerTarget(a, m.error, m.version, bytes(m.metadata))
        return out

    def _remove(self, tx: ConnectTx, group: ConnectGroup, member_id: str) -> None:
        """A worker leaves or is fenced: its records tombstoned, its timers cancelled, the epoch bumped."""
        gid = group.group_id
        tx.emit(rec.current_assignment_tombstone(gid, member_id))
        if member_id in group.target:
            tx.emit(rec.target_member_tombstone(gid, member_id))
        tx.emit(rec.member_metadata_tombstone(gid, member_id))
        tx.cancel(session_key(gid, member_id))
        tx.cancel(rebalance_key(gid, member_id))
        if group.computing is not None and group.computing.member_id == member_id:
            group.computing = None
            tx.cancel(assignment_key(gid, member_id))
        if group.last_computer == member_id:
            group.last_computer = None
        tx.emit(rec.group_epoch(gid, group.group_epoch + 1))
