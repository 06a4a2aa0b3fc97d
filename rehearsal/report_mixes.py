"""The rehearsal report's comparison of the client mixes (rehearsal/report.py): the verdict, the protocol's
cost beside the crashes' (with the calibration against real clients), the figures side by side, the
unavailability percentiles as bars and its distribution as histograms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rehearsal.events import CLIENT_MIXES
from rehearsal.report_html import MIX_COLOURS, MIX_LABELS, esc, num, table
from rehearsal.report_input import Row


def mix_table(mixes: Mapping[str, Any]) -> str:
    rows = []
    for mix in CLIENT_MIXES:
        m = mixes.get(mix)
        if m is None:
            rows.append([esc(mix)] + ["no data"] + [""] * 10)
            continue
        u, r, t = m["unavailability_ms"], m["rebalances_per_member"], m["time_to_stable_ms"]
        ratio = m["unavailability_ratio"]
        rows.append([
            f'<span class="dot" style="background:{MIX_COLOURS[mix]}"></span>{esc(mix)}',
            num(m["groups"]), num(m["partitions"]),
            num(u["p50"], 1), num(u["p90"], 1), num(u["p99"], 1), num(u["max"], 0),
            "–" if ratio is None else f"{ratio:.2%}",
            num(r["mean"], 2), num(m["double_ownership_violations"]),
            num(t["max"], 0), num(m["groups_never_stable"]),
        ])  # fmt: skip
    headers = [
        "client mix", "groups", "partitions", "unavail. p50 ms", "p90 ms", "p99 ms", "max ms",
        "unavailable share", "rebalances / member", "double ownership", "time to stable max ms",
        "groups never stable",
    ]  # fmt: skip
    return table(headers, rows, "mixes")


def _share(m: Mapping[str, Any]) -> float | None:
    return m.get("unavailability_ratio")


def verdict(mixes: Mapping[str, Any]) -> str:
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
        if m is None or share is None:
            parts.append(f'<text x="{left}" y="{y + 17}">no data</text>')
            continue
        bw = (w - left - right) * share / top
        parts.append(f'<rect x="{left}" y="{y + 3}" width="{max(bw, 0.5):.1f}" height="{row_h - 8}" '
                     f'fill="{MIX_COLOURS[mix]}"><title>{esc(mix)}: {share:.2%}</title></rect>')  # fmt: skip
        mark = " (least)" if mix == least and hi != lo else " (most)" if mix == most and hi != lo else ""
        parts.append(
            f'<text x="{left + bw + 6:.1f}" y="{y + 17}"><tspan font-weight="bold">{share:.2%}</tspan>{mark} · '
            f'p50 {num(m["unavailability_ms"]["p50"], 0)} ms, p99 {num(m["unavailability_ms"]["p99"], 0)} ms · '
            f'{num(m["rebalances_per_member"]["mean"], 1)} rebalances / member</text>'
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
        cells.append(f"{esc(scenario)} ({esc(client)}): measured {measured / 1000:,.1f}, "
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


def cost_split(mixes: Mapping[str, Any], calibration: Sequence[Row]) -> str:
    """What users choose between: the protocol's own cost (rebalances around clean restarts) beside the
    cost of crashes (partitions of a dead member wait for its session timeout, whatever the protocol)."""
    rows = []
    for mix in CLIENT_MIXES:
        m = mixes.get(mix)
        if m is None or m.get("clean_unavailability_ratio") is None:
            continue
        measured, confidence = _calibrated(calibration, mix)
        rows.append([
            esc(MIX_LABELS[mix]), f'<b>{m["clean_unavailability_ratio"]:.2%}</b>',
            f'{m["crash_unavailability_ratio"]:.2%}', esc(f'{m["clean_unavailable_ms"] / 1000:,.1f}'),
            esc(f'{m["crash_unavailable_ms"] / 1000:,.1f}'), measured, esc(confidence),
        ])  # fmt: skip
    if not rows:
        return ""
    headers = ["client mix", "protocol: clean restarts and rebalances", "crashes: session timeouts",
               "clean, partition-s", "crashes, partition-s", "calibration: measured / predicted", "confidence"]
    return table(headers, rows, "costs")


def bar_chart(mixes: Mapping[str, Any]) -> str:
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
            f'<text x="{x0 + group_w / 2:.1f}" y="{h - bottom + 18}" text-anchor="middle">{esc(mix)}</text>'
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
                f'fill="{MIX_COLOURS[mix]}" fill-opacity="{op:.1f}"><title>{esc(mix)} {s}: {v:,.1f} ms</title></rect>'
            )
            parts.append(f'<text x="{x + bar_w * 0.45:.1f}" y="{h - bottom - bh - 3:.1f}" '
                         f'text-anchor="middle" class="small">{s}</text>')  # fmt: skip
    parts.append(f'<text x="12" y="{(h - bottom) / 2:.0f}" transform="rotate(-90 12 {(h - bottom) / 2:.0f})" '
                 'text-anchor="middle">ms without owner (per partition)</text></svg>')  # fmt: skip
    return "".join(parts)


def histograms(hist: Mapping[str, Sequence[int]], width_ms: float) -> str:
    out = []
    w, h, left, bottom = 360, 160, 40, 30
    for mix in CLIENT_MIXES:
        counts = hist.get(mix)
        if not counts:
            continue
        top = max(counts) or 1
        bw = (w - left - 10) / len(counts)
        parts = [f'<figure><figcaption>{esc(mix)}</figcaption><svg width="{w}" height="{h}" role="img">']
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
