"""Properties every assignment must have, on generated groups (hypothesis, bounded examples)."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.assignors import RangeAssignor, UniformAssignor
from coordinator.assignors.api import AssignmentDelta, GroupSpec, SubscriptionType

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
R = RangeAssignor()
# Bounded for CI; raise GROUPGATE_PROPERTY_EXAMPLES for a deeper local search.
SETTINGS = settings(max_examples=int(os.environ.get("GROUPGATE_PROPERTY_EXAMPLES", "100")), deadline=None)


@st.composite
def groups(draw: st.DrawFn, homogeneous: bool | None = None, garbage: bool = True) -> GroupSpec:
    """Up to 4 topics of up to 12 partitions, up to 7 members; targets empty or arbitrary."""
    sizes = draw(st.lists(st.integers(0, 12), min_size=1, max_size=4))
    meta = topics(*sizes)
    ids = list(meta)
    n = draw(st.integers(1, 7))
    homog = draw(st.booleans()) if homogeneous is None else homogeneous
    subset = st.sets(st.sampled_from(ids), min_size=1 if homog else 0)
    shared = draw(subset)
    members = []
    for i in draw(st.permutations(range(n))):
        sub = shared if homog else draw(subset)
        held = {}
        if garbage and draw(st.booleans()):
            held = draw(st.dictionaries(st.sampled_from(ids), st.sets(st.integers(0, 13), max_size=6), max_size=3))
        static = f"i{draw(st.integers(0, 9))}-{i}" if draw(st.booleans()) else None
        members.append(member(f"m{i}", sub, held, instance_id=static))
    spec = group(members, meta)
    if homog and len(spec.members) > 0:
        spec = GroupSpec(spec.members, spec.topics, SubscriptionType.HOMOGENEOUS)
    return spec


@SETTINGS
@given(groups())
def test_uniform_is_valid_balanced_and_stable(spec: GroupSpec) -> None:
    result = U.assign(spec)
    assert_valid(spec, result)
    assert_balanced(spec, result)
    again = U.assign(with_targets(spec, result))
    assert all(again[m] is result[m] for m in result), "a valid balanced target must be kept as is"


@SETTINGS
@given(groups(), st.data())
def test_uniform_join_is_minimal_and_incremental_matches_full(spec: GroupSpec, data: st.DataObject) -> None:
    stable = U.assign(spec)
    model = spec.members[data.draw(st.sampled_from(sorted(spec.members)))]
    joined = with_targets(spec, stable, add=[member("joiner", model.subscribed_topic_ids)])
    full = U.assign(joined)
    inc = U.assign(joined, AssignmentDelta(added=frozenset({"joiner"})))
    assert inc == full
    for m in stable:
        if inc[m] == stable[m]:
            assert inc[m] is stable[m]
    assert_valid(joined, inc)
    assert_balanced(joined, inc)
    _assert_minimal_if_homogeneous(joined, stable, inc)


@SETTINGS
@given(groups(), st.data())
def test_uniform_leave_is_minimal_and_incremental_matches_full(spec: GroupSpec, data: st.DataObject) -> None:
    stable = U.assign(spec)
    leaver = data.draw(st.sampled_from(sorted(spec.members)))
    left = with_targets(spec, stable, drop=[leaver])
    full = U.assign(left)
    delta = AssignmentDelta(removed=frozenset({leaver}), removed_assigned={leaver: stable[leaver]})
    inc = U.assign(left, delta)
    assert inc == full
    assert_valid(left, inc)
    assert_balanced(left, inc)
    _assert_minimal_if_homogeneous(left, {m: stable[m] for m in left.members}, inc)


def _assert_minimal_if_homogeneous(spec: GroupSpec, before: dict, after: dict) -> None:
    """Per subscription, when subscriptions do not overlap: exactly the moves balance requires."""
    by_sub: dict[frozenset, list[str]] = {}
    for m in spec.members.values():
        by_sub.setdefault(m.subscribed_topic_ids & set(spec.topics), []).append(m.member_id)
    subs = list(by_sub)
    if sum(len(s) for s in subs) != len(set().union(*subs)):
        return  # overlapping subscriptions: balance is pairwise, no closed-form minimum
    expected = 0
    for sub, mids in by_sub.items():
        total = sum(spec.topics[t].num_partitions for t in sub)
        if sub:
            expected += minimum_moves([counts(before).get(m, 0) for m in mids], total, len(mids))
    assert moved(before, after) == expected


@SETTINGS
@given(groups(), st.randoms(use_true_random=False))
def test_results_do_not_depend_on_member_order(spec: GroupSpec, rnd) -> None:
    order = list(spec.members)
    rnd.shuffle(order)
    shuffled = GroupSpec({m: spec.members[m] for m in order}, spec.topics, spec.subscription_type)
    assert U.assign(shuffled) == U.assign(spec)
    assert R.assign(shuffled) == R.assign(spec)


@SETTINGS
@given(groups(garbage=False))
def test_range_gives_contiguous_even_co_partitioned_ranges(spec: GroupSpec) -> None:
    result = R.assign(spec)
    assert_valid(spec, result)
    for t in spec.topics:
        subs = [m for m, s in spec.members.items() if t in s.subscribed_topic_ids]
        sizes = [len(result[m].get(t, ())) for m in subs]
        if sizes:
            assert max(sizes) - min(sizes) <= 1
        for m in subs:
            ps = sorted(result[m].get(t, ()))
            assert ps == list(range(ps[0], ps[0] + len(ps))) if ps else True
    # Identical subscriptions and equal partition counts: the same partition numbers for each member.
    if len({s.subscribed_topic_ids for s in spec.members.values()}) == 1:
        sub = sorted(next(iter(spec.members.values())).subscribed_topic_ids, key=lambda t: t.int)
        for a in sub:
            for b in sub:
                if spec.topics[a].num_partitions == spec.topics[b].num_partitions:
                    for m in spec.members:
                        assert result[m].get(a, frozenset()) == result[m].get(b, frozenset())


def test_generated_topic_ids_are_distinct() -> None:
    assert len({tid(i) for i in range(10)}) == 10
