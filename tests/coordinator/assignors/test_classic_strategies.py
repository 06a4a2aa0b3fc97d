"""The classic strategies computed on the server (coordinator/assignors/roundrobin.py, sticky.py, and
range for Java's RangeAssignor) against the layouts the client-side assignors give, written out from
their documented algorithms (the examples of Java's RoundRobinAssignor, RangeAssignor and
StickyAssignor documentation among them)."""

from __future__ import annotations

import random

import pytest

from coordinator.assignors import (
    RdkafkaStickyAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    classic_strategy_assignors,
)
from coordinator.assignors.api import Assignment, GroupSpec, TopicId

from .support import assert_balanced, assert_valid, counts, group, member, tid, topics, with_targets

RR = RoundRobinAssignor()
CS = StickyAssignor("cooperative-sticky")
T0, T1, T2, T3 = tid(0), tid(1), tid(2), tid(3)


def fs(*ps: int) -> frozenset[int]:
    return frozenset(ps)


def flat(a: Assignment) -> set[tuple[TopicId, int]]:
    return {(t, p) for t, ps in a.items() for p in ps}


def moved(before: dict[str, Assignment], after: dict[str, Assignment]) -> int:
    """Partitions that changed owner."""
    owner_before = {tp: m for m, a in before.items() for tp in flat(a)}
    owner_after = {tp: m for m, a in after.items() for tp in flat(a)}
    return sum(1 for tp, m in owner_after.items() if tp in owner_before and owner_before[tp] != m)


# ---- range (Java's RangeAssignor) -------------------------------------------------------------------


def test_range_is_javas_range_assignor() -> None:
    # RangeAssignor's documented example: C0 [t0p0, t0p1, t1p0, t1p1], C1 [t0p2, t1p2].
    r = classic_strategy_assignors()["range"]
    spec = group([member(m, [T0, T1]) for m in ("C1", "C0")], topics(3, 3))
    assert r.assign(spec) == {"C0": {T0: fs(0, 1), T1: fs(0, 1)}, "C1": {T0: fs(2), T1: fs(2)}}


# ---- roundrobin --------------------------------------------------------------------------------------


def test_roundrobin_interleaves_one_topic() -> None:
    spec = group([member(m, [T0]) for m in ("c1", "c0")], topics(4))
    assert RR.assign(spec) == {"c0": {T0: fs(0, 2)}, "c1": {T0: fs(1, 3)}}


def test_roundrobin_deals_across_topics_in_name_order() -> None:
    # RoundRobinAssignor's documented example: C0 [t0p0, t0p2, t1p1], C1 [t0p1, t1p0, t1p2].
    spec = group([member(m, [T1, T0]) for m in ("C0", "C1")], topics(3, 3))
    assert RR.assign(spec) == {"C0": {T0: fs(0, 2), T1: fs(1)}, "C1": {T0: fs(1), T1: fs(0, 2)}}


def test_roundrobin_passes_over_members_not_subscribed() -> None:
    # The documented heterogeneous example: C0 [t0p0], C1 [t1p0], C2 [t1p1, t2p0, t2p1, t2p2].
    spec = group(
        [member("C0", [T0]), member("C1", [T0, T1]), member("C2", [T0, T1, T2])], topics(1, 2, 3)
    )
    result = RR.assign(spec)
    assert_valid(spec, result)
    assert result == {"C0": {T0: fs(0)}, "C1": {T1: fs(0)}, "C2": {T1: fs(1), T2: fs(0, 1, 2)}}


def test_roundrobin_static_members_first_and_is_not_sticky() -> None:
    spec = group([member("a", [T0]), member("z", [T0], instance_id="i0")], topics(3))
    assert RR.assign(spec) == {"z": {T0: fs(0, 2)}, "a": {T0: fs(1)}}
    # A third member re-deals everything, as on the client.
    spec = group([member("a", [T0], {T0: [1]}), member("b", [T0]), member("c", [T0], {T0: [0, 2]})], topics(3))
    assert RR.assign(spec) == {"a": {T0: fs(0)}, "b": {T0: fs(1)}, "c": {T0: fs(2)}}


def test_roundrobin_keeps_the_mapping_object_of_an_unchanged_member() -> None:
    spec = group([member("c0", [T0], {T0: [0, 2]}), member("c1", [T0], {T0: [1]})], topics(4))
    result = RR.assign(spec)
    assert result["c0"] is spec.members["c0"].assigned
    assert result["c1"] == {T0: fs(1, 3)}


# ---- sticky / cooperative-sticky ---------------------------------------------------------------------


def test_sticky_fresh_group_over_two_topics_gets_one_partition_of_each() -> None:
    spec = group([member(m, [T0, T1]) for m in ("c1", "c0")], topics(2, 2))
    assert CS.assign(spec) == {"c0": {T0: fs(0), T1: fs(0)}, "c1": {T0: fs(1), T1: fs(1)}}


def test_sticky_fresh_group_is_dealt_round_robin_over_all_topics() -> None:
    # StickyAssignor's documented example: C0 [t0p0, t1p1, t3p0], C1 [t0p1, t2p0, t3p1], C2 [t1p0, t2p1].
    spec = group([member(m, [T0, T1, T2, T3]) for m in ("C0", "C1", "C2")], topics(2, 2, 2, 2))
    result = CS.assign(spec)
    assert result == {
        "C0": {T0: fs(0), T1: fs(1), T3: fs(0)},
        "C1": {T0: fs(1), T2: fs(0), T3: fs(1)},
        "C2": {T1: fs(0), T2: fs(1)},
    }
    # C1 leaves: the others keep everything and share its three partitions.
    after = CS.assign(with_targets(spec, result, drop=["C1"]))
    assert flat(after["C0"]) >= flat(result["C0"]) and flat(after["C2"]) >= flat(result["C2"])
    assert counts(after) == {"C0": 4, "C2": 4}


def test_sticky_odd_partition_count_gives_the_extra_to_the_first_member() -> None:
    spec = group([member(m, [T0]) for m in ("c0", "c1")], topics(3))
    assert CS.assign(spec) == {"c0": {T0: fs(0, 2)}, "c1": {T0: fs(1)}}


def test_sticky_join_moves_only_what_the_new_quota_frees() -> None:
    spec = group([member(m, [T0]) for m in ("c0", "c1")], topics(4))
    first = CS.assign(spec)
    assert first == {"c0": {T0: fs(0, 2)}, "c1": {T0: fs(1, 3)}}
    second = CS.assign(with_targets(spec, first, add=[member("c2", [T0])]))
    # One member keeps its two, the other keeps its lowest; the newcomer gets the one given up.
    assert second == {"c0": {T0: fs(0, 2)}, "c1": {T0: fs(1)}, "c2": {T0: fs(3)}}
    assert second["c0"] is first["c0"]


def test_sticky_join_over_two_topics_keeps_a_partition_of_each_topic_where_it_can() -> None:
    spec = group([member(m, [T0, T1]) for m in ("c0", "c1")], topics(2, 2))
    first = CS.assign(spec)
    second = CS.assign(with_targets(spec, first, add=[member("c2", [T0, T1])]))
    assert second == {"c0": {T0: fs(0), T1: fs(0)}, "c1": {T0: fs(1)}, "c2": {T1: fs(1)}}
    assert moved(first, second) == 1


def test_sticky_different_subscriptions() -> None:
    # StickyAssignor's documented heterogeneous example.
    spec = group(
        [member("C0", [T0]), member("C1", [T0, T1]), member("C2", [T0, T1, T2])], topics(1, 2, 3)
    )
    result = CS.assign(spec)
    assert result == {"C0": {T0: fs(0)}, "C1": {T1: fs(0, 1)}, "C2": {T2: fs(0, 1, 2)}}
    # C0 leaves: its partition goes to C1 (fewest), nothing else moves.
    after = CS.assign(with_targets(spec, result, drop=["C0"]))
    assert after == {"C1": {T0: fs(0), T1: fs(0, 1)}, "C2": {T2: fs(0, 1, 2)}}
    assert after["C2"] is result["C2"]


def test_sticky_topic_growth_adds_the_new_partition_without_moving_others() -> None:
    spec = group([member("c0", [T0], {T0: [0]}), member("c1", [T0])], topics(1))
    assert CS.assign(spec)["c0"] is spec.members["c0"].assigned
    grown = group([member("c0", [T0], {T0: [0]}), member("c1", [T0])], topics(2))
    assert CS.assign(grown) == {"c0": spec.members["c0"].assigned, "c1": {T0: fs(1)}}


def test_sticky_drops_what_no_longer_exists_or_is_not_subscribed() -> None:
    spec = group([member("c0", [T0], {T0: [0, 1, 5], T1: [0]}), member("c1", [T0])], topics(2, 1))
    result = CS.assign(spec)
    assert_valid(spec, result)
    assert result == {"c0": {T0: fs(0)}, "c1": {T0: fs(1)}}


@pytest.mark.parametrize("seed", range(40))
def test_sticky_is_valid_balanced_and_sticky_through_random_changes(seed: int) -> None:
    rnd = random.Random(seed)
    meta = topics(*(rnd.randint(1, 6) for _ in range(4)))
    ids = list(meta)
    homogeneous = seed % 2 == 0

    def sub() -> list[TopicId]:
        return ids if homogeneous else rnd.sample(ids, rnd.randint(1, len(ids)))

    spec = group([member(f"m{i}", sub()) for i in range(rnd.randint(1, 5))], meta)
    result = CS.assign(spec)
    for step in range(8):
        assert_valid(spec, result)
        assert_balanced(spec, result)
        if homogeneous:
            c = counts(result)
            assert max(c.values()) - min(c.values()) <= 1
        live = list(spec.members)
        if len(live) > 1 and rnd.random() < 0.4:
            nxt = with_targets(spec, result, drop=[rnd.choice(live)])
        else:
            nxt = with_targets(spec, result, add=[member(f"n{seed}-{step}", sub())])
        again = CS.assign(nxt)
        if homogeneous:
            # Only what the new quotas require moves: a member keeps min(held, its new quota).
            total = sum(meta[t].num_partitions for t in ids)
            low = total // len(nxt.members)
            for mid, m in nxt.members.items():
                assert len(flat(again[mid]) & flat(m.assigned)) >= min(len(flat(m.assigned)), low)
        spec, result = nxt, again


def check_each(spec: GroupSpec) -> None:
    for a in classic_strategy_assignors().values():
        result = a.assign(spec)
        assert_valid(spec, result)


def test_every_strategy_handles_empty_groups_and_topics() -> None:
    for a in classic_strategy_assignors().values():
        assert a.assign(group([], topics(2))) == {}
    check_each(group([member("a", [T0]), member("b", [])], topics(3)))
    check_each(group([member("a", [T0]), member("b", [T0])], topics(0)))
    check_each(group([member(f"m{i}", [T0]) for i in range(5)], topics(2)))


# ---- librdkafka's sticky (KIP-54's original algorithm) -----------------------------------------------

RK = RdkafkaStickyAssignor("cooperative-sticky")


def test_rdkafka_sticky_fresh_group_is_dealt_in_turn() -> None:
    spec = group([member(m, [T0, T1]) for m in ("c1", "c0")], topics(2, 2))
    assert RK.assign(spec) == {"c0": {T0: fs(0), T1: fs(0)}, "c1": {T0: fs(1), T1: fs(1)}}


def test_rdkafka_sticky_newcomer_takes_a_whole_topic_from_a_member_holding_two() -> None:
    # What librdkafka's cooperative-sticky gives on Kafka (compat_tests/test_translate_strategies.py):
    # the first member keeps the second topic, the newcomer gets the first.
    spec = group([member("c0", [T0, T1], {T0: [0, 1], T1: [0, 1]}), member("c1", [T0, T1])], topics(2, 2))
    assert RK.assign(spec) == {"c0": {T1: fs(0, 1)}, "c1": {T0: fs(0, 1)}}


def test_rdkafka_sticky_third_member_takes_the_first_listed_partition() -> None:
    spec = group([member("c0", [T0], {T0: [0, 2]}), member("c1", [T0], {T0: [1, 3]}), member("c2", [T0])], topics(4))
    result = RK.assign(spec)
    assert result == {"c0": spec.members["c0"].assigned, "c1": {T0: fs(3)}, "c2": {T0: fs(1)}}
    assert result["c0"] is spec.members["c0"].assigned


def test_rdkafka_sticky_kip54_examples() -> None:
    # KIP-54's first example: three members over four 2-partition topics, then C1 leaves.
    spec = group([member(m, [T0, T1, T2, T3]) for m in ("C0", "C1", "C2")], topics(2, 2, 2, 2))
    result = RK.assign(spec)
    assert result == {
        "C0": {T0: fs(0), T1: fs(1), T3: fs(0)},
        "C1": {T0: fs(1), T2: fs(0), T3: fs(1)},
        "C2": {T1: fs(0), T2: fs(1)},
    }
    after = RK.assign(with_targets(spec, result, drop=["C1"]))
    assert after == {
        "C0": {T0: fs(0), T1: fs(1), T2: fs(0), T3: fs(0)},
        "C2": {T0: fs(1), T1: fs(0), T2: fs(1), T3: fs(1)},
    }
    # The second: different subscriptions, then C0 leaves.
    spec = group([member("C0", [T0]), member("C1", [T0, T1]), member("C2", [T0, T1, T2])], topics(1, 2, 3))
    result = RK.assign(spec)
    assert result == {"C0": {T0: fs(0)}, "C1": {T1: fs(0, 1)}, "C2": {T2: fs(0, 1, 2)}}
    assert RK.assign(with_targets(spec, result, drop=["C0"])) == {"C1": {T0: fs(0), T1: fs(0, 1)}, "C2": result["C2"]}


@pytest.mark.parametrize("seed", range(40))
def test_rdkafka_sticky_is_valid_and_balanced_through_random_changes(seed: int) -> None:
    rnd = random.Random(1000 + seed)
    meta = topics(*(rnd.randint(1, 6) for _ in range(4)))
    ids = list(meta)
    homogeneous = seed % 2 == 0

    def sub() -> list[TopicId]:
        return ids if homogeneous else rnd.sample(ids, rnd.randint(1, len(ids)))

    spec = group([member(f"m{i}", sub()) for i in range(rnd.randint(1, 5))], meta)
    result = RK.assign(spec)
    for step in range(8):
        assert_valid(spec, result)
        assert_balanced(spec, result)
        live = list(spec.members)
        if len(live) > 1 and rnd.random() < 0.4:
            spec = with_targets(spec, result, drop=[rnd.choice(live)])
        else:
            spec = with_targets(spec, result, add=[member(f"n{seed}-{step}", sub())])
        result = RK.assign(spec)
