"""A fleet of the user's own: its clients (each member with its client's calibrated model), its gateway's
coordinator settings (from the TOML `groupgate serve` reads), time to stable as convergence, and the spread of
single rolls in the report (oracle-built here; tests/rehearsal/test_fleet_report.py runs the Spark path)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from rehearsal import events as E
from rehearsal import oracle
from rehearsal.cli import find_simulations, parse_clients, simulate_main
from rehearsal.fleet import MANIFEST, FleetSimulation, run_group, simulate_fleet
from rehearsal.fleet_settings import ClientSpec, GatewaySpec, client_slots, gateway_from_config
from rehearsal.fleet_spec import FleetSpec, fleet_warnings, sim_config, simulation_settings
from rehearsal.report import render
from rehearsal.report_input import from_oracle
from rehearsal.report_provenance import annotate, calibration_backing
from rehearsal.tables import roll_spread

LIBRDKAFKA_AND_JAVA = ({"client": "librdkafka", "share": 3}, {"client": "java", "version": "4.3.1", "share": 1})


def spec(**kw: object) -> FleetSpec:
    fields: dict[str, object] = {"scenario": "rolling-upgrade", "groups": 4, "members": 4, "seed": 5,
                                 "topics": {"t": 8}}
    fields.update(kw)
    return FleetSpec.model_validate(fields)


def events_of(s: FleetSpec, index: int) -> list[E.Event]:
    out: list[E.Event] = []
    run_group(s, index, out.append)
    return out


# ---- item 1: clients ---------------------------------------------------------------------------------

def test_members_are_split_between_the_clients_by_share() -> None:
    clients = tuple(ClientSpec.model_validate(c) for c in LIBRDKAFKA_AND_JAVA)
    assert client_slots(clients, 8) == [0] * 6 + [1] * 2
    assert client_slots(clients, 4) == [0, 0, 0, 1]
    assert client_slots(clients, 1) == [0]


def test_each_member_runs_its_clients_calibrated_model() -> None:
    s = spec(clients=LIBRDKAFKA_AND_JAVA, mix="classic-cooperative")
    sim = FleetSimulation(s, 0, None)
    sim.run()
    by_slot = {c.slot: c for c in sim.clients if c.protocol == "classic"}
    librdkafka, java = by_slot[0], by_slot[3]
    # librdkafka paces its rejoins and restarts its heartbeat timer on SyncGroup (rehearsal/calibration.py).
    assert (librdkafka.join_interval_ms, librdkafka.heartbeat_from_sync) == (1_000, True)
    assert (java.join_interval_ms, java.heartbeat_from_sync, java.leader_assign_delay) == (0, False, True)
    assert librdkafka.session_timeout_ms == java.session_timeout_ms == 45_000
    consumers = {c.slot: c for c in sim.clients if c.protocol == "consumer"}
    assert consumers[0].callback_wait_ms == 0 and consumers[3].callback_wait_ms == 110


def test_named_clients_change_the_events_and_stay_reproducible() -> None:
    default, named = spec(), spec(clients=LIBRDKAFKA_AND_JAVA)
    assert events_of(named, 1) == events_of(named, 1)
    assert events_of(named, 1) != events_of(default, 1)
    # Without clients the spec is what fleets always were: the generic models and 2-60 ms callbacks.
    assert default.client_models() is None
    assert simulation_settings(default)["clients"] == "generic Java-like models"


def test_a_fleet_of_named_clients_simulates_every_mix_without_violations(tmp_path: Path) -> None:
    for scenario in ("rolling-upgrade", "crashes"):
        result = simulate_fleet(spec(scenario=scenario, groups=8, clients=LIBRDKAFKA_AND_JAVA), tmp_path / scenario,
                                echo=lambda _: None)
        assert result.violations == [], [o.violation for o in result.violations]


def test_clients_that_cannot_run_the_fleet_are_refused() -> None:
    with pytest.raises(ValidationError, match="franz-go is not modelled"):
        spec(clients=[{"client": "franz-go"}])
    with pytest.raises(ValidationError, match="no generally available KIP-848"):
        spec(clients=[{"client": "java", "version": "3.6.0"}])
    with pytest.raises(ValidationError, match="no generally available KIP-848"):
        spec(mix="consumer", scenario="crashes", clients=[{"client": "librdkafka", "version": "2.4.0"}])
    spec(mix="classic-eager", scenario="crashes", clients=[{"client": "java", "version": "3.6.0"}])  # classic only
    with pytest.raises(ValidationError, match="give a mix that matches"):
        spec(clients=[{"client": "java", "strategy": "range"}])  # mix all: cooperative groups too
    with pytest.raises(ValidationError, match="one assignor every member supports"):
        spec(mix="classic-eager", clients=[{"client": "java", "strategy": "range"},
                                           {"client": "librdkafka", "strategy": "roundrobin"}])
    with pytest.raises(ValidationError, match="outside the gateway"):
        spec(clients=[{"client": "java", "session_timeout_ms": 2_000}])


def test_a_clients_strategy_is_its_groups_assignor() -> None:
    s = spec(mix="classic-eager", clients=[{"client": "librdkafka", "strategy": "roundrobin"}])
    assert sim_config(s, 0).classic_assignor == "roundrobin"
    assert sim_config(spec(mix="classic-cooperative", clients=[
        {"client": "java", "strategy": "cooperative-sticky"}]), 0).classic_assignor == "cooperative-sticky"


def test_parse_clients() -> None:
    assert parse_clients("java@4.3.1:3,librdkafka:1/range") == [
        {"client": "java", "version": "4.3.1", "share": 3}, {"client": "librdkafka", "share": 1, "strategy": "range"}]
    with pytest.raises(ValueError):
        parse_clients("java:x")


# ---- item 2: the gateway's settings --------------------------------------------------------------------

def write_config(path: Path, coordinator: str = "") -> Path:
    path.write_text('[gateway]\nupstream = "127.0.0.1:9093"\n[coordinator]\n' + coordinator, encoding="utf-8")
    return path


def test_the_gateway_configuration_sets_the_simulated_coordinator(tmp_path: Path) -> None:
    g = gateway_from_config(write_config(tmp_path / "gw.toml", 'ephemeral_state = true\n'
                                         '"group.initial.rebalance.delay.ms" = 0\n'))
    assert (g.consumer_session_timeout_ms, g.consumer_heartbeat_interval_ms, g.initial_rebalance_delay_ms) == (
        45_000, 5_000, 0)
    assert g.not_modelled == ()  # memory store, defaults elsewhere: nothing the simulation leaves out
    sim = FleetSimulation(spec(gateway=g.model_dump()), 0, None)
    cfg = sim.endpoint.config
    assert (cfg.session_timeout_ms, cfg.heartbeat_interval_ms, cfg.initial_rebalance_delay_ms) == (45_000, 5_000, 0)
    settings = simulation_settings(spec(gateway=g.model_dump()))
    assert settings["gateway"] == str(tmp_path / "gw.toml")
    assert settings["group.consumer.session.timeout.ms"] == 45_000
    assert settings["group.consumer.heartbeat.interval.ms"] == 5_000
    assert settings["group.initial.rebalance.delay.ms"] == 0


def test_settings_the_simulation_cannot_model_are_named(tmp_path: Path) -> None:
    g = gateway_from_config(write_config(tmp_path / "gw.toml", 'classic_groups = "translate"\n'
                                         'managed_groups = "orders-.*"\n'
                                         'group_configs = {"orders-1" = {"consumer.session.timeout.ms" = 50000}}\n'))
    notes = "\n".join(g.not_modelled)
    # serve keeps state in the cluster by default: answers wait for the state write, which is not modelled.
    assert "state_store = kafka" in notes and "group_configs (orders-1)" in notes and "managed_groups" in notes
    warnings = fleet_warnings(spec(gateway=g.model_dump()))
    assert any("classic_groups = translate" in w and "classic-eager" in w for w in warnings)
    assert any(w.startswith("java 4.0: modelled with the behaviour measured on java 4.3.1")
               for w in fleet_warnings(spec(clients=[{"client": "java", "version": "4.0"}])))


def test_the_translate_topic_change_grace_is_simulated_not_named(tmp_path: Path) -> None:
    g = gateway_from_config(write_config(tmp_path / "gw.toml", 'ephemeral_state = true\n'
                                         'classic_groups = "translate"\n'
                                         'translate_topic_change_grace_ms = 0\n'))
    assert g.translate_topic_change_grace_ms == 0 and g.not_modelled == ()
    told_at_once = spec(scenario="topic-growth", mix="translate", gateway=g.model_dump())
    assert simulation_settings(told_at_once)["translate_topic_change_grace_ms"] == 0
    sim = FleetSimulation(told_at_once, 0, None)
    assert sim.endpoint.service.classic_members.config.topic_change_grace_ms == 0
    # The simulated clients notice a grown topic within 600 ms: with the default grace they rejoin by
    # themselves, with none the coordinator tells them first, so the two streams differ.
    waited = spec(scenario="topic-growth", mix="translate", gateway=g.model_copy(
        update={"translate_topic_change_grace_ms": 3_000}).model_dump())
    assert [e for i in range(4) for e in events_of(told_at_once, i)] != [
        e for i in range(4) for e in events_of(waited, i)]


def test_simulate_with_config_writes_settings_and_warnings(tmp_path: Path) -> None:
    config = write_config(tmp_path / "gw.toml", 'fsync = "never"\nstate_dir = "/tmp/x"\n')
    said: list[str] = []
    out = tmp_path / "sim"
    assert simulate_main(4, 3, "crashes", 2, str(out), "all", config=str(config), clients="librdkafka",
                         echo=said.append) == 0, said
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["settings"]["group.consumer.session.timeout.ms"] == 45_000
    assert manifest["settings"]["clients"].startswith("librdkafka 2.16.0 x1")
    assert any("state_store = file (fsync = never)" in w for w in manifest["warnings"])
    assert any(line.startswith("warning: not modelled: state_store = file") for line in said)
    assert simulate_main(4, 3, "crashes", 2, str(out), "all", config=str(tmp_path / "missing.toml"),
                         echo=said.append) == 2
    assert simulate_main(4, 3, "crashes", 2, str(out), "all", clients="franz-go", echo=said.append) == 2
    assert "franz-go is not modelled" in said[-1]


# ---- item 3: time to stable is convergence ----------------------------------------------------------

def test_time_to_stable_is_the_last_ownership_change_not_the_horizon(tmp_path: Path) -> None:
    # The case: 5-member rolls with the default 20 s duration were all "stable at 20,000 ms".
    s = spec(groups=8, members=5, duration_ms=20_000)
    result = simulate_fleet(s, tmp_path, echo=lambda _: None)
    m = oracle.compute(E.read_events([tmp_path]))
    groups = {g["group"]: g for g in m.group_summary}
    for o in result.outcomes:
        g = groups[o.group]
        # The simulator and the analysis agree on convergence ...
        assert g["converged_ms"] == o.settled_ms and g["time_to_stable_ms"] == o.time_to_stable_ms, o.group
        # ... which comes before the simulation's own horizon (the last group_stable, at >= 20 s).
        assert g["last_stable_ms"] >= 20_000 and g["converged_ms"] <= g["last_stable_ms"], o.group
    # Groups the simulator held until its 20 s horizon report when they converged instead.
    held = [g for g in m.group_summary if g["last_stable_ms"] == 20_000]
    assert held and all(g["converged_ms"] < 20_000 for g in held)
    run = m.summary["runs"][s.run_id]
    assert run["time_to_stable_ms"] == run["converged_ms"] - run["first_disturbance_ms"]
    assert run["converged_ms"] == max(o.settled_ms for o in result.outcomes)


# ---- item 4: spread of single rolls and the calibration behind them ------------------------------------

CALIBRATION = [{"mix": "classic-cooperative", "scenario": "rolling-upgrade", "client": "librdkafka", "runs": 5,
                "real": {"unavailable_ms": 4_000}, "simulated": [{"unavailable_ms": 4_400}],
                "ratios": {"unavailable": 1.1}}]


def test_spread_over_rolls_per_run_and_mix() -> None:
    groups = [{"run": "r", "client_mix": "translate", "unavailable_ms": v, "unavailability_ratio": v / 1e5,
               "time_to_stable_ms": v * 2} for v in (0, 1_000, 2_000, 3_000, 10_000)]
    (row,) = roll_spread(groups)
    assert row["rolls"] == 5
    assert row["unavailable_ms"] == pytest.approx({"p10": 400.0, "p50": 2_000.0, "p90": 7_200.0, "mean": 3_200.0})
    assert row["time_to_stable_ms"]["p90"] == pytest.approx(14_400.0)


def test_calibration_backing_names_the_rows_or_says_uncalibrated() -> None:
    label = calibration_backing(CALIBRATION, ["/x/_calibration.json"], "rolling-upgrade", "classic-cooperative",
                                ["librdkafka"])
    assert label == "/x/_calibration.json: librdkafka rolling-upgrade, 5 real runs, unavailable within 10%"
    assert calibration_backing(CALIBRATION, [], "rolling-upgrade", "translate") == "uncalibrated"
    assert calibration_backing(CALIBRATION, [], "rolling-upgrade", "classic-cooperative", ["java"]) == "uncalibrated"
    assert calibration_backing(CALIBRATION, [], "scale-up", "classic-cooperative") == "uncalibrated"


def test_report_shows_settings_spread_and_calibration(tmp_path: Path) -> None:
    config = write_config(tmp_path / "gw.toml")
    out = tmp_path / "sim"
    assert simulate_main(8, 3, "rolling-upgrade", 4, str(out), "all", config=str(config),
                         clients="librdkafka", echo=lambda _: None) == 0
    (out / "_calibration.json").write_text(json.dumps(CALIBRATION))
    metrics = oracle.compute(E.read_events([out]))
    data = from_oracle(metrics)
    from rehearsal.cli import find_calibration_sources

    data.calibration, data.calibration_sources = find_calibration_sources([str(out)])
    data.simulations = find_simulations([str(out / "events")])  # found beside the events directory too
    summary = annotate(metrics.summary, data.simulations, data.calibration, data.calibration_sources)
    sim = summary["simulations"]["rolling-upgrade-4"]
    assert sim["settings"]["group.consumer.session.timeout.ms"] == 45_000
    assert any("state_store = kafka" in w for w in sim["warnings"])
    by_mix = {r["client_mix"]: r for r in summary["spread"]}
    assert by_mix["classic-cooperative"]["calibration"].endswith("librdkafka rolling-upgrade, 5 real runs, "
                                                                 "unavailable within 10%")
    assert by_mix["translate"]["calibration"] == "uncalibrated"
    assert all(r["rolls"] == 2 and r["scenario"] == "rolling-upgrade" for r in summary["spread"])
    html = render(data)
    header = html.split('id="simulation"', 1)[1].split('id="verdict"', 1)[0]
    assert "group.consumer.session.timeout.ms" in header and "45000" in header and "state_store = kafka" in header
    spread = html.split('id="spread"', 1)[1].split('id="unavailability"', 1)[0]
    u = by_mix["classic-eager"]["unavailable_ms"]
    assert f"{u['p10'] / 1000:,.1f} – {u['p90'] / 1000:,.1f}" in spread
    assert f"<b>{u['mean'] / 1000:,.1f}</b>" in spread
    assert "uncalibrated" in spread and "_calibration.json: librdkafka rolling-upgrade" in spread
    # The runs table gives convergence, not the last group_stable (the simulation's horizon).
    runs = html.split('id="runs"', 1)[1]
    assert "converged ms" in runs and "last stable ms" not in runs


def test_gateway_spec_defaults_are_the_simulators_own() -> None:
    g = GatewaySpec()
    assert (g.source, g.consumer_session_timeout_ms, g.initial_rebalance_delay_ms) == ("simulator", 10_000, 300)
    assert simulation_settings(spec())["group.consumer.heartbeat.interval.ms"] == 1_000
