"""The shape of the analysis output, shared by the oracle (plain Python) and the pipeline (PySpark).

Both produce the same five tables, one dict per row with exactly these columns, and the same summary.
The definitions of every column are in docs/rehearsal-events.md ("Metrics").
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from rehearsal.events import CONNECT_MIX, unit_kind

OWNERSHIP_INTERVALS = (
    "run", "group", "client_mix", "topic", "partition", "member",
    "start_ms", "end_ms", "duration_ms", "ended_by", "open_at_end",
)  # fmt: skip
PARTITION_UNAVAILABILITY = (
    "run", "group", "client_mix", "topic", "partition",
    "window_start_ms", "window_end_ms", "window_ms", "owned_ms", "unavailable_ms", "gaps", "longest_gap_ms",
)  # fmt: skip
DOUBLE_OWNERSHIP = (
    "run", "group", "client_mix", "topic", "partition", "member_a", "member_b",
    "overlap_start_ms", "overlap_end_ms", "overlap_ms",
)  # fmt: skip
MEMBER_REBALANCES = (
    "run", "group", "client_mix", "member", "rebalances", "partitions_gained", "partitions_lost",
    "assignments_received", "joins", "leaves", "fenced",
)  # fmt: skip
GROUP_SUMMARY = (
    "run", "group", "client_mix", "events", "start_ms", "end_ms", "duration_ms", "members", "partitions",
    "rebalances", "unavailable_ms", "max_partition_unavailable_ms", "unavailability_ratio",
    "double_ownership_violations", "double_ownership_ms", "first_disturbance_ms", "last_stable_ms",
    "converged_ms", "time_to_stable_ms", "stable_at_end", "conversions", "fenced", "timers_expired",
)  # fmt: skip

TABLES: dict[str, tuple[str, ...]] = {
    "ownership_intervals": OWNERSHIP_INTERVALS,
    "partition_unavailability": PARTITION_UNAVAILABILITY,
    "double_ownership": DOUBLE_OWNERSHIP,
    "member_rebalances": MEMBER_REBALANCES,
    "group_summary": GROUP_SUMMARY,
}

# Percentiles of the fleet-wide distributions, with linear interpolation between closest ranks
# (the definition of Spark SQL's exact `percentile` and numpy's default).
PERCENTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))

# Events that change membership or assignment; a group_stable before the last of them is not "stable at
# end" (see docs, time to stable).
CHANGE_EVENTS = (
    "member_joined", "member_left", "member_fenced", "group_converted", "disturbance", "rebalance_started",
)  # fmt: skip


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """Linear interpolation between closest ranks; None for no values."""
    n = len(sorted_values)
    if n == 0:
        return None
    h = (n - 1) * p
    lo = math.floor(h)
    hi = min(lo + 1, n - 1)
    return float(sorted_values[lo] + (h - lo) * (sorted_values[hi] - sorted_values[lo]))


def distribution(values: Sequence[float]) -> dict[str, float | None]:
    """p50/p90/p99/max/mean of values (all None when empty)."""
    s = sorted(values)
    out: dict[str, float | None] = {name: percentile(s, p) for name, p in PERCENTILES}
    out["max"] = float(s[-1]) if s else None
    out["mean"] = float(sum(s)) / len(s) if s else None
    return out


def fleet_summary(
    groups: Sequence[Mapping[str, Any]],
    partitions_by_mix: Mapping[str, Mapping[str, Any]],
    rebalances_by_mix: Mapping[str, Mapping[str, float | None]],
) -> dict[str, Any]:
    """summary.json from the group_summary rows plus, per client mix, the per-partition figures
    ({"partitions", "unavailable_ms", "window_ms", "distribution"}) and the distribution of rebalances
    per member, which the oracle and the pipeline each compute their own way."""
    runs: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for g in groups:
        runs[g["run"]].append(g)
    run_rows = {}
    for run, gs in sorted(runs.items()):
        first = min(g["first_disturbance_ms"] for g in gs)
        # A run is stable once every one of its groups is; until then its time to stable is unknown.
        settled = all(g["time_to_stable_ms"] is not None for g in gs)
        last = max(g["last_stable_ms"] for g in gs) if settled else None
        converged = max(g["converged_ms"] for g in gs) if settled else None
        run_rows[run] = {
            "groups": len(gs),
            "first_disturbance_ms": first,
            "last_stable_ms": last,
            "converged_ms": converged,
            "time_to_stable_ms": converged - first if converged is not None else None,
        }
    empty = {"partitions": 0, "unavailable_ms": 0, "window_ms": 0, "distribution": distribution([])}
    mixes: dict[str, Any] = {}
    for mix in sorted({g["client_mix"] for g in groups}):
        gs = [g for g in groups if g["client_mix"] == mix]
        ps = partitions_by_mix.get(mix, empty)
        tts = [g["time_to_stable_ms"] for g in gs if g["time_to_stable_ms"] is not None]
        mixes[mix] = {
            "groups": len(gs),
            "partitions": ps["partitions"],
            "members": sum(g["members"] for g in gs),
            "rebalances": sum(g["rebalances"] for g in gs),
            "unavailable_ms": ps["unavailable_ms"],
            "unavailability_ratio": ps["unavailable_ms"] / ps["window_ms"] if ps["window_ms"] else None,
            "unavailability_ms": dict(ps["distribution"]),
            "rebalances_per_member": dict(rebalances_by_mix.get(mix, distribution([]))),
            "double_ownership_violations": sum(g["double_ownership_violations"] for g in gs),
            "double_ownership_ms": sum(g["double_ownership_ms"] for g in gs),
            "groups_never_stable": len(gs) - len(tts),
            "time_to_stable_ms": distribution(tts),
        }
    return {
        "schema_version": 1,
        "spread": roll_spread(groups),
        "events": sum(g["events"] for g in groups),
        "runs_count": len(run_rows),
        "groups": len(groups),
        "members": sum(g["members"] for g in groups),
        "partitions": sum(g["partitions"] for g in groups),
        "unavailable_ms": sum(g["unavailable_ms"] for g in groups),
        "double_ownership_violations": sum(g["double_ownership_violations"] for g in groups),
        "double_ownership_ms": sum(g["double_ownership_ms"] for g in groups),
        "runs": run_rows,
        "client_mixes": mixes,
    }


SPREAD_PERCENTILES: tuple[tuple[str, float], ...] = (("p10", 0.1), ("p50", 0.5), ("p90", 0.9))


def _spread(values: Sequence[float]) -> dict[str, float | None]:
    s = sorted(values)
    out: dict[str, float | None] = {name: percentile(s, p) for name, p in SPREAD_PERCENTILES}
    out["mean"] = float(sum(s)) / len(s) if s else None
    return out


def roll_spread(groups: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """How wide one roll's outcome is: per run (a scenario and its seed) and client mix, each group is one
    roll of its own seed; the mean and the p10 / p50 / p90 over those rolls of the group's unavailable
    partition-ms, its unavailable share and its time to stable (groups that became stable)."""
    cells: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for g in groups:
        cells[(g["run"], g["client_mix"])].append(g)
    rows = []
    for (run, mix), gs in sorted(cells.items()):
        ratios = [g["unavailability_ratio"] for g in gs if g["unavailability_ratio"] is not None]
        tts = [g["time_to_stable_ms"] for g in gs if g["time_to_stable_ms"] is not None]
        rows.append({
            "run": run, "client_mix": mix, "rolls": len(gs),
            "unavailable_ms": _spread([g["unavailable_ms"] for g in gs]),
            "unavailability_ratio": _spread(ratios),
            "time_to_stable_ms": _spread(tts),
        })  # fmt: skip
    return rows


# member_left reasons that mean the process died without leaving (the simulator's and the calibration's
# killed members); with member_fenced (a session or rebalance timeout) they end ownership by a crash.
CRASH_REASONS = ("crash",)


def add_crash_split(
    summary: dict[str, Any], crash_by_mix: Mapping[str, int], window_by_mix: Mapping[str, int]
) -> dict[str, Any]:
    """Per mix, split the unavailable time into what followed a crash or fence (``crash_unavailable_ms``:
    the partitions of a dead member wait for its session timeout, whatever the protocol) and the rest
    (``clean_unavailable_ms``: what the protocol's rebalances cost), with their shares of partition time."""
    for mix, figures in summary["client_mixes"].items():
        crash = int(crash_by_mix.get(mix, 0))
        total = figures["unavailable_ms"] or 0
        window = window_by_mix.get(mix) or 0
        figures["crash_unavailable_ms"] = crash
        figures["clean_unavailable_ms"] = total - crash
        figures["crash_unavailability_ratio"] = crash / window if window else None
        figures["clean_unavailability_ratio"] = (total - crash) / window if window else None
    return summary


def add_connect(
    summary: dict[str, Any], units: Sequence[Mapping[str, Any]], members: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """``summary["connect"]`` when connect groups are among the inputs: their connectors' and tasks' time
    without a running worker (from the ``partition_unavailability`` rows of client mix connect, whose units
    are connectors and tasks) and the rebalances per worker (``member_rebalances`` rows of that mix).
    Nothing is added for logs without connect groups."""
    mine = [u for u in units if u["client_mix"] == CONNECT_MIX]
    workers = [m for m in members if m["client_mix"] == CONNECT_MIX]
    if not mine and not workers:
        return summary
    out: dict[str, Any] = {
        "groups": len({(u["run"], u["group"]) for u in mine} | {(m["run"], m["group"]) for m in workers}),
        "workers": len(workers),
        "rebalances": sum(m["rebalances"] for m in workers),
        "rebalances_per_worker": distribution([m["rebalances"] for m in workers]),
    }
    for kind, plural in (("task", "tasks"), ("connector", "connectors")):
        rows = [u for u in mine if unit_kind(u["topic"]) == kind]
        unavailable = sum(u["unavailable_ms"] for u in rows)
        window = sum(u["window_ms"] for u in rows)
        out[plural] = len(rows)
        out[f"{kind}_unavailable_ms"] = unavailable
        out[f"{kind}_unavailability_ratio"] = unavailable / window if window else None
        out[f"{kind}_unavailability_ms"] = distribution([u["unavailable_ms"] for u in rows])
    summary["connect"] = out
    return summary
