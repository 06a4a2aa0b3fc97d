"""Seeded deterministic simulation of a connect group: Kafka Connect-like workers on the new protocol
talking to the sans-I/O connect coordinator (coordinator/connect, docs/connect.md).

Everything comes from one seed through ``random.Random(seed)``; time is virtual (ms) and moves only
through an event queue (request deliveries, responses, worker wake-ups, the coordinator's timers,
scenario actions), so a failing seed replays from its number: ``run_connect_seed(417, "crashes")``.

The workers (rehearsal/sim_connect_worker.py) join with ConnectGroupHeartbeat, compute and install
targets when the coordinator asks, stop what their assignment no longer names before starting what it
adds, and hold back the units of a vanished worker for the scheduled rebalance delay. Their settings are
rehearsal/sim_connect_config.py; their shared state, event log and invariant rehearsal/sim_connect_base.py.
This module holds the scenarios and the loop.

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
from dataclasses import dataclass
from typing import Any

from coordinator.connect.model import NOTHING, ConnectAssignment
from rehearsal import events as ev
from rehearsal.sim_connect_config import ConnectSimConfig, unit_tps
from rehearsal.sim_connect_worker import ConnectWorkers
from rehearsal.sim_events import EventSink


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


class ConnectSimulation(ConnectWorkers):
    """One connect group's seeded run: ``ConnectSimulation(config, sink=..., group_id=..., run_id=...).run()``."""

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
