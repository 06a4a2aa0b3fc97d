"""The HTML report from oracle metrics (no Spark): sections, the timeline's marks, group choice, bins;
and the example lines of the schema document stay valid."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import rehearsal_scenarios as S

from rehearsal import events as E
from rehearsal import oracle, report, report_input, report_mixes

DOC = Path(__file__).resolve().parents[2] / "docs" / "rehearsal-events.md"


def metrics() -> oracle.Metrics:
    return oracle.compute([ev for evs in S.hand_built().values() for ev in evs])


def test_report_sections_and_timeline_marks() -> None:
    m = metrics()
    data = report_input.from_oracle(m, "double/g3")
    html = report.render(data)
    for anchor in ("client-mixes", "unavailability", "timeline", "runs", "groups"):
        assert f'id="{anchor}"' in html
    assert "Ownership timeline: group double/g3" in html
    # One bar per ownership interval of the group, one outlined mark per double ownership.
    assert html.count("ended by ") == len(data.intervals) == 2
    assert html.count('class="double"><title>double ownership') == len(data.overlaps) == 1
    # The two overlapping owners of t-0 are drawn in separate lanes, not on top of each other.
    lanes = re.findall(r'<rect x="[0-9.]+" y="([0-9.]+)"[^>]*><title>[ab]: ', html)
    assert len(set(lanes)) == 2
    # Every mix has a row; the one without groups says so.
    rows = re.findall(r"<tr><td>(?:<span[^>]*></span>)?([a-z-]+)</td>", html)
    assert rows[:4] == list(E.CLIENT_MIXES)
    assert "no data" not in html  # all four mixes are in the hand-built scenarios
    assert html.count("<svg") >= 3
    # The body is well-formed markup (inline SVG included).
    body = html.split("<body>", 1)[1].split("</body>", 1)[0]
    ET.fromstring(f"<div>{body}</div>")


def test_absent_mix_is_shown_as_no_data() -> None:
    m = oracle.compute(S.gap().events)
    html = report.render(report_input.from_oracle(m))
    assert html.count("no data") >= 3


def test_choose_group() -> None:
    groups = metrics().group_summary
    assert report_input.choose_group(groups, "gap/g2") == ("gap", "g2")
    assert report_input.choose_group(groups, "gb") == ("multi", "gb")
    busiest = max(g["rebalances"] for g in groups)
    chosen = report_input.choose_group(groups, None)
    assert chosen is not None
    assert next(g for g in groups if (g["run"], g["group"]) == chosen)["rebalances"] == busiest
    with pytest.raises(ValueError, match="no group"):
        report_input.choose_group(groups, "missing")
    assert report_input.choose_group([], None) is None


def test_histogram_bins_cover_all_values() -> None:
    values = {"consumer": [0, 5, 10, 99, 100], "translate": [50]}
    hist = report_input.histogram(values, bins=10)
    assert hist["consumer"][0] == 2 and hist["consumer"][9] == 2 and hist["consumer"][1] == 1
    assert hist["translate"][5] == 1
    assert sum(map(sum, hist.values())) == 6
    assert report_input.histogram({"consumer": [0, 0]}, bins=4)["consumer"] == [2, 0, 0, 0]


def test_documented_example_lines_are_valid() -> None:
    lines = [ln for ln in DOC.read_text().splitlines() if ln.startswith('{"ts_ms"')]
    assert len(lines) >= 5
    evs = [E.parse_event(ln, str(DOC), i) for i, ln in enumerate(lines, 1)]
    assert {ev.event for ev in evs} >= {"partitions_assigned", "partitions_revoked", "group_stable"}


def _mix(share: float | None, p50: int = 1, mean_rebalances: float = 1.0) -> dict[str, object]:
    return {
        "unavailability_ratio": share,
        "unavailability_ms": {"p50": p50, "p90": p50, "p99": p50, "max": p50, "mean": p50},
        "rebalances_per_member": {"mean": mean_rebalances},
    }


def test_verdict_names_the_least_and_the_most_unavailable_mix() -> None:
    mixes = {"classic-eager": _mix(0.20), "classic-cooperative": _mix(0.08), "translate": _mix(0.05),
             "consumer": _mix(0.10)}  # fmt: skip
    html = report_mixes.verdict(mixes)
    assert "<b>5.00%</b> of their time under <b>translate mode</b>, the least" in html
    assert "<b>20.00%</b> under <b>classic eager</b>, the most (4.00 times as much)" in html
    # One bar per mix, in the fixed order, each as long as its share on a common scale.
    widths = [float(w) for w in re.findall(r'<rect x="\d+" y="[0-9.]+" width="([0-9.]+)"', html)]
    assert len(widths) == 4
    assert widths[0] == max(widths)
    assert [round(w / widths[0], 3) for w in widths] == [1.0, 0.4, 0.25, 0.5]
    labels = re.findall(r'text-anchor="end">([a-z ]+)</text>', html)
    assert labels == ["classic eager", "classic cooperative", "translate mode", "new protocol"]


def test_verdict_with_missing_or_equal_mixes() -> None:
    only = report_mixes.verdict({"consumer": _mix(0.1), "translate": _mix(None)})
    assert "under new protocol, the only mix in these logs" in only
    assert only.count("no data") == 3  # classic eager, classic cooperative, and translate without a window
    tie = report_mixes.verdict({"consumer": _mix(0.1), "translate": _mix(0.1)})
    assert "under every measured mix (translate mode, new protocol)" in tie and "(least)" not in tie
    assert "No client mix" in report_mixes.verdict({})


def test_the_verdict_comes_before_the_details() -> None:
    html = report.render(report_input.from_oracle(metrics()))
    assert html.index('id="verdict"') < html.index('id="client-mixes"') < html.index('id="timeline"')
