"""The client-side reference assignor of the connect group type (coordinator/connect/worker_assignor.py), on
its own: even spread, the scheduled rebalance delay for a departed worker's units, a returning worker."""

from __future__ import annotations

from coordinator.connect.messages import (
    ConnectGroupPrepareAssignmentResponse,
    ConnectorsAndTasks,
    PreparedWorker,
)
from coordinator.connect.model import NOTHING, ConnectAssignment
from coordinator.connect.worker_assignor import ConnectAssignor

UNITS = ConnectAssignment(frozenset({"a", "b"}), frozenset({("a", 0), ("a", 1), ("b", 0), ("b", 1)}))


def _prepared(targets: dict[str, ConnectAssignment]) -> ConnectGroupPrepareAssignmentResponse:
    return ConnectGroupPrepareAssignmentResponse(
        group_epoch=1, assignor_name="sessioned",
        members=[
            PreparedWorker(w, 1, None, f"http://{w}", 2, 0, b"", ConnectorsAndTasks.of(t), ConnectorsAndTasks.of(t))
            for w, t in targets.items()
        ],
    )  # fmt: skip


def _union(out: dict[str, ConnectAssignment]) -> ConnectAssignment:
    u = NOTHING
    for a in out.values():
        assert u.isdisjoint(a), out
        u = u | a
    return u


def test_new_units_spread_evenly_each_kind_on_its_own() -> None:
    out = ConnectAssignor(1000).assign(_prepared({"w1": NOTHING, "w2": NOTHING}), UNITS, now_ms=0)
    assert _union(out) == UNITS
    assert sorted((len(a.connectors), len(a.tasks)) for a in out.values()) == [(1, 2), (1, 2)]


def test_a_departed_workers_units_wait_for_the_delay_then_spread() -> None:
    assignor = ConnectAssignor(1000)
    first = assignor.assign(_prepared({"w1": NOTHING, "w2": NOTHING}), UNITS, now_ms=0)
    kept = first["w1"]
    held = assignor.assign(_prepared({"w1": kept}), UNITS, now_ms=100)
    assert held == {"w1": kept} and assignor.deadline_ms == 1100 and assignor.held
    still = assignor.assign(_prepared({"w1": kept}), UNITS, now_ms=1099)
    assert still == {"w1": kept}
    released = assignor.assign(_prepared({"w1": kept}), UNITS, now_ms=1100)
    assert released["w1"] == UNITS and not assignor.held and assignor.deadline_ms is None


def test_a_worker_back_within_the_delay_gets_the_lost_units_at_once() -> None:
    assignor = ConnectAssignor(60_000)
    first = assignor.assign(_prepared({"w1": NOTHING, "w2": NOTHING}), UNITS, now_ms=0)
    assignor.assign(_prepared({"w1": first["w1"]}), UNITS, now_ms=100)
    back = assignor.assign(_prepared({"w1": first["w1"], "w3": NOTHING}), UNITS, now_ms=200)
    assert back["w1"] == first["w1"] and back["w3"] == first["w2"] and _union(back) == UNITS
