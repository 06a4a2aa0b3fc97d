"""The connect group's assignment process: assignor and worker selection, COMPUTE_ASSIGNMENT,
ConnectGroupPrepareAssignment / ConnectGroupInstallAssignment and their checks, assignment validation,
and the assignor error."""

from __future__ import annotations

import pytest
from connect_helpers import ICA, Driver, G, cat, names

from coordinator.connect.assignors import covering_workers, select, usable_assignors
from coordinator.connect.messages import (
    AssignorSpec,
    ConnectGroupInstallAssignmentRequest,
    ConnectGroupPrepareAssignmentRequest,
    InstalledWorker,
)
from coordinator.connect.model import ClientAssignor, ConnectGroupState, ConnectWorker
from coordinator.connect.service import assignment_key
from coordinator.errors import Errors
from coordinator.timers import CancelTimer, ScheduleTimer


def _w(mid: str, *ranges: tuple[str, int, int]) -> ConnectWorker:
    return ConnectWorker(mid, assignors=tuple(ClientAssignor(n, lo, hi, version=lo) for n, lo, hi in ranges))


def test_worker_selection_takes_the_worker_covering_every_range() -> None:
    # The draft's example: A [1-5], B [3-4], C [2-4]: A must run the assignor.
    ws = [_w("A", ("ica", 1, 5)), _w("B", ("ica", 3, 4)), _w("C", ("ica", 2, 4))]
    assert covering_workers(ws, "ica") == ["A"]
    assert select(ws, sticky=None) == ("ica", "A")
    assert select(ws, sticky="B") == ("ica", "A")  # stickiness only among workers that qualify
    # Nobody covers [1-3] and [2-4]: no worker can be chosen.
    assert select([_w("A", ("ica", 1, 3)), _w("B", ("ica", 2, 4))], sticky=None) is None


def test_assignor_selection_takes_those_all_support_in_preference_order() -> None:
    ws = [
        _w("A", ("ica", 0, 2), ("eager", 0, 0)),
        _w("B", ("eager", 0, 0), ("ica", 1, 2)),
        _w("C", ("ica", 0, 2), ("eager", 0, 0), ("own", 0, 0)),
    ]
    assert usable_assignors(ws) == ["ica", "eager"]  # "own" is not offered by all
    assert select(ws, sticky=None) == ("ica", "A")
    assert select(ws, sticky="C") == ("ica", "C")  # the previous computer stays while it qualifies
    # Ranges of one name that share nothing make it unusable: the next one is taken.
    ws.append(_w("D", ("ica", 3, 3), ("eager", 0, 0)))
    assert usable_assignors(ws) == ["eager"]


def _stable_pair() -> Driver:
    d = Driver()
    d.join("W1")
    d.compute("W1", {"W1": ["AC0", "AT1", "AT2"]})
    d.join("W1")
    d.join("W2")
    return d


def test_only_the_selected_worker_is_asked_and_only_once_while_it_computes() -> None:
    d = _stable_pair()
    g = d.group()
    assert g.state() is ConnectGroupState.ASSIGNING
    assert d.hb("W2", owned=[]).response.error_code == 0  # W1 (sticky) is the one to ask
    res = d.hb("W1", owned=["AC0", "AT1", "AT2"])
    assert res.response.error_code == Errors.COMPUTE_ASSIGNMENT
    assert res.response.member_epoch == 1  # the heartbeat itself was handled
    assert ScheduleTimer(assignment_key(G, "W1"), 60_000) in res.timers
    assert d.hb("W1", owned=["AC0", "AT1", "AT2"]).response.error_code == 0  # asked once
    res = d.install("W1", {"W1": ["AC0", "AT1"], "W2": ["AT2"]})  # without PrepareAssignment
    assert res.response.error_code == Errors.INVALID_ASSIGNMENT
    d.prepare("W1")
    res = d.install("W1", {"W1": ["AC0", "AT1"], "W2": ["AT2"]})
    assert res.response.error_code == 0 and CancelTimer(assignment_key(G, "W1")) in res.timers
    assert g.assignment_epoch == g.group_epoch and g.computing is None
    d.assert_replays()


def test_a_computation_not_installed_in_time_is_asked_again() -> None:
    d = _stable_pair()
    d.hb("W1", owned=["AC0", "AT1", "AT2"])
    d.now = 60_000
    d.keep(d.coord.on_timer(assignment_key(G, "W1"), d.now))
    assert d.group().computing is None
    assert d.hb("W1", owned=["AC0", "AT1", "AT2"]).response.error_code == Errors.COMPUTE_ASSIGNMENT


def test_the_chosen_worker_leaving_hands_the_computation_to_another() -> None:
    d = _stable_pair()
    d.hb("W1", owned=["AC0", "AT1", "AT2"])
    res = d.hb("W1", epoch=-1)
    assert CancelTimer(assignment_key(G, "W1")) in res.timers
    assert d.hb("W2", owned=[]).response.error_code == Errors.COMPUTE_ASSIGNMENT
    d.assert_replays()


def test_prepare_assignment_returns_the_group_as_the_assignor_needs_it() -> None:
    d = Driver()
    meta = AssignorSpec(ICA.name, 0, 2, reason=0, version=2, metadata=b"config-offset=3")
    d.join("W1", assignors=[meta])
    d.compute("W1", {"W1": ["AC0", "AT1"]})
    d.join("W1", assignors=[meta])
    d.join("W2", assignors=[meta])
    d.hb("W1", owned=["AC0", "AT1"])
    p = d.prepare("W1")
    g = d.group()
    assert (p.error_code, p.group_epoch, p.assignor_name) == (0, g.group_epoch, ICA.name)
    assert [(m.member_id, m.member_epoch, m.url, m.version, m.metadata) for m in p.members] == [
        ("W1", 1, "http://w1:8083", 2, b"config-offset=3"), ("W2", 1, "http://w2:8083", 2, b"config-offset=3"),
    ]
    assert names(p.members[0].assigned) == ["AC0", "AT1"] and names(p.members[0].target) == ["AC0", "AT1"]
    assert names(p.members[1].assigned) == []


@pytest.mark.parametrize(
    "group_id, member_id, epoch, error",
    [
        ("", "W1", 1, Errors.INVALID_REQUEST),
        (G, "", 1, Errors.INVALID_REQUEST),
        (G, "W1", -1, Errors.INVALID_REQUEST),
        ("nope", "W1", 1, Errors.GROUP_ID_NOT_FOUND),
        (G, "ghost", 1, Errors.UNKNOWN_MEMBER_ID),
        (G, "W1", 7, Errors.FENCED_MEMBER_EPOCH),
        (G, "W2", 1, Errors.UNKNOWN_MEMBER_ID),  # not the worker asked to compute
    ],
)
def test_prepare_and_install_checks(group_id: str, member_id: str, epoch: int, error: Errors) -> None:
    d = _stable_pair()
    d.hb("W1", owned=["AC0", "AT1", "AT2"])
    g = d.group()
    p = d.coord.prepare_assignment(ConnectGroupPrepareAssignmentRequest(group_id, member_id, epoch), 0).response
    assert p.error_code == error
    req = ConnectGroupInstallAssignmentRequest(group_id, member_id, epoch, g.group_epoch, 0, [])
    res = d.coord.install_assignment(req, 0)
    assert res.response.error_code == error and not res.records
    assert "W1" in g.workers  # neither API fences


def _install(d: Driver, members: list[InstalledWorker], group_epoch: int | None = None) -> int:
    p = d.prepare("W1")
    g = d.group()
    req = ConnectGroupInstallAssignmentRequest(
        G, "W1", g.workers["W1"].member_epoch, p.group_epoch if group_epoch is None else group_epoch, 0, members
    )
    res = d.keep(d.coord.install_assignment(req, d.now))
    return res.response.error_code  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "members",
    [
        [InstalledWorker("W1", cat("AC0")), InstalledWorker("W2", cat("AC0"))],  # a connector twice
        [InstalledWorker("W1", cat("AT1")), InstalledWorker("W2", cat("AT1"))],  # a task twice
        [InstalledWorker("W1", cat("AT1")), InstalledWorker("W1", cat("AT2"))],  # a worker twice
        [InstalledWorker("W9", cat("AT1"))],  # a worker the group did not have
    ],
)
def test_invalid_assignments_are_refused_and_change_nothing(members: list[InstalledWorker]) -> None:
    d = _stable_pair()
    d.hb("W1", owned=["AC0", "AT1", "AT2"])
    g = d.group()
    before = d.coord.snapshot()
    assert _install(d, members) == Errors.INVALID_ASSIGNMENT
    assert d.coord.snapshot() == before and g.computing is not None  # may still install a valid one


def test_an_assignment_for_another_group_epoch_is_refused() -> None:
    d = _stable_pair()
    d.hb("W1", owned=["AC0", "AT1", "AT2"])
    e = d.group().group_epoch
    assert _install(d, [InstalledWorker("W1", cat("AC0"))], group_epoch=e - 1) == Errors.INVALID_ASSIGNMENT


def test_an_assignment_may_leave_connectors_and_tasks_out() -> None:
    d = _stable_pair()
    d.hb("W1", owned=["AC0", "AT1", "AT2"])
    assert _install(d, [InstalledWorker("W1", cat("AC0"))]) == 0
    assert d.target() == {"W1": ["AC0"], "W2": []}
    d.assert_replays()


def test_validation_is_against_the_prepared_group_and_a_newer_epoch_computes_again() -> None:
    d = _stable_pair()
    d.hb("W1", owned=["AC0", "AT1", "AT2"])
    p = d.prepare("W1")
    d.join("W3")  # joins while W1 computes: the group epoch moves on
    g = d.group()
    assert g.group_epoch == p.group_epoch + 1
    members = [InstalledWorker("W1", cat("AC0", "AT1")), InstalledWorker("W2", cat("AT2"))]
    req = ConnectGroupInstallAssignmentRequest(G, "W1", 1, p.group_epoch, 0, members)
    assert d.keep(d.coord.install_assignment(req, 0)).response.error_code == 0
    assert g.assignment_epoch == p.group_epoch and g.state() is ConnectGroupState.ASSIGNING
    assert d.target() == {"W1": ["AC0", "AT1"], "W2": ["AT2"], "W3": []}  # W3: nothing yet
    # The next heartbeat of the selected worker asks for the newer epoch's target.
    assert d.hb("W1", owned=["AC0", "AT1", "AT2"]).response.error_code == Errors.COMPUTE_ASSIGNMENT
    d.assert_replays()


def test_an_assignor_error_keeps_the_current_assignment() -> None:
    d = _stable_pair()
    g = d.group()
    d.hb("W1", owned=["AC0", "AT1", "AT2"])
    d.prepare("W1")
    req = ConnectGroupInstallAssignmentRequest(G, "W1", 1, g.group_epoch, 1, [InstalledWorker("W2", cat("AC0"))])
    assert d.keep(d.coord.install_assignment(req, 0)).response.error_code == 0
    assert g.assignment_epoch == g.group_epoch and g.assignment_error == 1
    assert d.target() == {"W1": ["AC0", "AT1", "AT2"], "W2": []}  # the installed members are ignored
    r = d.hb("W1", owned=["AC0", "AT1", "AT2"], client_assignors=[ICA], rebalance_timeout_ms=60_000).response
    assert r.member_epoch == g.group_epoch and r.assignment is not None
    assert r.assignment.error == 1 and names(r.assignment.assigned) == ["AC0", "AT1", "AT2"]
    assert d.current("W2") == (1, [])
    d.assert_replays()


def test_a_leave_leaving_no_worker_able_to_compute_keeps_the_target() -> None:
    d = Driver()
    d.join("W1", assignors=[AssignorSpec("ica", 1, 5, version=1)])
    d.compute("W1", {"W1": ["AC0", "AT1"]})
    d.join("W1", assignors=[AssignorSpec("ica", 1, 5, version=1)])
    d.join("W2", assignors=[AssignorSpec("ica", 1, 3, version=1)])
    d.join("W3", assignors=[AssignorSpec("ica", 3, 5, version=3)])
    d.hb("W1", owned=["AC0", "AT1"])
    d.compute("W1", {"W1": ["AC0"], "W2": ["AT1"], "W3": []})
    d.hb("W1", owned=["AC0", "AT1"])
    d.hb("W1", owned=["AC0"])
    d.hb("W1", epoch=-1)  # the only worker covering [1-3] and [3-5] leaves
    g = d.group()
    for w in ("W2", "W3"):
        assert d.hb(w, owned=[]).response.error_code == 0
    assert g.state() is ConnectGroupState.ASSIGNING and g.computing is None
    assert d.current("W2") == (g.assignment_epoch, ["AT1"])
    d.assert_replays()
