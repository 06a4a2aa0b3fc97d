"""What a finished rolling upgrade must show, from the clients' events and the coordinator's answers."""

from __future__ import annotations

from typing import Any

from compat_tests.harness.events import ProducedRecord
from compat_tests.harness.invariants import assert_all_consumed, assert_exclusive_ownership

from .scenario import RollingUpgrade


def assert_group_type_follows_policy(run: RollingUpgrade) -> None:
    """Every settled step: ListGroups v5 type == "consumer" iff some running member speaks KIP-848."""
    wrong = [
        (s.what, s.expected_type, s.group.group_type)
        for s in run.steps
        if s.group.group_type != s.expected_type
    ]
    assert not wrong, f"group type differs from the migration policy at (step, expected, seen): {wrong}"


def assert_ends_stable_and_assigned(run: RollingUpgrade, members: int) -> None:
    """The last settled step: group Stable, every partition assigned exactly once, to ``members`` members."""
    last = run.steps[-1].group
    assert last.stable, f"group ends in state {last.state!r}"
    assert last.assigned() == [(run.topic, p) for p in range(run.partitions)], (
        f"final assignment {last.assigned()} does not cover each of {run.partitions} partitions once"
    )
    assert len(last.members) == members, f"{len(last.members)} members at the end: {sorted(last.members)}"


def assert_rolling_upgrade(run: RollingUpgrade, produced: list[ProducedRecord]) -> None:
    """The verdict on one run: at-least-once delivery, exclusive ownership, group type, final state."""
    assert produced, "the producer acknowledged nothing"
    assert_all_consumed(produced, run.log)
    assert_exclusive_ownership(run.log)
    if run.steps and run.check_group:
        assert_group_type_follows_policy(run)
        assert_ends_stable_and_assigned(run, len(run.before))


def assert_same_membership(before: Any, after: Any) -> None:
    """A gateway restart kept the group as it was: member ids, their epochs and assignments, and the
    group epoch (``before``/``after``: the ``group`` of two settled steps)."""
    assert sorted(after.members) == sorted(before.members), "member ids changed across the restart"
    for mid, m in before.members.items():
        assert after.members[mid].assignment == m.assignment, f"{mid}'s assignment changed"
        assert after.members[mid].member_epoch == m.member_epoch, f"{mid}'s epoch changed"
    assert after.group_epoch == before.group_epoch, "the restart bumped the group epoch"
