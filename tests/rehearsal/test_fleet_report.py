"""A simulated small fleet through the CLI functions end to end (simulate -> report), and the
Spark-parallel simulation writing the same event files as the serial one. The reports are written
under the test's tmp dir."""

from __future__ import annotations

import filecmp
import json
import re
from pathlib import Path

import pytest
from rehearsal_compare import same

from rehearsal import events as E
from rehearsal import oracle
from rehearsal.cli import report_main, simulate_main
from rehearsal.fleet import MANIFEST
from rehearsal.fleet_spec import CLIENT_MIXES
from rehearsal.report_html import MIX_LABELS

pytestmark = pytest.mark.usefixtures("spark")

ARGS = {"groups": 8, "members": 3, "seed": 21, "topics": "orders:4,audit:2"}


def simulate(out: Path, scenario: str = "rolling-upgrade", **kw: object) -> list[str]:
    said: list[str] = []
    a: dict[str, object] = {**ARGS, **kw}
    code = simulate_main(
        a["groups"], a["members"], scenario, a["seed"], str(out), "all",  # type: ignore[arg-type]
        topics=a["topics"], spark=bool(a.get("spark")), echo=said.append,  # type: ignore[arg-type]
        config=a.get("config"), clients=a.get("clients"),  # type: ignore[arg-type]
    )
    assert code == 0, said
    return said


def test_rolling_upgrade_fleet_report_compares_the_four_mixes(tmp_path: Path) -> None:
    simulate(tmp_path / "sim")
    said: list[str] = []
    assert report_main([str(tmp_path / "sim")], str(tmp_path / "report"), echo=said.append) == 0, said
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["double_ownership_violations"] == 0
    assert summary["groups"] == 8
    assert sorted(summary["client_mixes"]) == sorted(CLIENT_MIXES)
    for mix, figures in summary["client_mixes"].items():
        assert figures["groups"] == 2, mix
        dist = figures["unavailability_ms"]
        assert dist["p50"] is not None and dist["p50"] <= dist["p90"] <= dist["p99"] <= dist["max"], (mix, dist)
        assert figures["groups_never_stable"] == 0
    # The same figures as the plain-Python oracle reading the same files.
    expected = oracle.compute(E.read_events([tmp_path / "sim"])).summary
    assert same(summary["client_mixes"], expected["client_mixes"]) == []
    # The spread of single rolls, per run and mix, from the pipeline's groups as from the oracle's.
    spread = {(r["run"], r["client_mix"]): r for r in summary["spread"]}
    for row in expected["spread"]:
        got = spread[(row["run"], row["client_mix"])]
        assert got["calibration"] == "uncalibrated" and got["scenario"] == "rolling-upgrade"
        assert same({k: got[k] for k in row}, row) == [], row
    # Time to stable is convergence: the simulation's horizon (its last group_stable) is not reported.
    assert summary["runs"]["rolling-upgrade-21"]["converged_ms"] <= summary["runs"]["rolling-upgrade-21"]["last_stable_ms"]
    assert summary["simulations"]["rolling-upgrade-21"]["settings"]["gateway"] == "simulator"
    html = (tmp_path / "report" / "report.html").read_text()
    assert 'id="spread"' in html and 'id="simulation"' in html
    assert 'id="client-mixes"' in html
    table = html.split('id="client-mixes"', 1)[1].split('id="unavailability"', 1)[0]
    for mix in CLIENT_MIXES:
        assert re.search(rf"</span>{mix}</td>", table), mix
    assert "no data" not in table
    # The verdict names the mixes with the smallest and the largest unavailable share of this fleet.
    shares = {mix: f["unavailability_ratio"] for mix, f in summary["client_mixes"].items()}
    least, most = min(shares, key=shares.__getitem__), max(shares, key=shares.__getitem__)
    verdict = html.split('id="verdict"', 1)[1].split('id="client-mixes"', 1)[0]
    assert f"<b>{shares[least]:.2%}</b> of their time under <b>{MIX_LABELS[least]}</b>, the least" in verdict
    assert f"<b>{shares[most]:.2%}</b> under <b>{MIX_LABELS[most]}</b>, the most" in verdict
    for table_dir in ("ownership_intervals", "partition_unavailability", "group_summary"):
        assert any((tmp_path / "report" / table_dir).glob("*.parquet")), table_dir


def test_spark_parallel_simulation_writes_the_serial_files(tmp_path: Path) -> None:
    simulate(tmp_path / "serial", "crashes", groups=10)
    said = simulate(tmp_path / "spark", "crashes", groups=10, spark=True)
    assert any("Spark" in line for line in said)
    serial = sorted(p.name for p in (tmp_path / "serial" / "events").iterdir())
    assert serial == sorted(p.name for p in (tmp_path / "spark" / "events").iterdir()) and serial
    for name in serial:
        assert filecmp.cmp(tmp_path / "serial" / "events" / name, tmp_path / "spark" / "events" / name, shallow=False)
    a, b = (json.loads((tmp_path / d / MANIFEST).read_text()) for d in ("serial", "spark"))
    assert a["outcomes"] == b["outcomes"] and a["events"] == b["events"] > 0


def test_spark_simulation_of_named_clients_and_a_gateway_config_writes_the_serial_files(tmp_path: Path) -> None:
    config = tmp_path / "gw.toml"
    config.write_text('[gateway]\nupstream = "127.0.0.1:9093"\n[coordinator]\nephemeral_state = true\n')
    kw = {"groups": 4, "clients": "librdkafka:1,java:1", "config": str(config)}
    simulate(tmp_path / "serial", "rolling-upgrade", **kw)
    simulate(tmp_path / "spark", "rolling-upgrade", spark=True, **kw)
    for part in (tmp_path / "serial" / "events").iterdir():
        assert filecmp.cmp(part, tmp_path / "spark" / "events" / part.name, shallow=False)
    a, b = (json.loads((tmp_path / d / MANIFEST).read_text()) for d in ("serial", "spark"))
    assert a["outcomes"] == b["outcomes"] and a["settings"] == b["settings"]
    assert a["settings"]["group.consumer.session.timeout.ms"] == 45_000
