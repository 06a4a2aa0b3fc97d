"""Calibration without real clients: the scheduled simulation, the figures both runs are measured with,
the crash / clean split of unavailability in the oracle, and the report's cost table."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rehearsal import events as E
from rehearsal import oracle, report, report_input
from rehearsal.calibration import Schedule, Step, figures, simulate_schedule

MIX = "classic-eager"


def ev(ts: int, event: str, member: str | None = None, **fields: object) -> E.Event:
    common = {"ts_ms": ts, "seq": ts, "run": "r", "group": "g", "client_mix": MIX, "protocol": "classic"}
    return _make(event, member=member, **common, **fields)


def _make(event: str, **fields: object) -> E.Event:
    classes: dict[str, Any] = {"partitions_assigned": E.PartitionsAssigned, "partitions_revoked": E.PartitionsRevoked,
               "member_left": E.MemberLeft, "member_fenced": E.MemberFenced, "disturbance": E.Disturbance,
               "topic_metadata": E.TopicMetadata, "group_stable": E.GroupStable}
    return classes[event].model_validate({k: v for k, v in fields.items() if v is not None or k != "member"})


P0 = [{"topic": "t", "partition": 0}]
P1 = [{"topic": "t", "partition": 1}]


def crash_log() -> list[E.Event]:
    """a owns p0, b owns p1; at 1000 a is killed, b takes p0 at 7000 (after a's session timeout); at 9000 b
    hands p1 over cleanly to c at 9400; the log ends at 10000."""
    return [
        ev(0, "topic_metadata", topic="t", num_partitions=2),
        ev(0, "partitions_assigned", "a", partitions=P0),
        ev(0, "partitions_assigned", "b", partitions=P1),
        ev(1000, "disturbance", kind="crash"),
        ev(1000, "member_left", "a", reason="crash"),
        ev(7000, "partitions_assigned", "b", partitions=P0),
        ev(9000, "partitions_revoked", "b", partitions=P1),
        ev(9400, "partitions_assigned", "c", partitions=P1),
        ev(10000, "group_stable", partitions=P0 + P1),
    ]


def test_oracle_splits_unavailability_into_crash_and_clean() -> None:
    mix = oracle.compute(crash_log()).summary["client_mixes"][MIX]
    assert mix["unavailable_ms"] == 6000 + 400
    assert mix["crash_unavailable_ms"] == 6000 and mix["clean_unavailable_ms"] == 400
    assert mix["crash_unavailability_ratio"] == 6000 / 20000
    # A fence is a crash too; a clean leave (revocation first) is not.
    fenced = [e if e.event != "member_left" else ev(1000, "member_fenced", "a", reason="session") for e in crash_log()]
    assert oracle.compute(fenced).summary["client_mixes"][MIX]["crash_unavailable_ms"] == 6000
    clean = [e if e.event != "member_left" else ev(1000, "partitions_revoked", "a", partitions=P0)
             for e in crash_log()]
    assert oracle.compute(clean).summary["client_mixes"][MIX]["crash_unavailable_ms"] == 0


def test_figures_measure_from_the_first_disturbance() -> None:
    f = figures(crash_log(), members=2)
    assert (f.first_disturbance_ms, f.settled_ms, f.time_to_stable_ms) == (1000, 9400, 8400)
    assert f.unavailable_ms == 6400 and f.crash_unavailable_ms == 6000
    assert f.changes == 3 and f.rebalances_per_member == 1.5
    # A longer common window adds nothing once every partition is owned again.
    assert figures(crash_log(), members=2, window_end_ms=20000).unavailable_ms == 6400


def schedule(mix: str) -> Schedule:
    steps = tuple(Step(slot, 8000 + 8000 * slot, False, 9500 + 8000 * slot, "classic") for slot in range(3))
    return Schedule(mix, "crashes", 6, (0, 100, 200), steps)  # type: ignore[arg-type]


def test_scheduled_simulation_follows_the_schedule() -> None:
    eager = figures(simulate_schedule(schedule("classic-eager")), 3)
    cooperative = figures(simulate_schedule(schedule("classic-cooperative")), 3)
    assert eager.first_disturbance_ms == cooperative.first_disturbance_ms == 8000
    for f in (eager, cooperative):
        # Each killed member's two partitions wait for its 6 s session timeout.
        assert 3 * 2 * 5000 <= f.crash_unavailable_ms <= 3 * 2 * 7000
    # An eager member restarted before the dead one's session expired makes every member revoke
    # everything and wait; cooperative members keep theirs.
    assert eager.unavailable_ms > 1.5 * cooperative.unavailable_ms
    assert eager.rebalances_per_member > cooperative.rebalances_per_member
    # Deterministic per seed.
    assert figures(simulate_schedule(schedule("classic-eager")), 3).unavailable_ms == eager.unavailable_ms


def test_report_shows_the_cost_split_and_a_calibration() -> None:
    m = oracle.compute(crash_log())
    real = figures(crash_log(), 2)
    calibration = [{"mix": MIX, "scenario": "crashes", "client": "java",
                    "real": {"unavailable_ms": real.unavailable_ms}, "simulated": [{"unavailable_ms": 6000}]}]
    data = report_input.from_oracle(m, None)
    data.calibration = calibration
    html = report.render(data)
    assert "crashes: session timeouts" in html and "30.00%" in html  # 6000 of 20000 partition-ms
    assert "measured 6.4, predicted 6.0 partition-s" in html
    assert "simulation within 6% of real clients" in html
    assert "prediction only" not in html
    # Two runs of one scenario are pooled: 12.8 measured against 9.0 predicted is off by 30 %.
    data.calibration = [*calibration, {**calibration[0], "simulated": [{"unavailable_ms": 3000}]}]
    html = report.render(data)
    assert "measured 12.8, predicted 9.0 partition-s" in html
    assert "simulation off by up to 30%: read as a range" in html
    # Clean restarts and crashes, the two halves of the headline, get their own confidence.
    restart = {**calibration[0], "scenario": "rolling-restart", "real": {"unavailable_ms": 2000},
               "simulated": [{"unavailable_ms": 2200}]}
    data.calibration = [*calibration, restart]
    html = report.render(data)
    assert "clean restarts: simulation within 10% of real clients; crashes: simulation within 6%" in html
    data.calibration = []
    assert "prediction only" in report.render(data)


def test_a_formed_schedule_plays_its_steps_from_the_replays_first_assignment() -> None:
    """The real fleet's first assignment came at ``formed_ms``; the replay keeps each stop at the same distance
    from its own first assignment, whatever its clients' start took."""
    plain = simulate_schedule(schedule("classic-cooperative"))
    first = min(e.ts_ms for e in plain if e.event == "partitions_assigned")
    for formed in (first, first - 700, first + 300):
        events = simulate_schedule(replace(schedule("classic-cooperative"), formed_ms=formed))
        mine = min(e.ts_ms for e in events if e.event == "partitions_assigned")
        assert mine == first
        assert sorted(e.ts_ms for e in events if e.event == "disturbance")[0] == 8000 + (mine - formed)
