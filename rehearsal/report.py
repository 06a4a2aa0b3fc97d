"""A self-contained HTML report of a rehearsal (inline SVG, no scripts, no external files).

It compares the client mixes side by side (the question a rehearsal answers: how long do partitions go
unconsumed under classic eager, classic cooperative, translate mode and the new protocol), shows the
distribution of per-partition unavailability and the ownership timeline of one group.

This module lays out the page; its input is rehearsal/report_input.py, its sections
rehearsal/report_mixes.py (the client mixes), rehearsal/report_provenance.py (what the figures rest on)
and rehearsal/report_groups.py (groups), built from rehearsal/report_html.py.
"""

from __future__ import annotations

from rehearsal.report_groups import connect_section, groups_table, members_table, timeline
from rehearsal.report_html import esc, num, table
from rehearsal.report_input import ReportInput
from rehearsal.report_mixes import bar_chart, cost_split, histograms, mix_table, verdict
from rehearsal.report_provenance import simulation_header, spread_table

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
    runs = table(
        ("run", "groups", "first disturbance ms", "converged ms", "time to stable ms"),
        [[esc(r), esc(v["groups"]), esc(v["first_disturbance_ms"]), esc(v.get("converged_ms")),
          esc(v["time_to_stable_ms"] if v["time_to_stable_ms"] is not None else "not stable")]
         for r, v in s.get("runs", {}).items()],
    )  # fmt: skip
    title = "group " + "/".join(data.timeline_group) if data.timeline_group else "no group"
    body = [
        "<h1>groupgate rehearsal report</h1>",
        '<div class="figures">' + "".join(f"<div>{esc(k)}</div><div><b>{num(v)}</b></div>" for k, v in figures)
        + "</div>",
        simulation_header(data.simulations),
        '<h2 id="verdict">Partition unavailability: classic eager, classic cooperative, translate, new protocol</h2>',
        "<p>Share of partition time without an owner, per client mix (the whole window of each group).</p>",
        verdict(mixes),
        "<p>Of that share, what the protocol costs (partitions waiting for rebalances around clean "
        "restarts) and what crashes cost (partitions of a member that died, or was fenced, waiting for its "
        "session timeout: the same for every protocol, and zero in a rolling deployment without kills). "
        "Where a calibration against real clients exists (groupgate rehearse calibrate, docs/rehearsal.md) its "
        "measured and predicted figures stand beside the mix.</p>",
        cost_split(mixes, data.calibration),
        '<h2 id="client-mixes">Client mixes side by side</h2>',
        "<p>Per-partition time without an owner within its group's window (ms), by fleet variant.</p>",
        mix_table(mixes),
        bar_chart(mixes),
        '<h2 id="spread">Single rolls: how wide one roll\'s outcome is</h2>',
        "<p>Each group is one roll of its scenario under its own seed. Per scenario and client mix: the mean "
        "over the rolls beside the p10-p90 range of single rolls (partition-seconds without an owner per "
        "group, its share of partition time, time to stable as convergence: from the first disturbance to "
        "the last ownership change), and which measured calibration backs the figures.</p>",
        spread_table(s.get("spread", []), data),
        '<h2 id="unavailability">Partition unavailability distribution</h2>',
        f"<p>Partitions per bin of {data.bin_width_ms:,.1f} ms without owner.</p>",
        histograms(data.histogram, data.bin_width_ms),
        f'<h2 id="timeline">Ownership timeline: {esc(title)}</h2>',
        timeline(data),
        members_table(data.members),
        '<h2 id="runs">Time to stable per run</h2>',
        runs,
        '<h2 id="groups">Groups (most rebalances first)</h2>',
        groups_table(data.groups),
    ]  # fmt: skip
    if s.get("connect"):
        # Only for logs with connect groups: the report of consumer groups alone stays as it was.
        body.insert(3, connect_section(s["connect"]))
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>groupgate rehearsal report</title>'
        f"<style>{_CSS}</style></head><body>" + "\n".join(body) + "</body></html>\n"
    )
