"""Seeded deterministic simulation of one group's members talking to the sans-I/O group entry point.

Everything is derived from one integer seed through ``random.Random(seed)``: the scenario, the group
size, the topics, the faults and every delay. Time is virtual (ms) and advances only through an event
queue (request deliveries, responses, client wake-ups, the coordinator's timers, scenario actions),
so a failing seed replays exactly from its number: ``run_seed(417)``.

The run's parameters come from rehearsal/sim_config.py; clients (rehearsal/sim_clients.py and
sim_consumer_client.py) model the classic eager and cooperative consumers and the new-protocol consumer. Faults: crashes (a member
stops; its session expires), lost responses (the request was applied, the answer dropped; the
client retries), slow members (long revocation / reconciliation callbacks), partitions added to a
topic, scale-out / scale-in, gateway failover (a service rebuilt from the records), and rolling
upgrades / downgrades, with dynamic or static (KIP-345) members.

After every step the checker asserts (``SimulationViolation`` names the seed and the step):
- no partition is owned by two live clients at once (what each believes after its last response);
- assignments told to a member for one generation / epoch are consistent (see docs/simulation.md);
- at checkpoints and at the end, a replay of every emitted record rebuilds the live state;
- once faults stop and the group is quiet, every subscribed partition is owned by one member.
"""

from __future__ import annotations

import heapq
import itertools
import random
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coordinator.messages import ConsumerGroupHeartbeatResponse
from coordinator.timers import ScheduleTimer, TimerKey, apply_timer_changes
from rehearsal.sim_assignors import COOPERATIVE_ASSIGNOR, TopicPartition
from rehearsal.sim_clients import (
    ClassicClient,
    SimClient,
    make_topic_ids,
)
from rehearsal.sim_config import (
    ROLL_GAP_MS,
    ROLL_RESTART_MS,
    SCENARIOS,
    START_SPREAD_MS,
    SimConfig,
    available_scenarios,
    scenario_config,
)
from rehearsal.sim_consumer_client import ConsumerClient
from rehearsal.sim_endpoint import AnyRecord, EndpointConfig, ServiceEndpoint, classic_group_settled
from rehearsal.sim_events import EventSink, SimEventEmitter
from translate.classic_messages import SyncGroupResponse
from translate.embedded import decode_assignment

GROUP_ID = "sim-group"

class SimulationViolation(AssertionError):
    """An invariant broke; the message starts with the seed and step that reproduce it."""


@dataclass(slots=True)
class SimReport:
    seed: int
    scenario: str
    steps: int
    virtual_ms: int
    # When the quiet-phase check found the group converged: the simulation's own horizon (no earlier
    # than the end of its faulty phase), not a result.
    converged_at_ms: int
    records: int
    members_started: int
    events: int = 0
    # Convergence: the last moment a client's ownership changed (an acknowledged assignment or revocation,
    # or a crash dropping what it owned), and the first disturbance (-1: none); after ``settled_at_ms``
    # every member held its final assignment.
    settled_at_ms: int = 0
    first_disturbance_ms: int = -1
    # What happened: lost responses, crashes, coordinator timers that fired (by kind), fences, ...
    stats: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Pending:
    client: SimClient
    incarnation: int
    kind: str
    request: Any


@dataclass(slots=True)
class _Told:
    assignment: frozenset[TopicPartition]
    shrunk: bool = False


@dataclass
class Simulation:
    config: SimConfig
    sink: EventSink | None = None
    endpoint_factory: Callable[[EndpointConfig, int], ServiceEndpoint] = ServiceEndpoint
    # Tests swap client models (e.g. a broken one) through these.
    classic_client: type[ClassicClient] = ClassicClient
    consumer_client: type[ConsumerClient] = ConsumerClient

    now: int = 0
    step: int = 0
    rng: random.Random = field(init=False)
    group_id: str = GROUP_ID
    # The rehearsal id events carry (default sim-<seed>); a fleet simulator sets its own.
    run_id: str | None = None
    partitions: dict[str, int] = field(init=False)
    topic_ids: dict[str, uuid.UUID] = field(init=False)
    topic_names: dict[uuid.UUID, str] = field(init=False)
    clients: list[SimClient] = field(default_factory=list)
    records: list[AnyRecord] = field(default_factory=list)
    _queue: list[tuple[int, int, str, Any]] = field(default_factory=list)
    _seq: Any = field(default_factory=itertools.count)
    _keys: Any = field(default_factory=itertools.count)
    _pending: dict[Any, _Pending] = field(default_factory=dict)
    _timers: dict[TimerKey, int] = field(default_factory=dict)
    _told: dict[tuple[str, int], _Told] = field(default_factory=dict)
    _slow: set[int] = field(default_factory=set)
    _slots: int = 0
    _faults_on: bool = True
    _replayed: int = 0
    _answered: set[Any] = field(default_factory=set)
    _incarnation: int = 0
    _names: Any = field(default_factory=itertools.count)
    # The last ownership change and the first disturbance (see SimReport).
    settled_at_ms: int = 0
    first_disturbance_ms: int = -1
    stats: Counter[str] = field(default_factory=Counter)
    # A roll's steps as played: (stop ms, slot, graceful, successor's start ms): a real roll can play the same.
    roll_steps: list[tuple[int, int, bool, int]] = field(default_factory=list)
    # Optional: called with one line per step (what was delivered / fired / done), for debugging a seed.
    trace: Callable[[str], None] | None = None

    def __post_init__(self) -> None:
        cfg = self.config
        self.rng = random.Random(cfg.seed)
        self.partitions = dict(cfg.topics)
        self.topic_ids = make_topic_ids(cfg.topics)
        self.topic_names = {v: k for k, v in self.topic_ids.items()}
        self.endpoint = self.endpoint_factory(
            EndpointConfig(classic_mode=cfg.classic_mode), cfg.seed
        )
        self.replica = self.endpoint.replica()
        self.emitter = SimEventEmitter(self.sink, self.run_id or f"sim-{cfg.seed}", self.group_id, _client_mix(cfg)) if self.sink else None
        self._group_type: str | None = None

    # ---- the Host interface the clients use ---------------------------------------------------
    def send(self, client: SimClient, kind: str, request: Any) -> None:
        key = next(self._keys)
        self._pending[key] = _Pending(client, client.incarnation, kind, request)
        self._push(self.now + self.network_delay(), "request", key)

    def call_later(self, client: SimClient, delay_ms: int, tag: str) -> None:
        self._push(self.now + max(delay_ms, 0), "wake", (client, client.incarnation, tag))

    def network_delay(self) -> int:
        """One way between a client and the coordinator, ms."""
        return self.rng.randint(1, 5)

    def processing_delay(self, client: SimClient) -> int:
        if client.slot in self._slow:
            return self.rng.randint(500, 4_000)
        return self.rng.randint(2, 60)

    def event(self, name: str, client: SimClient, **fields: Any) -> None:
        self.stats[name if name != "member_left" else f"member_left:{fields.get('reason')}"] += 1
        if fields.get("lost"):
            self.stats["partitions_lost"] += 1
        if name in ("partitions_assigned", "partitions_revoked"):
            self.settled_at_ms = self.now
        if self.emitter is not None:
            self.emitter.member_event(self.now, name, client, **fields)

    # ---- queue ----------------------------------------------------------------------------------
    def _push(self, at: int, kind: str, payload: Any) -> None:
        heapq.heappush(self._queue, (at, next(self._seq), kind, payload))

    def fail(self, message: str) -> SimulationViolation:
        cfg = self.config
        return SimulationViolation(
            f"seed {cfg.seed} step {self.step} t={self.now}ms ({cfg.scenario}, {cfg.classic_mode}): {message}"
        )

    # ---- building the run -----------------------------------------------------------------------
    def new_client(self, protocol: str, slot: int, member_id: str | None = None) -> SimClient:
        """Start a client in a slot (a place in the fleet: a static member keeps the slot's instance id
        across restarts and protocol changes, KIP-345)."""
        name = f"c{next(self._names)}"
        instance_id = f"instance-{slot}" if self.config.static_members else None
        client: SimClient
        if protocol == "classic":
            client = self.classic_client(self, name, self.config.subscribed, self.config.classic_assignor)
        else:
            mid = member_id or str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
            client = self.consumer_client(self, name, self.config.subscribed, mid, self.config.server_assignor)
        client.slot = slot
        client.instance_id = instance_id
        self.clients.append(client)
        client.start()
        return client

    def _plan(self) -> None:
        cfg = self.config
        rng = self.rng
        initial = {
            "classic-eager": "classic", "classic-cooperative": "classic", "translate-eager": "classic",
            "translate-cooperative": "classic", "consumer": "consumer", "mixed": "mixed",
            "upgrade-translate": "classic", "upgrade-native": "classic",
            "downgrade-translate": "consumer", "downgrade-native": "consumer",
        }[cfg.scenario]
        self._apply(self.endpoint.on_metadata(self._image(), 0))
        for slot in range(cfg.members):
            protocol = initial if initial != "mixed" else ("consumer" if slot % 2 == 0 else "classic")
            self._push(rng.randint(0, START_SPREAD_MS), "action", ("start", (protocol, slot, None)))
        self._slots = cfg.members
        self._slow = set(rng.sample(range(cfg.members), min(cfg.slow_members, cfg.members)))
        for _ in range(cfg.crashes):
            self._push(rng.randint(1_000, cfg.active_ms), "action", ("crash", None))
        for _ in range(cfg.topic_changes):
            self._push(rng.randint(1_000, cfg.active_ms), "action", ("add-partitions", None))
        for _ in range(cfg.scale_outs):
            self._push(rng.randint(1_000, cfg.active_ms), "action", ("scale-out", initial))
        for _ in range(cfg.scale_ins):
            self._push(rng.randint(1_000, cfg.active_ms), "action", ("scale-in", None))
        for _ in range(cfg.failovers):
            self._push(rng.randint(1_000, cfg.active_ms), "action", ("failover", None))
        end = cfg.active_ms
        if cfg.scenario.startswith(("upgrade", "downgrade")):
            old = "classic" if cfg.scenario.startswith("upgrade") else "consumer"
            t = cfg.roll_first_ms
            for _ in range(cfg.members):
                t += rng.randint(*ROLL_GAP_MS)
                self._push(t, "action", ("roll", old))
            end = max(end, t + 2_000)
        self._push(end, "action", ("quiet", None))

    def _image(self) -> dict[str, tuple[uuid.UUID, int]]:
        return {t: (self.topic_ids[t], n) for t, n in self.partitions.items()}

    # ---- actions ----------------------------------------------------------------------------------
    def disturbance(self, kind: str) -> None:
        """A scenario action: the first one starts the time to stable; a ``disturbance`` event when logging."""
        if self.first_disturbance_ms < 0:
            self.first_disturbance_ms = self.now
        if self.emitter is not None:
            self.emitter.disturbance(self.now, kind)

    def _stop(self, client: SimClient, graceful: bool) -> None:
        if graceful:
            client.leave()
        else:
            if client.owned:
                self.settled_at_ms = self.now  # a killed member's partitions are without an owner from here
            client.crash()
            self.event("member_left", client, reason="crash")

    def _act(self, action: str, arg: Any) -> None:
        rng = self.rng
        alive = [c for c in self.clients if c.alive]
        if action == "start":
            protocol, slot, member_id = arg
            self.new_client(protocol, slot, member_id)
        elif action == "crash":
            if len(alive) > 1:
                victim = rng.choice(alive)
                self._stop(victim, graceful=False)
                # The process is restarted after a while, as a new member (or the same static one).
                self._push(self.now + rng.randint(500, 6_000), "action", ("start", (victim.protocol, victim.slot, None)))
        elif action == "scale-out":
            protocol = arg if arg != "mixed" else rng.choice(("classic", "consumer"))
            self._slots += 1
            self.new_client(protocol, self._slots - 1)
        elif action == "scale-in":
            if len(alive) > 1:
                self._stop(rng.choice(alive), graceful=True)
        elif action == "add-partitions":
            topic = rng.choice(sorted(self.config.subscribed))
            self.partitions[topic] += rng.randint(1, 2)
            if self.emitter is not None:
                self.emitter.topic_metadata(self.now, topic, self.partitions[topic])
            self._apply(self.endpoint.on_metadata(self._image(), self.now))
            for c in alive:
                self.call_later(c, rng.randint(50, 600), "metadata-changed")
        elif action == "roll":
            candidates = [c for c in alive if c.protocol == arg]
            if not candidates:
                return
            old = rng.choice(candidates)
            reuse = old.member_id if self.config.rolling_reuse_ids and old.member_id else None
            self.disturbance("rolling-upgrade" if arg == "classic" else "rolling-downgrade")
            graceful = rng.random() < self.config.graceful_share
            self._stop(old, graceful)
            if not graceful:
                reuse = None  # the old member still holds its id until its session expires
            new_protocol = "consumer" if arg == "classic" else "classic"
            restart = self.now + rng.randint(*ROLL_RESTART_MS)
            self.roll_steps.append((self.now, old.slot, graceful, restart))
            self._push(restart, "action", ("start", (new_protocol, old.slot, reuse)))
        elif action == "failover":
            self._failover()
        elif action == "quiet":
            self._faults_on = False

    def _failover(self) -> None:
        """The gateway restarts (KIP-848 "Fail Over"): a new service rebuilt from the records alone.
        Requests it had not answered (parked JoinGroup / SyncGroup, requests on the wire) are lost
        with their connections; the clients time out and retry. Answers already sent still arrive."""
        self.stats["failover"] += 1
        for key in list(self._pending):
            if key not in self._answered:
                self._answered.add(key)
                self._push(self.now + 2_000, "lost", key)
        self._incarnation += 1
        self._timers.clear()
        self.endpoint = self.endpoint_factory(
            EndpointConfig(classic_mode=self.config.classic_mode, incarnation=self._incarnation), self.config.seed
        )
        self._apply(self.endpoint.load(list(self.records), self._image(), self.now))

    # ---- the endpoint ----------------------------------------------------------------------------
    def _deliver(self, key: Any) -> None:
        if key in self._answered:
            return  # lost with the connection of a gateway that restarted
        pending = self._pending[key]
        if self.trace is not None:
            self.trace(f"{self.now} {pending.client.name} -> {pending.request}")
        self._apply(self.endpoint.handle(pending.request, key, self.now))

    def _apply(self, result: Any) -> None:
        self.records.extend(result.records)

        def arm(change: ScheduleTimer) -> int:
            self._push(max(change.deadline_ms, self.now), "timer", (change.key, change.deadline_ms))
            return change.deadline_ms

        apply_timer_changes(self._timers, result.timers, arm)
        for key, body in result.responses:
            pending = self._pending.get(key)
            if pending is None or key in self._answered:
                raise self.fail(f"response to unknown or already answered request {key}: {body}")
            self._answered.add(key)
            self._check_told(pending, body)
            if self._faults_on and self.rng.random() < self.config.loss_rate:
                self.stats["lost-response"] += 1
                self._push(self.now + 2_000, "lost", key)
            else:
                self._push(self.now + self.network_delay(), "response", (key, body))

    def _receive(self, key: Any, body: Any, lost: bool) -> None:
        pending = self._pending.pop(key)
        self._answered.discard(key)
        client = pending.client
        if self.trace is not None:
            self.trace(f"{self.now} {client.name} <- {'LOST' if lost else body} owned={sorted(client.owned)}")
        if not client.alive or client.incarnation != pending.incarnation:
            return
        if lost:
            client.on_lost(pending.kind, pending.request)
        else:
            client.on_response(pending.kind, pending.request, body)

    # ---- invariants ------------------------------------------------------------------------------
    def _check_told(self, pending: _Pending, body: Any) -> None:
        """One generation of a classic group has one assignment per member. Under KIP-848 a member's
        assignment at one epoch may grow (partitions released by their previous owners) and then
        shrink (a revocation keeps the member at its epoch), and a classic member only sees some of
        those steps; but once partitions were taken away at an epoch, none is added at that epoch."""
        if isinstance(body, SyncGroupResponse) and body.error_code == 0:
            member, epoch = pending.request.member_id, pending.request.generation_id
            told = frozenset(
                (tp.topic, p) for tp in decode_assignment(body.assignment).assigned_partitions for p in tp.partitions
            )
        elif isinstance(body, ConsumerGroupHeartbeatResponse) and body.error_code == 0 and body.assignment is not None:
            member, epoch = body.member_id or "", body.member_epoch
            told = frozenset((self.topic_names[tp.topic_id], p) for tp in body.assignment for p in tp.partitions)
        else:
            return
        strict = self.endpoint.group_type(self.group_id) == "classic"
        if self.emitter is not None:
            self.emitter.assignment_sent(self.now, pending.client, member, epoch, told)
        prev = self._told.get((member, epoch))
        if prev is None:
            self._told[(member, epoch)] = _Told(told)
            return
        if told == prev.assignment:
            return
        self.stats["assignment-changed-within-epoch"] += 1
        if strict:
            raise self.fail(f"member {member} told two assignments for generation {epoch}: "
                            f"{sorted(prev.assignment)} then {sorted(told)}")
        if prev.shrunk and not told <= prev.assignment:
            raise self.fail(f"member {member} was given partitions after a revocation at epoch {epoch}: "
                            f"{sorted(prev.assignment)} then {sorted(told)}")
        if not prev.assignment <= told:
            prev.shrunk = True
        prev.assignment = told

    def check_ownership(self) -> None:
        owner: dict[TopicPartition, str] = {}
        for c in self.clients:
            if not c.alive:
                continue
            for tp in c.owned:
                other = owner.get(tp)
                if other is not None:
                    raise self.fail(f"partition {tp[0]}-{tp[1]} owned by {other} and {c.name} ({c.member_id})")
                owner[tp] = f"{c.name} ({c.member_id})"

    def check_replay(self) -> None:
        self.replica.apply(self.records[self._replayed:])
        self._replayed = len(self.records)
        if not classic_group_settled(self.endpoint.classic_group(self.group_id)):
            return
        live, replayed = self.endpoint.snapshot(), self.replica.snapshot()
        if live != replayed:
            raise self.fail(f"replay of {len(self.records)} records differs from the live state:\n"
                            f"live:     {live}\nreplayed: {replayed}")

    def converged(self) -> bool:
        alive = [c for c in self.clients if c.alive]
        if not alive or not all(c.settled for c in alive):
            return False
        owned = set().union(*(c.owned for c in alive))
        expected = {(t, p) for t in self.config.subscribed for p in range(self.partitions[t])}
        if owned != expected:
            return False
        group_type = self.endpoint.group_type(self.group_id)
        if group_type == "classic":
            group = self.endpoint.classic_group(self.group_id)
            return group is not None and group.state.value == "Stable"
        return self.endpoint.consumer_group_stable(self.group_id)

    def _note_group_type(self) -> None:
        now_type = self.endpoint.group_type(self.group_id)
        if now_type != self._group_type:
            if self._group_type is not None and now_type is not None:
                self.stats[f"group_converted:{now_type}"] += 1
                if self.emitter is not None:
                    self.emitter.group_converted(self.now, self._group_type, now_type)
            if now_type is not None:
                self._group_type = now_type

    # ---- run --------------------------------------------------------------------------------------
    def run(self) -> SimReport:
        cfg = self.config
        self._plan()
        converged_at = -1
        while self._queue:
            at, _, kind, payload = heapq.heappop(self._queue)
            self.now = max(self.now, at)
            self.step += 1
            if kind == "request":
                self._deliver(payload)
            elif kind == "response":
                self._receive(payload[0], payload[1], lost=False)
            elif kind == "lost":
                self._receive(payload, None, lost=True)
            elif kind == "wake":
                client, incarnation, tag = payload
                if client.alive and client.incarnation == incarnation:
                    client.on_wake(tag)
            elif kind == "timer":
                key, deadline = payload
                if self._timers.get(key) == deadline:
                    del self._timers[key]
                    if self.trace is not None:
                        self.trace(f"{self.now} timer {key}")
                    self.stats[f"timer:{key[0]}"] += 1
                    self._apply(self.endpoint.on_timer(key, self.now))
            elif kind == "action":
                if self.trace is not None:
                    self.trace(f"{self.now} action {payload}")
                self._act(*payload)
            self.check_ownership()
            self._note_group_type()
            if self.step % cfg.checkpoint_every == 0:
                self.check_replay()
            if not self._faults_on:
                if self.converged():
                    converged_at = self.now
                    break
                if self.now > cfg.active_ms + cfg.quiet_limit_ms:
                    break
            if self.step >= cfg.max_steps:
                break
        self.check_replay()
        if converged_at < 0:
            state = "; ".join(
                f"{c.name}/{c.protocol} {getattr(c, 'phase', '?')} owns {sorted(c.owned)}" for c in self.clients if c.alive
            )
            raise self.fail(f"group did not converge after the faults stopped: {state}")
        if self.emitter is not None:
            expected = {(t, p) for t in cfg.subscribed for p in range(self.partitions[t])}
            self.emitter.group_stable(self.now, expected)
        return SimReport(
            seed=cfg.seed, scenario=cfg.scenario, steps=self.step, virtual_ms=self.now, converged_at_ms=converged_at,
            records=len(self.records), members_started=len(self.clients),
            events=self.emitter.count if self.emitter is not None else 0,
            settled_at_ms=self.settled_at_ms, first_disturbance_ms=self.first_disturbance_ms, stats=dict(sorted(self.stats.items())),
        )


def _client_mix(cfg: SimConfig) -> str:
    if cfg.scenario == "consumer":
        return "consumer"
    if cfg.classic_mode == "translate":
        return "translate"
    return "classic-cooperative" if cfg.classic_assignor == COOPERATIVE_ASSIGNOR else "classic-eager"


def run_seed(seed: int, scenario: str | None = None, sink: EventSink | None = None, **overrides: Any) -> SimReport:
    """Run one seed; raises SimulationViolation with the seed and step when an invariant breaks."""
    factory = overrides.pop("endpoint_factory", ServiceEndpoint)
    available = available_scenarios(factory)
    cfg = scenario_config(seed, scenario, available)
    if cfg.scenario not in available:
        raise ValueError(f"scenario {cfg.scenario} needs an entry point that converts classic groups")
    return Simulation(cfg, sink=sink, endpoint_factory=factory, **overrides).run()


__all__ = [
    "GROUP_ID", "SCENARIOS", "SimConfig", "SimReport", "Simulation", "SimulationViolation", "available_scenarios",
    "run_seed", "scenario_config",
]
