"""The uniform assignor on hand-built groups (KIP-848 "Assignor": balanced and sticky)."""

from __future__ import annotations

from coordinator.assignors import UniformAssignor, default_assignors
from coordinator.assignors.api import EMPTY_ASSIGNMENT, AssignmentDelta

from .support import (
    assert_balanced,
    assert_valid,
    counts,
    group,
    member,
    minimum_moves,
    moved,
    tid,
    topics,
    with_targets,
)

U = UniformAssignor()
T0, T1, T2 = tid(0), tid(1), tid(2)


def test_registry_offers_uniform_first_then_range() -> None:
    assignors = default_assignors()
    assert list(assignors) == ["uniform", "range"]
    assert all(a.name == name for name, a in assignors.items())


def test_empty_group() -> None:
    assert U.assign(group([], topics(3))) == {}


def test_fresh_homogeneous_group_gets_quota_and_remainder() -> None:
    spec = group([member(m, [T0, T1]) for m in "abc"], topics(4, 3))
    result = U.assign(spec)
    assert_valid(spec, result)
    # 7 partitions over 3 members: quota 2, the first member (by id) gets the extra one.
    assert counts(result) == {"a": 3, "b": 2, "c": 2}


def test_a_balanced_target_is_returned_as_the_same_objects() -> None:
    spec = group([member(m, [T0, T1]) for m in "abcd"], topics(5, 6))
    first = U.assign(spec)
    again = U.assign(with_targets(spec, first))
    assert all(again[m] is first[m] for m in first)


def test_each_member_keeps_its_partitions_up_to_its_quota() -> None:
    spec = group(
        [
            member("a", [T0], {T0: range(0, 6)}),  # over quota: gives up 4
            member("b", [T0], {T0: [6]}),
            member("c", [T0]),
        ],
        topics(6 + 1),
    )
    result = U.assign(spec)
    assert_valid(spec, result)
    assert_balanced(spec, result)
    assert result["a"][T0] < frozenset(range(0, 6))
    assert result["b"][T0] >= {6}
    # 7 over 3: quotas 3, 2, 2; a (above the minimum) keeps the extra slot.
    assert counts(result) == {"a": 3, "b": 2, "c": 2}
    assert moved({m: s.assigned for m, s in spec.members.items()}, result) == 3


def test_invalid_and_duplicate_partitions_in_targets_are_dropped() -> None:
    spec = group(
        [
            member("a", [T0], {T0: [0, 1, 99], T1: [0]}),  # 99 out of range, T1 not subscribed
            member("b", [T0], {T0: [1, 2]}),  # 1 already kept by a
        ],
        topics(4, 2),
    )
    result = U.assign(spec)
    assert_valid(spec, result)
    assert result["a"] == {T0: frozenset({0, 1})}
    assert result["b"] == {T0: frozenset({2, 3})}


def test_member_without_topics_gets_nothing() -> None:
    spec = group([member("a", [T0]), member("b", [], {T0: [0]})], topics(2))
    result = U.assign(spec)
    assert_valid(spec, result)
    assert result["b"] == EMPTY_ASSIGNMENT
    assert counts(result)["a"] == 2


def test_join_moves_only_what_balance_requires_and_incremental_matches_full() -> None:
    spec = group([member(f"m{i}", [T0, T1, T2]) for i in range(5)], topics(7, 11, 4))
    stable = U.assign(spec)
    joined = with_targets(spec, stable, add=[member("new", [T0, T1, T2])])
    full = U.assign(joined)
    inc = U.assign(joined, AssignmentDelta(added=frozenset({"new"})))
    assert inc == full
    for result in (full, inc):
        assert_valid(joined, result)
        assert_balanced(joined, result)
        assert moved(stable, result) == minimum_moves(counts(stable).values(), 22, 6)
        # Members that gave nothing up keep their very mapping object.
        for m in stable:
            if result[m] == stable[m]:
                assert result[m] is stable[m]


def test_leave_with_removed_targets_is_incremental_and_matches_full() -> None:
    spec = group([member(f"m{i}", [T0, T1]) for i in range(4)], topics(9, 5))
    stable = U.assign(spec)
    left = with_targets(spec, stable, drop=["m1"])
    delta = AssignmentDelta(removed=frozenset({"m1"}), removed_assigned={"m1": stable["m1"]})
    inc = U.assign(left, delta)
    full = U.assign(left)
    assert inc == full
    assert_valid(left, inc)
    assert_balanced(left, inc)
    survivors = {m: stable[m] for m in left.members}
    assert moved(survivors, inc) == minimum_moves(counts(survivors).values(), 14, 3)


def test_incremental_falls_back_when_the_targets_are_incomplete() -> None:
    # The delta claims a join, but nobody holds anything yet: the count check must catch it.
    spec = group([member("a", [T0]), member("b", [T0])], topics(4))
    result = U.assign(spec, AssignmentDelta(added=frozenset({"b"})))
    assert_valid(spec, result)
    assert counts(result) == {"a": 2, "b": 2}


def test_leave_without_removed_targets_recomputes_in_full() -> None:
    spec = group([member(f"m{i}", [T0]) for i in range(3)], topics(6))
    stable = U.assign(spec)
    left = with_targets(spec, stable, drop=["m2"])
    result = U.assign(left, AssignmentDelta(removed=frozenset({"m2"})))
    assert_valid(left, result)
    assert counts(result) == {"m0": 3, "m1": 3}


def test_disjoint_heterogeneous_subscriptions_balance_per_subscription() -> None:
    members = [member(f"a{i}", [T0]) for i in range(2)] + [member(f"b{i}", [T1, T2]) for i in range(3)]
    spec = group(members, topics(5, 4, 4))
    result = U.assign(spec)
    assert_valid(spec, result)
    assert_balanced(spec, result)
    assert sorted(counts(result)[f"a{i}"] for i in range(2)) == [2, 3]
    assert sorted(counts(result)[f"b{i}"] for i in range(3)) == [2, 3, 3]


def test_join_in_one_subscription_leaves_the_other_untouched() -> None:
    members = [member(f"a{i}", [T0]) for i in range(2)] + [member(f"b{i}", [T1]) for i in range(2)]
    spec = group(members, topics(6, 6))
    stable = U.assign(spec)
    joined = with_targets(spec, stable, add=[member("b9", [T1])])
    result = U.assign(joined, AssignmentDelta(added=frozenset({"b9"})))
    assert result == U.assign(joined)
    assert result["a0"] is stable["a0"] and result["a1"] is stable["a1"]
    assert counts(result)["b9"] == 2


def test_overlapping_subscriptions_are_balanced() -> None:
    spec = group(
        [
            member("a", [T0]),
            member("b", [T0, T1]),
            member("c", [T1, T2]),
            member("d", [T2]),
        ],
        topics(6, 2, 8),
    )
    result = U.assign(spec)
    assert_valid(spec, result)
    assert_balanced(spec, result)
    # Balance is pairwise along shared topics (as in KIP-848's uniform assignor), not global: a chain
    # of moves d -> c -> b -> a could even it further, but no single member can take from another.
    assert sum(counts(result).values()) == 16
    assert max(counts(result).values()) - min(counts(result).values()) <= 2


def test_overlapping_subscriptions_keep_a_balanced_target() -> None:
    spec = group([member("a", [T0, T1]), member("b", [T1]), member("c", [T0, T1, T2])], topics(3, 5, 2))
    first = U.assign(spec)
    again = U.assign(with_targets(spec, first))
    assert all(again[m] is first[m] for m in first)


def test_a_topic_only_one_member_subscribes_to_goes_wholly_to_it() -> None:
    spec = group([member("a", [T0, T1]), member("b", [T0])], topics(2, 6))
    result = U.assign(spec)
    assert_valid(spec, result)
    assert result["a"][T1] == frozenset(range(6))
    assert result["b"][T0] == frozenset({0, 1})


def test_a_grown_topic_keeps_current_partitions_and_spreads_the_new_ones() -> None:
    spec = group([member(m, [T0]) for m in "abc"], topics(6))
    stable = U.assign(spec)
    grown = with_targets(spec, stable)
    grown = group(grown.members.values(), topics(9))
    result = U.assign(grown, AssignmentDelta(topics_changed=True))
    assert_valid(grown, result)
    assert counts(result) == {"a": 3, "b": 3, "c": 3}
    for m in "abc":
        assert result[m][T0] > stable[m][T0]
        assert result[m][T0] - stable[m][T0] <= frozenset(range(6, 9))


def test_a_shrunk_topic_drops_the_vanished_partitions_and_rebalances() -> None:
    spec = group([member(m, [T0]) for m in "ab"], topics(8))
    stable = U.assign(spec)
    shrunk = group(with_targets(spec, stable).members.values(), topics(4))
    result = U.assign(shrunk, AssignmentDelta(topics_changed=True))
    assert_valid(shrunk, result)
    assert counts(result) == {"a": 2, "b": 2}


def test_large_quotas_in_a_fresh_group() -> None:
    spec = group([member(m, [T0, T1]) for m in "abc"], topics(700, 301))
    result = U.assign(spec)
    assert_valid(spec, result)
    assert counts(result) == {"a": 334, "b": 334, "c": 333}
