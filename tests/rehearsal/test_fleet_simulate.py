"""Fleet rehearsals without Spark: per-group seeds, the client-mix split, the simulator configuration
of each variant and scenario, reproducible event files (also in another interpreter), and the
oracle's verdict on every scenario of a small fleet."""

from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from rehearsal import events as E
from rehearsal import oracle
from rehearsal.cli import parse_topics, simulate_main
from rehearsal.fleet import MANIFEST, part_path, simulate_fleet
from rehearsal.fleet_spec import CLIENT_MIXES, FLEET_SCENARIOS, FleetSpec, group_seed, sim_config

ROOT = Path(__file__).resolve().parents[2]


def small(scenario: str = "rolling-upgrade", **kw: object) -> FleetSpec:
    fields: dict[str, object] = {
        "scenario": scenario, "groups": 8, "members": 3, "seed": 11, "topics": {"orders": 4, "audit": 2},
        "groups_per_file": 3,
    }
    fields.update(kw)
    return FleetSpec.model_validate(fields)


def files_of(out: Path) -> list[Path]:
    return sorted((out / "events").iterdir())


def test_group_seeds_depend_on_seed_and_index_only() -> None:
    seeds = [group_seed(7, i) for i in range(200)]
    assert len(set(seeds)) == 200
    assert all(0 <= s < 2**63 for s in seeds)
    assert group_seed(8, 0) != group_seed(7, 0)
    # The fleet's size and layout do not move a group's seed.
    a, b = small(groups=4), small(groups=40, groups_per_file=7)
    assert [sim_config(a, i) for i in range(4)] == [sim_config(b, i) for i in range(4)]


def test_mix_all_splits_groups_across_the_four_variants() -> None:
    spec = small(groups=9)
    mixes = [spec.group_mix(i) for i in range(9)]
    assert mixes[:4] == list(CLIENT_MIXES) and mixes[4:8] == list(CLIENT_MIXES)
    assert all(spec.group_name(i).endswith(m) for i, m in enumerate(mixes))
    assert {small(mix="translate").group_mix(i) for i in range(8)} == {"translate"}


@pytest.mark.parametrize("scenario", FLEET_SCENARIOS)
def test_simulator_configuration_of_each_variant(scenario: str) -> None:
    spec = small(scenario)
    by_mix = {spec.group_mix(i): sim_config(spec, i) for i in range(4)}
    assert by_mix["classic-eager"].classic_mode == by_mix["classic-cooperative"].classic_mode == "native"
    assert by_mix["translate"].classic_mode == by_mix["consumer"].classic_mode == "translate"
    assert by_mix["classic-eager"].classic_assignor == "range"
    assert by_mix["classic-cooperative"].classic_assignor == "cooperative-sticky"
    assert by_mix["consumer"].scenario == "consumer"
    for cfg in by_mix.values():
        assert cfg.members == 3 and cfg.topics == {"orders": 4, "audit": 2} and cfg.subscribed == {"orders", "audit"}
    if scenario.startswith("rolling"):
        direction = scenario.removeprefix("rolling-")
        assert by_mix["classic-eager"].scenario == f"{direction}-native"
        assert by_mix["translate"].scenario == f"{direction}-translate"
    knobs = {"crashes": "crashes", "scale-up": "scale_outs", "scale-down": "scale_ins", "topic-growth": "topic_changes"}
    for name, attr in knobs.items():
        assert all((getattr(cfg, attr) > 0) == (name == scenario) for cfg in by_mix.values())


def test_invalid_descriptions_are_refused() -> None:
    with pytest.raises(ValidationError):
        small(groups=0)
    with pytest.raises(ValidationError):
        small(processing_ms=(50, 20))
    with pytest.raises(ValidationError):
        small(scenario="meteor-strike")
    with pytest.raises(ValidationError, match="static members"):
        small("topic-growth", static_members=True)
    assert small("topic-growth", static_members=True, mix="consumer").static_members
    assert parse_topics("orders:12, a:b:3") == {"orders": 12, "a:b": 3}
    with pytest.raises(ValueError):
        parse_topics("orders")
    said: list[str] = []
    assert simulate_main(4, 0, "crashes", 1, "/nonexistent/out", echo=said.append) == 2
    assert said and said[0].startswith("error: invalid fleet description")


def test_same_seed_same_files_also_in_another_interpreter(tmp_path: Path) -> None:
    spec = small("crashes", groups=6, groups_per_file=4)
    simulate_fleet(spec, tmp_path / "a", echo=lambda _: None)
    # Another interpreter with another string-hash seed writes the very same bytes.
    code = (
        "import sys; from rehearsal.fleet import FleetSpec, simulate_fleet; "
        "simulate_fleet(FleetSpec.model_validate_json(sys.argv[1]), sys.argv[2], echo=lambda _: None)"
    )
    env = {**os.environ, "PYTHONHASHSEED": "4242"}
    subprocess.run([sys.executable, "-c", code, spec.model_dump_json(), str(tmp_path / "b")], check=True, env=env, cwd=ROOT)
    names = [p.name for p in files_of(tmp_path / "a")]
    assert names == ["part-00000.jsonl", "part-00001.jsonl"] == [p.name for p in files_of(tmp_path / "b")]
    for name in names:
        assert filecmp.cmp(tmp_path / "a" / "events" / name, tmp_path / "b" / "events" / name, shallow=False)
    # Another seed is another rehearsal.
    simulate_fleet(small("crashes", groups=6, groups_per_file=4, seed=12), tmp_path / "c", echo=lambda _: None)
    assert part_path(tmp_path / "a", 0).read_bytes() != part_path(tmp_path / "c", 0).read_bytes()


def test_a_group_is_the_same_in_a_bigger_fleet(tmp_path: Path) -> None:
    simulate_fleet(small(groups=2, groups_per_file=2), tmp_path / "a", echo=lambda _: None)
    simulate_fleet(small(groups=5, groups_per_file=2), tmp_path / "b", echo=lambda _: None)
    assert part_path(tmp_path / "a", 0).read_bytes() == part_path(tmp_path / "b", 0).read_bytes()
    # A rerun into the same directory replaces the events of the earlier (bigger) one.
    simulate_fleet(small(groups=2, groups_per_file=2), tmp_path / "b", echo=lambda _: None)
    assert [p.name for p in files_of(tmp_path / "b")] == ["part-00000.jsonl"]


@pytest.mark.parametrize("scenario", FLEET_SCENARIOS)
def test_every_scenario_gives_valid_events_and_no_double_ownership(scenario: str, tmp_path: Path) -> None:
    said: list[str] = []
    assert simulate_main(8, 3, scenario, 5, str(tmp_path), topics="orders:4,audit:2", echo=said.append) == 0
    assert E.validate_logs([tmp_path]) == []
    manifest = json.loads((tmp_path / MANIFEST).read_text())
    assert manifest["groups"] == 8 and all(o["violation"] is None for o in manifest["outcomes"])
    assert {m: v["groups"] for m, v in manifest["client_mixes"].items()} == dict.fromkeys(CLIENT_MIXES, 2)
    events = list(E.read_events([tmp_path]))
    assert len(events) == manifest["events"]
    m = oracle.compute(events)
    assert m.summary["double_ownership_violations"] == 0
    assert sorted(m.summary["client_mixes"]) == sorted(CLIENT_MIXES)
    for g in m.group_summary:
        assert g["group"].endswith(g["client_mix"]) and g["run"] == f"{scenario}-5"
        assert g["stable_at_end"], g
    disturbances = {ev.kind for ev in events if isinstance(ev, E.Disturbance)}
    expected = {
        "rolling-upgrade": {"rolling-upgrade", "rolling-restart"},
        "rolling-downgrade": {"rolling-downgrade", "rolling-restart"},
    }.get(scenario, {scenario if scenario != "crashes" else "crash"})
    assert disturbances == expected
    if scenario == "rolling-upgrade":
        converted = {ev.group for ev in events if isinstance(ev, E.GroupConverted)}
        # Native classic groups become consumer groups; translated ones already are.
        assert converted == {g["group"] for g in m.group_summary if g["client_mix"].startswith("classic")}
    assert said[-1].startswith("done in") and " 0 with an invariant violation" in said[-1]


def test_heartbeat_and_processing_delays_shape_the_run(tmp_path: Path) -> None:
    fast = simulate_fleet(small("crashes", mix="consumer", groups=2), tmp_path / "a", echo=lambda _: None)
    slow = simulate_fleet(
        small("crashes", mix="consumer", groups=2, processing_ms=(1_500, 2_000), heartbeat_interval_ms=2_000),
        tmp_path / "b", echo=lambda _: None,
    )
    # Slower callbacks and heartbeats: members reach their assignment later after the same start.
    def first_owned(out: Path) -> int:
        return min(ev.ts_ms for ev in E.read_events([out]) if isinstance(ev, E.PartitionsAssigned))

    assert first_owned(tmp_path / "b") >= first_owned(tmp_path / "a") + 1_500
    assert fast.events > 0 and slow.events > 0


def test_groupgate_rehearse_simulate_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.ops.cli import main

    spec = tmp_path / "fleet.json"
    spec.write_text(json.dumps({"scenario": "crashes", "groups": 1, "members": 1, "groups_per_file": 2, "run": "r9"}))
    argv = ["rehearse", "simulate", "--groups", "3", "--members", "2", "--scenario", "scale-up", "--seed", "4",
            "--out", str(tmp_path / "out"), "--mix", "translate", "--topics", "orders:3", "--spec", str(spec)]
    assert main(argv) == 0
    assert "done in" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "out" / MANIFEST).read_text())
    # Command-line values override the file's; the rest comes from the file.
    assert manifest["spec"]["scenario"] == "scale-up" and manifest["spec"]["groups_per_file"] == 2
    assert manifest["run"] == "r9" and set(manifest["client_mixes"]) == {"translate"}
    assert [p.name for p in files_of(tmp_path / "out")] == ["part-00000.jsonl", "part-00001.jsonl"]
    assert main(["rehearse", "validate", str(tmp_path / "out")]) == 0
