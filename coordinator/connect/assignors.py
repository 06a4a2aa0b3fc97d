"""Which client-side assignor a connect group uses, and which worker runs it (the draft's "Assignor
Selection" and "Worker Selection").

- An assignor is usable when every worker offers it (by name) and their version ranges have a common
  part. Among usable ones the group takes the one the workers prefer most: the lowest sum of positions
  in the workers' lists, then the name.
- The worker asked to compute the assignment must support every version any worker supports for that
  assignor (its range covers all the others'): with A [1-5], B [3-4], C [2-4] it is A. The worker that
  ran the previous computation is kept while it qualifies (Connect's sticky leader); otherwise the
  first qualifying worker by member id. While any qualifying worker speaks the classic protocol
  (translated, translate/connect_classic_worker.py), only those are chosen: a real Connect leader
  also writes the task configurations and session keys, which only a classic worker does.
- A worker whose join or assignor change would leave the group with no usable assignor, or with no
  worker able to run it, is refused (UNSUPPORTED_ASSIGNOR) and the group stays as it was.
"""

from __future__ import annotations

from collections.abc import Iterable

from coordinator.connect.model import ClientAssignor, ConnectWorker


def _usable(workers: list[ConnectWorker], name: str) -> bool:
    low, high = -(2**15), 2**15 - 1
    for w in workers:
        a = w.assignor(name)
        if a is None:
            return False
        low, high = max(low, a.minimum_version), min(high, a.maximum_version)
    return low <= high


def usable_assignors(workers: Iterable[ConnectWorker]) -> list[str]:
    """The assignors every worker can run together, most preferred first."""
    ws = list(workers)
    if not ws:
        return []
    names = [a.name for a in ws[0].assignors if _usable(ws, a.name)]

    def rank(name: str) -> tuple[int, str]:
        return sum(next(i for i, a in enumerate(w.assignors) if a.name == name) for w in ws), name

    return sorted(names, key=rank)


def covering_workers(workers: Iterable[ConnectWorker], name: str) -> list[str]:
    """The workers whose version range of ``name`` covers every other worker's, by member id."""
    ws = list(workers)
    ranges: list[ClientAssignor] = []
    for w in ws:
        a = w.assignor(name)
        if a is None:
            return []
        ranges.append(a)
    out = []
    for w, mine in zip(ws, ranges, strict=True):
        if all(mine.covers(r) for r in ranges):
            out.append(w.member_id)
    return sorted(out)


def select(workers: Iterable[ConnectWorker], sticky: str | None) -> tuple[str, str] | None:
    """(assignor, worker to run it) for these workers, or None when none can be chosen."""
    ws = list(workers)
    for name in usable_assignors(ws):
        able = covering_workers(ws, name)
        classic = {w.member_id for w in ws if w.classic is not None}
        preferred = [m for m in able if m in classic] or able
        if preferred:
            return name, (sticky if sticky in preferred else preferred[0])
    return None
