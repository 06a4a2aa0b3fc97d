"""Connect rehearsals: the seeded simulation of Connect workers on the new protocol (rehearsal/sim_connect.py),
its invariant, the task unavailability of its scenarios, the oracle's connect figures on a hand-built log,
and the CLI path from ``rehearse simulate --group-type connect`` to the report."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from coordinator.connect.model import ConnectAssignment
from rehearsal import events as E
from rehearsal import oracle, report, report_input
from rehearsal.cli import simulate_main
from rehearsal.fleet import MANIFEST, simulate_fleet
from rehearsal.fleet_spec import FleetSpec
from rehearsal.sim_connect import ConnectSimulation, run_connect_seed
from rehearsal.sim_connect_base import SimWorker
from rehearsal.sim_connect_config import ConnectSimConfig
from rehearsal.simulate import SimulationViolation

SESSION_MS = 10_000
HEARTBEAT_MS = 3_000


def _events(seed: int, scenario: str, **kw: Any) -> list[Any]:
    out: list[Any] = []
    run_connect_seed(seed, scenario, sink=out.append, **kw)
    return out


def _task_rows(events: list[Any]) -> list[dict[str, Any]]:
    return [p for p in oracle.compute(events).partition_unavailability if E.unit_kind(p["topic"]) == "task"]


def test_no_connector_or_task_runs_twice_over_many_seeds() -> None:
    """Sizes, delays and both scenarios vary with the seed; every run settles with everything running once
    (the simulation checks after every step and at the end, and raises with the seed otherwise)."""
    for seed in range(120):
        for scenario in ("rolling-restart", "crashes"):
            events: list[Any] = []
            rep = run_connect_seed(
                seed, scenario, sink=events.append, workers=1 + seed % 6, connectors=1 + seed % 5,
                tasks_per_connector=seed % 4, scheduled_delay_ms=(0, 5_000, 300_000)[seed % 3],
                disturbances=1 + seed % 3,
            )  # fmt: skip
            assert rep.first_disturbance_ms > 0
            m = oracle.compute(events)
            assert m.double_ownership == [], (seed, scenario)
            # At the end every unit runs: no ownership interval of a live worker is missing.
            open_units = {(i["topic"], i["partition"]) for i in m.ownership_intervals if i["open_at_end"]}
            assert len(open_units) == len(m.partition_unavailability), (seed, scenario)


def test_the_same_seed_writes_the_same_events() -> None:
    assert _events(7, "crashes") == _events(7, "crashes")
    assert _events(7, "crashes") != _events(8, "crashes")


class _LyingSimulation(ConnectSimulation):
    """A broken worker: it never stops what it is told to give up, and reports it stopped anyway."""

    def owned_report(self, w: SimWorker) -> ConnectAssignment:
        return w.running & w.assigned

    def _reconcile(self, w: SimWorker) -> None:
        if not w.changing and not w.leaving and w.assigned - w.running:
            w.changing = True
            self._push(self.now + 10, "wake", (w, w.incarnation, "started", None))


def test_the_checker_names_the_seed_of_a_worker_running_what_it_gave_up() -> None:
    sim = _LyingSimulation(ConnectSimConfig(seed=5, scenario="rolling-restart", workers=3))
    with pytest.raises(SimulationViolation, match=r"^seed 5 step \d+ .*(still runs|runs on)"):
        sim.run()


@pytest.mark.parametrize("seed", range(6))
def test_a_crash_leaves_tasks_without_a_worker_for_about_the_session_timeout(seed: int) -> None:
    """Without a scheduled delay, a killed worker's tasks wait for its session to expire (armed at its last
    heartbeat, so at least the session timeout minus one interval), then for the next heartbeats of the
    computing worker and of their new owner."""
    rows = _task_rows(_events(seed, "crashes", workers=4, disturbances=1, scheduled_delay_ms=0))
    worst = max(r["unavailable_ms"] for r in rows)
    assert SESSION_MS - HEARTBEAT_MS <= worst <= SESSION_MS + 2 * HEARTBEAT_MS + 500
    assert sum(r["unavailable_ms"] > 0 for r in rows) < len(rows)  # the others' tasks kept running


def test_the_scheduled_rebalance_delay_holds_a_crashed_workers_tasks_back() -> None:
    """With a delay, a lost worker's tasks may also wait for it (when no worker with an empty assignment is
    there to take them): never beyond session timeout + delay, and in some seeds clearly beyond the session."""
    delay = 30_000
    worst = [max(r["unavailable_ms"] for r in _task_rows(_events(s, "crashes", workers=4, disturbances=1,
                                                                     scheduled_delay_ms=delay)))
             for s in range(8)]  # fmt: skip
    assert all(w <= SESSION_MS + delay + 2 * HEARTBEAT_MS + 500 for w in worst), worst
    assert any(w > SESSION_MS + 2 * HEARTBEAT_MS + 500 for w in worst), worst


def test_a_clean_rolling_restart_costs_less_than_crashes() -> None:
    """Each of four workers restarted cleanly versus each killed once: per disturbance, the clean stop hands
    its tasks back as soon as the worker returns; a crash waits for the session timeout (and the delay)."""

    def per_disturbance(scenario: str) -> float:
        total = 0
        for seed in range(8):
            total += sum(r["unavailable_ms"] for r in _task_rows(_events(seed, scenario, workers=4, disturbances=4)))
        return total / (8 * 4)

    clean, crashes = per_disturbance("rolling-restart"), per_disturbance("crashes")
    assert 0 < clean < crashes


def _ev(cls: type, ts: int, member: str | None = None, **kw: Any) -> Any:
    common = {"ts_ms": ts, "run": "r", "group": "cc", "protocol": "connect", "client_mix": "connect"}
    if member is not None:
        common["member"] = member
    return cls(**common, **kw)


def _units(*names: str) -> list[E.TopicPartition]:
    out = []
    for n in names:
        kind, _, rest = n.partition(":")
        conn, _, task = rest.partition("/")
        out.append(E.TopicPartition(topic=f"{kind}:{conn}", partition=int(task or 0)))
    return out


def test_the_oracle_counts_task_and_connector_time_without_a_worker_by_hand() -> None:
    """Connector A with tasks 0 and 1. w1 runs all three from 0; task 1 moves to w2 (stopped at 1000,
    started at 1500); w1 dies at 4000 and w2 starts connector A and task 0 at 9000; the log ends at 10000.
    Task 0: 4000-9000 = 5000 ms; task 1: 1000-1500 = 500 ms; connector A: 5000 ms; each worker changed
    what it runs twice."""
    log = [
        _ev(E.TopicMetadata, 0, topic="connector:A", num_partitions=1),
        _ev(E.TopicMetadata, 0, topic="task:A", num_partitions=2),
        _ev(E.MemberJoined, 0, "w1"),
        _ev(E.PartitionsAssigned, 0, "w1", partitions=_units("connector:A", "task:A/0", "task:A/1")),
        _ev(E.MemberJoined, 100, "w2"),
        _ev(E.PartitionsRevoked, 1000, "w1", partitions=_units("task:A/1")),
        _ev(E.PartitionsAssigned, 1500, "w2", partitions=_units("task:A/1")),
        _ev(E.MemberLeft, 4000, "w1", reason="crash"),
        _ev(E.PartitionsAssigned, 9000, "w2", partitions=_units("connector:A", "task:A/0")),
        _ev(E.GroupStable, 10_000),
    ]
    log = [e.model_copy(update={"seq": i}) for i, e in enumerate(log)]
    c = oracle.compute(log).summary["connect"]
    assert (c["groups"], c["workers"], c["tasks"], c["connectors"]) == (1, 2, 2, 1)
    assert c["task_unavailable_ms"] == 5_500 and c["task_unavailability_ratio"] == 5_500 / 20_000
    assert c["connector_unavailable_ms"] == 5_000 and c["connector_unavailability_ratio"] == 0.5
    assert c["task_unavailability_ms"] == {"p50": 2_750.0, "p90": 4_550.0, "p99": 4_955.0, "max": 5_000.0,
                                           "mean": 2_750.0}  # fmt: skip
    assert c["rebalances"] == 4 and c["rebalances_per_worker"]["max"] == 2.0
    # A log of consumer groups only has no connect figures.
    consumer = [e.model_copy(update={"protocol": "consumer", "client_mix": "consumer"}) for e in log]
    assert "connect" not in oracle.compute(consumer).summary


def test_events_validate_and_a_bad_unit_group_type_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    with E.EventWriter(path) as w:
        w.write_all(_events(3, "rolling-restart"))
    assert E.validate_logs([path]) == []
    line = json.loads(path.read_text().splitlines()[0])
    line["protocol"] = "streams"
    with pytest.raises(E.EventLogError, match="protocol"):
        E.parse_event(json.dumps(line))


def test_fleet_spec_keeps_connect_and_consumer_scenarios_apart() -> None:
    with pytest.raises(ValidationError, match="connect groups"):
        FleetSpec(scenario="rolling-restart", groups=1, members=2)
    with pytest.raises(ValidationError, match="connect groups know"):
        FleetSpec(scenario="topic-growth", groups=1, members=2, group_type="connect")
    with pytest.raises(ValidationError, match="client mix"):
        FleetSpec(scenario="crashes", groups=1, members=2, group_type="connect", mix="translate")
    # A consumer fleet's manifest names no connect field (it is written as before).
    assert "group_type" not in FleetSpec(scenario="crashes", groups=1, members=2).manifest_spec()


def test_rehearse_simulate_connect_writes_events_the_report_reads(tmp_path: Path) -> None:
    said: list[str] = []
    code = simulate_main(3, 3, "rolling-restart", 4, str(tmp_path / "a"), group_type="connect", connectors=2,
                         tasks=2, scheduled_delay_ms=60_000, echo=said.append)  # fmt: skip
    assert code == 0, said
    assert any("3 connect groups x 3 workers" in s for s in said)
    files = sorted((tmp_path / "a" / "events").glob("part-*.jsonl"))
    assert files and E.validate_logs(files) == []
    manifest = json.loads((tmp_path / "a" / MANIFEST).read_text())
    assert manifest["spec"]["group_type"] == "connect" and manifest["settings"]["scheduled.rebalance.max.delay.ms"] == 60_000
    assert all(o["violation"] is None and o["client_mix"] == "connect" for o in manifest["outcomes"])
    # The same spec simulated again writes the same files.
    spec = FleetSpec.model_validate(manifest["spec"])
    simulate_fleet(spec, tmp_path / "b", echo=lambda _: None)
    for f in files:
        assert filecmp.cmp(f, tmp_path / "b" / "events" / f.name, shallow=False)
    m = oracle.compute(E.read_events(files))
    c = m.summary["connect"]
    assert (c["groups"], c["tasks"], c["connectors"]) == (3, 3 * 2 * 2, 3 * 2)
    assert c["task_unavailable_ms"] > 0 and m.summary["double_ownership_violations"] == 0
    html = report.render(report_input.from_oracle(m))
    assert "Connect groups: task unavailability" in html and "task-seconds" in html
    # A bad combination is refused with exit code 2.
    assert simulate_main(1, 2, "scale-up", 0, str(tmp_path / "c"), group_type="connect", echo=said.append) == 2


@pytest.mark.usefixtures("spark")
def test_the_report_of_a_connect_fleet_shows_task_unavailability(tmp_path: Path) -> None:
    """Through PySpark (rehearse report): the pipeline's connect figures equal the oracle's."""
    from rehearsal.cli import report_main

    said: list[str] = []
    assert simulate_main(4, 3, "crashes", 2, str(tmp_path / "sim"), group_type="connect", echo=said.append) == 0
    assert report_main([str(tmp_path / "sim")], str(tmp_path / "out"), echo=said.append) == 0, said
    assert any("connect groups:" in s and "task unavailability" in s for s in said)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    expected = oracle.compute(E.read_events([tmp_path / "sim" / "events"])).summary["connect"]
    assert summary["connect"] == json.loads(json.dumps(expected))
    assert "Connect groups: task unavailability" in (tmp_path / "out" / "report.html").read_text()
