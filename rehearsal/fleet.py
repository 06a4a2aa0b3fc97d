"""Fleet rehearsals: many independent single-group simulations writing rebalance events.

A fleet is described by a ``FleetSpec`` (pydantic: it is read from the command line or a JSON file
and crosses into Spark tasks): groups, members per group, topics and partitions, the client mix,
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

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rehearsal.events import EventWriter
from rehearsal.fleet_settings import (
    CALIBRATED_VERSIONS,
    ClientModel,
    ClientSpec,
    GatewaySpec,
    client_model,
    client_slots,
)
from rehearsal.sim_assignors import COOPERATIVE_ASSIGNOR
from rehearsal.sim_clients import (
    CLASSIC_HEARTBEAT_INTERVAL_MS,
    CLASSIC_SESSION_TIMEOUT_MS,
    REBALANCE_TIMEOUT_MS,
    ClassicClient,
    SimClient,
)
from rehearsal.sim_config import GRACEFUL_SHARE, ROLL_FIRST_MS, ROLL_GAP_MS, ROLL_RESTART_MS
from rehearsal.sim_connect import SCENARIOS as CONNECT_SIM_SCENARIOS
from rehearsal.sim_connect import SCHEDULED_REBALANCE_DELAY_MS, ConnectSimConfig, ConnectSimulation
from rehearsal.sim_endpoint import EndpointConfig, ServiceEndpoint
from rehearsal.sim_events import EventSink
from rehearsal.simulate import SimConfig, Simulation, SimulationViolation

ClientMix = Literal["classic-eager", "classic-cooperative", "translate", "consumer"]
CLIENT_MIXES: tuple[ClientMix, ...] = ("classic-eager", "classic-cooperative", "translate", "consumer")
MIX_CHOICES: tuple[str, ...] = ("all", *CLIENT_MIXES)
FLEET_SCENARIOS: tuple[str, ...] = (
    "rolling-upgrade",
    "rolling-downgrade",
    "crashes",
    "scale-up",
    "scale-down",
    "topic-growth",
)
# Connect groups (``group_type="connect"``, rehearsal/sim_connect.py) know these.
CONNECT_SCENARIOS: tuple[str, ...] = CONNECT_SIM_SCENARIOS
# The FleetSpec fields of connect fleets, left out of a consumer fleet's manifest (which stays as it was).
CONNECT_FIELDS = frozenset({"group_type", "connectors", "tasks_per_connector", "scheduled_rebalance_delay_ms"})
EVENTS_DIR = "events"
MANIFEST = "_fleet.json"


class FleetSpec(BaseModel):
    """Everything a fleet rehearsal depends on; equal specs write identical event files."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scenario: Literal[
        "rolling-upgrade", "rolling-downgrade", "crashes", "scale-up", "scale-down", "topic-growth", "rolling-restart"
    ]
    groups: int = Field(ge=1)
    members: int = Field(ge=1, le=1_000)
    seed: int = 0
    mix: Literal["all", "classic-eager", "classic-cooperative", "translate", "consumer"] = "all"
    # Every member subscribes to every topic; topic name -> partitions.
    topics: dict[str, int] = Field(default_factory=lambda: {"orders": 12, "payments": 6}, min_length=1)
    run: str | None = None  # the rehearsal id of the events; default "<scenario>-<seed>"
    # Heartbeat interval of classic clients and the consumer groups' group.consumer.heartbeat.interval.ms;
    # kept well below the 10 s session timeout so that a live member is never fenced for it.
    heartbeat_interval_ms: int = Field(default=1_000, ge=50, le=3_000)
    # Time a member's rebalance callbacks / reconciliation take (uniform in the range), and for the
    # slow ones; below the 15 s rebalance timeout (a longer one is a max.poll.interval.ms problem).
    # None: each named client's measured callback latencies (``clients``), else 2-60 ms.
    processing_ms: tuple[int, int] | None = None
    slow_members: int = Field(default=0, ge=0)
    slow_processing_ms: tuple[int, int] = (500, 4_000)
    eager_assignor: Literal["range", "roundrobin"] = "range"
    # The rebalance protocol of the classic clients of the translate variant.
    translate_rebalance: Literal["eager", "cooperative"] = "cooperative"
    server_assignor: Literal["uniform", "range"] | None = None
    loss_rate: float = Field(default=0.0, ge=0.0, le=0.2)
    # The disturbed phase of crashes / scale / topic-growth scenarios (rolling ones last as long as the roll).
    duration_ms: int = Field(default=20_000, ge=2_000, le=600_000)
    # How many disturbances of the scenario's kind; default: a fifth of the members (at least one).
    disturbances: int | None = Field(default=None, ge=0)
    static_members: bool = False
    reuse_member_ids: bool = False
    # Of a roll's steps (rolling-upgrade, -downgrade, the consumer mix's rolling restart), the share that stop
    # their member cleanly (a LeaveGroup); the others kill it, and its session timeout fences it. 1.0: a roll
    # that only ever sends SIGTERM, as an orchestrator's rolling deployment does.
    graceful_share: float = Field(default=GRACEFUL_SHARE, ge=0.0, le=1.0)
    groups_per_file: int = Field(default=50, ge=1)
    # The clients of every group and their shares of its members (rehearsal/fleet_settings.py); None: the
    # generic Java-like models (what fleets were simulated with before clients could be named).
    clients: tuple[ClientSpec, ...] | None = Field(default=None, min_length=1)
    # The simulated gateway's coordinator settings (``--config``: a gateway's TOML); None: the simulator's own.
    gateway: GatewaySpec | None = None
    # consumer: the groups above; connect: connect groups of ``members`` Connect workers running
    # ``connectors`` connectors of ``tasks_per_connector`` tasks each (rehearsal/sim_connect.py), with
    # the workers' scheduled.rebalance.max.delay.ms.
    group_type: Literal["consumer", "connect"] = "consumer"
    connectors: int = Field(default=4, ge=1, le=10_000)
    tasks_per_connector: int = Field(default=3, ge=0, le=1_000)
    scheduled_rebalance_delay_ms: int = Field(default=SCHEDULED_REBALANCE_DELAY_MS, ge=0, le=3_600_000)

    @model_validator(mode="after")
    def _check(self) -> FleetSpec:
        if self.group_type == "connect":
            self._check_connect()
            return self
        if self.scenario == "rolling-restart":
            raise ValueError("the rolling-restart scenario is for connect groups (group_type connect); consumer "
                             "fleets get a rolling restart from rolling-upgrade with the consumer mix")
        ranges = (("processing_ms", self.processing_ms), ("slow_processing_ms", self.slow_processing_ms))
        for name, bounds in ranges:
            if bounds is not None and not 0 <= bounds[0] <= bounds[1] <= 10_000:
                raise ValueError(f"{name} must be 0 <= low <= high <= 10000 ms")
        self._check_clients()
        if any(n < 1 for n in self.topics.values()):
            raise ValueError("every topic needs at least one partition")
        if self.static_members and self.scenario == "topic-growth" and self.mix in ("all", "classic-eager", "classic-cooperative"):
            # A classic group of static members can end up with no client that knows it leads and then
            # nobody rejoins for added partitions: client-side assignment's blind spot (docs/simulation.md).
            raise ValueError("static members with topic-growth need the translate or consumer mix")
        return self

    def _check_connect(self) -> None:
        if self.scenario not in CONNECT_SCENARIOS:
            raise ValueError(f"connect groups know the scenarios {', '.join(CONNECT_SCENARIOS)}, not {self.scenario}")
        if self.mix != "all":
            raise ValueError("the client mix is for consumer groups: every connect group is of client mix connect")
        if self.clients:
            raise ValueError("clients name consumer clients: connect groups run simulated Connect workers")

    def _check_clients(self) -> None:
        g = self.gateway_settings
        if self.heartbeat_interval_ms >= g.consumer_session_timeout_ms or (
            g.consumer_heartbeat_interval_ms or 0) >= g.consumer_session_timeout_ms:
            raise ValueError("the heartbeat interval must be lower than the gateway's consumer session timeout")
        if not self.clients:
            return
        new_protocol = self.scenario in ("rolling-upgrade", "rolling-downgrade") or self.mix == "consumer"
        for c in self.clients:
            if new_protocol and not c.speaks_kip848():
                raise ValueError(f"{c.label} has no generally available KIP-848 consumer protocol, which the "
                                 f"{self.scenario} scenario of mix {self.mix} needs")
            if not g.min_session_timeout_ms <= c.session_timeout_ms <= g.max_session_timeout_ms:
                raise ValueError(f"{c.label}: session_timeout_ms {c.session_timeout_ms} is outside the gateway's "
                                 f"group.min/max.session.timeout.ms")
        eager = {c.strategy for c in self.clients if c.strategy in ("range", "roundrobin")}
        if len(eager) > 1:
            raise ValueError(f"clients name the eager strategies {sorted(eager)}: a classic group selects one "
                             "assignor every member supports")
        mixes = CLIENT_MIXES if self.mix == "all" else (self.mix,)
        for mix in mixes:
            if mix == "consumer":
                continue
            cooperative = self.cooperative(mix)
            for c in self.clients:
                if c.strategy is not None and (c.strategy == COOPERATIVE_ASSIGNOR) != cooperative:
                    raise ValueError(f"{c.label} runs {c.strategy} but the {mix} groups of this spec run "
                                     f"{'cooperative-sticky' if cooperative else 'an eager assignor'}: "
                                     "give a mix that matches the clients' strategy")

    def cooperative(self, mix: str) -> bool:
        return mix == "classic-cooperative" or (mix == "translate" and self.translate_rebalance == "cooperative")

    def classic_assignor(self, mix: str) -> str:
        if self.cooperative(mix):
            return COOPERATIVE_ASSIGNOR
        named = [c.strategy for c in self.clients or () if c.strategy in ("range", "roundrobin")]
        return named[0] if named else self.eager_assignor

    @property
    def gateway_settings(self) -> GatewaySpec:
        return self.gateway if self.gateway is not None else GatewaySpec()

    def client_models(self) -> list[ClientModel] | None:
        """Per slot of a group, its client's models; None: the generic models."""
        if not self.clients:
            return None
        models = [client_model(c) for c in self.clients]
        return [models[i] for i in client_slots(self.clients, self.members)]

    @property
    def run_id(self) -> str:
        return self.run or f"{self.scenario}-{self.seed}"

    @property
    def files(self) -> int:
        return -(-self.groups // self.groups_per_file)

    def group_mix(self, index: int) -> str:
        if self.group_type == "connect":
            return "connect"
        return CLIENT_MIXES[index % len(CLIENT_MIXES)] if self.mix == "all" else self.mix

    def connect_config(self, index: int) -> ConnectSimConfig:
        """The connect simulator's configuration of group ``index``."""
        return ConnectSimConfig(
            seed=group_seed(self.seed, index), scenario=self.scenario, workers=self.members,
            connectors=self.connectors, tasks_per_connector=self.tasks_per_connector,
            disturbances=self.disturbances, scheduled_delay_ms=self.scheduled_rebalance_delay_ms,
        )

    def manifest_spec(self) -> dict[str, Any]:
        """The spec as _fleet.json records it (a consumer fleet's without the connect fields)."""
        exclude = set(CONNECT_FIELDS) if self.group_type == "consumer" else None
        return self.model_dump(mode="json", exclude=exclude)

    def group_name(self, index: int) -> str:
        return f"g{index:05d}-{self.group_mix(index)}"


def group_seed(seed: int, index: int) -> int:
    """The seed of group ``index``: a hash of (seed, index), the same in every process (no hash())."""
    digest = hashlib.blake2b(f"{seed}/{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def sim_config(spec: FleetSpec, index: int) -> SimConfig:
    """The simulator's configuration of group ``index``: the scenario for its variant, no random draws."""
    mix = spec.group_mix(index)
    rolling = spec.scenario in ("rolling-upgrade", "rolling-downgrade")
    cooperative = spec.cooperative(mix)
    if mix == "consumer":
        sim_scenario = "consumer"
    elif rolling:
        direction = "upgrade" if spec.scenario == "rolling-upgrade" else "downgrade"
        sim_scenario = f"{direction}-{'translate' if mix == 'translate' else 'native'}"
    elif mix == "translate":
        sim_scenario = f"translate-{'cooperative' if cooperative else 'eager'}"
    else:
        sim_scenario = mix
    count = spec.disturbances if spec.disturbances is not None else max(1, spec.members // 5)
    return SimConfig(
        seed=group_seed(spec.seed, index),
        scenario=sim_scenario,
        classic_mode="native" if mix.startswith("classic") else "translate",
        members=spec.members,
        topics=dict(spec.topics),
        subscribed=frozenset(spec.topics),
        classic_assignor=spec.classic_assignor(mix),
        server_assignor=spec.server_assignor,
        loss_rate=spec.loss_rate,
        crashes=count if spec.scenario == "crashes" else 0,
        slow_members=min(spec.slow_members, spec.members),
        topic_changes=count if spec.scenario == "topic-growth" else 0,
        active_ms=spec.duration_ms,
        rolling_reuse_ids=spec.reuse_member_ids,
        static_members=spec.static_members,
        scale_outs=count if spec.scenario == "scale-up" else 0,
        scale_ins=min(count, spec.members - 1) if spec.scenario == "scale-down" else 0,
        graceful_share=spec.graceful_share,
        roll_first_ms=roll_first_ms(spec),
    )


def roll_first_ms(spec: FleetSpec) -> int:
    """A roll starts on a formed group: ROLL_FIRST_MS after the simulator's own first rebalance (its 300 ms
    initial delay, members up at once), pushed back by the members' start time and by a gateway's longer
    ``group.initial.rebalance.delay.ms`` (3 s by default), so that its first step never stops a member of a
    group still forming (a member stopped inside its first join is left in the group until its session
    expires, which no rolling deployment of a running fleet does)."""
    models = spec.client_models() or ()
    start = max((m.start_ms for m in models), default=0)
    delay = spec.gateway_settings.initial_rebalance_delay_ms
    return ROLL_FIRST_MS + start + max(0, delay - DEFAULT_INITIAL_DELAY_MS)


# The simulator's own group.initial.rebalance.delay.ms (rehearsal/sim_endpoint.py EndpointConfig).
DEFAULT_INITIAL_DELAY_MS = EndpointConfig().initial_rebalance_delay_ms

# Callback / reconciliation time of the generic models (FleetSpec.processing_ms None without clients).
DEFAULT_PROCESSING_MS = (2, 60)


def apply_gateway(config: EndpointConfig, g: GatewaySpec, classic_heartbeat_ms: int) -> None:
    """The simulated gateway's coordinator settings onto the endpoint's configuration."""
    config.session_timeout_ms = g.consumer_session_timeout_ms
    config.heartbeat_interval_ms = g.consumer_heartbeat_interval_ms or classic_heartbeat_ms
    config.initial_rebalance_delay_ms = g.initial_rebalance_delay_ms
    config.migration_policy = g.migration_policy
    config.assignment_interval_ms = g.consumer_assignment_interval_ms
    config.min_assignment_interval_ms = g.consumer_min_assignment_interval_ms
    config.max_assignment_interval_ms = g.consumer_max_assignment_interval_ms
    config.assignors = g.consumer_assignors
    config.consumer_max_size = g.consumer_max_size
    config.classic_min_session_timeout_ms = g.min_session_timeout_ms
    config.classic_max_session_timeout_ms = g.max_session_timeout_ms
    config.classic_max_size = g.max_size
    config.convert_builtin_sticky_userdata = g.convert_builtin_sticky_userdata


def simulation_settings(spec: FleetSpec) -> dict[str, Any]:
    """Every setting the fleet's simulation uses: the gateway's (by Kafka name) and the clients'."""
    if spec.group_type == "connect":
        c = spec.connect_config(0)
        return {
            "group type": "connect", "workers": spec.members, "connectors": spec.connectors,
            "tasks per connector": spec.tasks_per_connector, "session.timeout.ms": c.session_timeout_ms,
            "heartbeat.interval.ms": c.heartbeat_interval_ms, "rebalance.timeout.ms": c.rebalance_timeout_ms,
            "scheduled.rebalance.max.delay.ms": c.scheduled_delay_ms,
            "network one way ms": "-".join(map(str, c.network_ms)),
            "connector / task start and stop ms": "-".join(map(str, c.start_stop_ms)),
        }  # fmt: skip
    g = spec.gateway_settings
    out: dict[str, Any] = {"gateway": g.source, **g.settings(spec.heartbeat_interval_ms)}
    out["classic heartbeat.interval.ms"] = spec.heartbeat_interval_ms
    out["rebalance.timeout.ms"] = REBALANCE_TIMEOUT_MS
    out["network one way ms"] = "1-5"
    if spec.clients:
        out["clients"] = ", ".join(
            f"{c.label} x{c.share} ({c.strategy or 'strategy of the mix'}, session.timeout.ms {c.session_timeout_ms}, "
            f"first request {m.start_ms} ms after its start)"
            for c, m in ((c, client_model(c)) for c in spec.clients)
        )
        out["callback ms"] = ("-".join(map(str, spec.processing_ms)) if spec.processing_ms
                              else "measured per client (calibration)")
    else:
        out["clients"] = "generic Java-like models"
        out["classic session.timeout.ms"] = CLASSIC_SESSION_TIMEOUT_MS
        out["callback ms"] = "-".join(map(str, spec.processing_ms or DEFAULT_PROCESSING_MS))
    out["eager assignor"] = spec.classic_assignor("classic-eager")
    out["server assignor"] = spec.server_assignor or "the gateway's default"
    out["loss rate"] = spec.loss_rate
    out["roll"] = (f"a step every {ROLL_GAP_MS[0]}-{ROLL_GAP_MS[1]} ms, successor {ROLL_RESTART_MS[0]}-"
                   f"{ROLL_RESTART_MS[1]} ms after the stop, {spec.graceful_share:.0%} clean stops")
    return out


def fleet_warnings(spec: FleetSpec) -> list[str]:
    """What the simulation of this fleet cannot model: settings of the gateway's file, client versions it
    was not calibrated with, mixes the gateway does not run."""
    g = spec.gateway_settings
    if spec.group_type == "connect":
        # The gateway gives every connect group the connect coordinator's defaults (docs/connect.md).
        return ["connect groups: the gateway's configuration file does not change them"] if spec.gateway else []
    out = list(g.not_modelled)
    if g.classic_groups is not None:
        mixes = CLIENT_MIXES if spec.mix == "all" else (spec.mix,)
        other = "translate" if g.classic_groups == "native" else "classic-"
        whatif = [m for m in mixes if m.startswith(other)]
        if whatif:
            out.append(f"classic_groups = {g.classic_groups}: the {', '.join(whatif)} groups show what the other "
                       "mode would do, not this gateway")
    partitions = sum(spec.topics.values())
    if g.offload_enable and spec.members * partitions >= g.offload_min_size:
        out.append("consumer_assignor_offload_enable: this gateway computes these groups' targets on worker "
                   "threads; the simulation computes them inline")
    for c in spec.clients or ():
        if c.effective_version != CALIBRATED_VERSIONS[c.client]:
            out.append(f"{c.label}: modelled with the behaviour measured on {c.client} "
                       f"{CALIBRATED_VERSIONS[c.client]}")
    return out


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

        from rehearsal.fleet import FleetSpec, simulate_part

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
