"""The rehearsal report's sections on groups (rehearsal/report.py): one group's ownership timeline and its
members, the busiest groups, and the connect groups' task unavailability."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rehearsal.report_html import MEMBER_COLOURS, esc, num, table
from rehearsal.report_input import ReportInput, Row


def timeline(data: ReportInput) -> str:
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
        parts.append(f'<text x="{left - 6}" y="{ty + rh / 2 + 4:.0f}" text-anchor="end">{esc(tp[0])}-{tp[1]}</text>')
    for k, iv in enumerate(data.intervals):
        ty = y[(iv["topic"], iv["partition"])] + lane_h * lane_by_interval[k]
        parts.append(
            f'<rect x="{x(iv["start_ms"]):.1f}" y="{ty}" width="{max(x(iv["end_ms"]) - x(iv["start_ms"]), 0.5):.1f}" '
            f'height="{lane_h - 1}" fill="{colour[iv["member"]]}"><title>{esc(iv["member"])}: '
            f'{iv["start_ms"]}–{iv["end_ms"]} ms, ended by {esc(iv["ended_by"])}</title></rect>'
        )
    for o in data.overlaps:
        tp = (o["topic"], o["partition"])
        parts.append(
            f'<rect x="{x(o["overlap_start_ms"]):.1f}" y="{y[tp] - 1}" '
            f'width="{max(x(o["overlap_end_ms"]) - x(o["overlap_start_ms"]), 0.5):.1f}" '
            f'height="{lane_h * len(lanes[tp]) + 2}" '
            f'class="double"><title>double ownership {esc(o["member_a"])} + {esc(o["member_b"])}: '
            f'{o["overlap_ms"]} ms</title></rect>'
        )
    for k in range(6):
        t = start + span * k / 5
        parts.append(f'<text x="{x(t):.1f}" y="{h - 8}" text-anchor="middle" class="small">{t:,.0f}</text>')
    parts.append("</svg>")
    legend = "".join(
        f'<span class="dot" style="background:{colour[m]}"></span>{esc(m)} ' for m in members
    ) + '<span class="dot unowned"></span>no owner <span class="dot double"></span>double ownership'
    return "".join(parts) + f'<p class="legend">{legend}</p>'


def members_table(members: Sequence[Row]) -> str:
    cols = ("member", "rebalances", "partitions_gained", "partitions_lost", "assignments_received",
            "joins", "leaves", "fenced")  # fmt: skip
    rows = [[esc(m[c]) for c in cols] for m in sorted(members, key=lambda m: (-m["rebalances"], m["member"]))]
    return table(cols, rows)


def groups_table(groups: Sequence[Row], limit: int = 30) -> str:
    cols = ("run", "group", "client_mix", "members", "partitions", "rebalances", "unavailable_ms",
            "max_partition_unavailable_ms", "double_ownership_violations", "time_to_stable_ms",
            "stable_at_end")  # fmt: skip
    top = sorted(groups, key=lambda g: (-g["rebalances"], g["run"], g["group"]))[:limit]
    return table(cols, [[esc(g[c]) for c in cols] for g in top])


def connect_section(c: Mapping[str, Any]) -> str:
    """Connect groups: how long their tasks and connectors ran on no worker, and the workers' rebalances."""

    def share(x: float | None) -> str:
        return "–" if x is None else f"{x:.2%}"

    rows = []
    for kind, plural in (("task", "tasks"), ("connector", "connectors")):
        d = c.get(f"{kind}_unavailability_ms") or {}
        rows.append([
            esc(plural), num(c.get(plural)), num((c.get(f"{kind}_unavailable_ms") or 0) / 1000, 1),
            share(c.get(f"{kind}_unavailability_ratio")),
            *(num(d.get(k)) for k in ("p50", "p90", "p99", "max")),
        ])  # fmt: skip
    r = c.get("rebalances_per_worker") or {}
    return "".join([
        '<h2 id="connect">Connect groups: task unavailability</h2>',
        f"<p>{num(c.get('groups'))} connect groups (Kafka Connect workers on the new protocol), "
        f"{num(c.get('workers'))} worker members. Task unavailability is the time a task (or connector) ran "
        "on no worker within its group's window, summed in task-seconds; its share is of all task time.</p>",
        table(("unit", "count", "without a worker, s (summed)", "share of time", "p50 ms", "p90 ms", "p99 ms",
                "max ms"), rows, "connect"),
        f"<p>Rebalances per worker (acknowledged changes of what it runs): p50 {num(r.get('p50'), 1)}, "
        f"max {num(r.get('max'), 1)}, mean {num(r.get('mean'), 2)}; {num(c.get('rebalances'))} in all.</p>",
    ])  # fmt: skip
