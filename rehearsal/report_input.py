"""What the rehearsal report is drawn from (rehearsal/report.py): ``ReportInput``, the group its timeline
shows, the histograms of per-partition unavailability, and the input built from the plain-Python oracle's
metrics (the pipeline builds its own, rehearsal/cli.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Row = Mapping[str, Any]
HISTOGRAM_BINS = 20


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
