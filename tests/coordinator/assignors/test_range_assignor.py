"""The range assignor against hand-computed assignments (KIP-848 "Assignor": range)."""

from __future__ import annotations

from coordinator.assignors import RangeAssignor
from coordinator.assignors.api import AssignmentDelta

from .support import assert_valid, group, member, tid, topics, with_targets

R = RangeAssignor()
T0, T1, T2 = tid(0), tid(1), tid(2)


def fs(*ps: int) -> frozenset[int]:
    return frozenset(ps)


def test_contiguous_ranges_first_members_get_the_remainder() -> None:
    spec = group([member(m, [T0]) for m in "cab"], topics(7))
    result = R.assign(spec)
    assert_valid(spec, result)
    assert result == {"a": {T0: fs(0, 1, 2)}, "b": {T0: fs(3, 4)}, "c": {T0: fs(5, 6)}}


def test_identical_subscriptions_are_co_partitioned() -> None:
    spec = group([member(m, [T0, T1, T2]) for m in ("m1", "m2", "m3")], topics(5, 5, 3))
    result = R.assign(spec)
    assert result["m1"] == {T0: fs(0, 1), T1: fs(0, 1), T2: fs(0)}
    assert result["m2"] == {T0: fs(2, 3), T1: fs(2, 3), T2: fs(1)}
    assert result["m3"] == {T0: fs(4), T1: fs(4), T2: fs(2)}


def test_static_members_come_first_by_instance_id() -> None:
    spec = group(
        [
            member("a-dynamic", [T0]),
            member("z-static", [T0], instance_id="i1"),
            member("b-static", [T0], instance_id="i2"),
        ],
        topics(4),
    )
    result = R.assign(spec)
    assert result["z-static"] == {T0: fs(0, 1)}
    assert result["b-static"] == {T0: fs(2)}
    assert result["a-dynamic"] == {T0: fs(3)}


def test_heterogeneous_subscriptions_range_each_topic_over_its_subscribers() -> None:
    spec = group([member("m1", [T0, T1]), member("m2", [T0]), member("m3", [T1, T2])], topics(3, 4, 2))
    result = R.assign(spec)
    assert_valid(spec, result)
    assert result["m1"] == {T0: fs(0, 1), T1: fs(0, 1)}
    assert result["m2"] == {T0: fs(2)}
    assert result["m3"] == {T1: fs(2, 3), T2: fs(0, 1)}


def test_more_members_than_partitions_leaves_the_last_ones_empty() -> None:
    spec = group([member(m, [T0]) for m in "abc"], topics(2))
    result = R.assign(spec)
    assert result == {"a": {T0: fs(0)}, "b": {T0: fs(1)}, "c": {}}


def test_stateless_ignores_current_targets_but_keeps_unchanged_objects() -> None:
    spec = group([member("a", [T0], {T0: [3]}), member("b", [T0], {T0: [0]})], topics(4))
    result = R.assign(spec)
    assert result == {"a": {T0: fs(0, 1)}, "b": {T0: fs(2, 3)}}
    again = R.assign(with_targets(spec, result), AssignmentDelta(changed=frozenset({"a"})))
    assert again["a"] is result["a"] and again["b"] is result["b"]


def test_join_shifts_the_ranges() -> None:
    spec = group([member(m, [T0]) for m in "ac"], topics(6))
    stable = R.assign(spec)
    joined = with_targets(spec, stable, add=[member("b", [T0])])
    result = R.assign(joined, AssignmentDelta(added=frozenset({"b"})))
    assert result == {"a": {T0: fs(0, 1)}, "b": {T0: fs(2, 3)}, "c": {T0: fs(4, 5)}}


def test_large_ranges() -> None:
    # More than 256 partitions per member: ranges are cut slice by slice rather than with zip().
    spec = group([member(m, [T0, T1]) for m in "abc"], topics(1000, 2))
    result = R.assign(spec)
    assert_valid(spec, result)
    assert result["a"][T0] == frozenset(range(0, 334))
    assert result["b"][T0] == frozenset(range(334, 667))
    assert result["c"][T0] == frozenset(range(667, 1000))
    assert result["c"].get(T1) is None
