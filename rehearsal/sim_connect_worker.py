"""What a simulated Connect worker does (rehearsal/sim_connect.py).

A simulated worker:
- joins with ConnectGroupHeartbeat (its URL, the rebalance timeout, one client-side assignor) and
  heartbeats at the interval the coordinator gives, reporting what it runs (``owned``);
- when answered COMPUTE_ASSIGNMENT, reads the group (PrepareAssignment), runs ``ConnectAssignor`` and
  installs the target (InstallAssignment);
- stops the connectors and tasks its assignment no longer names before it starts new ones, and reports
  each change on its next heartbeat, sent at once;
- keeps the scheduled rebalance delay of units whose worker vanished and, when it runs out, asks for a
  new target through its assignor's reason (``REASON_SCHEDULED_REBALANCE``).
"""

from __future__ import annotations

from typing import Any

from coordinator.connect.messages import (
    ConnectGroupHeartbeatRequest,
    ConnectGroupHeartbeatResponse,
    ConnectGroupInstallAssignmentRequest,
    ConnectGroupPrepareAssignmentRequest,
    ConnectGroupPrepareAssignmentResponse,
    ConnectorsAndTasks,
    InstalledWorker,
)
from coordinator.connect.model import (
    NOTHING,
    REASON_NONE,
    REASON_SCHEDULED_REBALANCE,
    SESSIONED,
    ConnectAssignment,
)
from coordinator.connect.worker_assignor import ConnectAssignor
from coordinator.errors import Errors
from rehearsal.sim_connect_base import ConnectSimBase, SimWorker


class ConnectWorkers(ConnectSimBase):
    """The workers' side of the simulation: their requests, their reactions to the coordinator's answers,
    and the stopping and starting of what they run."""

    def _start_worker(self, slot: int) -> None:
        incarnation = next(self._ids)
        name = f"worker-{slot}"
        # Connect workers have no static membership: every start is a new member id.
        member_id = f"{name}-{incarnation}-{self.rng.getrandbits(32):08x}"
        w = SimWorker(name, slot, member_id, incarnation, ConnectAssignor(self.config.scheduled_delay_ms))
        self.workers.append(w)
        self.stats["workers_started"] += 1
        self._heartbeat(w)

    def _heartbeat(self, w: SimWorker) -> None:
        if not w.alive:
            return
        if w.in_flight:
            w.again = True
            return
        if w.epoch == 0:
            req = ConnectGroupHeartbeatRequest(
                self.group_id, w.member_id, 0, rebalance_timeout_ms=self.config.rebalance_timeout_ms,
                client_assignors=[w.spec()], owned=ConnectorsAndTasks(), worker_url=w.url,
            )
            w.send_assignors = False
        else:
            req = ConnectGroupHeartbeatRequest(
                self.group_id, w.member_id, w.epoch, owned=ConnectorsAndTasks.of(self.owned_report(w)),
                client_assignors=[w.spec()] if w.send_assignors else None,
            )
            w.send_assignors = False
        w.in_flight = True
        self._push(self.now + self._net(), "deliver", (w, w.incarnation, "heartbeat", req))

    def owned_report(self, w: SimWorker) -> ConnectAssignment:
        """What a heartbeat says the worker runs (tests swap in a worker that lies)."""
        return w.running

    def _schedule_heartbeat(self, w: SimWorker, interval_ms: int) -> None:
        w.heartbeat_token += 1
        self._push(self.now + max(interval_ms, 1), "wake", (w, w.incarnation, "heartbeat", w.heartbeat_token))

    def _on_heartbeat(self, w: SimWorker, res: ConnectGroupHeartbeatResponse) -> None:
        w.in_flight = False
        if res.error_code in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_MEMBER_EPOCH):
            # Fenced: stop everything and join again (the coordinator already dropped the worker).
            self.stats["fenced"] += 1
            self._member_event("member_fenced", w, reason=Errors(res.error_code).name.lower())
            w.running, w.assigned, w.epoch, w.joined, w.changing = NOTHING, NOTHING, 0, False, False
            w.incarnation = next(self._ids)  # callbacks of the old membership are void
            self._heartbeat(w)
            return
        if res.error_code not in (0, Errors.COMPUTE_ASSIGNMENT):
            self._fail(f"{w.member_id}'s heartbeat was answered {res.error_code}: {res.error_message}")
        if not w.joined:
            w.joined = True
            self._member_event("member_joined", w)
        w.epoch = res.member_epoch
        if res.assignment is not None:
            told = res.assignment.assigned.assignment()
            if told != w.assigned:
                self._member_event("assignment_sent", w, units=told)
            w.assigned = told
            self._reconcile(w)
        if res.error_code == Errors.COMPUTE_ASSIGNMENT:
            self.stats["computations"] += 1
            self._push(self.now + self.rng.randint(*self.config.compute_ms), "wake", (w, w.incarnation, "compute", None))
        self._schedule_heartbeat(w, res.heartbeat_interval_ms)
        if w.again:
            w.again = False
            self._heartbeat(w)

    def _reconcile(self, w: SimWorker) -> None:
        """Stop what the assignment no longer names, then start what it adds: one batch at a time."""
        if w.changing or w.leaving:
            return
        stop = w.running - w.assigned
        start = w.assigned - w.running
        if stop:
            w.changing = True
            self._push(self.now + self.rng.randint(*self.config.start_stop_ms), "wake", (w, w.incarnation, "stopped", stop))
        elif start:
            w.changing = True
            self._push(self.now + self.rng.randint(*self.config.start_stop_ms), "wake", (w, w.incarnation, "started", None))

    def _wake(self, w: SimWorker, tag: str, arg: Any) -> None:
        if tag == "heartbeat":
            if arg == w.heartbeat_token and not w.leaving:
                self._heartbeat(w)
        elif tag == "stopped":
            w.changing = False
            gone = w.running & arg
            if gone:
                w.running = w.running - gone
                self.settled_at_ms = self.now
                self._member_event("partitions_revoked", w, units=gone)
            if w.leaving:
                self._stop_all(w)
                return
            self._heartbeat(w)
            self._reconcile(w)
        elif tag == "started":
            w.changing = False
            if w.leaving:
                self._stop_all(w)
                return
            new = w.assigned - w.running
            if new:
                self._check_free(w, new)
                w.running = w.running | new
                self.settled_at_ms = self.now
                self._member_event("partitions_assigned", w, units=new)
                self._heartbeat(w)
            self._reconcile(w)
        elif tag == "compute":
            self._push(self.now + self._net(), "deliver",
                       (w, w.incarnation, "prepare", ConnectGroupPrepareAssignmentRequest(self.group_id, w.member_id, w.epoch)))
        elif tag == "delay":
            if w.assignor.held and w.assignor.deadline_ms is not None and self.now >= w.assignor.deadline_ms:
                w.reason, w.send_assignors = REASON_SCHEDULED_REBALANCE, True
                self.stats["scheduled_rebalances"] += 1
                self._heartbeat(w)

    def _on_prepared(self, w: SimWorker, res: ConnectGroupPrepareAssignmentResponse) -> None:
        if res.error_code:
            # Another epoch of this worker's overtook the request: the coordinator asks again later.
            self.stats["prepare_refused"] += 1
            return
        targets = w.assignor.assign(res, self.units, self.now)
        members = [InstalledWorker(m, ConnectorsAndTasks.of(a), version=SESSIONED) for m, a in sorted(targets.items())]
        req = ConnectGroupInstallAssignmentRequest(self.group_id, w.member_id, w.epoch, res.group_epoch, 0, members)
        self._push(self.now + self._net(), "deliver", (w, w.incarnation, "install", req))

    def _on_installed(self, w: SimWorker, error: int, message: str | None) -> None:
        if error == Errors.INVALID_ASSIGNMENT:
            self._fail(f"the assignor of {w.member_id} installed an invalid assignment: {message}")
        if error:
            self.stats["install_refused"] += 1
            return
        if w.reason != REASON_NONE:
            w.reason, w.send_assignors = REASON_NONE, True
        if w.assignor.deadline_ms is not None:
            self._push(w.assignor.deadline_ms, "wake", (w, w.incarnation, "delay", None))
        self._heartbeat(w)

    def _stop_all(self, w: SimWorker) -> None:
        """A worker shutting down cleanly: stop what it runs, then leave the group."""
        if w.running:
            w.changing = True
            self._push(self.now + self.rng.randint(*self.config.start_stop_ms), "wake",
                       (w, w.incarnation, "stopped", w.running))
        else:
            self._leave(w)

    def _leave(self, w: SimWorker) -> None:
        self._member_event("member_left", w, reason="shutdown")
        w.alive = False
        req = ConnectGroupHeartbeatRequest(self.group_id, w.member_id, -1)
        self._push(self.now + self._net(), "deliver", (w, w.incarnation, "leave", req))
