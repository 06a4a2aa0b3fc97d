"""`groupgate rehearse calibrate` without real clients: its arguments, what it plans to run, the table and
JSON it renders, and a replay of a saved run (the real half is compat_tests/test_calibration.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gateway.ops.cli import build_parser
from gateway.ops.cli import main as groupgate
from rehearsal import calibrate_cli as cc
from rehearsal.calibration import Comparison, Figures, Schedule, Step, simulate_schedule
from rehearsal.events import EventWriter


def test_parser_wires_the_command_and_its_defaults() -> None:
    args = build_parser().parse_args(["rehearse", "calibrate"])
    assert args.func.__name__ == "cmd_rehearse_calibrate"
    assert (args.client, args.mix, args.scenario, args.groups, args.members, args.partitions, args.seeds) == (
        "java", "all", "all", 1, 3, 6, 3)
    args = build_parser().parse_args(["rehearse", "calibrate", "--client", "librdkafka", "--groups", "3",
                                      "--members", "5", "--partitions", "10", "--replay", "/a", "--replay", "/b"])
    assert (args.client, args.groups, args.members, args.partitions) == ("librdkafka", 3, 5, 10)
    assert args.replay == [Path("/a"), Path("/b")]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["rehearse", "calibrate", "--client", "kafka-python"])


def test_mixes_and_scenarios_are_checked_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    assert cc.parse_choice("all", cc.SCENARIOS, "scenario") == list(cc.SCENARIOS)
    # Given order does not matter: the runs keep the canonical order.
    assert cc.parse_choice("translate, classic-eager", ("classic-eager", "classic-cooperative", "translate"),
                           "mix") == ["classic-eager", "translate"]
    with pytest.raises(ValueError, match="unknown mix eagre"):
        cc.parse_choice("classic-eager,eagre", ("classic-eager",), "mix")
    # Refused with exit 2 and the reason, before a broker or a gateway is started.
    assert groupgate(["rehearse", "calibrate", "--mix", "eagre"]) == 2
    assert "unknown mix eagre" in capsys.readouterr().out
    assert groupgate(["rehearse", "calibrate", "--scenario", "crashes", "--members", "0"]) == 2
    assert "at least 1" in capsys.readouterr().out
    # librdkafka consumers live in the calling process: no crashes for them, and nothing left to run here.
    assert groupgate(["rehearse", "calibrate", "--client", "librdkafka", "--scenario", "crashes"]) == 2
    out = capsys.readouterr().out
    assert "skipped for librdkafka" in out and "nothing to run" in out


def test_plan_folds_the_consumer_rolling_upgrade_into_its_rolling_restart() -> None:
    wanted, notes = cc.plan(["classic-eager", "consumer"], ["rolling-upgrade", "crashes"], "java")
    assert wanted == [("classic-eager", "rolling-upgrade"), ("classic-eager", "crashes"), ("consumer", "crashes"),
                      ("consumer", "rolling-restart")]
    assert len(notes) == 1
    wanted, _ = cc.plan(["translate"], list(cc.SCENARIOS), "librdkafka")
    assert wanted == [("translate", "rolling-upgrade"), ("translate", "rolling-restart")]


def fig(unavailable_ms: int, changes: int, stable_ms: int, crash_ms: int = 0) -> Figures:
    return Figures(1000, 1000 + stable_ms, 3, 6, unavailable_ms=unavailable_ms, window_ms=stable_ms, changes=changes,
                   crash_unavailable_ms=crash_ms)


def test_table_and_json_give_measured_predicted_ratio_and_agreement() -> None:
    good = cc.Row(Comparison("classic-cooperative", "crashes", fig(60_000, 3, 18_000, 59_000),
                             fig(57_000, 3, 18_600, 56_000), "java"))
    off = cc.Row(Comparison("translate", "rolling-restart", fig(2_000, 3, 2_000), fig(1_000, 6, 2_100), "confluent"))
    table = cc.markdown([good, off]).splitlines()
    assert len(table) == 4 and table[0].count("|") == table[1].count("|") == table[2].count("|")
    assert "| java | crashes | classic-cooperative | 1 | 60.0 / 57.0 | 0.95 | 59.0 / 56.0 | 1.00 / 1.00 | 1.00" in table[2]
    assert table[2].endswith("| yes |")
    # Half the measured unavailability and twice the rebalances: both flagged, in bold; the client is named
    # as the command names it.
    assert "| librdkafka | rolling-restart | translate |" in table[3] and "| **0.50** |" in table[3]
    assert "| **2.00** |" in table[3] and table[3].endswith("| no: unavailable, rebalances |")
    row = off.as_json()
    assert row["client"] == "librdkafka"
    assert row["metrics"]["unavailable"] == {"measured": 2.0, "predicted": 1.0, "ratio": 0.5, "within_25": False}
    assert row["metrics"]["time_to_stable"] == {"measured": 2.0, "predicted": 2.1, "ratio": 1.05, "within_25": True}
    # What `rehearse report` reads from a _calibration.json.
    assert row["real"]["unavailable_ms"] == 2000 and row["simulated"][0]["unavailable_ms"] == 1000
    json.dumps(row)  # serialisable as is


def test_pooled_rows_sum_partition_time_and_changes() -> None:
    a = cc.Row(Comparison("classic-eager", "crashes", fig(10_000, 6, 1_000), fig(12_000, 6, 1_200)))
    b = cc.Row(Comparison("classic-eager", "crashes", fig(20_000, 9, 3_000), fig(18_000, 9, 2_800)))
    (row,) = cc.pooled([a, b])
    assert row.runs == 2
    assert row.comparison.real.unavailable_ms == 30_000 and row.comparison.simulated.unavailable_ms == 30_000
    assert row.comparison.real.rebalances_per_member == 15 / 6
    assert row.comparison.real.time_to_stable_ms == 2_000


def test_replay_of_a_saved_run_writes_the_table_and_json(tmp_path: Path) -> None:
    steps = tuple(Step(slot, 8000 + 3000 * slot, True, 8100 + 3000 * slot, "classic") for slot in range(3))
    schedule = Schedule("classic-cooperative", "rolling-restart", 6, (0, 100, 200), steps)  # type: ignore[arg-type]
    run = tmp_path / "work" / "classic-cooperative-rolling-restart"
    run.mkdir(parents=True)
    (run / "schedule.json").write_text(json.dumps(dataclasses.asdict(schedule)))
    (run / "run.json").write_text(json.dumps({"client": "java"}))
    # A "measured" log that is another seed of the simulation: the replay must find it within 25 %.
    with EventWriter(run / "measured.jsonl") as w:
        w.write_all(simulate_schedule(schedule, 11, run="measured"))
    out, extra = tmp_path / "out", tmp_path / "_calibration.json"
    assert groupgate(["rehearse", "calibrate", "--replay", str(tmp_path / "work"), "--seeds", "2",
                      "--out", str(out), "--json", str(extra)]) == 0
    (row,) = json.loads((out / "calibration.json").read_text())
    assert extra.read_text() == (out / "calibration.json").read_text()
    assert (row["mix"], row["scenario"], row["client"], row["events"]) == (
        "classic-cooperative", "rolling-restart", "java", str(run))
    assert len(row["simulated"]) == 2
    for name in cc.METRICS:
        metric = row["metrics"][name]
        assert metric["measured"] > 0 and metric["within_25"], (name, metric)
    assert "| java | rolling-restart | classic-cooperative | 1 |" in (out / "calibration.md").read_text()
    # Nothing saved there: a clear refusal.
    assert groupgate(["rehearse", "calibrate", "--replay", str(tmp_path / "empty")]) == 2


def test_restarts_are_replayed_when_the_coordinator_first_heard_from_them() -> None:
    from rehearsal import events as E
    from rehearsal.calibration import first_requests

    origin = 1_000_000
    steps = (Step(0, 15000, True, 15200, "classic"), Step(1, 19000, True, 19100, "consumer"),
             Step(2, 23000, True, 23050, "classic"))
    schedule = Schedule("classic-cooperative", "rolling-upgrade", 6, (0, 0, 0), steps)  # type: ignore[arg-type]

    def at(ms: int, cls: type, **fields: object) -> E.Event:
        return cls.model_validate({"ts_ms": origin + ms, "seq": ms, "run": "gateway", "group": "g",
                                   "client_mix": "classic-cooperative", "protocol": "classic", **fields})

    coordinator = [
        at(100, E.MemberJoined, member="old-consumer", protocol="consumer"),
        at(15000, E.RebalanceStarted, reason="LeaveGroupRequest"),  # the stop itself
        at(15150, E.RebalanceStarted, reason="JoinGroupRequest"),  # before the new incarnation started: not it
        at(16900, E.RebalanceStarted, reason="JoinGroupRequest"),  # slot 0's classic successor
        at(19400, E.MemberJoined, member="old-consumer", protocol="consumer"),  # seen before: not new
        at(19600, E.MemberJoined, member="new-consumer", protocol="consumer"),  # slot 1's successor
        # Slot 2's successor joined a rebalance under way: nothing to read, its start latency stays.
    ]
    timed = first_requests(schedule, coordinator, origin)
    assert [s.first_request_ms for s in timed.steps] == [16900, 19600, None]
    assert timed.steps[0].start_ms == 15200  # the recorded start is kept beside it
    # The simulated successor's first request reaches the coordinator then, not at its start + latency.
    joins = [e for e in simulate_schedule(timed) if e.event == "member_joined" and e.ts_ms > 15000]
    assert 16900 <= joins[0].ts_ms <= 16900 + 600, joins[0]
