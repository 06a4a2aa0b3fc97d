"""The uniform assignor's fresh-group fill (nobody holds anything) against the generic quota fill.

A fresh group is built in bulk (whole topics per member, members per topic, shared partition sets);
the result must be exactly what the generic fill gives with the quotas q + 1 for the first
``total % n`` members (by id) and q for the rest: same partitions, same topic order in each mapping.
"""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.assignors import UniformAssignor
from coordinator.assignors._homogeneous import _fill, topic_order
from coordinator.assignors.api import Assignment, GroupSpec, MemberSpec, SubscriptionType, TopicId

from .support import assert_balanced, assert_valid, group, member, tid, topics

U = UniformAssignor()
SETTINGS = settings(max_examples=int(os.environ.get("GROUPGATE_PROPERTY_EXAMPLES", "100")), deadline=None)


def generic_fill(spec: GroupSpec, member_ids: list[str], topic_ids: list[TopicId]) -> dict[str, Assignment]:
    """The generic fill over every partition of ``topic_ids`` with the fresh-group quotas."""
    ordered = sorted(member_ids)
    sizes = [spec.topics[t].num_partitions for t in sorted(topic_ids, key=topic_order)]
    pool = [(t, range(n), n) for t, n in zip(sorted(topic_ids, key=topic_order), sizes, strict=True) if n]
    q, extra = divmod(sum(sizes), len(ordered))
    owned: list[Assignment] = [spec.members[m].assigned for m in ordered]
    _fill(pool, [(i, q + 1 if i < extra else q) for i in range(len(ordered)) if (q + 1 if i < extra else q)], owned)
    return dict(zip(ordered, owned, strict=True))


def assert_same(result: dict[str, Assignment], expected: dict[str, Assignment]) -> None:
    assert result == expected
    for m, a in expected.items():
        assert list(result[m]) == list(a), f"{m}: topics out of order"


@st.composite
def size_runs(draw: st.DrawFn) -> list[int]:
    """Topic sizes in runs of equal sizes (the bulk paths), zeros and odd sizes included."""
    runs = draw(st.lists(st.tuples(st.integers(0, 12), st.integers(1, 8)), min_size=1, max_size=4))
    return [size for size, length in runs for _ in range(length)]


@SETTINGS
@given(size_runs(), st.integers(1, 40), st.randoms(use_true_random=False))
def test_fresh_homogeneous_fill_is_the_generic_fill(sizes: list[int], n: int, rnd) -> None:
    meta = topics(*sizes)
    ids = list(meta)
    rnd.shuffle(ids)  # the topic image is in no particular order
    meta = {t: meta[t] for t in ids}
    spec = group([member(f"m{i:02d}", meta) for i in range(n)], meta)
    spec = GroupSpec(spec.members, spec.topics, SubscriptionType.HOMOGENEOUS)
    result = U.assign(spec)
    assert_valid(spec, result)
    assert_balanced(spec, result)
    assert_same(result, generic_fill(spec, list(spec.members), ids))
    for m, a in result.items():
        if not a:  # a member left without partitions keeps its own mapping object
            assert a is spec.members[m].assigned


def test_whole_topics_per_member_and_members_per_topic() -> None:
    # 40 one-partition topics over 4 members (10 whole topics each), then 3 topics of 12 over 6 members
    # (2 per topic, then 4 per topic): the shapes built in bulk.
    for sizes, n in (([1] * 40, 4), ([12] * 3, 6), ([12] * 3, 9), ([5] * 8 + [3] * 6, 7)):
        meta = topics(*sizes)
        spec = group([member(f"m{i}", meta) for i in range(n)], meta)
        assert_same(U.assign(spec), generic_fill(spec, list(spec.members), list(meta)))


def test_disjoint_groups_sharing_partition_sets_match_each_group_alone() -> None:
    # Two subscription groups with topics of the same size: the cut partition sets are shared
    # between them, and each group's result is the one it gets on its own.
    meta = topics(*([20] * 6))
    ids = list(meta)
    left = [member(f"a{i}", ids[:3]) for i in range(6)]
    right = [member(f"b{i}", ids[3:]) for i in range(6)]
    both = U.assign(group([*left, *right], meta))
    alone_left = U.assign(group(left, {t: meta[t] for t in ids[:3]}))
    alone_right = U.assign(group(right, {t: meta[t] for t in ids[3:]}))
    assert_same({m: both[m] for m in alone_left}, alone_left)
    assert_same({m: both[m] for m in alone_right}, alone_right)


def test_more_members_than_partitions_keep_their_own_empty_mapping() -> None:
    meta = topics(1, 1, 0, 1)
    members = [MemberSpec(f"m{i}", None, None, frozenset(meta), {}) for i in range(5)]
    spec = GroupSpec({m.member_id: m for m in members}, meta, SubscriptionType.HOMOGENEOUS)
    result = U.assign(spec)
    assert [len(a) for a in result.values()] == [1, 1, 1, 0, 0]
    assert result["m3"] is spec.members["m3"].assigned and result["m4"] is spec.members["m4"].assigned
    assert_same(result, generic_fill(spec, list(spec.members), list(meta)))
    assert tid(2) not in set().union(*map(set, result.values()))
