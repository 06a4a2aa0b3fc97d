"""A Connect-like incremental cooperative assignor for the connect group type's workers (the client side of
COMPUTE_ASSIGNMENT): what the worker that computes a group's target runs between PrepareAssignment and
InstallAssignment. The rehearsal simulator's workers (rehearsal/sim_connect.py) and the new-protocol worker model
of the testing package (groupgate/testing/connect_worker.py) both use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coordinator.connect.messages import ConnectGroupPrepareAssignmentResponse
from coordinator.connect.model import ConnectAssignment


def _spread(
    current: dict[str, set[Any]], free: list[Any], candidates: list[str], balance: bool
) -> dict[str, set[Any]]:
    """Give ``free`` units to ``candidates`` (the least loaded first) and, when ``balance``, move units
    from workers above their fair share to those below it: only what must move moves."""
    out = {w: set(u) for w, u in current.items()}
    if not out:
        return out
    pool = sorted(free)
    if balance:
        total = sum(len(u) for u in out.values()) + len(pool)
        base, extra = divmod(total, len(out))
        # The most loaded keep the extra units, so that as few move as possible.
        order = sorted(out, key=lambda w: (-len(out[w]), w))
        quota = {w: base + (1 if i < extra else 0) for i, w in enumerate(order)}
        for w in order:
            while len(out[w]) > quota[w]:
                unit = max(out[w])
                out[w].discard(unit)
                pool.append(unit)
        takers = sorted(out)
        for unit in sorted(pool):
            w = min((w for w in takers if len(out[w]) < quota[w]), key=lambda w: (len(out[w]) - quota[w], w))
            out[w].add(unit)
        return out
    takers = sorted(candidates) or sorted(out)
    for unit in pool:
        w = min(takers, key=lambda w: (len(out[w]), w))
        out[w].add(unit)
    return out


@dataclass(slots=True)
class ConnectAssignor:
    """A Connect-like incremental cooperative assignor (the worker-side state it keeps between runs).

    - Connectors and tasks are spread evenly over the workers, each kind on its own.
    - Units no worker's target names and that were not lost are new: assigned at once.
    - Units of a worker that left (in the previous target this assignor installed, now in nobody's) are
      lost: given at once to workers with an empty target (a worker that came back), else held back for
      the scheduled rebalance delay and spread over everyone when it has run out.
    - While units are held back nothing else moves (a returning worker must find room for them)."""

    delay_ms: int
    held: set[Any] = field(default_factory=set)
    deadline_ms: int | None = None
    last_target: dict[str, set[Any]] = field(default_factory=dict)

    def assign(self, prepared: ConnectGroupPrepareAssignmentResponse, units: ConnectAssignment, now_ms: int) -> dict[str, ConnectAssignment]:
        every = {("c", c) for c in units.connectors} | {("t", c, n) for c, n in units.tasks}
        current: dict[str, set[Any]] = {}
        for m in prepared.members:
            a = m.target.assignment()
            current[m.member_id] = ({("c", c) for c in a.connectors} | {("t", c, n) for c, n in a.tasks}) & every
        taken = set().union(*current.values()) if current else set()
        unassigned = every - taken
        gone = {u for w, us in self.last_target.items() if w not in current for u in us}
        self.held = (self.held | gone) & unassigned
        candidates = sorted(w for w, us in current.items() if not us)
        if self.held and (candidates or self.delay_ms <= 0 or (self.deadline_ms is not None and now_ms >= self.deadline_ms)):
            release, self.held, self.deadline_ms = set(self.held), set(), None
        else:
            release = set()
            if self.held and self.deadline_ms is None:
                self.deadline_ms = now_ms + self.delay_ms
            if not self.held:
                self.deadline_ms = None
        new = unassigned - self.held
        balance = not self.held
        # Lost units go to the workers that came back; the rest is spread over everyone.
        out = {w: set(u) for w, u in current.items()}
        for kind in ("c", "t"):
            mine = {w: {u for u in us if u[0] == kind} for w, us in out.items()}
            lost = [u for u in release if u[0] == kind]
            fresh = [u for u in new - release if u[0] == kind]
            if candidates and lost:
                mine = _spread(mine, lost, candidates, balance=False)
                lost = []
            mine = _spread(mine, lost + fresh, [], balance=balance)
            for w in out:
                out[w] = {u for u in out[w] if u[0] != kind} | mine[w]
        self.last_target = out
        return {
            w: ConnectAssignment(
                frozenset(u[1] for u in us if u[0] == "c"), frozenset((u[1], u[2]) for u in us if u[0] == "t")
            )
            for w, us in out.items()
        }
