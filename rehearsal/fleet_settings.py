"""What a fleet rehearsal runs with: its clients and its gateway's coordinator settings.

**Clients.** ``ClientSpec`` names a client (``java`` of a version, ``librdkafka``), its classic strategy and
its share of each group's members; ``client_model`` turns it into the simulator's models with the behaviour
the calibration against real clients measured (rehearsal/calibration.py ``client_timings``): librdkafka paces
its rejoins to one JoinGroup a second and restarts its heartbeat timer on the SyncGroup response; a Java
leader's assignor takes a callback's time; each client's callbacks take their measured latencies, and the
Java new-protocol consumer's callbacks wait for its poll loop. franz-go was never measured, so it is refused
rather than guessed. A spec without clients keeps the generic Java-like models the fleet always used.

**Gateway.** ``GatewaySpec`` holds the coordinator settings the simulated gateway runs with.
``gateway_from_config`` reads them from the TOML ``groupgate serve`` reads (gateway/config/settings.py
``load_config``); every setting the simulation cannot model and that matters to a group is kept in
``not_modelled`` (named in the command's output, ``_fleet.json`` and the report), never dropped. The gateway's
admin endpoint serves /metrics, /healthz and /readyz only, not its settings: a running gateway's settings
are given by its configuration file. Without one the simulator's own values apply (consumer session 10 s,
initial rebalance delay 300 ms, the fleet's heartbeat interval), which are not a gateway's defaults.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rehearsal.client_timings import client_timings
from rehearsal.sim_clients import REBALANCE_TIMEOUT_MS, ClassicClient
from rehearsal.sim_consumer_client import ConsumerClient

if TYPE_CHECKING:
    from gateway.config.coordinator import CoordinatorSettings

ClientName = Literal["java", "librdkafka", "franz-go"]
# The versions the calibration measured (docs/rehearsal.md, "Calibration against real clients").
CALIBRATED_VERSIONS = {"java": "4.3.1", "librdkafka": "2.16.0"}
# The first version whose KIP-848 consumer protocol is generally available.
KIP848_FROM = {"java": (4, 0), "librdkafka": (2, 10)}
# The classic clients' session.timeout.ms (Java's and librdkafka's default); the generic models use 10 s.
CLIENT_SESSION_TIMEOUT_MS = 45_000


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


class ClientSpec(BaseModel):
    """One kind of client of the fleet and its share of every group's members."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    client: ClientName
    version: str | None = None  # default: the calibrated version
    # Members per group are split between the clients in proportion to their shares (slots in order).
    share: int = Field(default=1, ge=1)
    # The classic assignor its members run; None: the group mix's (``FleetSpec.eager_assignor`` for eager
    # mixes, cooperative-sticky for cooperative ones). A classic group selects one assignor every member
    # supports, so the clients of a spec must agree with the mixes it runs (checked by FleetSpec).
    strategy: Literal["range", "roundrobin", "cooperative-sticky"] | None = None
    # The classic clients' session.timeout.ms (the new protocol's is the gateway's).
    session_timeout_ms: int = Field(default=CLIENT_SESSION_TIMEOUT_MS, ge=1_000, le=1_800_000)
    # From a member's start (its process, or a restart's) to its first group request. None: what the
    # calibration measured of the client once it is running (librdkafka 40 ms from its creation; Java 170 ms
    # from the consumer's startup, its JVM's own boot not included: a fleet of JVMs gives it here).
    start_ms: int | None = Field(default=None, ge=0, le=600_000)

    @model_validator(mode="after")
    def _check(self) -> ClientSpec:
        if self.client == "franz-go":
            raise ValueError("franz-go is not modelled: no calibration measured its behaviour (use java or librdkafka)")
        if self.version is not None and not re.fullmatch(r"\d+(\.\d+)*", self.version):
            raise ValueError(f"client version {self.version!r}: expected digits and dots (4.3.1)")
        return self

    @property
    def effective_version(self) -> str:
        return self.version or CALIBRATED_VERSIONS[self.client]

    @property
    def label(self) -> str:
        return f"{self.client} {self.effective_version}"

    def speaks_kip848(self) -> bool:
        return _version(self.effective_version)[:2] >= KIP848_FROM[self.client]


def client_slots(clients: tuple[ClientSpec, ...], members: int) -> list[int]:
    """Per slot of a group, the index of its client: members split by share (largest remainder, ties to
    the earlier client), in consecutive slots. A slot added later (scale-up) takes slot % members's client."""
    total = sum(c.share for c in clients)
    quotas = [members * c.share / total for c in clients]
    counts = [int(q) for q in quotas]
    order = sorted(range(len(clients)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in order[: members - sum(counts)]:
        counts[i] += 1
    return [i for i, n in enumerate(counts) for _ in range(n)]


@dataclass(frozen=True, slots=True)
class ClientModel:
    """The simulator's models of one client, with its measured callback latencies."""

    spec: ClientSpec
    classic: type[ClassicClient]
    consumer: type[ConsumerClient]
    processing_ms: tuple[int, int]
    straggler_share: float
    straggler_ms: tuple[int, int]
    calibration: str  # which calibration's measurements the model uses
    start_ms: int = 0  # from a member's start to its first group request


def client_model(spec: ClientSpec) -> ClientModel:
    t = client_timings("confluent" if spec.client == "librdkafka" else "java")
    name = spec.client.replace("-", "_").capitalize()
    classic = type(f"{name}Classic", (ClassicClient,), {
        "session_timeout_ms": spec.session_timeout_ms, "join_interval_ms": t.classic_join_interval_ms,
        "heartbeat_from_sync": t.classic_heartbeat_from_sync, "leader_assign_delay": t.classic_leader_assign_delay,
    })  # fmt: skip
    consumer = type(f"{name}Consumer", (ConsumerClient,), {
        "callback_wait_ms": t.callback_wait_ms, "callback_long_wait_share": t.callback_long_wait_share,
        "callback_long_wait_ms": t.callback_long_wait_ms,
    })  # fmt: skip
    return ClientModel(spec, classic, consumer, t.processing_ms, t.straggler_share, t.straggler_ms,
                       f"{spec.client} {CALIBRATED_VERSIONS[spec.client]}",
                       t.start_latency_ms if spec.start_ms is None else spec.start_ms)


class GatewaySpec(BaseModel):
    """The simulated gateway's coordinator settings (Kafka's names in ``settings()``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Where they come from: a configuration file's path, or "simulator" (the simulator's own values).
    source: str = "simulator"
    consumer_session_timeout_ms: int = Field(default=10_000, ge=1)
    # None: the fleet's heartbeat_interval_ms (the simulator's own setting).
    consumer_heartbeat_interval_ms: int | None = Field(default=None, ge=1)
    initial_rebalance_delay_ms: int = Field(default=300, ge=0)
    consumer_assignment_interval_ms: int = Field(default=1_000, ge=0)
    consumer_min_assignment_interval_ms: int = Field(default=0, ge=0)
    consumer_max_assignment_interval_ms: int = Field(default=15_000, ge=0)
    migration_policy: Literal["bidirectional", "upgrade", "downgrade", "disabled"] = "bidirectional"
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    min_session_timeout_ms: int = Field(default=6_000, ge=1)
    max_session_timeout_ms: int = Field(default=1_800_000, ge=1)
    max_size: int = Field(default=2**31 - 1, ge=1)
    consumer_max_size: int | None = Field(default=None, ge=1)
    convert_builtin_sticky_userdata: bool = True
    # How the gateway runs classic fleets (native / translate); None: not from a gateway. The fleet's mixes
    # choose per group, so a mix the gateway does not run is a what-if (named by ``fleet_warnings``).
    classic_groups: Literal["native", "translate"] | None = None
    # Translate mode: how long classic members may notice a topic change themselves before being told.
    translate_topic_change_grace_ms: int = Field(default=3_000, ge=0)
    # Assignment offload (KIP-1263): the simulator computes every target inline; named when a fleet's group
    # reaches the size the gateway would offload.
    offload_enable: bool = False
    offload_min_size: int = 1_000_000
    # Settings of the file that change what a group does and that the simulation cannot model.
    not_modelled: tuple[str, ...] = ()

    def settings(self, classic_heartbeat_ms: int) -> dict[str, Any]:
        """Every coordinator setting the simulation uses, by its Kafka name."""
        return {
            "group.consumer.session.timeout.ms": self.consumer_session_timeout_ms,
            "group.consumer.heartbeat.interval.ms": self.consumer_heartbeat_interval_ms or classic_heartbeat_ms,
            "group.initial.rebalance.delay.ms": self.initial_rebalance_delay_ms,
            "group.consumer.assignment.interval.ms": self.consumer_assignment_interval_ms,
            "group.consumer.migration.policy": self.migration_policy,
            "group.consumer.assignors": ",".join(self.consumer_assignors),
            "group.min.session.timeout.ms": self.min_session_timeout_ms,
            "group.max.session.timeout.ms": self.max_session_timeout_ms,
            "group.max.size": self.max_size,
            "group.consumer.max.size": self.consumer_max_size,
            "translate_topic_change_grace_ms": self.translate_topic_change_grace_ms,
        }


# CoordinatorSettings fields the simulation models (GatewaySpec), and those that do not change what a group
# does (where state and events are kept, which groups and instances, housekeeping); every other field that
# differs from its default is named as not modelled.
_MODELLED = {
    "consumer_session_timeout_ms", "consumer_heartbeat_interval_ms", "initial_rebalance_delay_ms",
    "consumer_assignment_interval_ms", "consumer_min_assignment_interval_ms", "consumer_max_assignment_interval_ms",
    "migration_policy", "consumer_assignors", "min_session_timeout_ms", "max_session_timeout_ms", "max_size",
    "consumer_max_size", "convert_builtin_sticky_userdata", "classic_groups", "consumer_assignor_offload_enable",
    "consumer_assignor_offload_min_size", "translate_topic_change_grace_ms",
    # Bounds the settings themselves were validated against.
    "consumer_min_session_timeout_ms", "consumer_max_session_timeout_ms", "consumer_min_heartbeat_interval_ms",
    "consumer_max_heartbeat_interval_ms",
}  # fmt: skip
_NO_GROUP_EFFECT = {
    "state_dir", "ephemeral_state", "state_topic_num_partitions", "state_topic", "state_topic_replication_factor",
    "state_topic_min_insync_replicas", "state_transactional_id_prefix", "state_write_timeout_ms",
    "state_preopen_transactions",
    "state_stall_check_ms", "rebalance_events", "rebalance_run", "background_threads", "metadata_refresh_s",
    "upstream_check_s", "leave_abandoned_upstream_members", "offsets_retention_minutes",
    "offsets_retention_check_interval_ms", "instances_session_timeout_ms", "instances_heartbeat_interval_ms",
    "instances_rebalance_timeout_ms", "cluster_group_configs_refresh_ms",
    # Judged below with what they mean for the fleet.
    "enabled", "managed_groups", "group_configs", "state_store", "fsync", "fsync_interval_ms",
    "state_append_linger_ms", "state_answer_stall_ms", "instances_group",
}  # fmt: skip


def gateway_from_settings(coordinator: CoordinatorSettings, source: str) -> GatewaySpec:
    """The simulated gateway of a gateway's ``[coordinator]`` settings, naming what it cannot model."""
    from gateway.config.coordinator import CoordinatorSettings

    c = coordinator.with_default_store()
    defaults = CoordinatorSettings()
    notes: list[str] = []
    if not c.enabled:
        notes.append("enabled = false: this gateway passes every group to the upstream cluster; the simulation "
                     "shows its own coordinator instead")
    if c.group_configs:
        notes.append(f"group_configs ({', '.join(sorted(c.group_configs))}): per-group overrides are not "
                     "applied to the simulated groups")
    if c.managed_groups != defaults.managed_groups:
        notes.append(f"managed_groups = {c.managed_groups!r}: every simulated group is treated as managed")
    if c.instances_group is not None:
        notes.append(f"instances_group = {c.instances_group!r}: a fleet of gateway instances (shard handovers) "
                     "is not modelled; one instance owns every group")
    store = c.effective_state_store
    if store == "kafka":
        notes.append(f"state_store = kafka (state_append_linger_ms = {c.state_append_linger_ms:g}, "
                     f"state_answer_stall_ms = {c.state_answer_stall_ms}): answers that wait for the state "
                     "write are not modelled; simulated answers are immediate")
    elif store == "file":
        notes.append(f"state_store = file (fsync = {c.fsync}): answers that wait for the state write are not "
                     "modelled; simulated answers are immediate")
    for name, value in c:
        if name in _MODELLED or name in _NO_GROUP_EFFECT:
            continue
        if value != getattr(defaults, name):
            notes.append(f"{name} = {value!r}: not modelled")
    return GatewaySpec(
        source=source,
        consumer_session_timeout_ms=c.consumer_session_timeout_ms,
        consumer_heartbeat_interval_ms=c.consumer_heartbeat_interval_ms,
        initial_rebalance_delay_ms=c.initial_rebalance_delay_ms,
        consumer_assignment_interval_ms=c.consumer_assignment_interval_ms,
        consumer_min_assignment_interval_ms=c.consumer_min_assignment_interval_ms,
        consumer_max_assignment_interval_ms=c.consumer_max_assignment_interval_ms,
        migration_policy=c.migration_policy,
        consumer_assignors=tuple(c.consumer_assignors),
        min_session_timeout_ms=c.min_session_timeout_ms,
        max_session_timeout_ms=c.max_session_timeout_ms,
        max_size=c.max_size,
        consumer_max_size=c.consumer_max_size,
        convert_builtin_sticky_userdata=c.convert_builtin_sticky_userdata,
        classic_groups=c.classic_groups,
        translate_topic_change_grace_ms=c.translate_topic_change_grace_ms,
        offload_enable=c.consumer_assignor_offload_enable,
        offload_min_size=c.consumer_assignor_offload_min_size,
        not_modelled=tuple(notes),
    )


def gateway_from_config(path: str | Path) -> GatewaySpec:
    """The coordinator settings of a gateway configuration file (the TOML ``groupgate serve --config`` reads;
    GROUPGATE_* environment variables are not read: the file alone describes the gateway)."""
    from gateway.config.settings import load_config

    return gateway_from_settings(load_config(path, environ={}).coordinator, str(path))


__all__ = [
    "CALIBRATED_VERSIONS", "ClientModel", "ClientSpec", "GatewaySpec", "REBALANCE_TIMEOUT_MS", "client_model",
    "client_slots", "gateway_from_config", "gateway_from_settings",
]
