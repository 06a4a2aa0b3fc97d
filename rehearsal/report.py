"""A self-contained HTML report of a rehearsal (inline SVG, no scripts, no external files).

It compares the client mixes side by side (the question a rehearsal answers: how long do partitions go
unconsumed under classic eager, classic cooperative, translate mode and the new protocol), shows the
distribution of per-partition unavailability and the ownership timeline of one group.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rehearsal.events import CLIENT_MIXES

Row = Mapping[str, Any]
HISTOGRAM_BINS = 20
MIX_COLOURS = {
    "classic-eager": "#d62728",
    "classic-cooperative": "#ff7f0e",
    "translate": "#1f77b4",
    "consumer": "#2ca02c",
}
# How the verdict names each mix: what an operator compares, in words.
MIX_LABELS = {
    "classic-eager": "classic eager",
    "classic-cooperative": "classic cooperative",
    "translate": "translate mode",
    "consumer": "new protocol",
}
MEMBER_COLOURS = (
    "#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#bab0ac",
    "#e15759", "#ff9da7",
)  # fmt: skip


@dataclass(slots=True)
class ReportInput:
    summary: dict[str, Any]
    groups: Sequence[Row]  # group_summary rows (the report lists the busiest)
    timeline_group: tuple[str, str] | None = None
    intervals: Sequence[Row] = field(default_factory=list)  # ownership_intervals of timeline_group
    partitions: Sequence[Row] = field(default_factory=list)  # partition_unavailability of timeline_group
    overlaps: Sequence[Row] = field(default_factory=list)  # double_ownership of timeline_group
    members: Sequence[Row] = field(default_factory=list)  # member_rebalances of timeline_group
    histogram: dict[str, list[int]] = field(default_factory=dict)  # mix -> count per bin
    bin_width_ms: float = 1.0
    # Rows of a calibration against real clients (`groupgate rehearse calibrate --json`), found as _calibration.json
    # beside the events; empty when none exists.
    calibration: Sequence[Row] = field(default_factory=list)
    # Where the calibration rows came from (the _calibration.json files), for the report to name.
    calibration_sources: Sequence[str] = field(default_factory=list)
    # The _fleet.json of simulated runs among the inputs (rehearsal/fleet.py FleetResult.manifest): the
    # settings each simulation used and what it could not model, shown in the header.
    simulations: Sequence[Row] = field(default_factory=list)


def choose_group(groups: Sequence[Row], wanted: str | None) -> tuple[str, str] | None:
    """wanted is "run/group" or "group"; by default the group with most rebalances (then by name)."""
    if not groups:
        return None
    if wanted:
        run, _, name = wanted.rpartition("/")
        for g in sorted(groups, key=lambda g: (g["run"], g["group"])):
            if g["group"] == name and (not run or g["run"] == run):
                return (g["run"], g["group"])
        raise ValueError(f"no group {wanted!r} in the event logs")
    best = min(groups, key=lambda g: (-g["rebalances"], g["run"], g["group"]))
    return (best["run"], best["group"])


def histogram_width(max_value: float, bins: int = HISTOGRAM_BINS) -> float:
    return max(max_value, 1) / bins


def histogram_bin(value: int, max_value: int, bins: int = HISTOGRAM_BINS) -> int:
    """Bin of a value in [0, max_value] (integer arithmetic, as the pipeline's `div`)."""
    return min(value * bins // max(max_value, 1), bins - 1)


def histogram(values_by_mix: Mapping[str, Sequence[int]], bins: int = HISTOGRAM_BINS) -> dict[str, list[int]]:
    top = max((v for vs in values_by_mix.values() for v in vs), default=0)
    out = {}
    for mix, values in values_by_mix.items():
        counts = [0] * bins
        for v in values:
            counts[histogram_bin(v, top, bins)] += 1
        out[mix] = counts
    return out


def _e(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def _num(x: Any, digits: int = 0) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return f"{x:,}"


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _mix_table(mixes: Mapping[str, Any]) -> str:
    rows = []
    for mix in CLIENT_MIXES:
        m = mixes.get(mix)
        if m is None:
            rows.append([_e(mix)] + ["no data"] + [""] * 10)
            continue
        u, r, t = m["unavailability_ms"], m["rebalances_per_member"], m["time_to_stable_ms"]
        ratio = m["unavailability_ratio"]
        rows.append([
            f'<span class="dot" style="background:{MIX_COLOURS[mix]}"></span>{_e(mix)}',
            _num(m["groups"]), _num(m["partitions"]),
            _num(u["p50"], 1), _num(u["p90"], 1), _num(u["p99"], 1), _num(u["max"], 0),
            "–" if ratio is None else f"{ratio:.2%}",
            _num(r["mean"], 2), _num(m["double_ownership_violations"]),
            _num(t["max"], 0), _num(m["groups_never_stable"]),
        ])  # fmt: skip
    headers = [
        "client mix", "groups", "partitions", "unavail. p50 ms", "p90 ms", "p99 ms", "max ms",
        "unavailable share", "rebalances / member", "double ownership", "time to stable max ms",
        "groups never stable",
    ]  # fmt: skip
    return _table(headers, rows, "mixes")


def _share(m: Mapping[str, Any]) -> float | None:
    return m.get("unavailability_ratio")


def _verdict(mixes: Mapping[str, Any]) -> str:
    """The comparison a rehearsal exists for, first: each mix's share of partition time without an owner,
    one bar per mix on a common scale, and a sentence naming the least and the most affected."""
    measured = [mix for mix in CLIENT_MIXES if mix in mixes and _share(mixes[mix]) is not None]
    if not measured:
        return "<p>No client mix has partitions with a measured window.</p>"
    least = min(measured, key=lambda mix: (_share(mixes[mix]), CLIENT_MIXES.index(mix)))
    most = max(measured, key=lambda mix: (_share(mixes[mix]), -CLIENT_MIXES.index(mix)))
    lo, hi = _share(mixes[least]) or 0.0, _share(mixes[most]) or 0.0
    if len(measured) == 1 or hi == lo:
        sentence = (f"Partitions went without an owner for <b>{lo:.2%}</b> of their time"
                    + (f" under every measured mix ({', '.join(MIX_LABELS[m] for m in measured)})." if len(measured) > 1
                       else f" under {MIX_LABELS[least]}, the only mix in these logs."))  # fmt: skip
    else:
        times = f" ({hi / lo:.2f} times as much)" if lo > 0 else ""
        sentence = (f"Partitions went without an owner for <b>{lo:.2%}</b> of their time under <b>{MIX_LABELS[least]}</b>, "
                    f"the least, and for <b>{hi:.2%}</b> under <b>{MIX_LABELS[most]}</b>, the most{times}.")  # fmt: skip
    w, row_h, left, right = 1060, 30, 150, 530
    top = hi or 1.0
    parts = [f'<svg class="verdict" width="{w}" height="{row_h * len(CLIENT_MIXES) + 10}" role="img">']
    for i, mix in enumerate(CLIENT_MIXES):
        y = 5 + i * row_h
        parts.append(f'<text x="{left - 8}" y="{y + 17}" text-anchor="end">{MIX_LABELS[mix]}</text>')
        m = mixes.get(mix)
        share = None if m is None else _share(m)
        if share is None:
            parts.append(f'<text x="{left}" y="{y + 17}">no data</text>')
            continue
        bw = (w - left - right) * share / top
        parts.append(f'<rect x="{left}" y="{y + 3}" width="{max(bw, 0.5):.1f}" height="{row_h - 8}" '
                     f'fill="{MIX_COLOURS[mix]}"><title>{_e(mix)}: {share:.2%}</title></rect>')  # fmt: skip
        mark = " (least)" if mix == least and hi != lo else " (most)" if mix == most and hi != lo else ""
        parts.append(
            f'<text x="{left + bw + 6:.1f}" y="{y + 17}"><tspan font-weight="bold">{share:.2%}</tspan>{mark} · '
            f'p50 {_num(m["unavailability_ms"]["p50"], 0)} ms, p99 {_num(m["unavailability_ms"]["p99"], 0)} ms · '
            f'{_num(m["rebalances_per_member"]["mean"], 1)} rebalances / member</text>'
        )
    parts.append("</svg>")
    return f'<p class="verdict-text">{sentence}</p>' + "".join(parts)


def _calibrated(rows: Sequence[Row], mix: str) -> tuple[str, str]:
    """(measured beside predicted, confidence) of one mix from the calibration rows; several runs of one
    client and scenario are pooled (partition-seconds summed). The confidence is the largest difference
    of predicted from measured unavailability, given apart for clean restarts (what the protocol costs) and
    for crashes (what session timeouts cost), the two halves of the headline."""
    pooled: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if r.get("mix") != mix:
            continue
        sims = r["simulated"] if isinstance(r["simulated"], list) else [r["simulated"]]
        cell = pooled.setdefault((str(r.get("client", "java")), str(r["scenario"])), [0.0, 0.0])
        cell[0] += r["real"]["unavailable_ms"]
        cell[1] += sum(f["unavailable_ms"] for f in sims) / len(sims)
    if not pooled:
        return "no calibration", "prediction only"
    cells: list[str] = []
    worst: dict[str, float] = {}
    for (client, scenario), (measured, predicted) in pooled.items():
        cells.append(f"{_e(scenario)} ({_e(client)}): measured {measured / 1000:,.1f}, "
                     f"predicted {predicted / 1000:,.1f} partition-s")
        kind = "crashes" if scenario == "crashes" else "clean restarts"
        if measured > 0:
            worst[kind] = max(worst.get(kind, 0.0), abs(predicted / measured - 1))
    confidence = "; ".join(
        f"{kind}: simulation within {off:.0%} of real clients" if off <= 0.25
        else f"{kind}: simulation off by up to {off:.0%}: read as a range"
        for kind, off in sorted(worst.items(), key=lambda item: item[0] == "crashes")
    )  # fmt: skip
    return "<br>".join(cells), confidence or "prediction only"


def _cost_split(mixes: Mapping[str, Any], calibration: Sequence[Row]) -> str:
    """What users choose between: the protocol's own cost (rebalances around clean restarts) beside the
    cost of crashes (partitions of a dead member wait for its session timeout, whatever the protocol)."""
    rows = []
    for mix in CLIENT_MIXES:
        m = mixes.get(mix)
        if m is None or m.get("clean_unavailability_ratio") is None:
            continue
        measured, confidence = _calibrated(calibration, mix)
        rows.append([
            _e(MIX_LABELS[mix]), f'<b>{m["clean_unavailability_ratio"]:.2%}</b>',
            f'{m["crash_unavailability_ratio"]:.2%}', _e(f'{m["clean_unavailable_ms"] / 1000:,.1f}'),
            _e(f'{m["crash_unavailable_ms"] / 1000:,.1f}'), measured, _e(confidence),
        ])  # fmt: skip
    if not rows:
        return ""
    headers = ["client mix", "protocol: clean restarts and rebalances", "crashes: session timeouts",
               "clean, partition-s", "crashes, partition-s", "calibration: measured / predicted", "confidence"]
    return _table(headers, rows, "costs")


def _bar_chart(mixes: Mapping[str, Any]) -> str:
    """Grouped bars: p50 / p90 / p99 / max partition unavailability for each client mix."""
    stats = ("p50", "p90", "p99", "max")
    top = max((mixes[m]["unavailability_ms"][s] or 0 for m in mixes for s in stats), default=0) or 1
    w, h, left, bottom = 760, 280, 60, 40
    group_w = (w - left - 20) / len(CLIENT_MIXES)
    bar_w = group_w / (len(stats) + 1)
    parts = [f'<svg class="bars" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img">']
    for i in range(5):
        y = h - bottom - (h - bottom - 20) * i / 4
        parts.append(f'<line x1="{left}" x2="{w - 10}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        parts.append(f'<text x="{left - 5}" y="{y + 4:.1f}" text-anchor="end">{top * i / 4:,.0f}</text>')
    for gi, mix in enumerate(CLIENT_MIXES):
        x0 = left + gi * group_w
        parts.append(
            f'<text x="{x0 + group_w / 2:.1f}" y="{h - bottom + 18}" text-anchor="middle">{_e(mix)}</text>'
        )
        if mix not in mixes:
            parts.append(f'<text x="{x0 + group_w / 2:.1f}" y="{h / 2:.1f}" text-anchor="middle">no data</text>')
            continue
        for si, s in enumerate(stats):
            v = mixes[mix]["unavailability_ms"][s] or 0
            bh = (h - bottom - 20) * v / top
            x = x0 + bar_w * (si + 0.5)
            op = 0.4 + 0.2 * si
            parts.append(
                f'<rect x="{x:.1f}" y="{h - bottom - bh:.1f}" width="{bar_w * 0.9:.1f}" height="{bh:.1f}" '
                f'fill="{MIX_COLOURS[mix]}" fill-opacity="{op:.1f}"><title>{_e(mix)} {s}: {v:,.1f} ms</title></rect>'
            )
            parts.append(f'<text x="{x + bar_w * 0.45:.1f}" y="{h - bottom - bh - 3:.1f}" '
                         f'text-anchor="middle" class="small">{s}</text>')  # fmt: skip
    parts.append(f'<text x="12" y="{(h - bottom) / 2:.0f}" transform="rotate(-90 12 {(h - bottom) / 2:.0f})" '
                 'text-anchor="middle">ms without owner (per partition)</text></svg>')  # fmt: skip
    return "".join(parts)


def _histograms(hist: Mapping[str, Sequence[int]], width_ms: float) -> str:
    out = []
    w, h, left, bottom = 360, 160, 40, 30
    for mix in CLIENT_MIXES:
        counts = hist.get(mix)
        if not counts:
            continue
        top = max(counts) or 1
        bw = (w - left - 10) / len(counts)
        parts = [f'<figure><figcaption>{_e(mix)}</figcaption><svg width="{w}" height="{h}" role="img">']
        for i, c in enumerate(counts):
            bh = (h - bottom - 10) * c / top
            lo = i * width_ms
            parts.append(
                f'<rect x="{left + i * bw:.1f}" y="{h - bottom - bh:.1f}" width="{bw * 0.92:.1f}" '
                f'height="{bh:.1f}" fill="{MIX_COLOURS[mix]}"><title>{lo:,.0f}–{lo + width_ms:,.0f} ms: '
                f"{c} partitions</title></rect>"
            )
        parts.append(f'<text x="{left}" y="{h - 10}" class="small">0</text>')
        parts.append(
            f'<text x="{w - 10}" y="{h - 10}" text-anchor="end" class="small">'
            f"{width_ms * len(counts):,.0f} ms</text>"
        )
        parts.append(f'<text x="{left - 4}" y="16" text-anchor="end" class="small">{top}</text></svg></figure>')
        out.append("".join(parts))
    return '<div class="hists">' + "".join(out) + "</div>" if out else "<p>No partitions.</p>"


def _timeline(data: ReportInput) -> str:
    if data.timeline_group is None:
        return "<p>No group in the event logs.</p>"
    rows = sorted({(p["topic"], p["partition"]) for p in data.partitions} | {
        (i["topic"], i["partition"]) for i in data.intervals
    })  # fmt: skip
    if not rows:
        return "<p>This group has no partitions.</p>"
    start = min([p["window_start_ms"] for p in data.partitions] + [i["start_ms"] for i in data.intervals])
    end = max([p["window_end_ms"] for p in data.partitions] + [i["end_ms"] for i in data.intervals])
    span = max(end - start, 1)
    members = sorted({i["member"] for i in data.intervals})
    colour = {m: MEMBER_COLOURS[k % len(MEMBER_COLOURS)] for k, m in enumerate(members)}
    # Intervals that overlap on a partition go to separate lanes of its row, so both owners stay visible.
    lanes: dict[tuple[str, int], list[int]] = {tp: [] for tp in rows}  # lane -> end of its last interval
    lane_by_interval: dict[int, int] = {}
    for k in sorted(range(len(data.intervals)), key=lambda k: (data.intervals[k]["start_ms"], k)):
        iv = data.intervals[k]
        ends = lanes[(iv["topic"], iv["partition"])]
        lane = next((n for n, e in enumerate(ends) if e <= iv["start_ms"]), len(ends))
        if lane == len(ends):
            ends.append(0)
        ends[lane] = iv["end_ms"]
        lane_by_interval[k] = lane
    lane_h, left, w = 14, 110, 900
    y: dict[tuple[str, int], int] = {}
    top = 10
    for tp in rows:
        y[tp] = top
        top += lane_h * max(len(lanes[tp]), 1) + 4
    h = top + 30
    x = lambda t: left + (w - left - 10) * (t - start) / span  # noqa: E731
    parts = [f'<svg class="timeline" width="{w}" height="{h}" role="img">']
    for tp, ty in y.items():
        rh = lane_h * max(len(lanes[tp]), 1)
        parts.append(f'<rect x="{left}" y="{ty}" width="{w - left - 10}" height="{rh}" class="unowned">'
                     "<title>no owner</title></rect>")  # fmt: skip
        parts.append(f'<text x="{left - 6}" y="{ty + rh / 2 + 4:.0f}" text-anchor="end">{_e(tp[0])}-{tp[1]}</text>')
    for k, iv in enumerate(data.intervals):
        ty = y[(iv["topic"], iv["partition"])] + lane_h * lane_by_interval[k]
        parts.append(
            f'<rect x="{x(iv["start_ms"]):.1f}" y="{ty}" width="{max(x(iv["end_ms"]) - x(iv["start_ms"]), 0.5):.1f}" '
            f'height="{lane_h - 1}" fill="{colour[iv["member"]]}"><title>{_e(iv["member"])}: '
            f'{iv["start_ms"]}–{iv["end_ms"]} ms, ended by {_e(iv["ended_by"])}</title></rect>'
        )
    for o in data.overlaps:
        tp = (o["topic"], o["partition"])
        parts.append(
            f'<rect x="{x(o["overlap_start_ms"]):.1f}" y="{y[tp] - 1}" '
            f'width="{max(x(o["overlap_end_ms"]) - x(o["overlap_start_ms"]), 0.5):.1f}" '
            f'height="{lane_h * len(lanes[tp]) + 2}" '
            f'class="double"><title>double ownership {_e(o["member_a"])} + {_e(o["member_b"])}: '
            f'{o["overlap_ms"]} ms</title></rect>'
        )
    for k in range(6):
        t = start + span * k / 5
        parts.append(f'<text x="{x(t):.1f}" y="{h - 8}" text-anchor="middle" class="small">{t:,.0f}</text>')
    parts.append("</svg>")
    legend = "".join(
        f'<span class="dot" style="background:{colour[m]}"></span>{_e(m)} ' for m in members
    ) + '<span class="dot unowned"></span>no owner <span class="dot double"></span>double ownership'
    return "".join(parts) + f'<p class="legend">{legend}</p>'


def _members_table(members: Sequence[Row]) -> str:
    cols = ("member", "rebalances", "partitions_gained", "partitions_lost", "assignments_received",
            "joins", "leaves", "fenced")  # fmt: skip
    rows = [[_e(m[c]) for c in cols] for m in sorted(members, key=lambda m: (-m["rebalances"], m["member"]))]
    return _table(cols, rows)


def _groups_table(groups: Sequence[Row], limit: int = 30) -> str:
    cols = ("run", "group", "client_mix", "members", "partitions", "rebalances", "unavailable_ms",
            "max_partition_unavailable_ms", "double_ownership_violations", "time_to_stable_ms",
            "stable_at_end")  # fmt: skip
    top = sorted(groups, key=lambda g: (-g["rebalances"], g["run"], g["group"]))[:limit]
    return _table(cols, [[_e(g[c]) for c in cols] for g in top])


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


def _spread_table(spread: Sequence[Row], data: ReportInput) -> str:
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
            _e(scenario or r["run"]) + ("" if scenario is None else f' <span class="small">({_e(r["run"])})</span>'),
            _e(MIX_LABELS.get(r["client_mix"], r["client_mix"])), _num(r["rolls"]),
            f"<b>{u_mean}</b>", f'<span class="spread">{u_range}</span>', s_mean, f'<span class="spread">{s_range}</span>',
            t_mean, f'<span class="spread">{t_range}</span>',
            _e(calibration_backing(data.calibration, data.calibration_sources, scenario, r["client_mix"], clients)),
        ])  # fmt: skip
    headers = ["scenario", "client mix", "rolls", "unavailable mean, partition-s", "p10 – p90",
               "share mean", "p10 – p90", "time to stable mean, s", "p10 – p90", "calibration"]
    return _table(headers, rows, "spread")


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


def _connect_section(c: Mapping[str, Any]) -> str:
    """Connect groups: how long their tasks and connectors ran on no worker, and the workers' rebalances."""

    def share(x: float | None) -> str:
        return "–" if x is None else f"{x:.2%}"

    rows = []
    for kind, plural in (("task", "tasks"), ("connector", "connectors")):
        d = c.get(f"{kind}_unavailability_ms") or {}
        rows.append([
            _e(plural), _num(c.get(plural)), _num((c.get(f"{kind}_unavailable_ms") or 0) / 1000, 1),
            share(c.get(f"{kind}_unavailability_ratio")),
            *(_num(d.get(k)) for k in ("p50", "p90", "p99", "max")),
        ])  # fmt: skip
    r = c.get("rebalances_per_worker") or {}
    return "".join([
        '<h2 id="connect">Connect groups: task unavailability</h2>',
        f"<p>{_num(c.get('groups'))} connect groups (Kafka Connect workers on the new protocol), "
        f"{_num(c.get('workers'))} worker members. Task unavailability is the time a task (or connector) ran "
        "on no worker within its group's window, summed in task-seconds; its share is of all task time.</p>",
        _table(("unit", "count", "without a worker, s (summed)", "share of time", "p50 ms", "p90 ms", "p99 ms",
                "max ms"), rows, "connect"),
        f"<p>Rebalances per worker (acknowledged changes of what it runs): p50 {_num(r.get('p50'), 1)}, "
        f"max {_num(r.get('max'), 1)}, mean {_num(r.get('mean'), 2)}; {_num(c.get('rebalances'))} in all.</p>",
    ])  # fmt: skip


def _simulation_header(simulations: Sequence[Row]) -> str:
    """The settings every simulated run used, and what its simulation could not model."""
    if not simulations:
        return ""
    out = ['<h2 id="simulation">Simulated with</h2>']
    for sim in simulations:
        settings = sim.get("settings") or {}
        out.append(f"<p><b>run {_e(sim.get('run'))}</b>: scenario {_e(sim.get('spec', {}).get('scenario'))}, "
                   f"{_e(sim.get('groups'))} groups</p>")
        out.append(_table(("setting", "value"), [[_e(k), _e(v)] for k, v in settings.items()], "settings"))
        warnings = sim.get("warnings") or []
        if warnings:
            out.append('<p class="warning"><b>Not modelled</b> (the prediction does not include these):</p><ul>'
                       + "".join(f"<li>{_e(w)}</li>" for w in warnings) + "</ul>")
    return "".join(out)


_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;margin:8px 0}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}td:first-child,th:first-child{text-align:left}
svg text{font-size:11px;fill:#333}.small{font-size:9px}.grid{stroke:#eee}
.unowned{fill:#fbd5d0}.double{fill:none;stroke:#b00;stroke-width:2}
.dot{display:inline-block;width:10px;height:10px;margin:0 4px 0 10px;border-radius:2px}
span.dot.double{border:2px solid #b00;background:none}span.dot.unowned{background:#fbd5d0}
.hists{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0}figcaption{font-size:13px}
.verdict-text{font-size:16px}svg.verdict text{font-size:13px}
.warning{color:#8a4b00}.spread{color:#555}
.figures{display:grid;grid-template-columns:repeat(4,auto);gap:4px 24px;font-size:14px}
"""


def render(data: ReportInput) -> str:
    s = data.summary
    mixes = s.get("client_mixes", {})
    figures = [
        ("events", s.get("events")), ("runs", s.get("runs_count")), ("groups", s.get("groups")),
        ("members", s.get("members")), ("partitions", s.get("partitions")),
        ("unavailable ms (sum)", s.get("unavailable_ms")),
        ("double ownership violations", s.get("double_ownership_violations")),
        ("double ownership ms", s.get("double_ownership_ms")),
    ]  # fmt: skip
    runs = _table(
        ("run", "groups", "first disturbance ms", "converged ms", "time to stable ms"),
        [[_e(r), _e(v["groups"]), _e(v["first_disturbance_ms"]), _e(v.get("converged_ms")),
          _e(v["time_to_stable_ms"] if v["time_to_stable_ms"] is not None else "not stable")]
         for r, v in s.get("runs", {}).items()],
    )  # fmt: skip
    title = "group " + "/".join(data.timeline_group) if data.timeline_group else "no group"
    body = [
        "<h1>groupgate rehearsal report</h1>",
        '<div class="figures">' + "".join(f"<div>{_e(k)}</div><div><b>{_num(v)}</b></div>" for k, v in figures)
        + "</div>",
        _simulation_header(data.simulations),
        '<h2 id="verdict">Partition unavailability: classic eager, classic cooperative, translate, new protocol</h2>',
        "<p>Share of partition time without an owner, per client mix (the whole window of each group).</p>",
        _verdict(mixes),
        "<p>Of that share, what the protocol costs (partitions waiting for rebalances around clean "
        "restarts) and what crashes cost (partitions of a member that died, or was fenced, waiting for its "
        "session timeout: the same for every protocol, and zero in a rolling deployment without kills). "
        "Where a calibration against real clients exists (groupgate rehearse calibrate, docs/rehearsal.md) its "
        "measured and predicted figures stand beside the mix.</p>",
        _cost_split(mixes, data.calibration),
        '<h2 id="client-mixes">Client mixes side by side</h2>',
        "<p>Per-partition time without an owner within its group's window (ms), by fleet variant.</p>",
        _mix_table(mixes),
        _bar_chart(mixes),
        '<h2 id="spread">Single rolls: how wide one roll\'s outcome is</h2>',
        "<p>Each group is one roll of its scenario under its own seed. Per scenario and client mix: the mean "
        "over the rolls beside the p10-p90 range of single rolls (partition-seconds without an owner per "
        "group, its share of partition time, time to stable as convergence: from the first disturbance to "
        "the last ownership change), and which measured calibration backs the figures.</p>",
        _spread_table(s.get("spread", []), data),
        '<h2 id="unavailability">Partition unavailability distribution</h2>',
        f"<p>Partitions per bin of {data.bin_width_ms:,.1f} ms without owner.</p>",
        _histograms(data.histogram, data.bin_width_ms),
        f'<h2 id="timeline">Ownership timeline: {_e(title)}</h2>',
        _timeline(data),
        _members_table(data.members),
        '<h2 id="runs">Time to stable per run</h2>',
        runs,
        '<h2 id="groups">Groups (most rebalances first)</h2>',
        _groups_table(data.groups),
    ]  # fmt: skip
    if s.get("connect"):
        # Only for logs with connect groups: the report of consumer groups alone stays as it was.
        body.insert(3, _connect_section(s["connect"]))
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>groupgate rehearsal report</title>'
        f"<style>{_CSS}</style></head><body>" + "\n".join(body) + "</body></html>\n"
    )


def from_oracle(metrics: Any, group: str | None = None) -> ReportInput:
    """Report input from oracle.Metrics (small logs, and tests)."""
    chosen = choose_group(metrics.group_summary, group)
    mine = lambda rows: [r for r in rows if (r["run"], r["group"]) == chosen]  # noqa: E731
    values: dict[str, list[int]] = {}
    for p in metrics.partition_unavailability:
        values.setdefault(p["client_mix"], []).append(p["unavailable_ms"])
    top = max((p["unavailable_ms"] for p in metrics.partition_unavailability), default=0)
    return ReportInput(
        summary=metrics.summary,
        groups=metrics.group_summary,
        timeline_group=chosen,
        intervals=mine(metrics.ownership_intervals),
        partitions=mine(metrics.partition_unavailability),
        overlaps=mine(metrics.double_ownership),
        members=mine(metrics.member_rebalances),
        histogram=histogram(values),
        bin_width_ms=histogram_width(top),
    )
