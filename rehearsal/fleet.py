"""Fleet rehearsals: many independent single-group simulations writing rebalance events.

A fleet is described by a ``FleetSpec`` (rehearsal/fleet_spec.py): groups, members per group, topics and partitions, the client mix,
heartbeat and processing delays, and a named scenario. Group ``i`` is one run of the deterministic
simulator (rehearsal/simulate.py) seeded with ``group_seed(seed, i)``, so any group of a fleet is
reproduced from the fleet's seed and its index alone, whatever the fleet size or the number of
Spark tasks.

Client mixes (the ``client_mix`` every event carries, docs/rehearsal-events.md):
``classic-eager`` and ``classic-cooperative`` are classic clients in a classic group (``native``
mode); ``translate`` is classic clients in a group the gateway runs as a consumer group (KIP-848
"Upgrade and Downgrade"); ``consumer`` is new-protocol clients. ``mix="all"`` gives group ``i`` the
variant ``i % 4`` so one run compares the four side by side.

Scenarios: ``rolling-upgrade`` replaces the members one at a time by new-protocol members (the
``consumer`` variant, already on the new protocol, gets a rolling restart: the same deployment with
nothing to convert); ``rolling-downgrade`` is the way back (classic variants start as new-protocol
members and become classic eager / cooperative / translated ones); ``crashes``, ``scale-up``,
``scale-down`` and ``topic-growth`` disturb a settled fleet of the variant. Every scenario action
writes a ``disturbance`` event, which starts the time to stable.

Events go to ``DIR/events/part-NNNNN.jsonl``, ``groups_per_file`` consecutive groups per file, each
file written by one writer, so the files are the same whether the groups ran serially or in Spark
tasks (``simulate_fleet_spark``). ``DIR/_fleet.json`` holds the spec and each group's outcome (the
report skips names starting with ``_``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rehearsal.events import EventWriter
from rehearsal.fleet_settings import (
    ClientModel,
)
from rehearsal.fleet_spec import (
    DEFAULT_PROCESSING_MS,
    FleetSpec,
    apply_gateway,
    fleet_warnings,
    sim_config,
    simulation_settings,
)
from rehearsal.sim_clients import (
    CLASSIC_HEARTBEAT_INTERVAL_MS,
    ClassicClient,
    SimClient,
)
from rehearsal.sim_config import ROLL_GAP_MS, ROLL_RESTART_MS
from rehearsal.sim_connect import ConnectSimulation
from rehearsal.sim_endpoint import EndpointConfig, ServiceEndpoint
from rehearsal.sim_events import EventSink
from rehearsal.simulate import Simulation, SimulationViolation

EVENTS_DIR = "events"
MANIFEST = "_fleet.json"


class FleetSimulation(Simulation):
    """The simulator with the fleet's delays, a disturbance event per scenario action, and rolling
    restarts (new-protocol members replaced by new-protocol members) for the consumer variant."""

    def __init__(self, spec: FleetSpec, index: int, sink: EventSink | None) -> None:
        self.spec = spec
        self.rolling_restart = spec.group_mix(index) == "consumer" and spec.scenario.startswith("rolling")
        self.quiet_at = 0
        self.models = spec.client_models()
        heartbeat = spec.heartbeat_interval_ms
        gateway = spec.gateway

        def endpoint(config: EndpointConfig, seed: int) -> ServiceEndpoint:
            config.heartbeat_interval_ms = heartbeat
            if gateway is not None:
                apply_gateway(config, gateway, heartbeat)
            return ServiceEndpoint(config, seed)

        super().__init__(
            sim_config(spec, index), sink=sink, endpoint_factory=endpoint,
            group_id=spec.group_name(index), run_id=spec.run_id,
        )

    def model(self, slot: int) -> ClientModel | None:
        return None if self.models is None else self.models[slot % len(self.models)]

    def new_client(self, protocol: str, slot: int, member_id: str | None = None) -> SimClient:
        model = self.model(slot)
        if model is not None:
            # Each member runs its own client's models (the Host picks the class when it starts one).
            self.classic_client, self.consumer_client = model.classic, model.consumer
        return super().new_client(protocol, slot, member_id)

    def processing_delay(self, client: SimClient) -> int:
        model = self.model(client.slot)
        if client.slot in self._slow:
            lo, hi = self.spec.slow_processing_ms
        elif self.spec.processing_ms is not None or model is None:
            lo, hi = self.spec.processing_ms or DEFAULT_PROCESSING_MS
        elif model.straggler_share and self.rng.random() < model.straggler_share:
            lo, hi = model.straggler_ms
        else:
            lo, hi = model.processing_ms
        return self.rng.randint(lo, hi)

    def call_later(self, client: SimClient, delay_ms: int, tag: str) -> None:
        # The classic client's background heartbeat thread runs at the fleet's interval.
        if tag.startswith("heartbeat:") and isinstance(client, ClassicClient) and delay_ms == CLASSIC_HEARTBEAT_INTERVAL_MS:
            delay_ms = self.spec.heartbeat_interval_ms
        super().call_later(client, delay_ms, tag)

    def _plan(self) -> None:
        super()._plan()
        if self.rolling_restart:
            # The same pacing as the simulator's rolling upgrade, restarting each member on its protocol.
            t = self.config.roll_first_ms
            for _ in range(self.config.members):
                t += self.rng.randint(*ROLL_GAP_MS)
                self._push(t, "action", ("restart", None))
            self.quiet_at = max(self.config.active_ms, t + 2_000)
            self._push(self.quiet_at, "action", ("quiet", None))

    def _act(self, action: str, arg: Any) -> None:
        if action == "start":
            model = self.model(arg[1])
            if model is not None and model.start_ms > 0:
                # The member's process starts now; the group hears from it once the client is up.
                self._push(self.now + model.start_ms, "action", ("started", arg))
                return
        elif action == "started":
            action = "start"
        if action == "quiet" and self.now < self.quiet_at:
            return  # the simulator's own end of the faulty phase, before the rolling restart is done
        if action == "restart":
            self._restart()
            return
        kind = {"crash": "crash", "scale-out": "scale-up", "scale-in": "scale-down", "add-partitions": "topic-growth"}
        if action in kind:
            self.disturbance(kind[action])
        super()._act(action, arg)

    def _restart(self) -> None:
        alive = [c for c in self.clients if c.alive]
        if not alive:
            return
        old = self.rng.choice(alive)
        self.disturbance("rolling-restart")
        graceful = self.rng.random() < self.config.graceful_share
        self._stop(old, graceful)
        restart = self.now + self.rng.randint(*ROLL_RESTART_MS)
        self.roll_steps.append((self.now, old.slot, graceful, restart))
        self._push(restart, "action", ("start", (old.protocol, old.slot, None)))


@dataclass(slots=True)
class GroupOutcome:
    index: int
    group: str
    client_mix: str
    seed: int
    events: int = 0
    steps: int = 0
    virtual_ms: int = 0
    # Convergence: the last ownership change, and its distance from the first disturbance (-1: unknown).
    settled_ms: int = -1
    time_to_stable_ms: int = -1
    members_started: int = 0
    # The simulator's invariant that broke (the events up to it are written), or None.
    violation: str | None = None
    stats: dict[str, int] = field(default_factory=dict)
    roll_steps: list[tuple[int, int, bool, int]] = field(default_factory=list)


def _played(out: GroupOutcome, run: Callable[[], Any]) -> GroupOutcome:
    """Run a group's simulation into ``out``: its settled time, stats and time to stable (from its first
    disturbance), or the invariant that broke."""
    try:
        report = run()
    except SimulationViolation as violation:
        out.violation = str(violation)
    else:
        out.settled_ms, out.stats = report.settled_at_ms, report.stats
        out.time_to_stable_ms = max(report.settled_at_ms - max(report.first_disturbance_ms, 0), 0)
    return out


def run_connect_group(spec: FleetSpec, index: int, sink: EventSink | None) -> GroupOutcome:
    """Simulate connect group ``index`` (rehearsal/sim_connect.py), as ``run_group`` does a consumer group."""
    sim = ConnectSimulation(spec.connect_config(index), sink=sink, group_id=spec.group_name(index), run_id=spec.run_id)
    out = _played(GroupOutcome(index, sim.group_id, "connect", sim.config.seed), sim.run)
    out.events, out.steps, out.virtual_ms = sim.events, sim.step, sim.now
    out.members_started = sim.stats["workers_started"]
    return out


def run_group(spec: FleetSpec, index: int, sink: EventSink | None) -> GroupOutcome:
    """Simulate group ``index``; an invariant violation ends that group only and is reported."""
    if spec.group_type == "connect":
        return run_connect_group(spec, index, sink)
    sim = FleetSimulation(spec, index, sink)
    out = _played(GroupOutcome(index, sim.group_id, spec.group_mix(index), sim.config.seed), sim.run)
    out.events = sim.emitter.count if sim.emitter is not None else 0
    out.steps, out.virtual_ms, out.members_started = sim.step, sim.now, len(sim.clients)
    out.roll_steps = list(sim.roll_steps)
    return out


def part_path(out: str | os.PathLike[str], part: int) -> Path:
    return Path(out, EVENTS_DIR, f"part-{part:05d}.jsonl")


def simulate_part(spec: FleetSpec, part: int, out: str | os.PathLike[str]) -> list[GroupOutcome]:
    """Simulate the groups of one events file and write it (replacing an older one)."""
    path = part_path(out, part)
    path.unlink(missing_ok=True)
    first = part * spec.groups_per_file
    with EventWriter(path) as writer:

        def sink(event: Any) -> None:
            writer.write(event)

        return [run_group(spec, i, sink) for i in range(first, min(first + spec.groups_per_file, spec.groups))]


def prepare_out(out: str | os.PathLike[str]) -> None:
    """Make DIR/events and drop the part files of an earlier run (a smaller fleet leaves fewer)."""
    events = Path(out, EVENTS_DIR)
    events.mkdir(parents=True, exist_ok=True)
    for old in events.glob("part-*.jsonl"):
        old.unlink()


@dataclass(slots=True)
class FleetResult:
    spec: FleetSpec
    outcomes: list[GroupOutcome]
    wall_s: float

    @property
    def events(self) -> int:
        return sum(o.events for o in self.outcomes)

    @property
    def violations(self) -> list[GroupOutcome]:
        return [o for o in self.outcomes if o.violation is not None]

    @property
    def member_seconds(self) -> float:
        """Simulated member-seconds: the fleet's members times each group's simulated time."""
        return sum(self.spec.members * o.virtual_ms for o in self.outcomes) / 1_000

    def manifest(self) -> dict[str, Any]:
        by_mix: dict[str, dict[str, int]] = {}
        for o in self.outcomes:
            m = by_mix.setdefault(o.client_mix, {"groups": 0, "events": 0, "violations": 0})
            m["groups"] += 1
            m["events"] += o.events
            m["violations"] += o.violation is not None
        return {
            "spec": self.spec.manifest_spec(),
            "run": self.spec.run_id,
            "settings": simulation_settings(self.spec),
            "warnings": fleet_warnings(self.spec),
            "groups": len(self.outcomes),
            "events": self.events,
            "simulated_member_seconds": self.member_seconds,
            "client_mixes": by_mix,
            "outcomes": [
                {"group": o.group, "client_mix": o.client_mix, "seed": o.seed, "events": o.events, "steps": o.steps,
                 "virtual_ms": o.virtual_ms, "settled_ms": o.settled_ms, "time_to_stable_ms": o.time_to_stable_ms,
                 "violation": o.violation}
                for o in self.outcomes
            ],
        }


class Progress:
    """A line every few seconds on long runs: groups done, events, rate."""

    def __init__(self, total: int, echo: Callable[[str], None], every_s: float = 5.0) -> None:
        self.total, self.echo, self.every_s = total, echo, every_s
        self.started = self.last = time.monotonic()
        self.done = self.events = 0

    def add(self, outcomes: Iterable[GroupOutcome]) -> None:
        for o in outcomes:
            self.done += 1
            self.events += o.events
        now = time.monotonic()
        if now - self.last >= self.every_s and self.done < self.total:
            self.last = now
            rate = self.done / max(now - self.started, 1e-9)
            self.echo(f"  {self.done}/{self.total} groups, {self.events} events, {rate:.1f} groups/s")


def iter_parts(spec: FleetSpec, out: str | os.PathLike[str]) -> Iterator[list[GroupOutcome]]:
    for part in range(spec.files):
        yield simulate_part(spec, part, out)


def simulate_fleet(
    spec: FleetSpec, out: str | os.PathLike[str], *, echo: Callable[[str], None] = print
) -> FleetResult:
    """Run the fleet in this process, writing DIR/events/part-*.jsonl and DIR/_fleet.json."""
    started = time.monotonic()
    prepare_out(out)
    progress = Progress(spec.groups, echo)
    outcomes: list[GroupOutcome] = []
    for part in iter_parts(spec, out):
        outcomes += part
        progress.add(part)
    return finish(spec, outcomes, out, time.monotonic() - started)


def finish(spec: FleetSpec, outcomes: list[GroupOutcome], out: str | os.PathLike[str], wall_s: float) -> FleetResult:
    result = FleetResult(spec, sorted(outcomes, key=lambda o: o.index), wall_s)
    Path(out, MANIFEST).write_text(json.dumps(result.manifest(), indent=1) + "\n", encoding="utf-8")
    return result


def _spark_part_task(spec_json: str, out: str) -> Callable[[Iterable[int]], Iterator[dict[str, Any]]]:
    """What a Spark task runs: simulate its parts (events files) and return their outcomes as dicts."""

    def task(parts: Iterable[int]) -> Iterator[dict[str, Any]]:
        from dataclasses import asdict

        from rehearsal.fleet import simulate_part
        from rehearsal.fleet_spec import FleetSpec

        spec = FleetSpec.model_validate_json(spec_json)
        for part in parts:
            for outcome in simulate_part(spec, part, out):
                yield asdict(outcome)

    return task


def simulate_fleet_spark(
    spec: FleetSpec,
    out: str | os.PathLike[str],
    master: str | None = None,
    *,
    echo: Callable[[str], None] = print,
) -> FleetResult:
    """Run the fleet's groups in Spark tasks: one task per events file (``groups_per_file`` groups),
    each writing its file under DIR/events. DIR must be a path every executor can write to (local
    masters; a shared file system on a cluster). The files equal those of ``simulate_fleet``."""
    import sys
    import threading

    from rehearsal.pipeline import spark_session

    started = time.monotonic()
    out_abs = os.path.abspath(out)
    prepare_out(out_abs)
    local = (master or "local[*]").startswith("local")
    if local:
        # Python workers must import this project and its dependencies: use this interpreter.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = spark_session(master)
    sc = spark.sparkContext
    if local and (sc.master or "").startswith("local"):
        sc.pythonExec = os.environ.get("PYSPARK_PYTHON", sys.executable)
    parts = spec.files
    echo(f"  {spec.groups} groups in {parts} Spark tasks on {sc.master}")
    group = f"groupgate-fleet-{spec.run_id}-{os.getpid()}-{time.monotonic_ns()}"
    sc.setJobGroup(group, "fleet simulation")
    done = threading.Event()

    def watch() -> None:
        # Tasks finish out of order; the status tracker tells how many parts (files) are written.
        tracker = sc.statusTracker()
        last = time.monotonic()
        while not done.wait(1.0):
            if time.monotonic() - last < 5.0:
                continue
            last = time.monotonic()
            finished = 0
            for job in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job)
                for stage in info.stageIds if info else ():
                    s = tracker.getStageInfo(stage)
                    finished += s.numCompletedTasks if s else 0
            echo(f"  {finished}/{parts} parts written ({min(finished * spec.groups_per_file, spec.groups)} groups)")

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        rows = sc.parallelize(range(parts), numSlices=parts).mapPartitions(
            _spark_part_task(spec.model_dump_json(), out_abs)
        ).collect()
    finally:
        done.set()
        watcher.join()
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    return finish(spec, [GroupOutcome(**r) for r in rows], out_abs, time.monotonic() - started)
