"""The group service routes the coordinator's KIP-1263 ``assignment`` timer (a target held back by the
group's assignment interval) to the coordinator, in both classic-group modes."""

from __future__ import annotations

import pytest
from migration_harness import Driver

from coordinator.timers import assignment_key


@pytest.mark.parametrize("mode", ["native", "translate"])
def test_the_held_back_target_is_computed_when_the_timer_fires(mode: str) -> None:
    d = Driver(mode=mode, assignment_interval_ms=1_000)
    first = d.consumer("a")
    assert first.member_epoch == 1
    d.advance(100)
    second = d.consumer("b")
    g = d.cgroup()
    # b's join is held back: it is at the first assignment epoch, the timer is armed for the interval.
    assert (second.member_epoch, g.group_epoch, g.assignment_epoch) == (1, 2, 1)
    assert d.timers[assignment_key("g")] == 1_000 + 1_000  # the first target was computed at now=1000
    d.advance(900)
    g = d.cgroup()
    assert (g.group_epoch, g.assignment_epoch) == (2, 2)
    assert assignment_key("g") not in d.timers
    assert sorted(d.target("a") + d.target("b")) == [0, 1, 2, 3, 4, 5]
