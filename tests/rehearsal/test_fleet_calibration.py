"""rehearsal/fleet_calibration.py without real clients: the figures of a roll, the spread, the row's ratios and
agreement, the table, and the descriptions refused before anything starts. The real half runs in
compat_tests/test_fleet_calibration.py."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rehearsal import events as ev
from rehearsal.fleet import run_group
from rehearsal.fleet_calibration import FleetRow, add_arguments, calibrate_fleet, markdown, measure, spread
from rehearsal.fleet_spec import FleetSpec


def _args(*extra: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(list(extra))


def _common(ts: int, member: str = "") -> dict[str, object]:
    return {"ts_ms": ts, "run": "r", "group": "g", "protocol": "classic", "client_mix": "classic-eager",
            **({"member": member} if member else {})}


def _tps(*ps: int) -> list[ev.TopicPartition]:
    return [ev.TopicPartition(topic="t", partition=p) for p in ps]


def test_a_roll_is_measured_from_its_first_stop_to_its_last_ownership_change() -> None:
    # Two members of two partitions; b leaves at 1000, a takes p1 at 1500 and nothing changes after.
    events = [
        ev.PartitionsAssigned(seq=0, partitions=_tps(0), **_common(0, "a")),
        ev.PartitionsAssigned(seq=1, partitions=_tps(1), **_common(0, "b")),
        ev.Disturbance(seq=2, kind="rolling-upgrade", **_common(1_000)),
        ev.PartitionsRevoked(seq=3, partitions=_tps(1), **_common(1_000, "b")),
        ev.MemberLeft(seq=4, **_common(1_000, "b")),
        ev.PartitionsAssigned(seq=5, partitions=_tps(1), **_common(1_500, "a")),
    ]
    m = measure(events, 2)
    # p1 without an owner from 1000 to 1500: half a partition-second; two changes over two members.
    assert m == {"unavailable_s": 0.5, "rebalances_per_member": 1.0, "time_to_stable_s": 0.5}


def test_spread_is_the_mean_and_nearest_rank_percentiles() -> None:
    s = spread([float(x) for x in range(1, 11)])
    assert s == {"mean": 5.5, "p10": 2.0, "p90": 9.0, "n": 10}
    assert spread([3.0]) == {"mean": 3.0, "p10": 3.0, "p90": 3.0, "n": 1}


def test_a_row_gives_both_sides_ratios_and_agreement() -> None:
    real = [{"unavailable_s": 10.0, "rebalances_per_member": 2.0, "time_to_stable_s": 8.0},
            {"unavailable_s": 14.0, "rebalances_per_member": 2.0, "time_to_stable_s": 12.0}]
    sim = [{"unavailable_s": 12.0, "rebalances_per_member": 3.0, "time_to_stable_s": 10.0}]
    row = FleetRow("librdkafka", "classic-eager", real, sim, {})
    assert row.ratios() == {"unavailable_s": 1.0, "rebalances_per_member": 1.5, "time_to_stable_s": 1.0}
    assert row.within() == {"unavailable_s": True, "rebalances_per_member": False, "time_to_stable_s": True}
    data = row.as_json()
    assert data["real"]["unavailable_s"] == {"mean": 12.0, "p10": 10.0, "p90": 14.0, "n": 2}
    line = markdown([row]).splitlines()[-1]
    assert "12.00 (10.00-14.00)" in line and "1.50 (!)" in line


def test_descriptions_are_refused_before_a_broker_starts(tmp_path: Path) -> None:
    said: list[str] = []

    class NoRuns:
        def broker(self) -> object:
            raise AssertionError("nothing may start for a refused description")

    assert calibrate_fleet(_args("--mix", "eager", "--out", str(tmp_path)), NoRuns(), said.append) == 2  # type: ignore[arg-type]
    assert "unknown mix eager" in said[-1]
    assert calibrate_fleet(_args("--topics", "a:3,b:3", "--out", str(tmp_path)), NoRuns(), said.append) == 2  # type: ignore[arg-type]
    assert "one topic" in said[-1]
    assert calibrate_fleet(_args("--clients", "franz-go", "--out", str(tmp_path)), NoRuns(), said.append) == 2  # type: ignore[arg-type]
    assert "franz-go" in said[-1]
    assert calibrate_fleet(_args("--out", str(tmp_path)), None, said.append) == 2
    assert "compatibility harness" in said[-1]
    # Without --config the gateway's defaults apply: a file that sets nothing.
    assert (tmp_path / "gateway.toml").read_text().strip().endswith("[coordinator]")


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_the_share_of_clean_stops_decides_how_a_roll_stops_its_members(share: float) -> None:
    spec = FleetSpec(scenario="rolling-upgrade", groups=4, members=4, mix="classic-cooperative",
                     topics={"t": 8}, graceful_share=share)
    left: list[ev.Event] = []
    for i in range(spec.groups):
        run_group(spec, i, lambda e: left.append(e) if isinstance(e, ev.MemberLeft) else None)
    crashes = [e for e in left if e.reason == "crash"]
    if share == 1.0:
        assert not crashes and left
    else:
        # Every roll step killed its member (4 per group).
        assert len(crashes) == spec.groups * spec.members


def test_paired_rolls_are_predicted_by_their_simulated_twins() -> None:
    real = [{"unavailable_s": 10.0, "rebalances_per_member": 2.0, "time_to_stable_s": 8.0}]
    sim = [{"unavailable_s": 11.0, "rebalances_per_member": 2.0, "time_to_stable_s": 8.0},
           {"unavailable_s": 31.0, "rebalances_per_member": 2.0, "time_to_stable_s": 8.0}]
    row = FleetRow("java", "classic-eager", real, sim, {}, paired=True)
    # The twin (simulated roll 0, whose plan the real roll played) predicts; every simulated roll gives the spread.
    assert row.ratios()["unavailable_s"] == 1.1 and row.within()["unavailable_s"]
    assert row.ratios("simulated")["unavailable_s"] == 2.1 and not row.within("simulated")["unavailable_s"]
    assert row.as_json()["all_simulated"]["unavailable_s"]["n"] == 2


def test_a_simulated_roll_records_the_plan_it_played() -> None:
    spec = FleetSpec(scenario="rolling-upgrade", groups=1, members=5, mix="classic-cooperative", topics={"t": 10},
                     clients=({"client": "java", "start_ms": 500},), graceful_share=0.5, seed=7)  # type: ignore[arg-type]
    events: list[ev.Event] = []
    outcome = run_group(spec, 0, events.append)
    steps = outcome.roll_steps
    assert len(steps) == spec.members and len({slot for _, slot, _, _ in steps}) == spec.members
    # Each step is a disturbance of the event log, a successor starts 10-1500 ms after its stop, and the killed
    # members are the log's crashes.
    assert [e.ts_ms for e in events if isinstance(e, ev.Disturbance)] == [stop for stop, _, _, _ in steps]
    assert all(10 <= start - stop <= 1_500 for stop, _, _, start in steps)
    crashes = sum(1 for e in events if isinstance(e, ev.MemberLeft) and e.reason == "crash")
    assert crashes == sum(1 for _, _, graceful, _ in steps if not graceful)
    # With start_ms, a successor's first group request comes that long after its start.
    joined = sorted(e.ts_ms for e in events if isinstance(e, ev.MemberJoined))
    for _, _, _, start in steps:
        assert any(start + 500 <= t <= start + 700 for t in joined), (start, joined)
