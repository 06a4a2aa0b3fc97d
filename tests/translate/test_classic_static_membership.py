"""KIP-345 static membership in classic groups: bounces without rebalances, fencing of old
incarnations, static members surviving the join barrier, and the leader's rejoin rules."""

from __future__ import annotations

from classic_harness import REBALANCE, SESSION, Harness, identity, protocols

from coordinator.errors import Errors
from translate.classic_group import ClassicGroupState as State

DELAY = 3000


def form_static_group(h: Harness, instances: list[str]) -> tuple[dict[str, str], int]:
    """Static members (instance id = client id) join, the leader assigns, all sync."""
    keys = {i: h.join(client_id=i, instance_id=i) for i in instances}
    h.advance(2 * DELAY)
    responses = {i: h.join_response(k) for i, k in keys.items()}
    member_ids = {i: r.member_id for i, r in responses.items()}
    generation = next(iter(responses.values())).generation_id
    leader = next(iter(responses.values())).leader
    assignments = {m: f"parts-of-{i}".encode() for i, m in member_ids.items()}
    leader_instance = next(i for i, m in member_ids.items() if m == leader)
    h.sync(leader, generation, assignments=assignments, instance_id=leader_instance)
    for i, m in member_ids.items():
        if m != leader:
            h.sync(m, generation, instance_id=i)
    assert h.group().state is State.STABLE
    return member_ids, generation


def test_static_member_joins_without_member_id_required() -> None:
    h = Harness()
    key = h.join(client_id="s1", instance_id="s1")
    assert not h.answered(key)
    assert h.group().static_members == {"s1": "s1-m1"}


def test_static_member_restart_gets_a_new_id_and_its_old_assignment_without_rebalance() -> None:
    h = Harness()
    ids, gen = form_static_group(h, ["s1", "s2", "s3"])
    records_before = len(h.records)
    # s2 restarts: it has forgotten its member id but keeps its instance id.
    key = h.join(client_id="s2", instance_id="s2")
    response = h.join_response(key)
    assert response.error_code == Errors.NONE
    assert response.member_id != ids["s2"] and response.generation_id == gen
    assert h.group().state is State.STABLE
    # The new member id is persisted at once.
    assert len(h.records) == records_before + 1
    value = h.records[-1].value
    assert value is not None and response.member_id in {m.member_id for m in value.members}
    sync = h.sync_response(h.sync(response.member_id, gen, instance_id="s2"))
    assert sync.assignment == b"parts-of-s2"
    # Nobody else has to rejoin.
    assert h.heartbeat(ids["s1"], gen, instance_id="s1") == Errors.NONE


def test_old_incarnation_of_a_restarted_static_member_is_fenced() -> None:
    h = Harness()
    ids, gen = form_static_group(h, ["s1", "s2"])
    h.join(client_id="s2", instance_id="s2")
    old = ids["s2"]
    assert h.heartbeat(old, gen, instance_id="s2") == Errors.FENCED_INSTANCE_ID
    assert h.sync_response(h.sync(old, gen, instance_id="s2")).error_code == Errors.FENCED_INSTANCE_ID
    rejoin = h.join(member_id=old, client_id="s2", instance_id="s2")
    assert h.join_response(rejoin).error_code == Errors.FENCED_INSTANCE_ID
    leave = h.leave(identity(old, "s2"))
    assert leave.members[0].error_code == Errors.FENCED_INSTANCE_ID
    assert h.coordinator.validate_offset_commit("g", old, gen, "s2", 8, h.now) == Errors.FENCED_INSTANCE_ID


def test_unknown_instance_id_is_unknown_member() -> None:
    h = Harness()
    ids, gen = form_static_group(h, ["s1"])
    assert h.heartbeat(ids["s1"], gen, instance_id="other") == Errors.UNKNOWN_MEMBER_ID
    rejoin = h.join(member_id=ids["s1"], client_id="s1", instance_id="other")
    assert h.join_response(rejoin).error_code == Errors.UNKNOWN_MEMBER_ID


def test_restart_while_old_join_is_parked_fences_the_parked_request() -> None:
    h = Harness()
    ids, gen = form_static_group(h, ["s1", "s2"])
    parked = h.join(member_id=ids["s1"], client_id="s1", instance_id="s1")  # leader rejoin: rebalance
    assert not h.answered(parked)
    h.join(client_id="s1", instance_id="s1")
    assert h.join_response(parked).error_code == Errors.FENCED_INSTANCE_ID


def test_static_member_that_does_not_rejoin_stays_through_the_barrier() -> None:
    h = Harness()
    ids, gen = form_static_group(h, ["s1", "s2"])
    # s1 (leader) rejoins with new topics; s2 is alive (heartbeating) but slow to rejoin.
    k1 = h.join(member_id=ids["s1"], client_id="s1", instance_id="s1", protos=protocols("range", topics=("x",)))
    h.advance_heartbeating(REBALANCE, [ids["s2"]], gen)
    response = h.join_response(k1)
    assert response.generation_id == gen + 1
    # A dynamic member would have been dropped here; the static one is still a member.
    assert ids["s2"] in h.group().members
    assert h.group().state is State.COMPLETING_REBALANCE
    # When it finally rejoins unchanged it gets the current generation at once and syncs.
    late = h.join_response(h.join(member_id=ids["s2"], client_id="s2", instance_id="s2"))
    assert late.generation_id == gen + 1
    h.sync(ids["s1"], gen + 1, instance_id="s1", assignments={ids["s1"]: b"A", ids["s2"]: b"B"})
    assert h.sync_response(h.sync(ids["s2"], gen + 1, instance_id="s2")).assignment == b"B"


def test_static_member_bounce_within_session_costs_no_rebalance() -> None:
    h = Harness()
    ids, gen = form_static_group(h, ["s1", "s2"])
    # s2 goes down; s1 keeps heartbeating; s2 comes back before its session expires.
    h.advance_heartbeating(SESSION - SESSION // 3 - 1, [ids["s1"]], gen)
    new = h.join_response(h.join(client_id="s2", instance_id="s2"))
    assert new.generation_id == gen
    assert h.sync_response(h.sync(new.member_id, gen, instance_id="s2")).assignment == b"parts-of-s2"
    h.advance_heartbeating(SESSION * 3, [ids["s1"], new.member_id], gen)
    assert h.group().generation_id == gen and h.group().state is State.STABLE


def test_static_member_gone_past_its_session_is_removed_with_a_rebalance() -> None:
    h = Harness()
    ids, gen = form_static_group(h, ["s1", "s2"])
    h.advance_heartbeating(SESSION + 1, [ids["s1"]], gen)
    assert ids["s2"] not in h.group().members
    assert "s2" not in h.group().static_members


def test_restarted_static_leader_gets_members_and_skip_assignment() -> None:
    h = Harness()
    ids, gen = form_static_group(h, ["s1", "s2"])
    assert h.group().leader_id == ids["s1"]
    response = h.join_response(h.join(client_id="s1", instance_id="s1"))
    assert response.skip_assignment is True
    assert response.generation_id == gen
    assert {m.member_id for m in response.members} == {response.member_id, ids["s2"]}
    # KIP-814 (v9): the restarted leader is told it leads under its new id, so it keeps watching
    # topic metadata, but skips the assignment and fetches its own with SyncGroup.
    assert response.leader == response.member_id != ids["s1"]
    assert h.group().leader_id == response.member_id
    sync = h.sync_response(h.sync(response.member_id, gen, instance_id="s1"))
    assert sync.assignment == b"parts-of-s1"
    assert h.group().state is State.STABLE


def test_restarted_static_leader_before_v9_is_answered_as_a_follower() -> None:
    h = Harness()
    ids, gen = form_static_group(h, ["s1", "s2"])
    response = h.join_response(h.join(client_id="s1", instance_id="s1", version=8))
    # Without SkipAssignment the old leader id keeps the client from assigning a Stable group.
    assert response.leader == ids["s1"] != response.member_id
    assert response.members == [] and response.skip_assignment is False
    assert h.group().leader_id == response.member_id
    assert h.sync_response(h.sync(response.member_id, gen, instance_id="s1")).assignment == b"parts-of-s1"


def test_restarted_follower_gets_no_member_list() -> None:
    h = Harness()
    ids, gen = form_static_group(h, ["s1", "s2"])
    response = h.join_response(h.join(client_id="s2", instance_id="s2"))
    assert response.members == [] and response.skip_assignment is False


def test_static_restart_that_changes_the_selected_protocol_rebalances() -> None:
    h = Harness()
    keys = {i: h.join(client_id=i, instance_id=i, protos=protocols("range", "roundrobin")) for i in ("s1", "s2")}
    h.advance(2 * DELAY)
    gen = h.join_response(keys["s1"]).generation_id
    leader = h.join_response(keys["s1"]).member_id
    h.sync(leader, gen, instance_id="s1")
    h.sync(h.join_response(keys["s2"]).member_id, gen, instance_id="s2")
    assert h.group().protocol_name == "range"
    # s2 comes back supporting only roundrobin: the protocol of the next generation changes.
    parked = h.join(client_id="s2", instance_id="s2", protos=protocols("roundrobin"))
    assert not h.answered(parked)
    assert h.group().state is State.PREPARING_REBALANCE


def test_static_restart_during_completing_rebalance_restarts_the_rebalance() -> None:
    h = Harness()
    for i in ("s1", "s2"):
        h.join(client_id=i, instance_id=i)
    h.advance(2 * DELAY)
    assert h.group().state is State.COMPLETING_REBALANCE
    parked = h.join(client_id="s2", instance_id="s2")
    assert not h.answered(parked)
    assert h.group().state is State.PREPARING_REBALANCE


def test_static_leave_by_instance_id_alone_removes_the_member() -> None:
    h = Harness()
    ids, gen = form_static_group(h, ["s1", "s2"])
    response = h.leave(identity("", "s2"))
    assert response.members[0].error_code == Errors.NONE
    assert ids["s2"] not in h.group().members
    assert h.leave(identity("", "nope")).members[0].error_code == Errors.UNKNOWN_MEMBER_ID
