"""A worker's next current assignment toward its target (the draft's "Member Epoch - Reconciliation").

A pure function, as consumer groups' ``coordinator.reconcile``:
1. connectors and tasks no longer in the worker's target are revoked first: the worker keeps its epoch
   (UNREVOKED) until it reports that it stopped them;
2. then it moves to the target epoch;
3. connectors and tasks another worker still runs are withheld (UNRELEASED) and handed over once that
   worker stopped them, so nothing ever runs on two workers at once.
A response therefore either revokes or assigns, never both.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.connect.model import NOTHING, ConnectAssignment, ConnectWorker, TaskId, WorkerState


@dataclass(frozen=True, slots=True)
class Next:
    member_epoch: int
    previous_member_epoch: int
    state: WorkerState
    assigned: ConnectAssignment
    pending_revocation: ConnectAssignment


def still_runs(owned: ConnectAssignment | None, units: ConnectAssignment) -> bool:
    """Whether the worker still runs any of ``units``; not reported (None) counts as running."""
    return owned is None or not owned.isdisjoint(units)


def reconcile(
    worker: ConnectWorker,
    target_epoch: int,
    target: ConnectAssignment,
    owned: ConnectAssignment | None,
    connector_owners: dict[str, str],
    task_owners: dict[TaskId, str],
) -> Next | None:
    """The worker's next current assignment, or None when it does not change."""
    if worker.state is WorkerState.STABLE and worker.member_epoch == target_epoch:
        return None
    if worker.state is WorkerState.UNREVOKED and still_runs(owned, worker.pending_revocation):
        return None
    mid = worker.member_id
    current = worker.assigned
    kept = current & target
    revoke = current - kept
    wanted = target - kept

    def free_connector(c: str) -> bool:
        o = connector_owners.get(c)
        return o is None or (o == mid and c in worker.pending_revocation.connectors)

    def free_task(t: TaskId) -> bool:
        o = task_owners.get(t)
        return o is None or (o == mid and t in worker.pending_revocation.tasks)

    free = ConnectAssignment(
        frozenset(c for c in wanted.connectors if free_connector(c)),
        frozenset(t for t in wanted.tasks if free_task(t)),
    )
    if revoke and still_runs(owned, revoke):
        nxt = Next(worker.member_epoch, worker.member_epoch, WorkerState.UNREVOKED, kept, revoke)
    else:
        state = WorkerState.STABLE if free == wanted else WorkerState.UNRELEASED
        assigned = current if (kept | free) == current else (kept | free)
        nxt = Next(target_epoch, worker.member_epoch, state, assigned, NOTHING)
    if (
        nxt.member_epoch == worker.member_epoch
        and nxt.previous_member_epoch == worker.previous_member_epoch
        and nxt.state is worker.state
        and nxt.assigned == worker.assigned
        and nxt.pending_revocation == worker.pending_revocation
    ):
        return None
    return nxt
