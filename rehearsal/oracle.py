"""The rehearsal metrics computed in plain Python, event by event.

This is the reference the PySpark pipeline is tested against: it replays each group's events in order
and keeps the owned partitions of every member in dicts, which is the most direct reading of the
ownership semantics in docs/rehearsal-events.md. It is written independently of pipeline.py on purpose.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rehearsal.events import (
    EVENT_RANK,
    AssignmentSent,
    Disturbance,
    Event,
    GroupConverted,
    GroupStable,
    MemberFenced,
    MemberJoined,
    MemberLeft,
    PartitionsAssigned,
    PartitionsRevoked,
    TimerExpired,
    TopicMetadata,
)
from rehearsal.tables import (
    CHANGE_EVENTS,
    CRASH_REASONS,
    GROUP_SUMMARY,
    add_connect,
    add_crash_split,
    distribution,
    fleet_summary,
)

Row = dict[str, Any]
TP = tuple[str, int]


@dataclass(slots=True)
class Metrics:
    ownership_intervals: list[Row]
    partition_unavailability: list[Row]
    double_ownership: list[Row]
    member_rebalances: list[Row]
    group_summary: list[Row]
    summary: dict[str, Any]


@dataclass(slots=True)
class _Member:
    owned: dict[TP, int] = field(default_factory=dict)  # partition -> since (ts_ms)
    rebalances: int = 0
    gained: int = 0
    lost: int = 0
    assignments_received: int = 0
    joins: int = 0
    leaves: int = 0
    fenced: int = 0


def _order_key(item: tuple[int, Event]) -> tuple[int, int, int, int]:
    idx, ev = item
    return (ev.ts_ms, ev.seq, EVENT_RANK[ev.event], idx)


def _replay_group(run: str, group: str, events: list[Event]) -> tuple[list[Row], list[Row], Row, set[TP]]:
    """Intervals, member rows, group facts and declared partitions of one group's ordered events."""
    start = min(ev.ts_ms for ev in events)
    end = max(ev.ts_ms for ev in events)
    mix = min(ev.client_mix for ev in events)
    members: dict[str, _Member] = {}
    intervals: list[Row] = []
    ended_by_crash: list[bool] = []  # per interval: its member crashed or was fenced (CRASH_ENDS)
    declared: set[TP] = set()
    disturbances: list[int] = []
    stables: list[int] = []
    changes: list[int] = []
    moved: list[int] = []  # when what a member owns changed (convergence is the last of them)
    conversions = timers = 0

    def close(member: str, tp: TP, since: int, ts: int, by: str, open_at_end: bool = False, crash: bool = False) -> None:
        intervals.append({
            "run": run, "group": group, "client_mix": mix, "topic": tp[0], "partition": tp[1],
            "member": member, "start_ms": since, "end_ms": ts, "duration_ms": ts - since,
            "ended_by": by, "open_at_end": open_at_end,
        })  # fmt: skip
        ended_by_crash.append(crash)

    for ev in events:
        if ev.event in CHANGE_EVENTS:
            changes.append(ev.ts_ms)
        # Any event naming a member makes it a member of the group (for the counts).
        m = members.setdefault(ev.member, _Member()) if ev.member is not None else None
        if isinstance(ev, PartitionsAssigned):
            m = members[ev.member]
            changed = False
            for p in ev.partitions:
                tp = (p.topic, p.partition)
                declared.add(tp)
                if tp not in m.owned:
                    m.owned[tp] = ev.ts_ms
                    m.gained += 1
                    changed = True
            m.rebalances += changed
            if changed:
                moved.append(ev.ts_ms)
        elif isinstance(ev, PartitionsRevoked):
            m = members[ev.member]
            changed = False
            for p in ev.partitions:
                tp = (p.topic, p.partition)
                since = m.owned.pop(tp, None)
                if since is not None:
                    close(ev.member, tp, since, ev.ts_ms, ev.event)
                    m.lost += 1
                    changed = True
            m.rebalances += changed
            if changed:
                moved.append(ev.ts_ms)
        elif isinstance(ev, MemberLeft | MemberFenced):
            m = members[ev.member]
            crash = isinstance(ev, MemberFenced) or ev.reason in CRASH_REASONS
            if m.owned:
                moved.append(ev.ts_ms)
            for tp, since in sorted(m.owned.items()):
                close(ev.member, tp, since, ev.ts_ms, ev.event, crash=crash)
                m.lost += 1
            m.owned.clear()
            if isinstance(ev, MemberLeft):
                m.leaves += 1
            else:
                m.fenced += 1
        elif isinstance(ev, MemberJoined):
            members[ev.member].joins += 1
        elif isinstance(ev, AssignmentSent):
            members[ev.member].assignments_received += 1
        elif isinstance(ev, GroupStable):
            stables.append(ev.ts_ms)
            declared.update((p.topic, p.partition) for p in ev.partitions or ())
        elif isinstance(ev, TopicMetadata):
            declared.update((ev.topic, i) for i in range(ev.num_partitions))
        elif isinstance(ev, Disturbance):
            disturbances.append(ev.ts_ms)
        elif isinstance(ev, GroupConverted):
            conversions += 1
        elif isinstance(ev, TimerExpired):
            timers += 1

    for name, m in members.items():
        for tp, since in sorted(m.owned.items()):
            close(name, tp, since, end, "end_of_log", open_at_end=True)

    member_rows = [
        {
            "run": run, "group": group, "client_mix": mix, "member": name, "rebalances": m.rebalances,
            "partitions_gained": m.gained, "partitions_lost": m.lost,
            "assignments_received": m.assignments_received, "joins": m.joins, "leaves": m.leaves,
            "fenced": m.fenced,
        }  # fmt: skip
        for name, m in members.items()
    ]
    first_disturbance = min(disturbances) if disturbances else start
    after = [t for t in stables if t >= first_disturbance]
    last_stable = max(after) if after else None
    # Convergence: the last ownership change from the first disturbance on (after it every member held what
    # it holds at the end); a group that never became stable has none.
    converged = max((t for t in moved if t >= first_disturbance), default=first_disturbance) if after else None
    facts: Row = {
        "run": run, "group": group, "client_mix": mix, "events": len(events), "start_ms": start, "end_ms": end,
        "duration_ms": end - start, "members": len(members),
        "rebalances": sum(m.rebalances for m in members.values()),
        "first_disturbance_ms": first_disturbance, "last_stable_ms": last_stable, "converged_ms": converged,
        "time_to_stable_ms": None if converged is None else converged - first_disturbance,
        "stable_at_end": last_stable is not None and (not changes or last_stable >= max(changes)),
        "conversions": conversions, "fenced": sum(m.fenced for m in members.values()),
        "timers_expired": timers,
    }  # fmt: skip
    for row, crash in zip(intervals, ended_by_crash, strict=True):
        row[_CRASH] = crash
    return intervals, member_rows, facts, declared


_CRASH = "_ended_by_crash"


def _crash_gaps(window: tuple[int, int], spans: list[tuple[int, int, bool]]) -> int:
    """The part of a partition's unavailability that follows an ownership ended by a crash or a fence:
    each gap is charged to the ownership whose end opened it (the latest end so far; at equal ends, a
    crashed one). The pipeline computes the same with a running maximum of (end, crashed)."""
    ws, we = window
    cursor: tuple[int, bool] = (ws, False)
    total = 0
    for s, e, crash in sorted(spans):
        if s - cursor[0] > 0 and cursor[1]:
            total += s - cursor[0]
        cursor = max(cursor, (e, crash))
    if we - cursor[0] > 0 and cursor[1]:
        total += we - cursor[0]
    return total


def _unavailability(key: Row, window: tuple[int, int], spans: list[tuple[int, int]]) -> Row:
    ws, we = window
    cursor = ws
    total = gaps = longest = 0
    for s, e in sorted(spans):
        gap = s - cursor
        if gap > 0:
            total += gap
            gaps += 1
            longest = max(longest, gap)
        cursor = max(cursor, e)
    tail = we - cursor
    if tail > 0:
        total += tail
        gaps += 1
        longest = max(longest, tail)
    return {
        **key, "window_start_ms": ws, "window_end_ms": we, "window_ms": we - ws,
        "owned_ms": we - ws - total, "unavailable_ms": total, "gaps": gaps, "longest_gap_ms": longest,
    }  # fmt: skip


def _overlaps(intervals: list[Row]) -> list[Row]:
    out = []
    for i, a in enumerate(intervals):
        for b in intervals[i + 1 :]:
            if a["member"] == b["member"]:
                continue
            lo, hi = max(a["start_ms"], b["start_ms"]), min(a["end_ms"], b["end_ms"])
            if lo < hi:
                first, second = sorted((a["member"], b["member"]))
                out.append({
                    "run": a["run"], "group": a["group"], "client_mix": a["client_mix"],
                    "topic": a["topic"], "partition": a["partition"], "member_a": first, "member_b": second,
                    "overlap_start_ms": lo, "overlap_end_ms": hi, "overlap_ms": hi - lo,
                })  # fmt: skip
    return out


def compute(events: Iterable[Event]) -> Metrics:
    by_group: dict[tuple[str, str], list[tuple[int, Event]]] = defaultdict(list)
    for idx, ev in enumerate(events):
        by_group[(ev.run, ev.group)].append((idx, ev))

    intervals: list[Row] = []
    unavailability: list[Row] = []
    overlaps: list[Row] = []
    member_rows: list[Row] = []
    groups: list[Row] = []
    crash_by_mix: dict[str, int] = defaultdict(int)
    for (run, group), items in sorted(by_group.items()):
        ordered = [ev for _, ev in sorted(items, key=_order_key)]
        g_intervals, g_members, facts, declared = _replay_group(run, group, ordered)
        by_tp: dict[TP, list[Row]] = defaultdict(list)
        for row in g_intervals:
            by_tp[(row["topic"], row["partition"])].append(row)
        g_unavail = []
        g_overlaps = []
        for tp in sorted(declared):
            key = {"run": run, "group": group, "client_mix": facts["client_mix"], "topic": tp[0], "partition": tp[1]}
            spans = [(r["start_ms"], r["end_ms"]) for r in by_tp.get(tp, [])]
            window = (facts["start_ms"], facts["end_ms"])
            g_unavail.append(_unavailability(key, window, spans))
            crash_by_mix[facts["client_mix"]] += _crash_gaps(
                window, [(r["start_ms"], r["end_ms"], r[_CRASH]) for r in by_tp.get(tp, [])]
            )
            g_overlaps += _overlaps(by_tp.get(tp, []))
        for row in g_intervals:
            del row[_CRASH]
        unavail_ms = [r["unavailable_ms"] for r in g_unavail]
        capacity = len(g_unavail) * facts["duration_ms"]
        groups.append({
            **facts,
            "partitions": len(g_unavail),
            "unavailable_ms": sum(unavail_ms),
            "max_partition_unavailable_ms": max(unavail_ms, default=0),
            "unavailability_ratio": sum(unavail_ms) / capacity if capacity > 0 else None,
            "double_ownership_violations": len(g_overlaps),
            "double_ownership_ms": sum(r["overlap_ms"] for r in g_overlaps),
        })  # fmt: skip
        intervals += g_intervals
        unavailability += g_unavail
        overlaps += g_overlaps
        member_rows += g_members

    # Rows in the column order of the tables (as the pipeline writes them).
    groups = [{c: g[c] for c in GROUP_SUMMARY} for g in groups]
    return Metrics(
        ownership_intervals=intervals,
        partition_unavailability=unavailability,
        double_ownership=overlaps,
        member_rebalances=member_rows,
        group_summary=groups,
        summary=add_connect(
            add_crash_split(
                summarize(groups, unavailability, member_rows), crash_by_mix, _windows_by_mix(unavailability)
            ),
            unavailability,
            member_rows,
        ),
    )


def _windows_by_mix(unavailability: list[Row]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for p in unavailability:
        out[p["client_mix"]] += p["window_ms"]
    return out


def summarize(groups: list[Row], unavailability: list[Row], members: list[Row]) -> dict[str, Any]:
    """Fleet-wide figures; the per-mix distributions are computed here from the rows."""
    partitions_by_mix: dict[str, Any] = {}
    for mix in sorted({p["client_mix"] for p in unavailability}):
        ps = [p for p in unavailability if p["client_mix"] == mix]
        partitions_by_mix[mix] = {
            "partitions": len(ps),
            "unavailable_ms": sum(p["unavailable_ms"] for p in ps),
            "window_ms": sum(p["window_ms"] for p in ps),
            "distribution": distribution([p["unavailable_ms"] for p in ps]),
        }
    rebalances_by_mix = {
        mix: distribution([m["rebalances"] for m in members if m["client_mix"] == mix])
        for mix in {m["client_mix"] for m in members}
    }
    return fleet_summary(groups, partitions_by_mix, rebalances_by_mix)
