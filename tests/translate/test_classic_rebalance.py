"""Classic groups behaving like Kafka's classic coordinator: joins, the barrier, syncs, heartbeats,
leaves and session expiry, for eager (range, roundrobin) and cooperative-sticky consumers and for
groups of other protocol types."""

from __future__ import annotations

from classic_harness import REBALANCE, SESSION, Harness, identity, protocols, subscription

from coordinator.errors import Errors
from translate.classic_group import ClassicGroupState as State
from translate.classic_messages import JoinGroupRequestProtocol
from translate.classic_rebalance import ClassicGroupConfig

DELAY = 3000


def form_group(h: Harness, clients: list[str], protos=None, group: str = "g") -> tuple[list[str], int]:  # type: ignore[no-untyped-def]
    """Dynamic v9 members join, the initial delay passes, the leader assigns, everyone syncs."""
    keys = [h.join_with_id(c, protos=protos, group=group) for c in clients]
    h.advance(2 * DELAY)
    responses = [h.join_response(k) for k in keys]
    generation = responses[0].generation_id
    leader = responses[0].leader
    members = [r.member_id for r in responses]
    assignments = {m: f"assignment-of-{m}".encode() for m in members}
    sync_keys = {leader: h.sync(leader, generation, group=group, assignments=assignments)}
    for m in members:
        if m != leader:
            sync_keys[m] = h.sync(m, generation, group=group)
    for m, k in sync_keys.items():
        assert h.sync_response(k).assignment == assignments[m]
    return members, generation


# ---- joining -------------------------------------------------------------------------------
def test_v4_new_member_gets_member_id_required_and_nothing_else() -> None:
    h = Harness()
    key = h.join(client_id="alice")
    response = h.join_response(key)
    assert response.error_code == Errors.MEMBER_ID_REQUIRED
    assert response.member_id == "alice-m1" and response.generation_id == -1
    group = h.group()
    assert not group.members and group.pending_members == {"alice-m1"}
    assert not h.records


def test_v3_new_member_is_parked_without_member_id_required() -> None:
    h = Harness()
    key = h.join(client_id="old", version=3)
    assert not h.answered(key)
    assert list(h.group().members) == ["old-m1"]
    assert h.group().state is State.PREPARING_REBALANCE


def test_initial_rebalance_waits_for_the_delay_then_leader_gets_all_members() -> None:
    h = Harness()
    a = h.join_with_id("a")
    b = h.join_with_id("b")
    # b arrived during the first delay window, so the delay runs once more.
    h.advance(2 * DELAY - 1)
    assert not h.answered(a) and not h.answered(b)
    h.advance(1)
    ra, rb = h.join_response(a), h.join_response(b)
    assert ra.error_code == rb.error_code == Errors.NONE
    assert ra.generation_id == rb.generation_id == 1
    assert ra.leader == rb.leader == ra.member_id  # first member added leads
    assert [m.member_id for m in ra.members] == [ra.member_id, rb.member_id]
    assert rb.members == []
    assert ra.protocol_type == "consumer" and ra.protocol_name == "range"
    assert h.group().state is State.COMPLETING_REBALANCE


def test_initial_delay_is_extended_while_members_keep_joining_up_to_the_rebalance_timeout() -> None:
    h = Harness()
    started = h.now
    first = h.join_with_id("a", rebalance=7000)
    # A member arrives in every delay window; the delay is extended but not past the timeout.
    joined = [first]
    for name in "bcdefghij":
        h.advance(DELAY - 1)
        if h.answered(first):
            break
        joined.append(h.join_with_id(name, rebalance=7000))
    assert h.answered(first)
    assert h.answered_at[first] == started + 7000
    assert h.join_response(first).generation_id == 1
    assert len(h.join_response(first).members) == 3


def test_initial_delay_is_not_extended_when_nobody_else_joins() -> None:
    h = Harness()
    key = h.join_with_id("a")
    h.advance(DELAY)
    assert h.join_response(key).error_code == Errors.NONE


def test_followers_wait_for_the_leader_sync_and_get_what_the_leader_assigned() -> None:
    h = Harness()
    a, b = h.join_with_id("a"), h.join_with_id("b")
    h.advance(2 * DELAY)
    leader, follower = h.join_response(a).member_id, h.join_response(b).member_id
    follower_sync = h.sync(follower, 1)
    assert not h.answered(follower_sync)
    leader_sync = h.sync(leader, 1, assignments={leader: b"L", follower: b"F"})
    assert h.sync_response(leader_sync).assignment == b"L"
    assert h.sync_response(follower_sync).assignment == b"F"
    assert h.sync_response(follower_sync).protocol_name == "range"
    assert h.group().state is State.STABLE
    # The completed generation is persisted with both assignments.
    value = h.records[-1].value
    assert value is not None and value.generation == 1 and value.leader == leader
    assert {m.member_id: m.assignment for m in value.members} == {leader: b"L", follower: b"F"}


def test_member_left_out_of_leader_assignment_gets_an_empty_one() -> None:
    h = Harness()
    a, b = h.join_with_id("a"), h.join_with_id("b")
    h.advance(2 * DELAY)
    leader, follower = h.join_response(a).member_id, h.join_response(b).member_id
    h.sync(leader, 1, assignments={leader: b"L", "stranger": b"?"})
    assert h.sync_response(h.sync(follower, 1)).assignment == b""


def test_protocol_is_chosen_by_the_members_votes_among_common_protocols() -> None:
    h = Harness()
    a = h.join_with_id("a", protos=protocols("roundrobin", "range"))
    b = h.join_with_id("b", protos=protocols("range", "roundrobin", "sticky"))
    c = h.join_with_id("c", protos=protocols("range", "roundrobin"))
    h.advance(2 * DELAY)
    assert {h.join_response(k).protocol_name for k in (a, b, c)} == {"range"}


def test_joiner_sharing_no_protocol_with_the_group_gets_inconsistent_group_protocol() -> None:
    h = Harness()
    h.join_with_id("a", protos=protocols("range"))
    key = h.join(client_id="b", protos=protocols("roundrobin"))
    assert h.join_response(key).error_code == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_joiner_with_another_protocol_type_gets_inconsistent_group_protocol() -> None:
    h = Harness()
    h.join_with_id("a")
    key = h.join(client_id="b", protocol_type="connect")
    assert h.join_response(key).error_code == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_join_with_empty_protocol_list_is_refused() -> None:
    h = Harness()
    key = h.join(client_id="a", protos=[])
    assert h.join_response(key).error_code == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_session_timeout_outside_broker_bounds_is_refused() -> None:
    h = Harness()
    assert h.join_response(h.join(session=5999)).error_code == Errors.INVALID_SESSION_TIMEOUT
    assert h.join_response(h.join(session=1_800_001)).error_code == Errors.INVALID_SESSION_TIMEOUT


def test_join_with_unknown_member_id_on_missing_group_is_unknown_member() -> None:
    h = Harness()
    assert h.join_response(h.join(member_id="ghost")).error_code == Errors.UNKNOWN_MEMBER_ID
    assert h.join_response(h.join(group="", client_id="a")).error_code == Errors.INVALID_GROUP_ID


def test_group_max_size_refuses_extra_members() -> None:
    h = Harness(config=ClassicGroupConfig(max_size=1))
    form_group(h, ["a"])
    key = h.join(client_id="b")
    assert h.join_response(key).error_code == Errors.GROUP_MAX_SIZE_REACHED
    assert len(h.group().members) == 1


# ---- rejoining and the barrier --------------------------------------------------------------
def test_barrier_completes_as_soon_as_every_known_member_rejoins() -> None:
    h = Harness()
    (m1, m2), gen = form_group(h, ["a", "b"])
    # A third member arrives: the group rebalances, the old members learn it by heartbeat.
    k3 = h.join_with_id("c")
    assert h.group().state is State.PREPARING_REBALANCE
    assert h.heartbeat(m1, gen) == Errors.REBALANCE_IN_PROGRESS
    k1 = h.join(member_id=m1, client_id="a")
    assert not h.answered(k1)
    k2 = h.join(member_id=m2, client_id="b")
    # Everyone is in: no need to wait for the rebalance timeout.
    assert h.join_response(k1).generation_id == gen + 1
    assert h.join_response(k2).generation_id == gen + 1
    assert h.join_response(k3).generation_id == gen + 1


def test_slow_member_is_removed_when_the_rebalance_timeout_expires() -> None:
    h = Harness()
    (m1, m2), gen = form_group(h, ["a", "b"])
    k1 = h.join(member_id=m1, client_id="a", protos=protocols("range", topics=("t", "u")))
    assert h.group().state is State.PREPARING_REBALANCE
    # b keeps heartbeating (it is busy, not dead) but does not rejoin in time.
    h.advance_heartbeating(REBALANCE - 1, [m2], gen)
    assert not h.answered(k1)
    h.advance(1)
    response = h.join_response(k1)
    assert response.generation_id == gen + 1 and [m.member_id for m in response.members] == [m1]
    assert m2 not in h.group().members
    assert h.heartbeat(m2, gen) == Errors.UNKNOWN_MEMBER_ID


def test_leader_rejoin_in_stable_starts_a_rebalance_but_unchanged_follower_does_not() -> None:
    h = Harness()
    (leader, follower), gen = form_group(h, ["a", "b"])
    follower_join = h.join(member_id=follower, client_id="b")
    response = h.join_response(follower_join)
    assert response.generation_id == gen and response.members == [] and response.leader == leader
    assert h.group().state is State.STABLE
    h.join(member_id=leader, client_id="a")
    assert h.group().state is State.PREPARING_REBALANCE


def test_follower_with_changed_metadata_triggers_a_rebalance() -> None:
    h = Harness()
    (_, follower), _ = form_group(h, ["a", "b"])
    h.join(member_id=follower, client_id="b", protos=protocols("range", topics=("t", "new-topic")))
    assert h.group().state is State.PREPARING_REBALANCE


def test_leader_leaving_hands_leadership_to_a_member_that_rejoined() -> None:
    h = Harness()
    (leader, m2, m3), gen = form_group(h, ["a", "b", "c"])
    left = h.leave(identity(leader))
    assert left.members[0].error_code == Errors.NONE
    assert h.heartbeat(m2, gen) == Errors.REBALANCE_IN_PROGRESS
    k2 = h.join(member_id=m2, client_id="b")
    k3 = h.join(member_id=m3, client_id="c")
    r2, r3 = h.join_response(k2), h.join_response(k3)
    assert r2.leader == r3.leader and r2.leader in (m2, m3)
    new_leader = r2 if r2.leader == m2 else r3
    assert {m.member_id for m in new_leader.members} == {m2, m3}


def test_join_during_completing_rebalance_with_same_metadata_returns_the_generation_again() -> None:
    h = Harness()
    a, b = h.join_with_id("a"), h.join_with_id("b")
    h.advance(2 * DELAY)
    leader = h.join_response(a).member_id
    again = h.join_response(h.join(member_id=leader, client_id="a"))
    assert again.generation_id == 1 and len(again.members) == 2
    assert h.group().state is State.COMPLETING_REBALANCE
    assert h.join_response(b).error_code == Errors.NONE


def test_join_during_completing_rebalance_with_new_metadata_fails_parked_syncs() -> None:
    h = Harness()
    a, b = h.join_with_id("a"), h.join_with_id("b")
    h.advance(2 * DELAY)
    leader, follower = h.join_response(a).member_id, h.join_response(b).member_id
    parked = h.sync(follower, 1)
    h.join(member_id=leader, client_id="a", protos=protocols("range", topics=("x",)))
    assert h.sync_response(parked).error_code == Errors.REBALANCE_IN_PROGRESS
    assert h.group().state is State.PREPARING_REBALANCE


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout() -> None:
    h = Harness()
    a, b = h.join_with_id("a"), h.join_with_id("b")
    h.advance(2 * DELAY)
    leader, follower = h.join_response(a).member_id, h.join_response(b).member_id
    h.sync(leader, 1, assignments={leader: b"L", follower: b"F"})
    h.advance_heartbeating(REBALANCE, [leader], 1)
    assert follower not in h.group().members
    assert leader in h.group().members
    assert h.group().state is State.PREPARING_REBALANCE


def test_pending_member_blocks_early_completion_until_its_session_expires() -> None:
    h = Harness()
    (m1, m2), gen = form_group(h, ["a", "b"])
    h.join(client_id="c")  # handed an id, never comes back
    k1 = h.join(member_id=m1, client_id="a", protos=protocols("range", topics=("x",)))
    k2 = h.join(member_id=m2, client_id="b")
    assert not h.answered(k1) and not h.answered(k2)
    h.advance(SESSION)
    assert h.join_response(k1).generation_id == gen + 1
    assert h.join_response(k2).generation_id == gen + 1


def test_duplicate_join_while_parked_answers_the_first_and_parks_the_second() -> None:
    h = Harness()
    (m1, m2), gen = form_group(h, ["a", "b"])
    first = h.join(member_id=m1, client_id="a", protos=protocols("range", topics=("x",)))
    second = h.join(member_id=m1, client_id="a", protos=protocols("range", topics=("x",)))
    assert h.join_response(first).error_code == Errors.REBALANCE_IN_PROGRESS
    h.join(member_id=m2, client_id="b")
    assert h.join_response(second).generation_id == gen + 1


# ---- heartbeats and sessions ----------------------------------------------------------------
def test_heartbeat_errors_for_unknown_member_and_old_generation() -> None:
    h = Harness()
    (m1, _), gen = form_group(h, ["a", "b"])
    assert h.heartbeat(m1, gen) == Errors.NONE
    assert h.heartbeat(m1, gen - 1) == Errors.ILLEGAL_GENERATION
    assert h.heartbeat("nobody", gen) == Errors.UNKNOWN_MEMBER_ID
    assert h.heartbeat(m1, gen, group="other") == Errors.UNKNOWN_MEMBER_ID


def test_heartbeat_after_join_before_sync_is_fine() -> None:
    h = Harness()
    a, _ = h.join_with_id("a"), h.join_with_id("b")
    h.advance(2 * DELAY)
    assert h.heartbeat(h.join_response(a).member_id, 1) == Errors.NONE


def test_session_expiry_removes_the_silent_member_and_rebalances() -> None:
    h = Harness()
    (m1, m2), gen = form_group(h, ["a", "b"])
    h.advance(SESSION // 2)
    assert h.heartbeat(m1, gen) == Errors.NONE
    assert m2 in h.group().members
    h.advance(SESSION // 2)
    assert m2 not in h.group().members
    assert h.heartbeat(m1, gen) == Errors.REBALANCE_IN_PROGRESS
    k1 = h.join(member_id=m1, client_id="a")
    # m1 is the only member left and has rejoined: the barrier completes at once.
    assert h.join_response(k1).generation_id == gen + 1


def test_heartbeats_keep_a_member_alive_indefinitely() -> None:
    h = Harness()
    (m1,), gen = form_group(h, ["a"])
    for _ in range(20):
        h.advance(SESSION - 1)
        assert h.heartbeat(m1, gen) == Errors.NONE
    assert h.group().state is State.STABLE


def test_stale_timer_fire_is_ignored() -> None:
    h = Harness()
    (m1,), gen = form_group(h, ["a"])
    stale = next(k for k in h.timers if k[2] == m1)
    h.advance(SESSION // 2)
    h.heartbeat(m1, gen)
    result = h.coordinator.on_timer(stale, h.now)
    assert result.responses == [] and m1 in h.group().members


def test_a_session_timer_fired_early_is_scheduled_again_and_expires_the_member_at_its_deadline() -> None:
    """A driver whose timers run on a coarser clock than the coordinator's (uvloop's whole milliseconds)
    may fire one a moment early: it must come again, not be dropped (the member would never expire)."""
    h = Harness()
    (m1,), _ = form_group(h, ["a"])
    key, due = next((k, d) for k, d in h.timers.items() if k[2] == m1)
    del h.timers[key]  # the driver let go of it when it fired
    result = h.absorb(h.coordinator.on_timer(key, due - 1))
    assert m1 in h.group().members and result.records == []
    assert h.timers[key] == due  # again, for the same deadline
    h.advance(due - h.now)
    assert m1 not in h.group().members


# ---- leaving --------------------------------------------------------------------------------
def test_leave_group_batch_reports_each_member() -> None:
    h = Harness()
    (m1, m2, m3), _ = form_group(h, ["a", "b", "c"])
    response = h.leave(identity(m1), identity("ghost"), identity(m2))
    assert [(r.member_id, r.error_code) for r in response.members] == [
        (m1, Errors.NONE),
        ("ghost", Errors.UNKNOWN_MEMBER_ID),
        (m2, Errors.NONE),
    ]
    assert list(h.group().members) == [m3]


def test_leave_group_v0_reports_the_member_error_at_top_level() -> None:
    h = Harness()
    form_group(h, ["a"])
    assert h.leave(identity("ghost"), version=0).error_code == Errors.UNKNOWN_MEMBER_ID
    assert h.leave(identity("ghost"), version=3).error_code == Errors.NONE


def test_leave_of_unknown_group_is_unknown_member() -> None:
    assert Harness().leave(identity("x"), group="nope").error_code == Errors.UNKNOWN_MEMBER_ID


def test_last_member_leaving_empties_the_group_and_persists_it() -> None:
    h = Harness()
    (m1,), gen = form_group(h, ["a"])
    h.leave(identity(m1))
    group = h.group()
    assert group.state is State.EMPTY and group.generation_id == gen + 1
    value = h.records[-1].value
    assert value is not None and value.members == [] and value.generation == gen + 1


def test_member_leaving_while_others_are_parked_completes_the_join() -> None:
    h = Harness()
    (m1, m2), gen = form_group(h, ["a", "b"])
    k1 = h.join(member_id=m1, client_id="a", protos=protocols("range", topics=("x",)))
    h.leave(identity(m2))
    assert h.join_response(k1).generation_id == gen + 1


def test_leaving_pending_member_is_accepted() -> None:
    h = Harness()
    pending = h.join_response(h.join(client_id="a")).member_id
    assert h.leave(identity(pending)).members[0].error_code == Errors.NONE
    assert h.group().pending_members == set()


# ---- protocol flavours ----------------------------------------------------------------------
def test_cooperative_sticky_members_run_two_consecutive_rebalances() -> None:
    coop = [JoinGroupRequestProtocol("cooperative-sticky", subscription("t", version=1))]
    h = Harness()
    (m1,), gen = form_group(h, ["a"], protos=coop)
    # A second member: first rebalance, the leader revokes what must move and asks for another.
    k2 = h.join_with_id("b", protos=coop)
    k1 = h.join(member_id=m1, client_id="a", protos=coop)
    r1, r2 = h.join_response(k1), h.join_response(k2)
    assert r1.protocol_name == "cooperative-sticky" and r1.generation_id == gen + 1
    m2 = r2.member_id
    h.sync(m1, gen + 1, assignments={m1: b"p0", m2: b""})
    assert h.sync_response(h.sync(m2, gen + 1)).assignment == b""
    # Second rebalance, triggered by the member that gave up partitions (a changed subscription
    # carrying its owned partitions).
    coop2 = [JoinGroupRequestProtocol("cooperative-sticky", subscription("t", version=1) + b"")]
    k1 = h.join(member_id=m1, client_id="a", protos=coop2)
    k2 = h.join(member_id=m2, client_id="b", protos=coop)
    assert h.join_response(k1).generation_id == gen + 2
    h.sync(m1, gen + 2, assignments={m1: b"p0", m2: b"p1"})
    assert h.sync_response(h.sync(m2, gen + 2)).assignment == b"p1"


def test_connect_workers_form_a_classic_group_with_opaque_metadata() -> None:
    h = Harness()
    worker = [JoinGroupRequestProtocol("sessioned", b"\x00\x01opaque-config")]
    keys = [h.join_with_id(f"w{i}", protos=worker, protocol_type="connect") for i in range(3)]
    h.advance(2 * DELAY)
    responses = [h.join_response(k) for k in keys]
    assert {r.protocol_type for r in responses} == {"connect"}
    leader = next(r for r in responses if r.members)
    assert [m.metadata for m in leader.members] == [b"\x00\x01opaque-config"] * 3
    assert h.join_response(h.join(client_id="c", protocol_type="consumer")).error_code == (
        Errors.INCONSISTENT_GROUP_PROTOCOL
    )


def test_sync_with_wrong_protocol_name_is_inconsistent_group_protocol() -> None:
    h = Harness()
    (m1,), gen = form_group(h, ["a"])
    key = h.sync(m1, gen, protocol_type="consumer", protocol_name="roundrobin")
    assert h.sync_response(key).error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    key = h.sync(m1, gen, protocol_type="connect")
    assert h.sync_response(key).error_code == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_sync_errors_for_rebalancing_old_generation_and_unknown_member() -> None:
    h = Harness()
    (m1, m2), gen = form_group(h, ["a", "b"])
    assert h.sync_response(h.sync("ghost", gen)).error_code == Errors.UNKNOWN_MEMBER_ID
    assert h.sync_response(h.sync(m1, gen + 5)).error_code == Errors.ILLEGAL_GENERATION
    h.join(member_id=m1, client_id="a")  # leader rejoins: rebalance
    assert h.sync_response(h.sync(m2, gen)).error_code == Errors.REBALANCE_IN_PROGRESS
    assert h.sync_response(h.sync(m1, gen, group="nope")).error_code == Errors.UNKNOWN_MEMBER_ID


def test_join_v0_uses_the_session_timeout_as_rebalance_timeout() -> None:
    h = Harness()
    h.join(client_id="old", version=0, session=12_000, rebalance=99_999)
    member = h.group().members["old-m1"]
    assert member.rebalance_timeout_ms == member.session_timeout_ms == 12_000


def test_new_member_parked_past_the_join_timeout_is_dropped_and_told_unknown_member() -> None:
    h = Harness(config=ClassicGroupConfig(new_member_join_timeout_ms=5_000))
    (m1,), gen = form_group(h, ["a"])
    late = h.join(client_id="late", version=3)  # parked; a rebalance starts
    # a keeps heartbeating but does not rejoin for a while.
    h.advance_heartbeating(5_000, [m1], gen)
    assert h.join_response(late).error_code == Errors.UNKNOWN_MEMBER_ID
    assert list(h.group().members) == [m1]
