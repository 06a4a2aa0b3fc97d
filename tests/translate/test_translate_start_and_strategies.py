"""``classic_groups = translate``: how a translated group starts (the first joiners are gathered
for ``group.initial.rebalance.delay.ms`` and assigned once), which server assignor stands in for a
classic consumer's ``partition.assignment.strategy``, and which topics a JoinGroup names for the
topic-image refresh."""

from __future__ import annotations

import uuid

import pytest
from migration_harness import REBALANCE, SESSION, TOPIC, TOPIC_ID, Driver, metadata, partitions_of

from coordinator.errors import Errors
from coordinator.target import select_assignor
from translate.classic_member_gathering import CLASSIC_MEMBER_GATHER_TIMER
from translate.classic_messages import JoinGroupRequest, JoinGroupRequestProtocol, MemberIdentity
from translate.embedded import subscribed_topics
from translate.result import timer_key

DELAY = 3_000
GATHER = timer_key(CLASSIC_MEMBER_GATHER_TIMER, "g")


def member_ids(d: Driver, clients: tuple[str, ...], protocols: tuple[str, ...] = ("range",)) -> list[str]:
    """Each client's first JoinGroup (answered MEMBER_ID_REQUIRED at once, gathering or not)."""
    ids = []
    for c in clients:
        r = d.join_response(d.join(client=c, protocols=protocols))
        assert r.error_code == Errors.MEMBER_ID_REQUIRED
        ids.append(r.member_id)
    return ids


def sync(d: Driver, member_id: str, generation: int) -> list[int]:
    s = d.sync_response(d.sync(member_id, generation))
    assert s.error_code == 0, s
    return partitions_of(s.assignment).get(TOPIC, [])


# ---- topics named for the refresh --------------------------------------------------------------
def test_a_join_names_the_topics_of_every_protocols_subscription_once() -> None:
    blobs = [metadata(topics=("a", "b")), metadata(topics=("b", "c")), b"\x00"]  # the last is unreadable
    assert subscribed_topics("consumer", blobs) == ["a", "b", "c"]
    assert subscribed_topics("connect", blobs) == []


# ---- gathering ----------------------------------------------------------------------------------
def test_a_translated_group_gathers_its_first_joiners_and_assigns_them_once() -> None:
    d = Driver(mode="translate", initial_delay_ms=DELAY)
    clients = ("a", "b", "c")
    ids = member_ids(d, clients)
    start = d.now
    keys = []
    for m, c in zip(ids, clients, strict=True):
        keys.append(d.join(member_id=m, client=c))
        d.advance(500)
    # Held: every newcomer pushed the end of the wait to its arrival plus the delay.
    assert not any(k in d.responses for k in keys)
    assert d.timers[GATHER] == start + 1_000 + DELAY
    d.advance(start + 1_000 + DELAY - 1 - d.now)
    assert not any(k in d.responses for k in keys)
    d.advance(1)
    answers = [d.join_response(k) for k in keys]
    assert all(r.error_code == 0 for r in answers) and len({r.generation_id for r in answers}) == 1
    owned = [sync(d, m, r.generation_id) for m, r in zip(ids, answers, strict=True)]
    # One assignment for all three: 2 partitions each, none handed out twice, nothing to give back.
    assert sorted(p for o in owned for p in o) == list(range(6)) and all(len(o) == 2 for o in owned)
    assert all(d.heartbeat(m, r.generation_id) == 0 for m, r in zip(ids, answers, strict=True))
    assert GATHER not in d.timers


def test_without_a_delay_the_first_joiner_takes_everything() -> None:
    """What the gathering prevents (group.initial.rebalance.delay.ms = 0 keeps the old start)."""
    d = Driver(mode="translate", initial_delay_ms=0)
    ids = member_ids(d, ("a", "b"))
    first = d.join_response(d.join(member_id=ids[0], client="a"))
    assert sync(d, ids[0], first.generation_id) == list(range(6))
    d.join(member_id=ids[1], client="b")
    assert d.heartbeat(ids[0], first.generation_id) == Errors.REBALANCE_IN_PROGRESS


def test_the_gathering_ends_within_the_first_joiners_rebalance_timeout() -> None:
    d = Driver(mode="translate", initial_delay_ms=DELAY)
    clients = tuple(f"c{i}" for i in range(20))
    ids = member_ids(d, clients)
    start = d.now
    first = d.join(member_id=ids[0], client=clients[0])
    for m, c in zip(ids[1:], clients[1:], strict=True):
        assert d.timers[GATHER] <= start + REBALANCE
        d.advance(DELAY - 1)  # each newcomer arrives just before the wait would end
        if first in d.responses:
            break
        d.join(member_id=m, client=c)
    assert first in d.responses and d.now < start + REBALANCE + DELAY
    assert d.join_response(first).error_code == 0


def test_a_newcomer_to_a_stable_group_is_answered_with_the_members_it_displaces() -> None:
    d = Driver(mode="translate", initial_delay_ms=DELAY)
    ids = member_ids(d, ("a", "b"))
    key = d.join(member_id=ids[0], client="a")
    d.advance(DELAY)
    gen = d.join_response(key).generation_id
    assert sync(d, ids[0], gen) == list(range(6))
    newcomer = d.join(member_id=ids[1], client="b")
    assert newcomer not in d.responses  # the join barrier: a must rejoin first
    assert d.heartbeat(ids[0], gen) == Errors.REBALANCE_IN_PROGRESS
    again = d.join(member_id=ids[0], client="a")
    answers = [d.join_response(again), d.join_response(newcomer)]
    assert [r.error_code for r in answers] == [0, 0] and GATHER not in d.timers
    owned = [sync(d, m, r.generation_id) for m, r in zip(ids, answers, strict=True)]
    assert sorted(p for o in owned for p in o) == list(range(6)) and all(len(o) == 3 for o in owned)


def test_a_member_joining_again_while_held_replaces_its_held_join() -> None:
    d = Driver(mode="translate", initial_delay_ms=DELAY)
    (m,) = member_ids(d, ("a",))
    old = d.join(member_id=m, client="a")
    new = d.join(member_id=m, client="a")
    assert d.join_response(old).error_code == Errors.REBALANCE_IN_PROGRESS
    d.advance(DELAY)
    assert d.join_response(new).error_code == 0 and len(d.cgroup().members) == 1


def test_a_held_join_with_a_bad_session_timeout_is_refused_when_the_gathering_ends() -> None:
    d = Driver(mode="translate", initial_delay_ms=DELAY)
    ids = member_ids(d, ("a", "b"))
    good = d.join(member_id=ids[0], client="a")
    bad = d.join(member_id=ids[1], client="b", session=1)
    d.advance(DELAY)
    assert d.join_response(bad).error_code == Errors.INVALID_SESSION_TIMEOUT
    assert d.join_response(good).error_code == 0 and list(d.cgroup().members) == [ids[0]]


def test_a_native_mode_group_is_not_gathered_by_the_translator() -> None:
    d = Driver(mode="native", initial_delay_ms=DELAY)
    assert not d.service.classic_members.translate
    member_ids(d, ("a",))
    assert GATHER not in d.timers


# ---- strategies -> server assignors -------------------------------------------------------------
@pytest.mark.parametrize(
    "strategy,assignor",
    [("range", "range"), ("roundrobin", "uniform"), ("sticky", "uniform"),
     ("cooperative-sticky", "uniform"), ("my-custom", None)],
)
def test_a_classic_strategy_chooses_its_server_assignor(strategy: str, assignor: str | None) -> None:
    d = Driver(mode="translate")
    (m,) = member_ids(d, ("a",), (strategy,))
    assert d.join_response(d.join(member_id=m, client="a", protocols=(strategy, "range"))).error_code == 0
    assert d.cgroup().members[m].server_assignor == assignor


def test_the_strategy_most_members_prefer_picks_the_groups_assignor() -> None:
    d = Driver(mode="translate")
    for client, protocols in (("a", ("range",)), ("b", ("range", "roundrobin")), ("c", ("roundrobin", "range"))):
        (m,) = member_ids(d, (client,), protocols)
        assert d.join_response(d.join(member_id=m, client=client, protocols=protocols)).error_code == 0
    group = d.cgroup()
    assert select_assignor(d.service.coordinator.state.config, group)[0] == "range"


def test_range_members_get_ranges_of_every_topic() -> None:
    """Two range consumers of two 3-partition topics: each topic split [0, 1] / [2], the split a
    client-side range assignor makes (uniform would balance to three partitions each)."""
    d = Driver(mode="translate")
    other, other_id = "bar", uuid.UUID(int=0xBA2)
    d.absorb(d.service.on_metadata({TOPIC: (TOPIC_ID, 3), other: (other_id, 3)}, d.now))
    ids = member_ids(d, ("a", "b"))

    def join(member_id: str) -> int:
        protocols = [JoinGroupRequestProtocol("range", metadata(topics=(TOPIC, other)))]
        key, _ = d.send(JoinGroupRequest("g", SESSION, member_id, "consumer", protocols, REBALANCE, client_id="x"))
        response = d.join_response(key)
        assert response.error_code == 0, response
        return response.generation_id

    gens = {m: join(m) for m in ids}
    for _ in range(3):  # settle: the first member gives back what the second is due
        for m in ids:
            if d.heartbeat(m, gens[m]) == Errors.REBALANCE_IN_PROGRESS:
                gens[m] = join(m)
    shapes = sorted(
        tuple(sorted((t, tuple(p)) for t, p in partitions_of(d.sync_response(d.sync(m, gens[m])).assignment).items()))
        for m in ids
    )
    assert shapes == [((other, (0, 1)), (TOPIC, (0, 1))), ((other, (2,)), (TOPIC, (2,)))]


def test_a_rejoin_that_moves_the_epoch_waits_for_the_other_classic_members() -> None:
    """A member whose pattern now matches a new topic rejoins: its answer waits until the other
    (eager) member, told at its next heartbeat, has rejoined too; both are then assigned once."""
    d = Driver(mode="translate", initial_delay_ms=DELAY)
    other, other_id = "bar", uuid.UUID(int=0xBA2)
    d.absorb(d.service.on_metadata({TOPIC: (TOPIC_ID, 6), other: (other_id, 2)}, d.now))
    ids = member_ids(d, ("a", "b"))
    keys = [d.join(member_id=m, client=c) for m, c in zip(ids, ("a", "b"), strict=True)]
    d.advance(DELAY)
    gens = {m: d.join_response(k).generation_id for m, k in zip(ids, keys, strict=True)}
    for m in ids:
        assert len(sync(d, m, gens[m])) == 3

    def rejoin(member_id: str) -> int:
        protocols = [JoinGroupRequestProtocol("range", metadata(topics=(TOPIC, other)))]
        key, _ = d.send(JoinGroupRequest("g", SESSION, member_id, "consumer", protocols, REBALANCE, client_id="x"))
        return key

    held = rejoin(ids[0])  # eager: it gave everything up first
    assert held not in d.responses and d.timers[GATHER] == d.now + SESSION
    d.advance(500)
    assert d.heartbeat(ids[1], gens[ids[1]]) == Errors.REBALANCE_IN_PROGRESS
    second = rejoin(ids[1])
    # The barrier is complete: both answered at once, in the same epoch, without waiting out the timer.
    answers = [d.join_response(held), d.join_response(second)]
    assert [r.error_code for r in answers] == [0, 0] and answers[0].generation_id == answers[1].generation_id
    assert GATHER not in d.timers
    owned = {}
    for m, r in zip(ids, answers, strict=True):
        s = d.sync_response(d.sync(m, r.generation_id))
        owned[m] = partitions_of(s.assignment)
        assert d.heartbeat(m, r.generation_id) == 0
    assert sorted(p for o in owned.values() for p in o.get(TOPIC, [])) == list(range(6))
    assert sorted(p for o in owned.values() for p in o.get(other, [])) == [0, 1]


def test_the_rejoin_barrier_ends_at_the_joiners_session_timeout_when_others_stay_away() -> None:
    d = Driver(mode="translate", initial_delay_ms=DELAY)
    ids = member_ids(d, ("a", "b"))
    keys = [d.join(member_id=m, client=c) for m, c in zip(ids, ("a", "b"), strict=True)]
    d.advance(DELAY)
    assert all(d.join_response(k).error_code == 0 for k in keys)
    protocols = [JoinGroupRequestProtocol("range", metadata(topics=(TOPIC, "bar")))]
    held, _ = d.send(JoinGroupRequest("g", SESSION, ids[0], "consumer", protocols, REBALANCE, client_id="a"))
    d.advance(SESSION - 1)
    assert held not in d.responses
    d.advance(1)
    # b never came back (its session ended meanwhile): a is answered alone.
    assert d.join_response(held).error_code == 0
    assert list(d.cgroup().members) == [ids[0]]


def test_a_held_member_taken_over_by_a_consumer_protocol_member_is_not_answered_as_classic() -> None:
    """While a's join waits at the barrier, a restarts as a consumer-protocol member under the same
    id (an upgrade). The held join is not a's any more: answered UNKNOWN_MEMBER_ID, and no classic
    timer is left armed that could later fence the consumer member."""
    d = Driver(mode="translate", initial_delay_ms=DELAY)
    ids = member_ids(d, ("a", "b"))
    keys = [d.join(member_id=m, client=c) for m, c in zip(ids, ("a", "b"), strict=True)]
    d.advance(DELAY)
    gens = {m: d.join_response(k).generation_id for m, k in zip(ids, keys, strict=True)}
    for m in ids:
        sync(d, m, gens[m])
    protocols = [JoinGroupRequestProtocol("range", metadata(topics=(TOPIC, "bar")))]
    held, _ = d.send(JoinGroupRequest("g", SESSION, ids[0], "consumer", protocols, REBALANCE, client_id="a"))
    assert held not in d.responses
    assert d.consumer(ids[0]).error_code == 0
    assert not d.cgroup().members[ids[0]].uses_classic_protocol
    assert d.heartbeat(ids[1], gens[ids[1]]) == Errors.REBALANCE_IN_PROGRESS
    again = d.join(member_id=ids[1], client="b")
    assert d.join_response(held).error_code == Errors.UNKNOWN_MEMBER_ID
    assert d.join_response(again).error_code == 0
    assert timer_key("classic-member-sync", "g", ids[0]) not in d.timers
    assert not d.cgroup().members[ids[0]].uses_classic_protocol


def test_the_rejoin_barrier_ends_when_the_member_it_waits_for_leaves() -> None:
    d = Driver(mode="translate", initial_delay_ms=DELAY)
    ids = member_ids(d, ("a", "b"))
    keys = [d.join(member_id=m, client=c) for m, c in zip(ids, ("a", "b"), strict=True)]
    d.advance(DELAY)
    assert all(d.join_response(k).error_code == 0 for k in keys)
    protocols = [JoinGroupRequestProtocol("range", metadata(topics=(TOPIC, "bar")))]
    held, _ = d.send(JoinGroupRequest("g", SESSION, ids[0], "consumer", protocols, REBALANCE, client_id="a"))
    assert held not in d.responses
    assert d.leave(MemberIdentity(ids[1], None)).error_code == 0
    # No one else to wait for: answered with the leave, not at the timer.
    assert d.join_response(held).error_code == 0 and GATHER not in d.timers
