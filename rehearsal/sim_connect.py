"""Seeded deterministic simulation of a connect group: Kafka Connect-like workers on the new protocol
talking to the sans-I/O connect coordinator (coordinator/connect, docs/connect.md).

Everything comes from one seed through ``random.Random(seed)``; time is virtual (ms) and moves only
through an event queue (request deliveries, responses, worker wake-ups, the coordinator's timers,
scenario actions), so a failing seed replays from its number: ``run_connect_seed(417, "crashes")``.

A simulated worker:
- joins with ConnectGroupHeartbeat (its URL, the rebalance timeout, one client-side assignor) and
  heartbeats at the interval the coordinator gives, reporting what it runs (``owned``);
- when answered COMPUTE_ASSIGNMENT, reads the group (PrepareAssignment), runs ``ConnectAssignor`` and
  installs the target (InstallAssignment);
- stops the connectors and tasks its assignment no longer names before it starts new ones, and reports
  each change on its next heartbeat, sent at once;
- keeps the scheduled rebalance delay of units whose worker vanished and, when it runs out, asks for a
  new target through its assignor's reason (``REASON_SCHEDULED_REBALANCE``).

Scenarios: ``rolling-restart`` (each worker stopped cleanly, then started again, one after another) and
``crashes`` (a worker killed without a word; its units wait for its session timeout, then for the
scheduled rebalance delay unless a worker with nothing to run is there to take them; a supervisor
starts the worker again a few seconds after the kill).

After every step the checker asserts that no connector or task runs on two live workers
(``SimulationViolation`` names the seed and step); at the end every connector and task runs on one.

Events (rehearsal/events.py) are written from the moment the group first runs everything (the warm-up
is left out): connectors and tasks are the partition-shaped units of ``events.CONNECTOR_PREFIX`` and
``events.TASK_PREFIX``; ``protocol`` and ``client_mix`` are ``connect``.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator.connect.messages import (
    AssignorSpec,
    ConnectGroupHeartbeatRequest,
    ConnectGroupHeartbeatResponse,
    ConnectGroupInstallAssignmentRequest,
    ConnectGroupPrepareAssignmentRequest,
    ConnectGroupPrepareAssignmentResponse,
    ConnectorsAndTasks,
    InstalledWorker,
)
from coordinator.connect.model import (
    NOTHING,
    REASON_NONE,
    REASON_SCHEDULED_REBALANCE,
    SESSIONED,
    ConnectAssignment,
    ConnectGroupState,
    TaskId,
)
from coordinator.connect.service import ConnectConfig, ConnectGroupCoordinator
from coordinator.connect.worker_assignor import ConnectAssignor
from coordinator.errors import Errors
from coordinator.timers import ScheduleTimer, TimerKey, apply_timer_changes
from rehearsal import events as ev
from rehearsal.sim_events import EventSink
from rehearsal.simulate import SimulationViolation

GROUP_ID = "connect-cluster"
ASSIGNOR = "sessioned"
SCENARIOS: tuple[str, ...] = ("rolling-restart", "crashes")
# Connect's defaults: rebalance.timeout.ms and scheduled.rebalance.max.delay.ms.
REBALANCE_TIMEOUT_MS = 60_000
SCHEDULED_REBALANCE_DELAY_MS = 300_000
_COORDINATOR = ConnectConfig()


@dataclass(frozen=True, slots=True)
class ConnectSimConfig:
    seed: int
    scenario: str = "rolling-restart"
    workers: int = 3
    connectors: int = 4
    tasks_per_connector: int = 3
    # How many workers the crashes scenario kills (one after another); default a fifth, at least one.
    disturbances: int | None = None
    scheduled_delay_ms: int = SCHEDULED_REBALANCE_DELAY_MS
    rebalance_timeout_ms: int = REBALANCE_TIMEOUT_MS
    # The coordinator's settings (ConnectConfig's defaults are the gateway's for every connect group).
    session_timeout_ms: int = _COORDINATOR.session_timeout_ms
    heartbeat_interval_ms: int = _COORDINATOR.heartbeat_interval_ms
    network_ms: tuple[int, int] = (1, 5)
    # Starting / stopping a batch of connectors and tasks, and the assignor's own work.
    start_stop_ms: tuple[int, int] = (20, 300)
    compute_ms: tuple[int, int] = (1, 20)
    # Rolling restart: how long a stopped worker stays down, and the pause before the next one.
    restart_gap_ms: tuple[int, int] = (500, 3_000)
    restart_pace_ms: tuple[int, int] = (5_000, 10_000)
    # Crashes: the time between kills and how long the supervisor takes to start the worker again.
    crash_spacing_ms: tuple[int, int] = (20_000, 40_000)
    crash_restart_ms: tuple[int, int] = (1_000, 5_000)

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ValueError(f"unknown connect scenario {self.scenario!r}; known: {', '.join(SCENARIOS)}")
        if self.workers < 1 or self.connectors < 1 or self.tasks_per_connector < 0:
            raise ValueError("a connect rehearsal needs workers >= 1, connectors >= 1 and tasks >= 0")

    @property
    def kills(self) -> int:
        return self.disturbances if self.disturbances is not None else max(1, self.workers // 5)


def connector_names(n: int) -> list[str]:
    return [f"conn-{i:02d}" for i in range(n)]


def all_units(cfg: ConnectSimConfig) -> ConnectAssignment:
    names = connector_names(cfg.connectors)
    return ConnectAssignment(
        frozenset(names), frozenset((c, t) for c in names for t in range(cfg.tasks_per_connector))
    )


def unit_tps(a: ConnectAssignment) -> list[tuple[str, int]]:
    """A connect assignment as the event log's partition-shaped units."""
    return sorted([(ev.CONNECTOR_PREFIX + c, 0) for c in a.connectors] + [(ev.TASK_PREFIX + c, t) for c, t in a.tasks])


# -- workers ------------------------------------------------------------------------------------------


@dataclass(slots=True)
class SimWorker:
    name: str
    slot: int
    member_id: str
    incarnation: int
    assignor: ConnectAssignor
    alive: bool = True
    leaving: bool = False
    joined: bool = False  # a heartbeat of this incarnation was answered without error
    epoch: int = 0
    assigned: ConnectAssignment = NOTHING  # what the coordinator last told it to run
    running: ConnectAssignment = NOTHING  # what it runs (acknowledged)
    reason: int = REASON_NONE
    send_assignors: bool = True
    in_flight: bool = False
    again: bool = False
    changing: bool = False  # stopping or starting units
    heartbeat_token: int = 0

    @property
    def url(self) -> str:
        return f"http://{self.name}:8083"

    def spec(self) -> AssignorSpec:
        return AssignorSpec(ASSIGNOR, 0, SESSIONED, reason=self.reason, version=SESSIONED)


@dataclass(slots=True)
class ConnectSimReport:
    seed: int
    scenario: str
    steps: int
    virtual_ms: int
    events: int
    workers_started: int
    first_disturbance_ms: int
    settled_at_ms: int
    stats: dict[str, int]


@dataclass
class ConnectSimulation:
    config: ConnectSimConfig
    sink: EventSink | None = None
    group_id: str = GROUP_ID
    run_id: str | None = None
    trace: Callable[[str], None] | None = None

    now: int = 0
    step: int = 0
    workers: list[SimWorker] = field(default_factory=list)
    stats: Counter[str] = field(default_factory=Counter)
    events: int = 0
    first_disturbance_ms: int = -1
    settled_at_ms: int = 0

    def __post_init__(self) -> None:
        cfg = self.config
        self.rng = random.Random(cfg.seed)
        self.units = all_units(cfg)
        self.coord = ConnectGroupCoordinator(
            ConnectConfig(session_timeout_ms=cfg.session_timeout_ms, heartbeat_interval_ms=cfg.heartbeat_interval_ms)
        )
        self.run_name = self.run_id or f"connect-sim-{cfg.seed}"
        self._queue: list[tuple[int, int, str, Any]] = []
        self._seq = itertools.count()
        self._timers: dict[TimerKey, int] = {}
        self._ids = itertools.count()
        self._recording = False
        self._last_actions_at = 0
        self._stable = False
        self._epoch = 0

    # -- the queue -----------------------------------------------------------------------------------

    def _push(self, at: int, kind: str, payload: Any) -> None:
        heapq.heappush(self._queue, (at, next(self._seq), kind, payload))

    def _net(self) -> int:
        return self.rng.randint(*self.config.network_ms)

    def _fail(self, message: str) -> None:
        raise SimulationViolation(f"seed {self.config.seed} step {self.step} t={self.now}ms "
                                  f"({self.config.scenario}): {message}")

    # -- events --------------------------------------------------------------------------------------

    def _common(self) -> dict[str, Any]:
        return {"ts_ms": self.now, "run": self.run_name, "group": self.group_id, "protocol": "connect",
                "client_mix": ev.CONNECT_MIX, "seq": self.events}  # fmt: skip

    def _emit(self, event: Any) -> None:
        if self.sink is not None and self._recording:
            self.sink(event)
            self.events += 1

    def _tps(self, a: ConnectAssignment) -> list[ev.TopicPartition]:
        return [ev.TopicPartition(topic=t, partition=p) for t, p in unit_tps(a)]

    def _member_event(self, kind: str, w: SimWorker, **fields: Any) -> None:
        if self.sink is None or not self._recording:
            return
        common = {**self._common(), "member": w.member_id}
        if kind == "member_joined":
            self._emit(ev.MemberJoined(**common))
        elif kind == "member_left":
            self._emit(ev.MemberLeft(reason=fields["reason"], **common))
        elif kind == "member_fenced":
            self._emit(ev.MemberFenced(reason=fields["reason"], **common))
        elif kind == "assignment_sent":
            self._emit(ev.AssignmentSent(partitions=self._tps(fields["units"]), **{**common, "member_epoch": w.epoch}))
        elif kind == "partitions_assigned":
            self._emit(ev.PartitionsAssigned(partitions=self._tps(fields["units"]), **common))
        elif kind == "partitions_revoked":
            self._emit(ev.PartitionsRevoked(partitions=self._tps(fields["units"]), **common))

    def _start_recording(self) -> None:
        """The group runs everything for the first time: declare the units and what each worker runs."""
        self._recording = True
        if self.sink is None:
            return
        names = connector_names(self.config.connectors)
        for c in names:
            self._emit(ev.TopicMetadata(topic=ev.CONNECTOR_PREFIX + c, num_partitions=1, **self._common()))
            if self.config.tasks_per_connector:
                self._emit(ev.TopicMetadata(topic=ev.TASK_PREFIX + c, num_partitions=self.config.tasks_per_connector,
                                            **self._common()))
        for w in self._live():
            self._member_event("member_joined", w)
            if w.running:
                self._member_event("partitions_assigned", w, units=w.running)
        self._emit(ev.GroupStable(group_epoch=self._epoch, **self._common()))

    # -- the coordinator -----------------------------------------------------------------------------

    def _apply(self, outcome: Any) -> None:
        apply_timer_changes(self._timers, outcome.timers, self._arm)

    def _arm(self, change: ScheduleTimer) -> int:
        self._push(change.deadline_ms, "timer", (change.key, change.deadline_ms))
        return change.deadline_ms

    def _observe(self) -> None:
        """Group-level events after each coordinator call: an epoch bump, the group becoming stable."""
        g = self.coord.group(self.group_id)
        if g is None:
            return
        if g.group_epoch > self._epoch:
            self._epoch = g.group_epoch
            self._emit(ev.RebalanceStarted(group_epoch=g.group_epoch, reason="group epoch bumped", **self._common()))
        stable = g.state() is ConnectGroupState.STABLE and self._all_running()
        if stable and not self._stable:
            if not self._recording:
                # The warm-up ends once every worker started at first has joined and the group runs all.
                if len(self.workers) >= self.config.workers and all(w.joined for w in self._live()):
                    self._start_recording()
                else:
                    return
            else:
                self._emit(ev.GroupStable(group_epoch=g.group_epoch, **self._common()))
        self._stable = stable

    def _all_running(self) -> bool:
        running = NOTHING
        for w in self._live():
            running = running | w.running
        return running == self.units and not any(w.changing for w in self._live())

    # -- workers -------------------------------------------------------------------------------------

    def _live(self) -> list[SimWorker]:
        return [w for w in self.workers if w.alive]

    def _start_worker(self, slot: int) -> None:
        incarnation = next(self._ids)
        name = f"worker-{slot}"
        # Connect workers have no static membership: every start is a new member id.
        member_id = f"{name}-{incarnation}-{self.rng.getrandbits(32):08x}"
        w = SimWorker(name, slot, member_id, incarnation, ConnectAssignor(self.config.scheduled_delay_ms))
        self.workers.append(w)
        self.stats["workers_started"] += 1
        self._heartbeat(w)

    def _heartbeat(self, w: SimWorker) -> None:
        if not w.alive:
            return
        if w.in_flight:
            w.again = True
            return
        if w.epoch == 0:
            req = ConnectGroupHeartbeatRequest(
                self.group_id, w.member_id, 0, rebalance_timeout_ms=self.config.rebalance_timeout_ms,
                client_assignors=[w.spec()], owned=ConnectorsAndTasks(), worker_url=w.url,
            )
            w.send_assignors = False
        else:
            req = ConnectGroupHeartbeatRequest(
                self.group_id, w.member_id, w.epoch, owned=ConnectorsAndTasks.of(self.owned_report(w)),
                client_assignors=[w.spec()] if w.send_assignors else None,
            )
            w.send_assignors = False
        w.in_flight = True
        self._push(self.now + self._net(), "deliver", (w, w.incarnation, "heartbeat", req))

    def owned_report(self, w: SimWorker) -> ConnectAssignment:
        """What a heartbeat says the worker runs (tests swap in a worker that lies)."""
        return w.running

    def _schedule_heartbeat(self, w: SimWorker, interval_ms: int) -> None:
        w.heartbeat_token += 1
        self._push(self.now + max(interval_ms, 1), "wake", (w, w.incarnation, "heartbeat", w.heartbeat_token))

    def _on_heartbeat(self, w: SimWorker, res: ConnectGroupHeartbeatResponse) -> None:
        w.in_flight = False
        if res.error_code in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_MEMBER_EPOCH):
            # Fenced: stop everything and join again (the coordinator already dropped the worker).
            self.stats["fenced"] += 1
            self._member_event("member_fenced", w, reason=Errors(res.error_code).name.lower())
            w.running, w.assigned, w.epoch, w.joined, w.changing = NOTHING, NOTHING, 0, False, False
            w.incarnation = next(self._ids)  # callbacks of the old membership are void
            self._heartbeat(w)
            return
        if res.error_code not in (0, Errors.COMPUTE_ASSIGNMENT):
            self._fail(f"{w.member_id}'s heartbeat was answered {res.error_code}: {res.error_message}")
        if not w.joined:
            w.joined = True
            self._member_event("member_joined", w)
        w.epoch = res.member_epoch
        if res.assignment is not None:
            told = res.assignment.assigned.assignment()
            if told != w.assigned:
                self._member_event("assignment_sent", w, units=told)
            w.assigned = told
            self._reconcile(w)
        if res.error_code == Errors.COMPUTE_ASSIGNMENT:
            self.stats["computations"] += 1
            self._push(self.now + self.rng.randint(*self.config.compute_ms), "wake", (w, w.incarnation, "compute", None))
        self._schedule_heartbeat(w, res.heartbeat_interval_ms)
        if w.again:
            w.again = False
            self._heartbeat(w)

    def _reconcile(self, w: SimWorker) -> None:
        """Stop what the assignment no longer names, then start what it adds: one batch at a time."""
        if w.changing or w.leaving:
            return
        stop = w.running - w.assigned
        start = w.assigned - w.running
        if stop:
            w.changing = True
            self._push(self.now + self.rng.randint(*self.config.start_stop_ms), "wake", (w, w.incarnation, "stopped", stop))
        elif start:
            w.changing = True
            self._push(self.now + self.rng.randint(*self.config.start_stop_ms), "wake", (w, w.incarnation, "started", None))

    def _wake(self, w: SimWorker, tag: str, arg: Any) -> None:
        if tag == "heartbeat":
            if arg == w.heartbeat_token and not w.leaving:
                self._heartbeat(w)
        elif tag == "stopped":
            w.changing = False
            gone = w.running & arg
            if gone:
                w.running = w.running - gone
                self.settled_at_ms = self.now
                self._member_event("partitions_revoked", w, units=gone)
            if w.leaving:
                self._stop_all(w)
                return
            self._heartbeat(w)
            self._reconcile(w)
        elif tag == "started":
            w.changing = False
            if w.leaving:
                self._stop_all(w)
                return
            new = w.assigned - w.running
            if new:
                self._check_free(w, new)
                w.running = w.running | new
                self.settled_at_ms = self.now
                self._member_event("partitions_assigned", w, units=new)
                self._heartbeat(w)
            self._reconcile(w)
        elif tag == "compute":
            self._push(self.now + self._net(), "deliver",
                       (w, w.incarnation, "prepare", ConnectGroupPrepareAssignmentRequest(self.group_id, w.member_id, w.epoch)))
        elif tag == "delay":
            if w.assignor.held and w.assignor.deadline_ms is not None and self.now >= w.assignor.deadline_ms:
                w.reason, w.send_assignors = REASON_SCHEDULED_REBALANCE, True
                self.stats["scheduled_rebalances"] += 1
                self._heartbeat(w)

    def _on_prepared(self, w: SimWorker, res: ConnectGroupPrepareAssignmentResponse) -> None:
        if res.error_code:
            # Another epoch of this worker's overtook the request: the coordinator asks again later.
            self.stats["prepare_refused"] += 1
            return
        targets = w.assignor.assign(res, self.units, self.now)
        members = [InstalledWorker(m, ConnectorsAndTasks.of(a), version=SESSIONED) for m, a in sorted(targets.items())]
        req = ConnectGroupInstallAssignmentRequest(self.group_id, w.member_id, w.epoch, res.group_epoch, 0, members)
        self._push(self.now + self._net(), "deliver", (w, w.incarnation, "install", req))

    def _on_installed(self, w: SimWorker, error: int, message: str | None) -> None:
        if error == Errors.INVALID_ASSIGNMENT:
            self._fail(f"the assignor of {w.member_id} installed an invalid assignment: {message}")
        if error:
            self.stats["install_refused"] += 1
            return
        if w.reason != REASON_NONE:
            w.reason, w.send_assignors = REASON_NONE, True
        if w.assignor.deadline_ms is not None:
            self._push(w.assignor.deadline_ms, "wake", (w, w.incarnation, "delay", None))
        self._heartbeat(w)

    def _stop_all(self, w: SimWorker) -> None:
        """A worker shutting down cleanly: stop what it runs, then leave the group."""
        if w.running:
            w.changing = True
            self._push(self.now + self.rng.randint(*self.config.start_stop_ms), "wake",
                       (w, w.incarnation, "stopped", w.running))
        else:
            self._leave(w)

    def _leave(self, w: SimWorker) -> None:
        self._member_event("member_left", w, reason="shutdown")
        w.alive = False
        req = ConnectGroupHeartbeatRequest(self.group_id, w.member_id, -1)
        self._push(self.now + self._net(), "deliver", (w, w.incarnation, "leave", req))

    # -- scenario ------------------------------------------------------------------------------------

    def _plan(self) -> None:
        cfg = self.config
        for slot in range(cfg.workers):
            self._push(self.rng.randint(0, 500), "action", ("start", slot))
        t = 15_000
        if cfg.scenario == "rolling-restart":
            for slot in range(cfg.workers):
                self._push(t, "action", ("stop", slot))
                t += self.rng.randint(*cfg.restart_gap_ms)
                self._push(t, "action", ("start", slot))
                t += self.rng.randint(*cfg.restart_pace_ms)
        else:
            for _ in range(cfg.kills):
                slot = self.rng.randrange(cfg.workers)
                self._push(t, "action", ("kill", slot))
                self._push(t + self.rng.randint(*cfg.crash_restart_ms), "action", ("start", slot))
                t += self.rng.randint(*cfg.crash_spacing_ms)
        self._last_actions_at = t

    def _act(self, action: str, slot: int) -> None:
        if action == "start":
            self._start_worker(slot)
            return
        w = next((w for w in self._live() if w.slot == slot), None)
        if w is None:
            return
        if not self._recording:
            self._fail("the group did not run everything before the first disturbance (the warm-up is too short)")
        self._disturbance("rolling-restart" if action == "stop" else "crash")
        if action == "stop":
            # A clean stop: every connector and task stopped, then the leave.
            w.leaving = True
            if not w.changing:
                self._stop_all(w)
        else:
            self.stats["crashes"] += 1
            self._member_event("member_left", w, reason="crash")
            if w.running:
                self.settled_at_ms = self.now
            w.alive, w.running = False, NOTHING

    def _disturbance(self, kind: str) -> None:
        if self.first_disturbance_ms < 0:
            self.first_disturbance_ms = self.now
        self._emit(ev.Disturbance(kind=kind, **self._common()))

    # -- the invariant -------------------------------------------------------------------------------

    def _check_free(self, w: SimWorker, new: ConnectAssignment) -> None:
        for other in self._live():
            if other is not w and not other.running.isdisjoint(new):
                both = sorted(unit_tps(other.running & new))
                self._fail(f"{w.member_id} starts {both} which {other.member_id} still runs")

    def _check(self) -> None:
        connectors: dict[str, str] = {}
        tasks: dict[TaskId, str] = {}
        for w in self._live():
            for c in w.running.connectors:
                if c in connectors:
                    self._fail(f"connector {c} runs on {connectors[c]} and {w.member_id}")
                connectors[c] = w.member_id
            for t in w.running.tasks:
                if t in tasks:
                    self._fail(f"task {t[0]}-{t[1]} runs on {tasks[t]} and {w.member_id}")
                tasks[t] = w.member_id

    # -- the loop ------------------------------------------------------------------------------------

    def run(self, max_steps: int = 2_000_000) -> ConnectSimReport:
        cfg = self.config
        self._plan()
        # Long enough for a crash's units to wait for the session timeout and the whole delay.
        horizon = self._last_actions_at + cfg.session_timeout_ms + cfg.scheduled_delay_ms + 4 * cfg.heartbeat_interval_ms + 60_000
        while self._queue:
            at, _, kind, payload = heapq.heappop(self._queue)
            if at > horizon:
                break
            self.now = at
            self.step += 1
            if self.step > max_steps:
                self._fail("too many steps")
            self._dispatch(kind, payload)
            self._check()
            if self.now >= self._last_actions_at and self._stable and self._recording:
                break
        if not (self._stable and self._all_running()):
            g = self.coord.group(self.group_id)
            self._fail(f"the group did not settle by {self.now} ms: state "
                       f"{g.state().value if g else 'none'}, running {sorted(unit_tps(self._running()))[:5]}...")
        return ConnectSimReport(
            cfg.seed, cfg.scenario, self.step, self.now, self.events, self.stats["workers_started"],
            self.first_disturbance_ms, self.settled_at_ms, dict(self.stats),
        )

    def _running(self) -> ConnectAssignment:
        out = NOTHING
        for w in self._live():
            out = out | w.running
        return out

    def _dispatch(self, kind: str, payload: Any) -> None:
        if kind == "action":
            action, slot = payload
            if self.trace:
                self.trace(f"{self.now} action {action} {slot}")
            self._act(action, slot)
            return
        if kind == "timer":
            key, deadline = payload
            if self._timers.get(key) != deadline:
                return
            del self._timers[key]
            g = self.coord.group(self.group_id)
            before = set(g.workers) if g else set()
            outcome = self.coord.on_timer(key, self.now)
            self._apply(outcome)
            after = set(g.workers) if g else set()
            for mid in sorted(before - after):
                self.stats[f"timer_{key[0]}"] += 1
                self._emit(ev.TimerExpired(kind=key[0].removeprefix("connect-"), member=mid, **self._common()))
                w = next((w for w in self.workers if w.member_id == mid), None)
                if w is not None:
                    if w.alive:
                        self._fail(f"{mid} was removed by its {key[0]} timer while alive")
                    self._emit(ev.MemberFenced(member=mid, reason=key[0].removeprefix("connect-"), **self._common()))
            self._observe()
            return
        w, incarnation, tag, arg = payload
        if kind == "wake":
            if w.alive and w.incarnation == incarnation:
                self._wake(w, tag, arg)
                self._observe()
            return
        if kind == "deliver":
            if tag == "heartbeat" or tag == "leave":
                if tag == "heartbeat" and not (w.alive and w.incarnation == incarnation):
                    return  # a request of a dead worker's never left it
                hb = self.coord.connect_group_heartbeat(arg, self.now)
                self._apply(hb)
                self._observe()
                if tag == "heartbeat":
                    self._push(self.now + self._net(), "response", (w, incarnation, tag, hb.response))
            elif tag == "prepare":
                res = self.coord.prepare_assignment(arg, self.now)
                self._push(self.now + self._net(), "response", (w, incarnation, tag, res.response))
            elif tag == "install":
                inst = self.coord.install_assignment(arg, self.now)
                self._apply(inst)
                self._observe()
                self._push(self.now + self._net(), "response", (w, incarnation, tag, inst.response))
            return
        # A response: dropped when its worker died or was fenced meanwhile.
        if not (w.alive and w.incarnation == incarnation):
            return
        if tag == "heartbeat":
            self._on_heartbeat(w, arg)
        elif tag == "prepare":
            self._on_prepared(w, arg)
        elif tag == "install":
            self._on_installed(w, arg.error_code, arg.error_message)
        self._observe()


def run_connect_seed(seed: int, scenario: str = "rolling-restart", sink: EventSink | None = None, **kw: Any) -> ConnectSimReport:
    """One seeded run (a failing seed is reproduced from its number)."""
    return ConnectSimulation(ConnectSimConfig(seed=seed, scenario=scenario, **kw), sink=sink).run()
