"""KIP-848 "Case Studies": every intermediate state the KIP prints, reproduced through heartbeats.

"pending-partitions" in the KIP's member views is the part of the member's target it does not have yet
(see ``Driver.member_view``). The test assignor picks the same partitions as the KIP's examples.
"""

from __future__ import annotations

import uuid

from cg_helpers import Driver

from coordinator.model import GroupState, MemberState
from coordinator.timers import session_key

G = "grp"


def test_basic() -> None:
    d = Driver()
    d.topics({"foo": 3})
    # Empty group: no group yet; epoch 0 everywhere.
    assert d.coord.group(G) is None

    # A joins: epoch 1, target computed at once (server-side assignor), A gets everything.
    r = d.hb(G, "A", 0)
    g = d.group(G)
    assert g.group_epoch == 1 and g.assignment_epoch == 1
    assert d.target_view(G) == {"A": {"foo": [0, 1, 2]}}
    assert d.member_view(G, "A") == (1, {"foo": [0, 1, 2]}, {})
    assert (r.member_epoch, d.resp_parts(r)) == (1, {"foo": [0, 1, 2]})

    # B joins: epoch 2, new target; B moves to epoch 2 but waits for foo-2.
    r = d.hb(G, "B", 0)
    assert g.group_epoch == 2 and g.assignment_epoch == 2
    assert d.target_view(G) == {"A": {"foo": [0, 1]}, "B": {"foo": [2]}}
    assert d.member_view(G, "A") == (1, {"foo": [0, 1, 2]}, {})
    assert d.member_view(G, "B") == (2, {}, {"foo": [2]})
    assert (r.member_epoch, d.resp_parts(r)) == (2, {})
    assert g.members["B"].state is MemberState.UNRELEASED_PARTITIONS
    assert g.state() is GroupState.RECONCILING

    # A heartbeats: told to revoke foo-2 (assignment without it), stays at epoch 1.
    r = d.hb(G, "A", 1, {"foo": [0, 1, 2]})
    assert (r.member_epoch, d.resp_parts(r)) == (1, {"foo": [0, 1]})
    assert g.members["A"].state is MemberState.UNREVOKED_PARTITIONS
    # A acknowledges: epoch 2, foo-2 released.
    r = d.hb(G, "A", 1, {"foo": [0, 1]})
    assert r.member_epoch == 2 and r.assignment is None  # assigned partitions did not change
    assert d.member_view(G, "A") == (2, {"foo": [0, 1]}, {})
    assert d.member_view(G, "B") == (2, {}, {"foo": [2]})

    # B gets foo-2.
    r = d.hb(G, "B", 2, {})
    assert (r.member_epoch, d.resp_parts(r)) == (2, {"foo": [2]})
    assert d.member_view(G, "B") == (2, {"foo": [2]}, {})
    assert g.state() is GroupState.STABLE

    # C joins: epoch 3; target A[0] B[2] C[1].
    r = d.hb(G, "C", 0)
    assert g.group_epoch == 3 and g.assignment_epoch == 3
    assert d.target_view(G) == {"A": {"foo": [0]}, "B": {"foo": [2]}, "C": {"foo": [1]}}
    assert d.member_view(G, "C") == (3, {}, {"foo": [1]})
    assert d.member_view(G, "A") == (2, {"foo": [0, 1]}, {})
    assert d.member_view(G, "B") == (2, {"foo": [2]}, {})

    # B: nothing to revoke, straight to epoch 3.
    r = d.hb(G, "B", 2, {"foo": [2]})
    assert r.member_epoch == 3 and r.assignment is None
    assert d.member_view(G, "B") == (3, {"foo": [2]}, {})
    # C heartbeats: still waiting for foo-1.
    r = d.hb(G, "C", 3, {})
    assert r.member_epoch == 3 and r.assignment is None
    assert d.member_view(G, "C") == (3, {}, {"foo": [1]})
    # A revokes foo-1, then acknowledges.
    r = d.hb(G, "A", 2, {"foo": [0, 1]})
    assert (r.member_epoch, d.resp_parts(r)) == (2, {"foo": [0]})
    r = d.hb(G, "A", 2, {"foo": [0]})
    assert r.member_epoch == 3
    r = d.hb(G, "C", 3, {})
    assert (r.member_epoch, d.resp_parts(r)) == (3, {"foo": [1]})
    assert d.member_view(G, "A") == (3, {"foo": [0]}, {})
    assert d.member_view(G, "B") == (3, {"foo": [2]}, {})
    assert d.member_view(G, "C") == (3, {"foo": [1]}, {})
    assert g.state() is GroupState.STABLE


def _group_at_stable(d: Driver, layout: dict[str, list[int]], partitions: int) -> None:
    """Build a stable group whose members own ``layout`` (member -> partitions of foo)."""
    d.topics({"foo": partitions})
    for m in layout:
        d.hb(G, m, 0)
    for _ in range(4):
        for m in layout:
            g = d.group(G)
            mm = g.members[m]
            d.hb(G, m, mm.member_epoch, d.parts(mm.assigned_partitions) or {})
    g = d.group(G)
    assert g.state() is GroupState.STABLE
    assert {m: d.parts(g.members[m].assigned_partitions).get("foo", []) for m in layout} == layout


def test_incremental_revocation_and_assignment() -> None:
    d = Driver()
    _group_at_stable(d, {"A": [0, 1, 2], "B": [3, 4, 5]}, 6)
    g = d.group(G)
    e = g.group_epoch  # the KIP's 21

    r = d.hb(G, "C", 0)
    assert g.group_epoch == e + 1 and g.assignment_epoch == e + 1
    assert d.target_view(G) == {"A": {"foo": [0, 1]}, "B": {"foo": [3, 4]}, "C": {"foo": [2, 5]}}
    # C moves to the new epoch without partitions: foo-2 and foo-5 are not revoked yet.
    assert d.member_view(G, "C") == (e + 1, {}, {"foo": [2, 5]})
    assert d.member_view(G, "A") == (e, {"foo": [0, 1, 2]}, {})
    assert d.member_view(G, "B") == (e, {"foo": [3, 4, 5]}, {})

    r = d.hb(G, "A", e, {"foo": [0, 1, 2]})
    assert d.resp_parts(r) == {"foo": [0, 1]} and r.member_epoch == e
    r = d.hb(G, "B", e, {"foo": [3, 4, 5]})
    assert d.resp_parts(r) == {"foo": [3, 4]} and r.member_epoch == e
    r = d.hb(G, "C", e + 1, {})
    assert r.assignment is None

    r = d.hb(G, "A", e, {"foo": [0, 1]})
    assert r.member_epoch == e + 1
    assert d.member_view(G, "A") == (e + 1, {"foo": [0, 1]}, {})
    assert d.member_view(G, "B") == (e, {"foo": [3, 4, 5]}, {})
    r = d.hb(G, "C", e + 1, {})
    assert d.resp_parts(r) == {"foo": [2]}
    assert d.member_view(G, "C") == (e + 1, {"foo": [2]}, {"foo": [5]})

    r = d.hb(G, "B", e, {"foo": [3, 4]})
    assert r.member_epoch == e + 1
    assert d.member_view(G, "B") == (e + 1, {"foo": [3, 4]}, {})
    r = d.hb(G, "C", e + 1, {"foo": [2]})
    assert d.resp_parts(r) == {"foo": [2, 5]}
    assert d.member_view(G, "C") == (e + 1, {"foo": [2, 5]}, {})
    assert g.state() is GroupState.STABLE


def test_member_failure() -> None:
    d = Driver()
    _group_at_stable(d, {"A": [0, 1, 2], "B": [3, 4, 5]}, 6)
    d.hb(G, "C", 0)
    for _ in range(3):
        for m in "ABC":
            mm = d.group(G).members[m]
            d.hb(G, m, mm.member_epoch, d.parts(mm.assigned_partitions))
    g = d.group(G)
    assert {m: d.parts(g.members[m].assigned_partitions) for m in "ABC"} == {
        "A": {"foo": [0, 1]}, "B": {"foo": [3, 4]}, "C": {"foo": [2, 5]},
    }
    e = g.group_epoch  # the KIP's 22

    # A's session expires: removed, epoch bumped, target not recomputed yet.
    d.keep(d.coord.on_timer(session_key(G, "A"), d.now + 45_000))
    assert g.group_epoch == e + 1 and g.assignment_epoch == e
    assert "A" not in g.members and "A" not in g.target_assignment
    assert d.member_view(G, "B") == (e, {"foo": [3, 4]}, {})
    assert d.member_view(G, "C") == (e, {"foo": [2, 5]}, {})
    assert g.state() is GroupState.ASSIGNING

    # Next heartbeat computes the target; B and C move to the new epoch with A's partitions.
    r = d.hb(G, "B", e, {"foo": [3, 4]})
    assert d.target_view(G) == {"B": {"foo": [0, 3, 4]}, "C": {"foo": [1, 2, 5]}}
    assert (r.member_epoch, d.resp_parts(r)) == (e + 1, {"foo": [0, 3, 4]})
    r = d.hb(G, "C", e, {"foo": [2, 5]})
    assert (r.member_epoch, d.resp_parts(r)) == (e + 1, {"foo": [1, 2, 5]})
    assert d.member_view(G, "B") == (e + 1, {"foo": [0, 3, 4]}, {})
    assert d.member_view(G, "C") == (e + 1, {"foo": [1, 2, 5]}, {})
    assert g.state() is GroupState.STABLE


def test_partition_added() -> None:
    d = Driver()
    _group_at_stable(d, {"A": [0], "B": []}, 1)
    g = d.group(G)
    e = g.group_epoch
    assert d.target_view(G) == {"A": {"foo": [0]}}  # B's target is empty

    res = d.topics({"foo": 2})
    assert g.group_epoch == e + 1 and g.assignment_epoch == e
    assert res.response == {G: e}  # the groups bumped, each with its epoch before
    assert d.topics({"foo": 2}).response == {}  # the same image again moves nothing
    assert d.member_view(G, "A") == (e, {"foo": [0]}, {})
    assert d.member_view(G, "B") == (e, {}, {})

    r = d.hb(G, "A", e, {"foo": [0]})
    assert d.target_view(G) == {"A": {"foo": [0]}, "B": {"foo": [1]}}
    assert r.member_epoch == e + 1 and r.assignment is None
    r = d.hb(G, "B", e, {})
    assert (r.member_epoch, d.resp_parts(r)) == (e + 1, {"foo": [1]})
    assert d.member_view(G, "A") == (e + 1, {"foo": [0]}, {})
    assert d.member_view(G, "B") == (e + 1, {"foo": [1]}, {})
    assert g.state() is GroupState.STABLE


def test_case_studies_with_the_uniform_assignor_structurally() -> None:
    """The Basic case study with the shipped default assignor: same shape, any partition numbers."""
    d = Driver(None)
    from coordinator.config import CoordinatorConfig

    d.coord.__init__(CoordinatorConfig())  # type: ignore[misc]
    d.topics({"foo": 3})
    d.hb(G, "A", 0)
    d.hb(G, "B", 0)
    g = d.group(G)
    ta, tb = g.target_assignment["A"], g.target_assignment["B"]
    t = d.tid("foo")
    assert len(ta[t]) == 2 and len(tb[t]) == 1 and ta[t] | tb[t] == {0, 1, 2}
    moved = sorted(tb[t])
    r = d.hb(G, "A", 1, {"foo": [0, 1, 2]})
    assert d.resp_parts(r) == {"foo": sorted(ta[t])}
    d.hb(G, "A", 1, {"foo": sorted(ta[t])})
    r = d.hb(G, "B", 2, {})
    assert d.resp_parts(r) == {"foo": moved}
    assert g.state() is GroupState.STABLE
    assert isinstance(t, uuid.UUID)
