"""What the rehearsal report's figures rest on (rehearsal/report.py): the settings of each simulated run and
what it could not model, the spread of single rolls per scenario and mix, and which calibration against
real clients backs them; ``annotate`` writes the same into summary.json."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rehearsal.report_html import MIX_LABELS, esc, num, table
from rehearsal.report_input import ReportInput, Row


def _scenario_of(run: str, simulations: Sequence[Row]) -> str | None:
    for sim in simulations:
        if sim.get("run") == run:
            return str(sim.get("spec", {}).get("scenario"))
    return None


# A fleet scenario (and mix) -> the calibration scenario that measured it (rehearsal/calibrate_cli.py).
def _calibration_scenario(scenario: str | None, mix: str) -> str | None:
    if scenario == "rolling-upgrade":
        return "rolling-restart" if mix == "consumer" else "rolling-upgrade"
    return "crashes" if scenario == "crashes" else None


def calibration_backing(rows: Sequence[Row], sources: Sequence[str], scenario: str | None, mix: str,
                        clients: Sequence[str] = ()) -> str:
    """Which measured calibration backs the figures of one scenario and mix: the _calibration.json rows of
    that mix and scenario (of the fleet's clients when it names them), or "uncalibrated"."""
    wanted = _calibration_scenario(scenario, mix)
    mine = [r for r in rows if r.get("mix") == mix and r.get("scenario") == wanted]
    if clients:
        mine = [r for r in mine if str(r.get("client", "java")) in clients]
    if not mine:
        return "uncalibrated"
    where = ", ".join(sources) if sources else "_calibration.json"
    parts = []
    for client in sorted({str(r.get("client", "java")) for r in mine}):
        cells = [r for r in mine if str(r.get("client", "java")) == client]
        runs = sum(int(r.get("runs", 1)) for r in cells)
        ratios = [r["ratios"]["unavailable"] for r in cells if r.get("ratios", {}).get("unavailable") is not None]
        off = max((abs(x - 1) for x in ratios), default=None)
        agree = "" if off is None else f", unavailable within {off:.0%}"
        parts.append(f"{client} {wanted}, {runs} real run{'s' if runs != 1 else ''}{agree}")
    return f"{where}: " + "; ".join(parts)


def _spread_cell(d: Mapping[str, Any], scale: float = 1.0, fmt: str = "{:,.1f}") -> tuple[str, str]:
    if d.get("mean") is None:
        return "–", "–"
    f = lambda v: fmt.format(v / scale)  # noqa: E731
    return f(d["mean"]), f"{f(d['p10'])} – {f(d['p90'])}"


def spread_table(spread: Sequence[Row], data: ReportInput) -> str:
    if not spread:
        return "<p>No groups.</p>"
    rows = []
    for r in spread:
        scenario = _scenario_of(r["run"], data.simulations)
        sim = next((x for x in data.simulations if x.get("run") == r["run"]), None)
        clients = sorted({str(c["client"]) for c in (sim or {}).get("spec", {}).get("clients") or []})
        u_mean, u_range = _spread_cell(r["unavailable_ms"], 1000)
        s_mean, s_range = _spread_cell(r["unavailability_ratio"], 0.01, "{:.2f} %")
        t_mean, t_range = _spread_cell(r["time_to_stable_ms"], 1000)
        rows.append([
            esc(scenario or r["run"]) + ("" if scenario is None else f' <span class="small">({esc(r["run"])})</span>'),
            esc(MIX_LABELS.get(r["client_mix"], r["client_mix"])), num(r["rolls"]),
            f"<b>{u_mean}</b>", f'<span class="spread">{u_range}</span>', s_mean, f'<span class="spread">{s_range}</span>',
            t_mean, f'<span class="spread">{t_range}</span>',
            esc(calibration_backing(data.calibration, data.calibration_sources, scenario, r["client_mix"], clients)),
        ])  # fmt: skip
    headers = ["scenario", "client mix", "rolls", "unavailable mean, partition-s", "p10 – p90",
               "share mean", "p10 – p90", "time to stable mean, s", "p10 – p90", "calibration"]
    return table(headers, rows, "spread")


def annotate(summary: dict[str, Any], simulations: Sequence[Row], calibration: Sequence[Row],
             sources: Sequence[str]) -> dict[str, Any]:
    """summary.json's record of what the figures rest on: per simulated run its settings and what it could not
    model (``simulations``), and per spread row its scenario and the calibration that backs it."""
    summary["simulations"] = {
        str(sim.get("run")): {
            "scenario": sim.get("spec", {}).get("scenario"), "settings": sim.get("settings") or {},
            "warnings": list(sim.get("warnings") or []), "clients": sim.get("spec", {}).get("clients"),
        }
        for sim in simulations
    }  # fmt: skip
    for row in summary.get("spread", []):
        scenario = _scenario_of(row["run"], simulations)
        sim = summary["simulations"].get(row["run"]) or {}
        clients = sorted({str(c["client"]) for c in sim.get("clients") or []})
        row["scenario"] = scenario
        row["calibration"] = calibration_backing(calibration, sources, scenario, row["client_mix"], clients)
    return summary


def simulation_header(simulations: Sequence[Row]) -> str:
    """The settings every simulated run used, and what its simulation could not model."""
    if not simulations:
        return ""
    out = ['<h2 id="simulation">Simulated with</h2>']
    for sim in simulations:
        settings = sim.get("settings") or {}
        out.append(f"<p><b>run {esc(sim.get('run'))}</b>: scenario {esc(sim.get('spec', {}).get('scenario'))}, "
                   f"{esc(sim.get('groups'))} groups</p>")
        out.append(table(("setting", "value"), [[esc(k), esc(v)] for k, v in settings.items()], "settings"))
        warnings = sim.get("warnings") or []
        if warnings:
            out.append('<p class="warning"><b>Not modelled</b> (the prediction does not include these):</p><ul>'
                       + "".join(f"<li>{esc(w)}</li>" for w in warnings) + "</ul>")
    return "".join(out)
