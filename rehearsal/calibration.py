"""Calibration: a real run of a small fleet and the simulation of the same fleet, side by side.

A real run (real clients through the gateway, ``groupgate rehearse calibrate``) is reduced to a ``Schedule``: when
each member started, and for every step of the scenario which slot stopped (cleanly or killed), when,
and when its next incarnation started and with which protocol. ``simulate_schedule`` replays exactly
that schedule in the simulator (rehearsal/simulate.py) with the real run's group timings, so the two
runs differ only in what the client and coordinator models do, not in when things happen.
``figures`` then measures both event logs the same way:

- **unavailable**: partition-milliseconds without an owner from the first disturbance until both runs
  are stable again (``window_end_ms``, the later of the two), and that as a share of the window;
- **rebalances per slot**: acknowledged ownership changes (a ``partitions_assigned`` or
  ``partitions_revoked`` that changed what a member owns) inside the window, over the fleet's slots
  (every incarnation of a slot counts for that slot);
- **time to stable**: from the first disturbance to the last acknowledged ownership change (after it
  the fleet owned every partition once and nothing moved any more).

The window starts at the first disturbance because the report's whole-log window also holds the fleet's
first join, which the real harness and the simulation start differently.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rehearsal import events as ev
from rehearsal.client_timings import Timings
from rehearsal.fleet_spec import ClientMix, FleetSpec, sim_config
from rehearsal.sim_clients import ClassicClient, SimClient
from rehearsal.sim_consumer_client import ConsumerClient
from rehearsal.sim_endpoint import EndpointConfig, ServiceEndpoint
from rehearsal.simulate import Simulation

# Scenario name -> the fleet scenario whose simulator setup (group type, assignors) it uses.
CALIBRATION_SCENARIOS: dict[str, str] = {
    "rolling-upgrade": "rolling-upgrade",
    "rolling-restart": "rolling-upgrade",  # the consumer mix's rolling upgrade is a rolling restart
    "crashes": "crashes",
}
DISTURBANCE_KIND = {"rolling-upgrade": "rolling-upgrade", "rolling-restart": "rolling-restart", "crashes": "crash"}
TOLERANCE = 0.25


@dataclass(frozen=True, slots=True)
class Step:
    slot: int
    stop_ms: int  # the old incarnation is stopped (LeaveGroup) or killed
    graceful: bool
    start_ms: int  # the next incarnation starts (its consumer is created and subscribes)
    protocol: str  # the next incarnation's protocol: classic | consumer
    # When the coordinator first heard from the next incarnation (its first JoinGroup or ConsumerGroupHeartbeat,
    # read from the gateway's --rebalance-events by ``first_requests``); None: start_ms + the client's start
    # latency. A client's start is CPU-bound (a JVM on a loaded machine), the protocol after it is not.
    first_request_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    """What happened when, in ms from the fleet's first start."""

    mix: ClientMix
    scenario: str  # rolling-upgrade | rolling-restart | crashes
    partitions: int
    starts: tuple[int, ...]  # per slot: the first incarnation's start
    steps: tuple[Step, ...]
    timings: Timings = Timings()
    topic: str = "calibration"
    # When the real fleet's first assignment reached a member (its first partitions_assigned); None: not
    # known. The replay then plays the steps at the same distance from its own first assignment: the
    # group's first rebalance sets the phase of every classic member's heartbeats, and a client's start
    # (its first JoinGroup) is CPU time, not protocol.
    formed_ms: int | None = None

    @property
    def members(self) -> int:
        return len(self.starts)

    def initial_protocol(self) -> str:
        return "consumer" if self.mix == "consumer" else "classic"


# A simulated client's first request reaches the coordinator this long after it starts (a 1 ms wake-up and
# the simulated network's 1-5 ms).
REQUEST_LEAD_MS = 4


def first_requests(schedule: Schedule, coordinator_events: Iterable[ev.Event], origin_ms: int) -> Schedule:
    """The schedule with each step's ``first_request_ms``: when the coordinator first heard from the slot's
    next incarnation, read from the coordinator's own events of the group (the gateway's
    ``--rebalance-events``; ``origin_ms`` is the schedule's zero on their clock).

    After the incarnation started (and the old one stopped) and before the next step, that is the first
    ``rebalance_started`` caused by a JoinGroup (a classic member joining a settled group starts one) or the
    first ``member_joined`` of a new-protocol member id not seen before (written on its first heartbeat's
    response). A step where neither is found (a classic member that joined a rebalance already under way)
    keeps its start plus the client's start latency."""
    ordered = _ordered(coordinator_events)
    steps = []
    for i, step in enumerate(schedule.steps):
        lo = origin_ms + max(step.stop_ms, step.start_ms)
        hi = origin_ms + schedule.steps[i + 1].stop_ms if i + 1 < len(schedule.steps) else 1 << 62
        seen = {e.member for e in ordered if e.ts_ms < lo and e.member}
        found = next((e.ts_ms for e in ordered if lo <= e.ts_ms < hi and (
            (isinstance(e, ev.RebalanceStarted) and e.reason == "JoinGroupRequest")
            or (isinstance(e, ev.MemberJoined) and e.protocol == "consumer" and e.member not in seen))), None)
        steps.append(replace(step, first_request_ms=None if found is None else found - origin_ms))
    return replace(schedule, steps=tuple(steps))


def formed(schedule: Schedule, real_events: Iterable[ev.Event], origin_ms: int) -> Schedule:
    """The schedule with ``formed_ms``: the real run's first acknowledged assignment (``origin_ms`` is the
    schedule's zero on the events' clock)."""
    first = next((e.ts_ms for e in _ordered(real_events) if isinstance(e, ev.PartitionsAssigned) and e.partitions), None)
    return replace(schedule, formed_ms=None if first is None else first - origin_ms)


class ScheduledSimulation(Simulation):
    """The simulator following a recorded schedule instead of drawing one: same group, same timings."""

    def __init__(self, schedule: Schedule, sink: Any, seed: int = 0, run: str = "simulated") -> None:
        self.schedule = schedule
        t = schedule.timings
        spec = FleetSpec(
            scenario=CALIBRATION_SCENARIOS[schedule.scenario],  # type: ignore[arg-type]
            groups=1, members=schedule.members, seed=seed, mix=schedule.mix,
            topics={schedule.topic: schedule.partitions}, heartbeat_interval_ms=t.heartbeat_interval_ms,
            processing_ms=t.processing_ms,
            server_assignor="uniform",  # what the real new-protocol members ask for (group.remote.assignor)
        )
        config = replace(sim_config(spec, 0), crashes=0, active_ms=2_000, seed=seed)
        classic = type("CalibratedClassic", (ClassicClient,), {
            "session_timeout_ms": t.session_timeout_ms,
            "join_interval_ms": t.classic_join_interval_ms, "heartbeat_from_sync": t.classic_heartbeat_from_sync,
            "leader_assign_delay": t.classic_leader_assign_delay})
        consumer = type("CalibratedConsumer", (ConsumerClient,), {
            "callback_wait_ms": t.callback_wait_ms, "callback_long_wait_share": t.callback_long_wait_share,
            "callback_long_wait_ms": t.callback_long_wait_ms})

        def endpoint(cfg: EndpointConfig, s: int) -> ServiceEndpoint:
            cfg.heartbeat_interval_ms = t.heartbeat_interval_ms
            cfg.session_timeout_ms = t.session_timeout_ms
            cfg.initial_rebalance_delay_ms = t.initial_rebalance_delay_ms
            return ServiceEndpoint(cfg, s)

        super().__init__(config, sink=sink, endpoint_factory=endpoint, classic_client=classic, consumer_client=consumer,
                         group_id=f"calibration-{schedule.mix}", run_id=run)
        self._by_slot: dict[int, SimClient] = {}
        self._steps_played = False

    def network_delay(self) -> int:
        return self.rng.randint(*self.schedule.timings.network_ms)

    def processing_delay(self, client: SimClient) -> int:
        t = self.schedule.timings
        lo, hi = t.straggler_ms if t.straggler_share and self.rng.random() < t.straggler_share else t.processing_ms
        return self.rng.randint(lo, hi)

    def call_later(self, client: SimClient, delay_ms: int, tag: str) -> None:
        if tag.startswith("heartbeat:") and isinstance(client, ClassicClient) and delay_ms and delay_ms % 1_000 == 0:
            # The models count classic heartbeats in 1 s intervals (CLASSIC_HEARTBEAT_INTERVAL_MS).
            delay_ms = delay_ms // 1_000 * self.schedule.timings.heartbeat_interval_ms
        super().call_later(client, delay_ms, tag)

    def new_client(self, protocol: str, slot: int, member_id: str | None = None) -> SimClient:
        client = super().new_client(protocol, slot, member_id)
        self._by_slot[slot] = client
        return client

    def _plan(self) -> None:
        s = self.schedule
        self._apply(self.endpoint.on_metadata(self._image(), 0))
        self._slots = s.members
        lag = s.timings.start_latency_ms
        for slot, at in enumerate(s.starts):
            self._push(at + lag, "action", ("start", (s.initial_protocol(), slot, None)))
        if s.formed_ms is None:
            self._play_steps(0)
        # else: at the first assignment (event)

    def _play_steps(self, shift_ms: int) -> None:
        s = self.schedule
        self._steps_played = True
        end = max(s.starts) + s.timings.start_latency_ms
        for step in s.steps:
            self._push(step.stop_ms + shift_ms, "action", ("stop", step))
            at = step.start_ms + s.timings.start_latency_ms if step.first_request_ms is None else step.first_request_ms - REQUEST_LEAD_MS
            start = max(at, step.stop_ms + 1) + shift_ms
            self._push(start, "action", ("start", (step.protocol, step.slot, None)))
            end = max(end, start)
        # Faults stop (the simulator then runs until the group converged) once the last member started.
        self._push(end + 1, "action", ("quiet", None))

    def event(self, name: str, client: SimClient, **fields: Any) -> None:
        super().event(name, client, **fields)
        if name == "partitions_assigned" and not self._steps_played and self.schedule.formed_ms is not None:
            self._play_steps(self.now - self.schedule.formed_ms)

    def _act(self, action: str, arg: Any) -> None:
        if action == "stop":
            step: Step = arg
            old = self._by_slot.get(step.slot)
            self.disturbance(DISTURBANCE_KIND[self.schedule.scenario])
            if old is not None and old.alive:
                self._stop(old, step.graceful)
            return
        super()._act(action, arg)


def simulate_schedule(schedule: Schedule, seed: int = 0, run: str = "simulated") -> list[ev.Event]:
    """The simulated run's rebalance events (raises SimulationViolation if an invariant breaks)."""
    out: list[ev.Event] = []
    ScheduledSimulation(schedule, out.append, seed, run).run()
    return out


# ---- measuring ---------------------------------------------------------------------------------------

@dataclass(slots=True)
class Figures:
    first_disturbance_ms: int
    settled_ms: int  # the last acknowledged ownership change
    members: int  # fleet slots
    partitions: int
    unavailable_ms: int = 0
    window_ms: int = 0
    changes: int = 0
    crash_unavailable_ms: int = 0  # the part after a killed member's ownership ended (session timeouts)
    intervals: dict[tuple[str, int], list[tuple[int, int, str]]] = field(default_factory=dict)

    @property
    def time_to_stable_ms(self) -> int:
        return self.settled_ms - self.first_disturbance_ms

    @property
    def rebalances_per_member(self) -> float:
        return self.changes / self.members

    @property
    def unavailable_share(self) -> float:
        return self.unavailable_ms / (self.partitions * self.window_ms) if self.window_ms else 0.0


def _ordered(events: Iterable[ev.Event]) -> list[ev.Event]:
    return sorted(events, key=lambda e: (e.ts_ms, e.seq, ev.EVENT_RANK[e.event]))


def ownership(events: Iterable[ev.Event]) -> tuple[Figures, list[ev.Event]]:
    """Ownership intervals per partition (end None while open), the changes, first disturbance."""
    ordered = _ordered(events)
    first = next((e.ts_ms for e in ordered if e.event == "disturbance"), ordered[0].ts_ms)
    owned: dict[str, dict[tuple[str, int], int]] = {}
    crashed: set[str] = set()
    intervals: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
    last_change = first
    partitions: set[tuple[str, int]] = set()
    for e in ordered:
        if isinstance(e, ev.TopicMetadata):
            partitions |= {(e.topic, p) for p in range(e.num_partitions)}
        elif isinstance(e, ev.PartitionsAssigned):
            mine = owned.setdefault(e.member, {})
            for tp in e.partitions:
                key = (tp.topic, tp.partition)
                partitions.add(key)
                if key not in mine:
                    mine[key] = e.ts_ms
                    last_change = max(last_change, e.ts_ms)
        elif isinstance(e, ev.PartitionsRevoked):
            mine = owned.setdefault(e.member, {})
            for tp in e.partitions:
                key = (tp.topic, tp.partition)
                if key in mine:
                    intervals.setdefault(key, []).append((mine.pop(key), e.ts_ms, e.member))
                    last_change = max(last_change, e.ts_ms)
        elif isinstance(e, ev.MemberLeft | ev.MemberFenced):
            if isinstance(e, ev.MemberLeft) and e.reason == "crash":
                crashed.add(e.member)
            who = "crash:" + e.member if e.member in crashed else e.member
            for key, since in owned.pop(e.member, {}).items():
                intervals.setdefault(key, []).append((since, e.ts_ms, who))
    open_end = 1 << 62
    for member, mine in owned.items():
        for key, since in mine.items():
            intervals.setdefault(key, []).append((since, open_end, member))
    fig = Figures(first, last_change, 0, len(partitions), intervals=intervals)
    return fig, ordered


def figures(
    events: Sequence[ev.Event], members: int, window_end_ms: int | None = None, window_start_ms: int | None = None
) -> Figures:
    """The calibration figures of one run's events over [first disturbance, window_end_ms] (a log without
    disturbances, like the gateway's own, is given ``window_start_ms``)."""
    fig, ordered = ownership(events)
    if window_start_ms is not None:
        fig.first_disturbance_ms = window_start_ms
    fig.members = members
    end = max(window_end_ms if window_end_ms is not None else fig.settled_ms, fig.first_disturbance_ms)
    start = fig.first_disturbance_ms
    fig.window_ms = end - start
    for key in sorted(fig.intervals):
        # Each gap is charged to the ownership whose end opened it (the latest end so far; at equal ends a
        # crashed one), as oracle._crash_gaps does for the report.
        cursor: tuple[int, bool] = (start, False)
        for lo, hi, who in sorted(fig.intervals[key]):
            if lo > cursor[0] and cursor[0] < end:
                gap = min(lo, end) - cursor[0]
                fig.unavailable_ms += gap
                fig.crash_unavailable_ms += gap if cursor[1] else 0
            cursor = max(cursor, (hi, who.startswith("crash:")))
        if cursor[0] < end:
            fig.unavailable_ms += end - cursor[0]
            fig.crash_unavailable_ms += end - cursor[0] if cursor[1] else 0
    # Partitions never owned in the window.
    fig.unavailable_ms += (fig.partitions - len(fig.intervals)) * fig.window_ms
    owned: dict[str, set[tuple[str, int]]] = {}
    for e in ordered:
        if isinstance(e, ev.MemberLeft | ev.MemberFenced):
            owned.pop(e.member, None)
        elif isinstance(e, ev.PartitionsAssigned | ev.PartitionsRevoked):
            mine = owned.setdefault(e.member, set())
            tps = {(tp.topic, tp.partition) for tp in e.partitions}
            assigned = isinstance(e, ev.PartitionsAssigned)
            changed = (tps - mine) if assigned else (tps & mine)
            if assigned:
                mine |= tps
            else:
                mine -= tps
            if changed and start <= e.ts_ms <= end:
                fig.changes += 1
    return fig


@dataclass(slots=True)
class Comparison:
    mix: str
    scenario: str
    real: Figures
    simulated: Figures
    client: str = "java"

    @staticmethod
    def ratio(sim: float, real: float) -> float | None:
        if real == 0:
            return None if sim == 0 else float("inf")
        return sim / real

    def ratios(self) -> dict[str, float | None]:
        r, s = self.real, self.simulated
        return {
            "unavailable": self.ratio(s.unavailable_ms, r.unavailable_ms),
            "rebalances": self.ratio(s.rebalances_per_member, r.rebalances_per_member),
            "time_to_stable": self.ratio(s.time_to_stable_ms, r.time_to_stable_ms),
        }

    def within(self, tolerance: float = TOLERANCE, floor_ms: int = 0) -> dict[str, bool]:
        """Each figure agrees within ``tolerance`` (relative), or both unavailabilities are under ``floor_ms``
        partition-ms (too small to compare relatively)."""
        out = {}
        for name, value in self.ratios().items():
            out[name] = value is None or abs(value - 1.0) <= tolerance
        if max(self.real.unavailable_ms, self.simulated.unavailable_ms) < floor_ms:
            out["unavailable"] = True
        return out


def compare(schedule: Schedule, real_events: Sequence[ev.Event], *, seed: int = 0, client: str = "java") -> Comparison:
    """Simulate the schedule and measure both runs over the same window."""
    simulated = simulate_schedule(schedule, seed)
    real_fig = figures(real_events, schedule.members)
    sim_fig = figures(simulated, schedule.members)
    end = max(real_fig.settled_ms - real_fig.first_disturbance_ms, sim_fig.settled_ms - sim_fig.first_disturbance_ms)
    return Comparison(
        schedule.mix, schedule.scenario,
        figures(real_events, schedule.members, real_fig.first_disturbance_ms + end),
        figures(simulated, schedule.members, sim_fig.first_disturbance_ms + end),
        client,
    )


def _pct(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{(value - 1) * 100:+.0f} %"


def table(rows: Sequence[Comparison]) -> str:
    """A Markdown table: measured and predicted per mix and scenario, and the differences."""
    head = ("| client | scenario | mix | unavailable, real / sim (partition-s) | share real / sim | of it after kills real / sim"
            " | rebalances per member real / sim | time to stable real / sim (s) | sim vs real: unavail / rebal / stable |")
    lines = [head, "|" + " --- |" * 9]
    for c in rows:
        r, s, q = c.real, c.simulated, c.ratios()
        lines.append(
            f"| {c.client} | {c.scenario} | {c.mix} | {r.unavailable_ms / 1000:.1f} / {s.unavailable_ms / 1000:.1f}"
            f" | {r.unavailable_share * 100:.1f} % / {s.unavailable_share * 100:.1f} %"
            f" | {r.crash_unavailable_ms / 1000:.1f} / {s.crash_unavailable_ms / 1000:.1f}"
            f" | {r.rebalances_per_member:.2f} / {s.rebalances_per_member:.2f}"
            f" | {r.time_to_stable_ms / 1000:.1f} / {s.time_to_stable_ms / 1000:.1f}"
            f" | {_pct(q['unavailable'])} / {_pct(q['rebalances'])} / {_pct(q['time_to_stable'])} |"
        )
    return "\n".join(lines)


__all__ = [
    "CALIBRATION_SCENARIOS", "Comparison", "Figures", "Schedule", "ScheduledSimulation", "Step",
    "compare", "figures", "first_requests", "simulate_schedule", "table",
]
