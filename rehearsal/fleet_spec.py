"""A fleet's description and what follows from it alone: ``FleetSpec`` (pydantic: read from the command line
or a JSON file, and crossing into Spark tasks), the client mixes and scenarios it names, each group's seed and
simulator configuration, the simulated gateway's settings, and the table of settings and warnings the report
prints. Running a fleet is rehearsal/fleet.py's.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
    CLASSIC_SESSION_TIMEOUT_MS,
    REBALANCE_TIMEOUT_MS,
)
from rehearsal.sim_config import GRACEFUL_SHARE, ROLL_FIRST_MS, ROLL_GAP_MS, ROLL_RESTART_MS
from rehearsal.sim_connect_config import SCENARIOS as CONNECT_SIM_SCENARIOS
from rehearsal.sim_connect_config import SCHEDULED_REBALANCE_DELAY_MS, ConnectSimConfig
from rehearsal.sim_endpoint import EndpointConfig
from rehearsal.simulate import SimConfig

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
    config.topic_change_grace_ms = g.translate_topic_change_grace_ms


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
