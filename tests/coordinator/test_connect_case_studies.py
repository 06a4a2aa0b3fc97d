"""The connect draft's "Case Studies", every state it prints reproduced through the coordinator's API.

Connectors and tasks are named as in the draft: AC0 is connector A, AT1 its task 1. The worker the
draft has run the assignor is the one the coordinator selects (W1 alone; W3 in the later studies,
whose wider version range makes it the only worker covering all the others').
"""

from __future__ import annotations

from connect_helpers import ICA, Driver, names

from coordinator.connect.messages import AssignorSpec
from coordinator.connect.model import (
    REASON_NONE,
    REASON_SCHEDULED_REBALANCE,
    SESSIONED,
    ConnectGroupState,
    WorkerState,
)
from coordinator.connect.service import session_key
from coordinator.errors import Errors

ALL = ["AC0", "AT1", "AT2", "BC0", "BT1"]
NARROW = AssignorSpec("incremental-cooperative", 1, SESSIONED, version=SESSIONED)


def test_empty_group_then_w1_then_w2_join() -> None:
    d = Driver()
    assert d.coord.group("connect-cluster") is None  # empty group: nothing stored

    # W1 joins: group epoch 1, target still epoch 0, W1 at epoch 0 with nothing; W1 is asked to compute.
    r = d.join("W1").response
    g = d.group()
    assert (g.group_epoch, g.assignment_epoch) == (1, 0)
    assert d.current("W1") == (0, []) and d.target() == {}
    assert r.error_code == Errors.COMPUTE_ASSIGNMENT and r.member_epoch == 0
    assert g.state() is ConnectGroupState.ASSIGNING

    d.compute("W1", {"W1": ALL})
    assert g.assignment_epoch == 1 and d.target() == {"W1": ALL}
    assert d.current("W1") == (0, [])

    # W1's next heartbeat (still a join at epoch 0): nothing to revoke, so epoch 1 and everything.
    r = d.join("W1").response
    assert r.error_code == 0 and r.member_epoch == 1 and r.assignment is not None
    assert names(r.assignment.assigned) == ALL
    assert d.current("W1") == (1, ALL)
    assert g.state() is ConnectGroupState.STABLE

    # W2 joins: group epoch 2; W2 moves to the current assignment epoch 1 with nothing.
    r = d.join("W2").response
    assert g.group_epoch == 2 and g.assignment_epoch == 1
    assert r.error_code == 0 and d.current("W2") == (1, [])
    # W1 (the previous computer, sticky) is asked on its next heartbeat.
    r = d.hb("W1", owned=ALL).response
    assert r.error_code == Errors.COMPUTE_ASSIGNMENT
    d.compute("W1", {"W1": ["AC0", "AT1", "AT2"], "W2": ["BC0", "BT1"]})
    assert g.assignment_epoch == 2
    assert d.target() == {"W1": ["AC0", "AT1", "AT2"], "W2": ["BC0", "BT1"]}
    assert d.current("W1") == (1, ALL) and d.current("W2") == (1, [])

    # W2 moves to epoch 2 but cannot have BC0, BT1 while W1 runs them.
    r = d.hb("W2", owned=[]).response
    assert r.member_epoch == 2 and d.current("W2") == (2, [])
    assert g.workers["W2"].state is WorkerState.UNRELEASED

    # W1 is asked to revoke them (its assignment without them, epoch unchanged), then acknowledges.
    r = d.hb("W1", owned=ALL).response
    assert r.member_epoch == 1 and r.assignment is not None
    assert names(r.assignment.assigned) == ["AC0", "AT1", "AT2"]
    assert g.workers["W1"].state is WorkerState.UNREVOKED
    r = d.hb("W1", owned=["AC0", "AT1", "AT2"]).response
    assert r.member_epoch == 2 and d.current("W1") == (2, ["AC0", "AT1", "AT2"])

    # W2 gets them on its next heartbeat.
    r = d.hb("W2", owned=[]).response
    assert r.member_epoch == 2 and r.assignment is not None and names(r.assignment.assigned) == ["BC0", "BT1"]
    assert d.current("W2") == (2, ["BC0", "BT1"])
    assert g.state() is ConnectGroupState.STABLE
    d.assert_replays()


def _three_workers() -> Driver:
    """W1 [AC0, AT1], W2 [BC0, BT1], W3 [AT2], all at the group epoch; W3 runs the assignor."""
    d = Driver()
    d.join("W1", assignors=[NARROW])
    d.compute("W1", {"W1": ALL})
    d.join("W1", assignors=[NARROW])
    d.join("W2", assignors=[NARROW])
    # W3 offers versions 0-2, the only range covering every other's: its join answer asks it to compute.
    assert d.join("W3", assignors=[ICA]).response.error_code == Errors.COMPUTE_ASSIGNMENT
    d.compute("W3", {"W1": ["AC0", "AT1"], "W2": ["BC0", "BT1"], "W3": ["AT2"]})
    d.hb("W1", owned=ALL)
    d.hb("W1", owned=["AC0", "AT1"])
    for w in ("W2", "W3"):
        d.hb(w, owned=[])
    g = d.group()
    assert g.state() is ConnectGroupState.STABLE
    assert {w: d.current(w)[1] for w in g.workers} == {"W1": ["AC0", "AT1"], "W2": ["BC0", "BT1"], "W3": ["AT2"]}
    return d


def _w2_expires(d: Driver) -> int:
    g = d.group()
    e = g.group_epoch
    d.now += 10_000
    d.keep(d.coord.on_timer(session_key(g.group_id, "W2"), d.now))
    assert "W2" not in g.workers and g.group_epoch == e + 1 and g.assignment_epoch == e
    # W3 is asked, and (the delay) keeps every assignment as it is, leaving BC0, BT1 unassigned.
    assert d.hb("W1", owned=["AC0", "AT1"]).response.error_code == 0
    assert d.hb("W3", owned=["AT2"]).response.error_code == Errors.COMPUTE_ASSIGNMENT
    d.compute("W3", {"W1": ["AC0", "AT1"], "W3": ["AT2"]})
    assert g.assignment_epoch == e + 1
    assert d.target() == {"W1": ["AC0", "AT1"], "W3": ["AT2"]}
    for w, owned in (("W1", ["AC0", "AT1"]), ("W3", ["AT2"])):
        r = d.hb(w, owned=owned).response
        assert r.member_epoch == e + 1 and r.assignment is None  # same assignment, new epoch
    assert d.current("W1") == (e + 1, ["AC0", "AT1"]) and d.current("W3") == (e + 1, ["AT2"])
    return e + 1


def test_worker_leaving_the_group_and_the_scheduled_rebalance() -> None:
    d = _three_workers()
    g = d.group()
    e = _w2_expires(d)
    # The delay ran out on W3: it says so through its assignor's reason, which bumps the group epoch,
    # and as the selected worker it is asked to compute in the same answer.
    due = AssignorSpec(ICA.name, 0, SESSIONED, reason=REASON_SCHEDULED_REBALANCE, version=SESSIONED)
    r = d.hb("W3", owned=["AT2"], client_assignors=[due]).response
    assert g.group_epoch == e + 1 and r.error_code == Errors.COMPUTE_ASSIGNMENT
    d.compute("W3", {"W1": ["AC0", "AT1", "BC0"], "W3": ["AT2", "BT1"]})
    assert g.assignment_epoch == e + 1 == g.group_epoch
    r1 = d.hb("W1", owned=["AC0", "AT1"]).response
    r3 = d.hb("W3", owned=["AT2"]).response
    assert r1.assignment is not None and names(r1.assignment.assigned) == ["AC0", "AT1", "BC0"]
    assert r3.assignment is not None and names(r3.assignment.assigned) == ["AT2", "BT1"]
    assert d.current("W1") == (e + 1, ["AC0", "AT1", "BC0"]) and d.current("W3") == (e + 1, ["AT2", "BT1"])
    assert g.state() is ConnectGroupState.STABLE
    # Going back to "no reason" asks for nothing.
    calm = AssignorSpec(ICA.name, 0, SESSIONED, reason=REASON_NONE, version=SESSIONED)
    res = d.hb("W3", owned=["AT2", "BT1"], client_assignors=[calm])
    assert res.response.error_code == 0 and g.group_epoch == e + 1 and res.records  # the reason is stored
    d.assert_replays()


def test_worker_bounces_back_before_the_delay() -> None:
    d = _three_workers()
    g = d.group()
    e = _w2_expires(d)
    # W2 comes back with the epoch it knew: it is no member any more, so it rejoins with epoch 0.
    assert d.hb("W2", epoch=e - 1, owned=[]).response.error_code == Errors.UNKNOWN_MEMBER_ID
    d.join("W2", assignors=[NARROW])
    assert g.group_epoch == e + 1 and d.current("W2") == (e, [])
    # W3 notices its delay is under way and gives the returning worker its old assignment.
    assert d.hb("W3", owned=["AT2"]).response.error_code == Errors.COMPUTE_ASSIGNMENT
    d.compute("W3", {"W1": ["AC0", "AT1"], "W2": ["BC0", "BT1"], "W3": ["AT2"]})
    for w, owned in (("W1", ["AC0", "AT1"]), ("W2", []), ("W3", ["AT2"])):
        d.hb(w, owned=owned)
    assert {w: d.current(w) for w in sorted(g.workers)} == {
        "W1": (e + 1, ["AC0", "AT1"]), "W2": (e + 1, ["BC0", "BT1"]), "W3": (e + 1, ["AT2"]),
    }
    assert g.state() is ConnectGroupState.STABLE
    d.assert_replays()
