"""Classic Kafka Connect workers inside a connect group (coordinator/connect/), translated per worker.

A Connect worker speaking JoinGroup / SyncGroup / Heartbeat / LeaveGroup (protocol type ``connect``) in a
group run by the connect coordinator is one of its workers; each classic request becomes a core call for
that worker alone, with no group-wide barrier (docs/connect.md, "Classic workers in a connect group"):

- JoinGroup is a core heartbeat reporting what the worker runs (the allocation in its metadata) and its
  protocols as assignors (version range [v, v], metadata without the allocation so that a change of what it
  runs never bumps the group epoch). A JoinGroup the gateway did not ask for (Connect rejoins after a
  revocation, after its scheduled delay, on a config change, each time expecting its leader to compute
  again) asks for a new target through the assignor reason (SCHEDULED_REBALANCE, then back to NONE). A
  worker asked to compute gets the leader's answer: every worker with metadata whose allocation is what it
  runs now.
- SyncGroup installs the leader's assignments (incremental, turned back into each worker's whole target),
  reconciles the worker against the target from what it still runs, then hands it an incremental assignment: revoked = what it ran at its join minus what the core
  gives it, assigned = the reverse.
- Heartbeat is a core heartbeat reporting what the worker was handed; REBALANCE_IN_PROGRESS sends it back to
  JoinGroup when the core's assignment moved, when it is to compute, or when its generation is stale.
- LeaveGroup leaves; the sync and join timers (rebalance-timeout long) and the classic session timeout
  remove a worker that stops answering.

What each worker was handed is transient: after a reload a worker's next Heartbeat or SyncGroup is answered
REBALANCE_IN_PROGRESS and its JoinGroup rebuilds it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from coordinator.connect import assignors as sel
from coordinator.connect.messages import (
    LEAVE_GROUP_MEMBER_EPOCH,
    AssignorSpec,
    ConnectGroupHeartbeatRequest,
    ConnectGroupInstallAssignmentRequest,
    ConnectGroupPrepareAssignmentRequest,
    ConnectorsAndTasks,
    InstalledWorker,
)
from coordinator.connect.model import (
    REASON_NONE,
    REASON_SCHEDULED_REBALANCE,
    ClassicWorkerMetadata,
    ConnectAssignment,
    ConnectGroup,
    ConnectWorker,
)
from coordinator.connect.service import ConnectGroupCoordinator, session_key
from coordinator.errors import ApiError, Errors
from coordinator.outcome import Outcome, RequestKey
from coordinator.timers import TimerKey
from translate.classic_join import join_error
from translate.classic_messages import (
    BATCH_LEAVE_VERSION,
    MEMBER_ID_REQUIRED_VERSION,
    UNKNOWN_MEMBER_ID,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from translate.classic_rebalance import ClassicGroupConfig
from translate.connect_protocol import (
    NO_ERROR,
    PROTOCOL_VERSIONS,
    ExtendedAssignment,
    after,
    decode_assignment,
    encode_assignment,
)
from translate.connect_worker_bytes import delivery, leader_view, read_protocols
from translate.result import Cancel, Schedule, timer_key

CONNECT_PROTOCOL_TYPE = "connect"
# A classic worker answered JoinGroup (no SyncGroup yet) or told to rejoin has one rebalance timeout to do so.
CONNECT_CLASSIC_JOIN_TIMER = "connect-classic-join"
CONNECT_CLASSIC_SYNC_TIMER = "connect-classic-sync"
TIMER_KINDS = (CONNECT_CLASSIC_JOIN_TIMER, CONNECT_CLASSIC_SYNC_TIMER)


@dataclasses.dataclass(slots=True)
class _Seen:
    """What one classic worker reported at its last JoinGroup and what it was handed since (transient)."""

    owned_at_join: ConnectAssignment
    delivered: ConnectAssignment | None = None  # None: joined, not synced yet
    delay_given: bytes | None = None  # the target metadata whose scheduled delay was handed out


@dataclasses.dataclass(frozen=True, slots=True)
class _Prepared:
    leader: str
    group_epoch: int
    assigned: dict[str, ConnectAssignment]


class ConnectClassicWorkers:
    def __init__(
        self, connect: ConnectGroupCoordinator, new_member_id: Callable[[str], str], config: ClassicGroupConfig | None = None
    ) -> None:
        self.connect = connect
        self.new_member_id = new_member_id
        self.config = config or ClassicGroupConfig()
        self.seen: dict[tuple[str, str], _Seen] = {}
        self.asked: set[tuple[str, str]] = set()  # told REBALANCE_IN_PROGRESS: their next join is expected
        self.prepared: dict[str, _Prepared] = {}
        self.deadlines: dict[TimerKey, int] = {}

    # ---- JoinGroup ---------------------------------------------------------------------------
    def join_group(self, request: JoinGroupRequest, key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        try:
            self._join(out, request, key, now_ms)
        except ApiError as exc:
            out.respond(key, join_error(exc.error, request.member_id))
        return out

    def _join(self, out: Outcome, request: JoinGroupRequest, key: RequestKey, now_ms: int) -> None:
        cfg = self.config
        if not cfg.min_session_timeout_ms <= request.session_timeout_ms <= cfg.max_session_timeout_ms:
            raise ApiError(Errors.INVALID_SESSION_TIMEOUT)
        if request.protocol_type != CONNECT_PROTOCOL_TYPE or not request.protocols:
            raise ApiError(Errors.INCONSISTENT_GROUP_PROTOCOL)
        gid = request.group_id
        group = self.connect.group(gid)
        if group is None:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID)
        try:
            read = read_protocols(request.protocols)
        except ValueError as exc:
            raise ApiError(Errors.INCONSISTENT_GROUP_PROTOCOL, str(exc)) from exc
        mid = request.member_id
        if mid == UNKNOWN_MEMBER_ID:
            mid = self.new_member_id(request.client_id)
            if request.group_instance_id is None and request.api_version >= MEMBER_ID_REQUIRED_VERSION:
                out.respond(key, join_error(Errors.MEMBER_ID_REQUIRED, mid))
                return
        worker = group.workers.get(mid)
        if worker is not None and worker.classic is None:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID, f"worker {mid} uses the connect protocol")
        asked = worker is None or (gid, mid) in self.asked
        self.asked.discard((gid, mid))
        reason = REASON_NONE if asked else REASON_SCHEDULED_REBALANCE
        specs = tuple(dataclasses.replace(a, reason=reason) for a in read.assignors)
        rebalance_timeout = request.rebalance_timeout_ms
        if request.api_version == 0 or rebalance_timeout < 0:
            rebalance_timeout = request.session_timeout_ms
        classic = ClassicWorkerMetadata(request.session_timeout_ms, tuple((p.name, p.metadata) for p in request.protocols))
        epoch = worker.member_epoch if worker is not None else 0
        beat = ConnectGroupHeartbeatRequest(
            gid, mid, epoch, instance_id=request.group_instance_id,
            rebalance_timeout_ms=rebalance_timeout, client_assignors=specs,
            owned=ConnectorsAndTasks.of(read.runs) if epoch else None, worker_url=read.url,
            client_id=request.client_id, client_host=request.client_host, classic=classic,
        )
        self._beat(out, beat, classic, now_ms)
        if not asked:
            # The reason asked for a new target (the epoch moved); going back to NONE asks for nothing.
            now = group.workers[mid]
            self._beat(out, dataclasses.replace(beat, member_epoch=now.member_epoch, client_assignors=read.assignors,
                                                owned=ConnectorsAndTasks.of(read.runs) if now.member_epoch else None),
                       classic, now_ms)  # fmt: skip
        worker = group.workers[mid]
        self.seen[(gid, mid)] = _Seen(read.runs)
        self._cancel(out, timer_key(CONNECT_CLASSIC_JOIN_TIMER, gid, mid))
        self._schedule(out, timer_key(CONNECT_CLASSIC_SYNC_TIMER, gid, mid), now_ms + max(rebalance_timeout, 0))
        members: list[JoinGroupResponseMember] = []
        job = group.computing
        if job is not None and job.member_id == mid:
            prep = self.connect.prepare_assignment(ConnectGroupPrepareAssignmentRequest(gid, mid, worker.member_epoch), now_ms)
            body = prep.response
            if body.error_code:
                raise ApiError(Errors(body.error_code), body.error_message)
            self.prepared[gid] = _Prepared(mid, body.group_epoch, {p.member_id: p.assigned.assignment() for p in body.members})
            version = PROTOCOL_VERSIONS.get(body.assignor_name, 1)
            members = [leader_view(p, version, mid, worker.url) for p in body.members]
            protocol, leader = body.assignor_name, mid
        else:
            choice = sel.select(group.workers.values(), group.last_computer)
            protocol = choice[0] if choice is not None else (group.assignor or request.protocols[0].name)
            leader = group.last_computer or (job.member_id if job is not None else "")
            if leader == mid:
                # Not asked to compute: a Connect worker named leader runs its assignor over the member list,
                # which an empty list crashes. The assignment's own leader fields still name it (SyncGroup).
                leader = ""
        out.respond(key, JoinGroupResponse(
            generation_id=worker.member_epoch, protocol_type=CONNECT_PROTOCOL_TYPE, protocol_name=protocol,
            leader=leader, member_id=mid, members=members,
        ))  # fmt: skip

    def _beat(self, out: Outcome, beat: ConnectGroupHeartbeatRequest, classic: ClassicWorkerMetadata, now_ms: int) -> None:
        res = self.connect.connect_group_heartbeat(beat, now_ms)
        out.records.extend(res.records)
        out.timers.extend(res.timers)
        code = res.response.error_code
        if code and code != Errors.COMPUTE_ASSIGNMENT:
            self.forget(out, beat.group_id, beat.member_id)
            if code == Errors.UNSUPPORTED_ASSIGNOR:
                raise ApiError(Errors.INCONSISTENT_GROUP_PROTOCOL, res.response.error_message)
            if code in (Errors.FENCED_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID):
                raise ApiError(Errors.UNKNOWN_MEMBER_ID, res.response.error_message)
            raise ApiError(Errors(code), res.response.error_message)
        # The classic session timeout replaces the group's (the later change of the key wins).
        out.timers.append(Schedule(session_key(beat.group_id, beat.member_id), now_ms + classic.session_timeout_ms))

    # ---- SyncGroup ---------------------------------------------------------------------------
    def sync_group(self, request: SyncGroupRequest, key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        try:
            group, worker = self._worker(request.group_id, request.member_id)
            if request.generation_id != worker.member_epoch:
                raise ApiError(Errors.ILLEGAL_GENERATION)
            if request.protocol_type is not None and request.protocol_type != CONNECT_PROTOCOL_TYPE:
                raise ApiError(Errors.INCONSISTENT_GROUP_PROTOCOL)
            seen = self.seen.get((group.group_id, worker.member_id))
            if seen is None:
                self._ask_rejoin(out, group, worker, now_ms)
                raise ApiError(Errors.REBALANCE_IN_PROGRESS)
            self._cancel(out, timer_key(CONNECT_CLASSIC_SYNC_TIMER, group.group_id, worker.member_id))
            prepared = self.prepared.get(group.group_id)
            if prepared is not None and prepared.leader == worker.member_id and request.assignments:
                self._install(out, group, worker, prepared, request, now_ms)
            # Reconciled against the target as it is now (the leader's just installed), from what the worker
            # still runs: it stops what it must give up in this very answer.
            assert worker.classic is not None
            self._beat(out, _core_beat(group.group_id, worker, seen.owned_at_join, request.client_id), worker.classic, now_ms)
            worker = group.workers[worker.member_id]
            answer, seen.delay_given = delivery(group, worker, seen.owned_at_join, seen.delay_given)
            seen.delivered = worker.assigned
            out.respond(key, SyncGroupResponse(
                protocol_type=request.protocol_type, protocol_name=request.protocol_name,
                assignment=encode_assignment(answer),
            ))  # fmt: skip
        except ApiError as exc:
            out.respond(key, SyncGroupResponse(error_code=exc.error))
        return out

    def _install(
        self, out: Outcome, group: ConnectGroup, worker: ConnectWorker, prepared: _Prepared, request: SyncGroupRequest, now_ms: int
    ) -> None:
        del self.prepared[group.group_id]
        given: dict[str, ExtendedAssignment | None] = {}
        raw: dict[str, bytes] = {}
        try:
            for a in request.assignments:
                given[a.member_id] = decode_assignment(a.assignment)
                raw[a.member_id] = bytes(a.assignment)
        except ValueError as exc:
            raise ApiError(Errors.INCONSISTENT_GROUP_PROTOCOL, str(exc)) from exc
        members = []
        for mid, before in prepared.assigned.items():
            g = given.get(mid)
            target = after(before, g)
            members.append(InstalledWorker(
                mid, ConnectorsAndTasks.of(target), g.error if g else NO_ERROR, g.version if g else 0, raw.get(mid, b""),
            ))  # fmt: skip
        res = self.connect.install_assignment(ConnectGroupInstallAssignmentRequest(
            group.group_id, worker.member_id, worker.member_epoch, prepared.group_epoch, members=members,
        ), now_ms)  # fmt: skip
        out.records.extend(res.records)
        out.timers.extend(res.timers)
        if res.response.error_code:
            # Not installed (the core says why): the leader joins again and computes again.
            self._ask_rejoin(out, group, worker, now_ms)
            raise ApiError(Errors.REBALANCE_IN_PROGRESS, res.response.error_message)

    # ---- Heartbeat ---------------------------------------------------------------------------
    def heartbeat(self, request: HeartbeatRequest, key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        error = Errors.NONE
        try:
            group, worker = self._worker(request.group_id, request.member_id)
            gid, mid = group.group_id, worker.member_id
            seen = self.seen.get((gid, mid))
            owned = None if seen is None else (seen.delivered if seen.delivered is not None else seen.owned_at_join)
            assert worker.classic is not None
            self._beat(out, _core_beat(gid, worker, owned, request.client_id, request.client_host), worker.classic, now_ms)
            worker = group.workers[mid]
            job = group.computing
            rejoin = (
                seen is None
                or request.generation_id != worker.member_epoch
                or (job is not None and job.member_id == mid and not job.prepared)
                or (seen.delivered is not None and worker.assigned != seen.delivered)
            )
            if rejoin:
                self._ask_rejoin(out, group, worker, now_ms)
                error = Errors.REBALANCE_IN_PROGRESS
        except ApiError as exc:
            error = exc.error
        out.respond(key, HeartbeatResponse(error_code=error))
        return out

    # ---- LeaveGroup --------------------------------------------------------------------------
    def leave_group(self, request: LeaveGroupRequest, key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        members = []
        for identity in request.members:
            error = Errors.NONE
            try:
                group, worker = self._worker(request.group_id, identity.member_id)
                self.fence(out, group.group_id, worker.member_id, now_ms)
            except ApiError as exc:
                error = exc.error
            members.append(MemberResponse(identity.member_id, identity.group_instance_id, error))
        response = LeaveGroupResponse(members=members)
        if request.api_version < BATCH_LEAVE_VERSION and members:
            response.error_code = members[0].error_code
        out.respond(key, response)
        return out

    # ---- timers and state --------------------------------------------------------------------
    def on_timer(self, key: TimerKey, now_ms: int) -> Outcome:
        """A classic worker that did not send SyncGroup, or did not rejoin when told, is removed."""
        out = Outcome()
        deadline = self.deadlines.get(key)
        if deadline is None:
            return out
        if now_ms < deadline:
            # Fired early by this clock (the loop's timers may run on a coarser one): again at its deadline.
            out.timers.append(Schedule(key, deadline))
            return out
        del self.deadlines[key]
        _, gid, mid = key
        group = self.connect.group(gid)
        if group is not None and mid in group.workers:
            self.fence(out, gid, mid, now_ms)
        return out

    def fence(self, out: Outcome, group_id: str, member_id: str, now_ms: int) -> None:
        res = self.connect.connect_group_heartbeat(
            ConnectGroupHeartbeatRequest(group_id, member_id, LEAVE_GROUP_MEMBER_EPOCH), now_ms
        )
        out.records.extend(res.records)
        out.timers.extend(res.timers)
        self.forget(out, group_id, member_id)

    def forget(self, out: Outcome, group_id: str, member_id: str) -> None:
        """A worker gone from the group (or the group gone): its transient state and timers."""
        self.seen.pop((group_id, member_id), None)
        self.asked.discard((group_id, member_id))
        prepared = self.prepared.get(group_id)
        if prepared is not None and prepared.leader == member_id:
            del self.prepared[group_id]
        for kind in TIMER_KINDS:
            self._cancel(out, timer_key(kind, group_id, member_id))

    def adopt(self, group_id: str, member_id: str, runs: ConnectAssignment, metadata: bytes) -> None:
        """A worker converted from a classic group: it runs ``runs``, handed to it with ``metadata``."""
        self.seen[(group_id, member_id)] = _Seen(runs, runs, metadata)

    def _ask_rejoin(self, out: Outcome, group: ConnectGroup, worker: ConnectWorker, now_ms: int) -> None:
        self.asked.add((group.group_id, worker.member_id))
        key = timer_key(CONNECT_CLASSIC_JOIN_TIMER, group.group_id, worker.member_id)
        if key not in self.deadlines:
            self._schedule(out, key, now_ms + max(worker.rebalance_timeout_ms, 0))

    def _worker(self, group_id: str, member_id: str) -> tuple[ConnectGroup, ConnectWorker]:
        group = self.connect.group(group_id)
        worker = group.workers.get(member_id) if group is not None else None
        if group is None or worker is None or worker.classic is None:
            raise ApiError(Errors.UNKNOWN_MEMBER_ID)
        return group, worker

    def _schedule(self, out: Outcome, key: TimerKey, deadline_ms: int) -> None:
        self.deadlines[key] = deadline_ms
        out.timers.append(Schedule(key, deadline_ms))

    def _cancel(self, out: Outcome, key: TimerKey) -> None:
        if self.deadlines.pop(key, None) is not None:
            out.timers.append(Cancel(key))



def _core_beat(
    group_id: str, worker: ConnectWorker, owned: ConnectAssignment | None, client_id: str, client_host: str = ""
) -> ConnectGroupHeartbeatRequest:
    """A core heartbeat for a known classic worker at its member epoch. At epoch 0 (a group without a target
    yet) a heartbeat is a join for the core, which wants the worker's whole description and nothing owned."""
    if worker.member_epoch == 0:
        return ConnectGroupHeartbeatRequest(
            group_id, worker.member_id, 0, instance_id=worker.instance_id,
            rebalance_timeout_ms=max(worker.rebalance_timeout_ms, 1), worker_url=worker.url,
            client_assignors=[AssignorSpec(a.name, a.minimum_version, a.maximum_version, REASON_NONE, a.version, a.metadata)
                              for a in worker.assignors],
            client_id=client_id, client_host=client_host or worker.client_host,
        )  # fmt: skip
    return ConnectGroupHeartbeatRequest(
        group_id, worker.member_id, worker.member_epoch, owned=None if owned is None else ConnectorsAndTasks.of(owned),
        client_id=client_id, client_host=client_host or worker.client_host,
    )
