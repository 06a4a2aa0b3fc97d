"""The plain-Python metrics: known answers on hand-built scenarios, and a millisecond-by-millisecond
brute force on random logs (so that the oracle the pipeline is compared with is itself checked)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
import rehearsal_scenarios as S

from rehearsal import oracle
from rehearsal.tables import TABLES, percentile


def by(rows: list[dict[str, Any]], *cols: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {tuple(r[c] for c in cols): r for r in rows}


def spans(m: oracle.Metrics) -> set[tuple[str, str, int, int, int, str]]:
    return {
        (r["member"], r["topic"], r["partition"], r["start_ms"], r["end_ms"], r["ended_by"])
        for r in m.ownership_intervals
    }


def test_clean_handover_has_no_gap_and_no_double_ownership() -> None:
    m = oracle.compute(S.handover().events)
    assert spans(m) == {
        ("a", "t", 0, 0, 200, "end_of_log"),
        ("a", "t", 1, 0, 100, "partitions_revoked"),
        ("b", "t", 1, 100, 200, "end_of_log"),
    }
    assert [p["unavailable_ms"] for p in m.partition_unavailability] == [0, 0]
    assert m.double_ownership == []
    members = by(m.member_rebalances, "member")
    assert members[("a",)]["rebalances"] == 2  # acquired t-0 and t-1, then gave t-1 up
    assert members[("b",)]["rebalances"] == 1
    assert members[("a",)]["assignments_received"] == 2
    (g,) = m.group_summary
    # Convergence: from the disturbance at 10 to the last ownership change at 100 (the group_stable at 200
    # is when it was declared, not when it converged).
    assert (g["first_disturbance_ms"], g["last_stable_ms"], g["converged_ms"], g["time_to_stable_ms"]) == (
        10, 200, 100, 90)
    assert g["stable_at_end"] is True
    assert m.summary["runs"]["handover"]["time_to_stable_ms"] == 90
    assert m.summary["runs"]["handover"]["converged_ms"] == 100


def test_gap_and_declared_partition_that_was_never_owned() -> None:
    m = oracle.compute(S.gap().events)
    u = by(m.partition_unavailability, "topic", "partition")
    assert (u[("t", 0)]["unavailable_ms"], u[("t", 0)]["gaps"], u[("t", 0)]["longest_gap_ms"]) == (30, 1, 30)
    assert u[("t", 0)]["owned_ms"] == 70
    # t-1 appears only in group_stable: it exists for the whole window [0, 100] with no owner.
    assert (u[("t", 1)]["unavailable_ms"], u[("t", 1)]["gaps"]) == (100, 1)
    (g,) = m.group_summary
    assert g["unavailable_ms"] == 130
    assert g["unavailability_ratio"] == pytest.approx(130 / 200)
    mix = m.summary["client_mixes"]["classic-eager"]
    assert mix["unavailability_ms"]["max"] == 100
    assert mix["unavailability_ms"]["p50"] == pytest.approx(65)


def test_double_ownership_is_counted_with_its_duration() -> None:
    m = oracle.compute(S.double().events)
    (d,) = m.double_ownership
    assert (d["member_a"], d["member_b"], d["overlap_start_ms"], d["overlap_end_ms"], d["overlap_ms"]) == (
        "a", "b", 30, 70, 40,
    )  # fmt: skip
    assert ("b", "t", 0, 30, 100, "member_left") in spans(m)
    assert m.summary["double_ownership_violations"] == 1
    assert m.summary["double_ownership_ms"] == 40
    (g,) = m.group_summary
    # Stable at 60, but b left at 100 after it: the group is not stable at the end of the log, and its
    # ownership last changed when b left.
    assert g["time_to_stable_ms"] == 100
    assert g["stable_at_end"] is False


def test_fenced_member_loses_everything_it_held() -> None:
    m = oracle.compute(S.fenced().events)
    assert ("a", "t", 0, 0, 40, "member_fenced") in spans(m)
    assert ("a", "t", 1, 0, 40, "member_fenced") in spans(m)
    assert [p["unavailable_ms"] for p in m.partition_unavailability] == [30, 30]
    members = by(m.member_rebalances, "member")
    assert members[("a",)]["fenced"] == 1
    assert members[("a",)]["partitions_lost"] == 2
    assert members[("a",)]["rebalances"] == 1  # being fenced is not an acknowledged change
    (g,) = m.group_summary
    # From the disturbance at 20 to b taking both partitions at 70.
    assert (g["fenced"], g["timers_expired"], g["time_to_stable_ms"]) == (1, 1, 50)


def test_several_groups_and_mixes_in_one_run() -> None:
    m = oracle.compute([ev for g in S.multi() for ev in g.events])
    groups = by(m.group_summary, "group")
    assert groups[("ga",)]["time_to_stable_ms"] == 5  # disturbed at 5, both partitions owned at 10
    assert groups[("gb",)]["rebalances"] == 4
    # gc has no partitions and never becomes stable.
    assert groups[("gc",)]["partitions"] == 0
    assert groups[("gc",)]["unavailability_ratio"] is None
    assert groups[("gc",)]["time_to_stable_ms"] is None
    assert m.summary["runs"]["multi"]["time_to_stable_ms"] is None
    mixes = m.summary["client_mixes"]
    assert set(mixes) == {"consumer", "classic-eager"}
    assert mixes["classic-eager"]["groups"] == 2
    assert mixes["classic-eager"]["groups_never_stable"] == 1
    assert mixes["consumer"]["unavailable_ms"] == 10


def test_rows_have_exactly_the_table_columns() -> None:
    m = oracle.compute(S.random_log(3))
    for name, cols in TABLES.items():
        rows = getattr(m, name)
        assert rows, name
        assert all(tuple(r) == cols for r in rows), name


def test_percentile_interpolates_between_ranks() -> None:
    assert percentile([], 0.5) is None
    assert percentile([7], 0.99) == 7
    assert percentile([0, 10], 0.9) == pytest.approx(9)
    assert percentile([1, 2, 3, 4], 0.5) == pytest.approx(2.5)


@pytest.mark.parametrize("seed", range(8))
def test_oracle_matches_a_millisecond_brute_force(seed: int) -> None:
    m = oracle.compute(S.random_log(seed))
    owners: dict[tuple[Any, ...], list[tuple[str, int, int]]] = defaultdict(list)
    for r in m.ownership_intervals:
        assert r["start_ms"] <= r["end_ms"]
        owners[(r["run"], r["group"], r["topic"], r["partition"])].append((r["member"], r["start_ms"], r["end_ms"]))
    for member_spans in owners.values():
        # A member never holds one partition twice at a time.
        per_member = defaultdict(list)
        for member, s, e in member_spans:
            per_member[member].append((s, e))
        for ss in per_member.values():
            ss.sort()
            assert all(a[1] <= b[0] for a, b in zip(ss, ss[1:], strict=False))
    expected_double = 0
    for p in m.partition_unavailability:
        key = (p["run"], p["group"], p["topic"], p["partition"])
        free = 0
        for t in range(p["window_start_ms"], p["window_end_ms"]):
            holders = {mem for mem, s, e in owners.get(key, []) if s <= t < e}
            free += not holders
            expected_double += len(holders) * (len(holders) - 1) // 2
        assert p["unavailable_ms"] == free, key
        assert p["owned_ms"] + p["unavailable_ms"] == p["window_ms"]
    assert m.summary["double_ownership_ms"] == expected_double
