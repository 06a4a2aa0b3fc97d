"""Random traffic against the connect group: workers join, heartbeat, crash, leave and compute
assignments; after every step no connector or task runs on two workers, the records replay to the
same state (through their bytes at the end), and once traffic stops the group settles with every unit running exactly once."""

from __future__ import annotations

import random

import pytest
from connect_helpers import ICA, Driver, G

from coordinator.connect.messages import (
    ConnectGroupHeartbeatRequest,
    ConnectGroupInstallAssignmentRequest,
    ConnectGroupPrepareAssignmentRequest,
    ConnectorsAndTasks,
    InstalledWorker,
)
from coordinator.connect.model import ConnectAssignment, ConnectGroupState
from coordinator.connect.service import session_key
from coordinator.errors import Errors

UNITS = ConnectAssignment(frozenset("ABC"), frozenset((c, n) for c in "ABC" for n in range(1, 4)))


class Worker:
    """A worker as the draft describes it: runs what it was given, stops what was taken away."""

    def __init__(self, mid: str) -> None:
        self.mid = mid
        self.epoch = 0
        self.runs = ConnectAssignment()
        self.compute = False


def _round_robin(members: list[str]) -> list[InstalledWorker]:
    units = [("c", c) for c in sorted(UNITS.connectors)] + [("t", t) for t in sorted(UNITS.tasks)]
    per: dict[str, list[tuple[str, object]]] = {m: [] for m in members}
    for i, u in enumerate(units):
        per[members[i % len(members)]].append(u)
    return [
        InstalledWorker(
            m,
            ConnectorsAndTasks([c for k, c in us if k == "c"], [t for k, t in us if k == "t"]),  # type: ignore[misc]
        )
        for m, us in per.items()
    ]


class Sim:
    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)
        self.d = Driver()
        self.workers: dict[str, Worker] = {}
        self.n = 0
        self.answers = 0  # heartbeat answers that carried an assignment

    def heartbeat(self, w: Worker) -> None:
        d = self.d
        if w.epoch == 0:
            req = ConnectGroupHeartbeatRequest(
                G, w.mid, 0, rebalance_timeout_ms=60_000, client_assignors=[ICA], worker_url="http://x",
                owned=ConnectorsAndTasks(),
            )
            w.runs = ConnectAssignment()
        else:
            req = ConnectGroupHeartbeatRequest(G, w.mid, w.epoch, owned=ConnectorsAndTasks.of(w.runs))
        r = d.keep(d.coord.connect_group_heartbeat(req, d.now)).response
        if r.error_code in (Errors.FENCED_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID):
            w.runs, w.epoch = ConnectAssignment(), 0  # abandon everything, rejoin
            return
        assert r.error_code in (0, Errors.COMPUTE_ASSIGNMENT), r.error_message
        previous_epoch = w.epoch
        w.epoch = r.member_epoch
        if r.assignment is not None:
            new = r.assignment.assigned.assignment()
            if previous_epoch > 0:
                # An answer revokes or assigns, never both (the draft's "Response Handling").
                assert not (w.runs - new) or not (new - w.runs), (w.runs, new)
            w.runs = new
            self.answers += 1
        w.compute = w.compute or r.error_code == Errors.COMPUTE_ASSIGNMENT

    def compute(self, w: Worker) -> None:
        d = self.d
        p = d.keep(d.coord.prepare_assignment(ConnectGroupPrepareAssignmentRequest(G, w.mid, w.epoch), d.now)).response
        w.compute = False
        if p.error_code:
            return
        members = sorted(m.member_id for m in p.members)
        req = ConnectGroupInstallAssignmentRequest(G, w.mid, w.epoch, p.group_epoch, 0, _round_robin(members))
        assert d.keep(d.coord.install_assignment(req, d.now)).response.error_code == 0

    def step(self) -> None:
        d = self.d
        d.now += self.rnd.randint(0, 500)
        roll = self.rnd.random()
        if roll < 0.1 and len(self.workers) < 5:
            self.n += 1
            w = self.workers[f"W{self.n}"] = Worker(f"W{self.n}")
            self.heartbeat(w)
        elif roll < 0.15 and self.workers:
            w = self.workers.pop(self.rnd.choice(sorted(self.workers)))
            w.runs = ConnectAssignment()  # stops everything, then leaves
            if w.epoch > 0 or w.mid in d.group().workers:
                d.keep(d.coord.connect_group_heartbeat(ConnectGroupHeartbeatRequest(G, w.mid, -1), d.now))
        elif roll < 0.18 and self.workers:
            w = self.workers.pop(self.rnd.choice(sorted(self.workers)))
            w.runs = ConnectAssignment()  # crashed: its session expires
            d.keep(d.coord.on_timer(session_key(G, w.mid), d.now))
        elif self.workers:
            w = self.workers[self.rnd.choice(sorted(self.workers))]
            if w.compute and self.rnd.random() < 0.7:
                self.compute(w)
            else:
                self.heartbeat(w)
        self.check()

    def check(self) -> None:
        seen_c: set[str] = set()
        seen_t: set[tuple[str, int]] = set()
        for w in self.workers.values():
            assert seen_c.isdisjoint(w.runs.connectors) and seen_t.isdisjoint(w.runs.tasks)
            seen_c |= w.runs.connectors
            seen_t |= w.runs.tasks
        self.d.assert_replays(through_bytes=False)


@pytest.mark.parametrize("seed", range(12))
def test_random_traffic_never_runs_a_unit_twice_and_settles(seed: int) -> None:
    sim = Sim(seed)
    for _ in range(300):
        sim.step()
    if not sim.workers:
        sim.n += 1
        sim.workers[f"W{sim.n}"] = Worker(f"W{sim.n}")
    for _ in range(30):  # quiet: everyone heartbeats and the chosen worker computes
        for w in list(sim.workers.values()):
            if w.compute:
                sim.compute(w)
            sim.heartbeat(w)
            sim.check()
    g = sim.d.group()
    assert g.state() is ConnectGroupState.STABLE
    running = ConnectAssignment()
    for w in sim.workers.values():
        running = running | w.runs
    assert running == UNITS
    sim.d.assert_replays()  # and through the records' bytes
    assert sim.answers > 10  # the traffic did move assignments around
