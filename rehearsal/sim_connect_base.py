"""What the parts of the connect simulation share (rehearsal/sim_connect.py): each simulated worker's state,
the virtual clock and its event queue, the events written once the warm-up is over, the coordinator's
timers and the group-level events after each call, and the invariant checked after every step. The
workers' behaviour builds on it (rehearsal/sim_connect_worker.py), the scenario and the loop on that."""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator.connect.messages import AssignorSpec
from coordinator.connect.model import (
    NOTHING,
    REASON_NONE,
    SESSIONED,
    ConnectAssignment,
    ConnectGroupState,
    TaskId,
)
from coordinator.connect.service import ConnectConfig, ConnectGroupCoordinator
from coordinator.connect.worker_assignor import ConnectAssignor
from coordinator.timers import ScheduleTimer, TimerKey, apply_timer_changes
from rehearsal import events as ev
from rehearsal.sim_connect_config import (
    ASSIGNOR,
    GROUP_ID,
    ConnectSimConfig,
    all_units,
    connector_names,
    unit_tps,
)
from rehearsal.sim_events import EventSink
from rehearsal.simulate import SimulationViolation


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


@dataclass
class ConnectSimBase:
    """The state of one connect group's run and what every part of it does with that state."""

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

    def _live(self) -> list[SimWorker]:
        return [w for w in self.workers if w.alive]

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
