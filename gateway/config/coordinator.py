"""The ``coordinator`` section of the gateway configuration: the group coordinator the gateway runs.

Settings carry Kafka's broker config names and defaults where Kafka has them; each field accepts
its Kafka name too (``"group.consumer.session.timeout.ms" = 10000`` in the TOML ``[coordinator]``
table). ``service_configs()`` maps them onto the sans-I/O layers' CoordinatorConfig and
GroupServiceConfig.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Literal

import re2
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

if TYPE_CHECKING:
    from coordinator.config import CoordinatorConfig
    from translate.group_config import GroupServiceConfig

# The cluster state store's defaults (gateway/state/topic.py), here so that reading settings stays cheap.
DEFAULT_STATE_TOPIC = "__groupgate_groups"
DEFAULT_STATE_TRANSACTIONAL_ID_PREFIX = "groupgate-groups-"
_TOPIC_NAME = re2.compile(r"[a-zA-Z0-9._-]{1,249}")

# The server assignors coordinator/assignors provides (Kafka's group.consumer.assignors names). Known
# here without importing the coordinator, so that reading the configuration stays cheap.
KNOWN_ASSIGNORS = ("uniform", "range")


def _kafka(name: str, kafka_name: str) -> Any:
    return AliasChoices(name, kafka_name)


class CoordinatorSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)

    # False: every group API passes through to the upstream as before.
    enabled: bool = True
    # RE2 pattern (whole group id) of the groups the gateway coordinates; others pass through untouched.
    managed_groups: str = ".*"
    # Where the group state log lives; None keeps group state in memory only (lost on restart), which
    # `serve` accepts only with ephemeral_state.
    state_dir: str | None = None
    # Run without a state_dir on purpose: after a restart every managed group starts empty and all its
    # members rejoin (offsets are kept: they live in the cluster).
    ephemeral_state: bool = False
    # How many shards the group state is split into: a group belongs to shard
    # abs(java_hash(group_id)) % P, as Kafka places a group on a partition of __consumer_offsets
    # (offsets.topic.num.partitions, default 50). Each shard has its own log, request ordering and timers,
    # and fails and reloads alone. The state is written with P: a state store refuses to start with another.
    state_topic_num_partitions: int = Field(
        default=50,
        ge=1,
        le=10_000,
        validation_alias=_kafka("state_topic_num_partitions", "state.topic.num.partitions"),
    )
    fsync: Literal["always", "interval", "never"] = "always"
    fsync_interval_ms: int = Field(default=100, ge=1)
    # Where group state is kept: "kafka" (a compacted topic of the upstream cluster, one partition per
    # shard: gateway/state/topic.py, docs/ARCHITECTURE.md) or "file" (the shard logs under state_dir).
    # None: "file" when state_dir is set, else memory only. `serve` and `dev` choose "kafka" unless told
    # otherwise (state_dir, or ephemeral_state for memory on purpose).
    state_store: Literal["file", "kafka"] | None = None
    # The cluster store's topic; created at start when missing (cleanup.policy=compact), verified when present.
    state_topic: str = DEFAULT_STATE_TOPIC
    # None: min(3, brokers in the cluster), as Kafka's internal topics are usually replicated.
    state_topic_replication_factor: int | None = Field(default=None, ge=1)
    # The topic's min.insync.replicas; None: min(2, replication factor).
    state_topic_min_insync_replicas: int | None = Field(default=None, ge=1)
    # Shard N is written by the transactional id <prefix>N; a new owner of the id fences the older one.
    state_transactional_id_prefix: str = Field(default=DEFAULT_STATE_TRANSACTIONAL_ID_PREFIX, min_length=1)
    # How long a shard waits for more appends before each transaction. 0: none; appends made while a
    # transaction is in flight share the next one anyway.
    state_append_linger_ms: float = Field(
        default=0, ge=0, validation_alias=_kafka("state_append_linger_ms", "group.coordinator.append.linger.ms")
    )
    # One transaction (with the client's retries across leader changes) gives up after this long; the
    # shard must then be re-opened.
    state_write_timeout_ms: int = Field(default=30_000, ge=1)
    # Open each shard's next transaction (and add its partition) as soon as one commits, so that a group
    # change costs two round trips to the cluster instead of three; one left empty is committed after
    # 10 s. False: each write begins its own transaction.
    state_preopen_transactions: bool = True
    # With the cluster store: an event loop that stood still this long (the process was paused) proves it
    # still owns its shards (an owner-marker write each) before serving from memory again; a newer owner
    # has fenced it otherwise. 0: off.
    state_stall_check_ms: int = Field(default=5_000, ge=0)
    # With the cluster store: an answer that has waited this long for its shard's write (a state partition
    # leader or the transaction coordinator moving) is answered NOT_COORDINATOR, and the client retries;
    # the write goes on. Kept below clients' heartbeat request timeouts (librdkafka timed a
    # ConsumerGroupHeartbeat out after 1 s with a 500 ms heartbeat interval). 0: answers wait for the write.
    state_answer_stall_ms: int = Field(default=500, ge=0)
    # Several instances sharing the shards (gateway/fleet/membership.py): the id of the classic consumer group,
    # on the state topic, through which the instances with the same configuration find each other and
    # split the shards (its members are the instances, its partitions the shards). None: this instance
    # owns every shard. Needs state_store "kafka".
    instances_group: str | None = Field(default=None, min_length=1)
    # That group's session.timeout.ms: an instance that stops heartbeating (SIGKILL, a lost host) has its
    # shards taken over after this long, so it bounds failover time (the brokers' group.min.session.timeout.ms
    # is its floor, 6000 by default).
    instances_session_timeout_ms: int = Field(default=10_000, ge=1)
    # heartbeat.interval.ms of that group: how soon the others notice a rebalance (a join or a leave).
    instances_heartbeat_interval_ms: int = Field(default=1_000, ge=1)
    # rebalance.timeout.ms of that group: how long a rebalance waits for every instance to rejoin, which
    # bounds how long an instance may take to drain a shard it hands over.
    instances_rebalance_timeout_ms: int = Field(default=30_000, ge=1)
    # How often the topic image is refreshed from the upstream (also refreshed on demand).
    metadata_refresh_s: float = Field(default=5.0, gt=0)
    # How often the consumer lag of the managed groups is computed in the background for /metrics
    # (committed offsets against log end offsets, gateway/groups/lag.py); 0: never.
    lag_refresh_s: float = Field(default=15.0, ge=0)
    # How often managed groups are checked for members on the upstream coordinator (clients that bypass
    # the gateway); 0 disables the periodic check (a commit error still triggers one).
    upstream_check_s: float = Field(default=30.0, ge=0)
    # A member id a client presents for a managed group and the gateway does not know is one the client
    # left on the upstream coordinator (a group taken over while live): remove it there (gateway/groups/adoption.py).
    leave_abandoned_upstream_members: bool = True

    # Where the gateway appends its rebalance events (JSON lines, docs/rehearsal-events.md); None: off.
    rebalance_events: str | None = None
    # The ``run`` of those events: groups of different runs are analysed as distinct groups.
    rebalance_run: str = Field(default="gateway", min_length=1)

    classic_groups: Literal["native", "translate"] = "native"
    migration_policy: Literal["bidirectional", "upgrade", "downgrade", "disabled"] = Field(
        default="bidirectional",
        validation_alias=_kafka("migration_policy", "group.consumer.migration.policy"),
    )
    # groupgate's own (Kafka has no such setting): convert classic groups whose assignments carry a
    # built-in sticky assignor's copy of the subscription userData (librdkafka leaders write one),
    # which Kafka 4.x refuses (KAFKA-18134); False refuses them as Kafka does. Custom userData is
    # always refused.
    convert_builtin_sticky_userdata: bool = Field(
        default=True,
        validation_alias=_kafka(
            "convert_builtin_sticky_userdata", "group.consumer.convert.builtin.sticky.userdata"
        ),
    )
    consumer_assignors: list[str] = Field(
        default_factory=lambda: ["uniform", "range"],
        validation_alias=_kafka("consumer_assignors", "group.consumer.assignors"),
    )
    consumer_session_timeout_ms: int = Field(
        default=45_000,
        ge=1,
        validation_alias=_kafka("consumer_session_timeout_ms", "group.consumer.session.timeout.ms"),
    )
    consumer_min_session_timeout_ms: int = Field(
        default=45_000,
        ge=1,
        validation_alias=_kafka("consumer_min_session_timeout_ms", "group.consumer.min.session.timeout.ms"),
    )
    consumer_max_session_timeout_ms: int = Field(
        default=60_000,
        ge=1,
        validation_alias=_kafka("consumer_max_session_timeout_ms", "group.consumer.max.session.timeout.ms"),
    )
    consumer_heartbeat_interval_ms: int = Field(
        default=5_000,
        ge=1,
        validation_alias=_kafka("consumer_heartbeat_interval_ms", "group.consumer.heartbeat.interval.ms"),
    )
    consumer_min_heartbeat_interval_ms: int = Field(
        default=5_000,
        ge=1,
        validation_alias=_kafka(
            "consumer_min_heartbeat_interval_ms", "group.consumer.min.heartbeat.interval.ms"
        ),
    )
    consumer_max_heartbeat_interval_ms: int = Field(
        default=15_000,
        ge=1,
        validation_alias=_kafka(
            "consumer_max_heartbeat_interval_ms", "group.consumer.max.heartbeat.interval.ms"
        ),
    )
    # KIP-1263: a consumer group computes a new target assignment at most once per interval.
    consumer_assignment_interval_ms: int = Field(
        default=1_000,
        ge=0,
        validation_alias=_kafka("consumer_assignment_interval_ms", "group.consumer.assignment.interval.ms"),
    )
    consumer_min_assignment_interval_ms: int = Field(
        default=0,
        ge=0,
        validation_alias=_kafka(
            "consumer_min_assignment_interval_ms", "group.consumer.min.assignment.interval.ms"
        ),
    )
    consumer_max_assignment_interval_ms: int = Field(
        default=15_000,
        ge=0,
        validation_alias=_kafka(
            "consumer_max_assignment_interval_ms", "group.consumer.max.assignment.interval.ms"
        ),
    )
    # KIP-1263: compute large groups' target assignments on worker threads instead of the event loop
    # (docs/gateway.md, "Assignment offload").
    consumer_assignor_offload_enable: bool = Field(
        default=True,
        validation_alias=_kafka("consumer_assignor_offload_enable", "group.consumer.assignor.offload.enable"),
    )
    # groupgate's own: offload only a group of at least this many members x subscribed partitions;
    # smaller ones compute inline (measured: well under 5 ms), so their members get it in the same answer.
    consumer_assignor_offload_min_size: int = Field(
        default=1_000_000,
        ge=0,
        validation_alias=_kafka(
            "consumer_assignor_offload_min_size", "group.consumer.assignor.offload.min.size"
        ),
    )
    # Kafka's worker threads for offloaded assignments (and regex resolution, which groupgate does inline).
    background_threads: int = Field(
        default=2,
        ge=1,
        validation_alias=_kafka("background_threads", "group.coordinator.background.threads"),
    )
    # Kafka's dynamic group configs, per managed group: {group id: {"consumer.session.timeout.ms" |
    # "consumer.heartbeat.interval.ms" | "consumer.assignment.interval.ms" | "consumer.assignor.offload.enable"
    # (true / false): value}}. IncrementalAlterConfigs
    # passes through to the cluster, which stores them; the gateway reads them back from the cluster
    # (gateway/groups/cluster_configs.py). A value here overrides the cluster's for that group and name.
    group_configs: dict[str, dict[str, int]] = Field(default_factory=dict)
    # How often the dynamic group configs of the consumer groups the gateway coordinates are read from
    # the cluster (DescribeConfigs, resource type GROUP); a group's first member also reads them before
    # it joins. 0: never read them (only group_configs above and the group.consumer.* defaults apply).
    cluster_group_configs_refresh_ms: int = Field(default=10_000, ge=0)
    consumer_max_size: int | None = Field(
        default=None, ge=1, validation_alias=_kafka("consumer_max_size", "group.consumer.max.size")
    )
    min_session_timeout_ms: int = Field(
        default=6_000, ge=1, validation_alias=_kafka("min_session_timeout_ms", "group.min.session.timeout.ms")
    )
    max_session_timeout_ms: int = Field(
        default=1_800_000,
        ge=1,
        validation_alias=_kafka("max_session_timeout_ms", "group.max.session.timeout.ms"),
    )
    initial_rebalance_delay_ms: int = Field(
        default=3_000,
        ge=0,
        validation_alias=_kafka("initial_rebalance_delay_ms", "group.initial.rebalance.delay.ms"),
    )
    max_size: int = Field(default=2**31 - 1, ge=1, validation_alias=_kafka("max_size", "group.max.size"))
    # Translate mode: how long a translated classic member is left to notice a change of its topics
    # itself before it is told to rejoin (docs/gateway.md, "Topic changes").
    translate_topic_change_grace_ms: int = Field(default=3_000, ge=0)
    # A group Empty this long is deleted from the gateway's state (Kafka deletes an empty group when its
    # offsets expired; docs/operations.md). Kafka takes whole minutes; fractions are accepted (tests).
    offsets_retention_minutes: float = Field(
        default=10_080, gt=0, validation_alias=_kafka("offsets_retention_minutes", "offsets.retention.minutes")
    )
    offsets_retention_check_interval_ms: int = Field(
        default=600_000,
        ge=1,
        validation_alias=_kafka(
            "offsets_retention_check_interval_ms", "offsets.retention.check.interval.ms"
        ),
    )

    @field_validator("managed_groups")
    @classmethod
    def _check_pattern(cls, v: str) -> str:
        try:
            re2.compile(v)
        except Exception as e:  # noqa: BLE001 - re2.error
            raise ValueError(f"managed_groups is not a valid RE2 pattern: {e}") from None
        return v

    @field_validator("state_topic")
    @classmethod
    def _check_state_topic(cls, v: str) -> str:
        if v in (".", "..") or not _TOPIC_NAME.fullmatch(v):
            raise ValueError(f"state_topic {v!r} is not a legal Kafka topic name")
        return v

    @field_validator("rebalance_events")
    @classmethod
    def _check_events_uri(cls, v: str | None) -> str | None:
        # kafka://BOOTSTRAP/TOPIC produces the events to a topic (gateway/groups/rebalance_log.py); checked here so
        # that a malformed one stops the start-up with a settings error, not later.
        if v is not None and v.startswith("kafka://"):
            servers, _, topic = v[len("kafka://") :].partition("/")
            if not servers or not topic or "/" in topic:
                raise ValueError(f"rebalance_events: expected kafka://BOOTSTRAP/TOPIC, got {v!r}")
        return v

    @field_validator("consumer_assignors", mode="before")
    @classmethod
    def _split_assignors(cls, v: Any) -> Any:
        if isinstance(v, str):  # Kafka's list syntax: "uniform,range"
            return [x.strip() for x in v.split(",") if x.strip()]
        return v

    @model_validator(mode="after")
    def _check_state_store(self) -> CoordinatorSettings:
        if self.state_store == "file" and self.state_dir is None:
            raise ValueError("state_store = \"file\" needs state_dir (--state-dir)")
        if self.state_store == "kafka" and (self.state_dir is not None or self.ephemeral_state):
            raise ValueError(
                "state_store = \"kafka\" keeps group state in the cluster: drop state_dir / ephemeral_state"
            )
        if self.state_dir is not None and self.ephemeral_state:
            raise ValueError("state_dir and ephemeral_state: set one, not both")
        if self.instances_group is not None and (self.state_dir is not None or self.ephemeral_state):
            raise ValueError("instances_group: instances share their shards through the cluster's state topic "
                             "(state_store \"kafka\"), not a state_dir or memory")
        if self.instances_heartbeat_interval_ms >= self.instances_session_timeout_ms:
            raise ValueError("instances_heartbeat_interval_ms must be lower than instances_session_timeout_ms")
        return self

    @property
    def effective_state_store(self) -> Literal["file", "kafka", "memory"]:
        """Where group state is kept: the explicit ``state_store``, else the file logs under ``state_dir``,
        else memory."""
        if self.state_store is not None:
            return self.state_store
        return "file" if self.state_dir is not None else "memory"

    def with_default_store(self) -> CoordinatorSettings:
        """The settings `serve` and `dev` run with: group state in the cluster's state topic unless a
        state_dir, ephemeral_state or state_store says otherwise (or the coordinator is off)."""
        if self.enabled and self.state_store is None and self.state_dir is None and not self.ephemeral_state:
            return self.model_copy(update={"state_store": "kafka"})
        return self

    @model_validator(mode="after")
    def _check_bounds(self) -> CoordinatorSettings:
        known = set(KNOWN_ASSIGNORS)
        unknown = [a for a in self.consumer_assignors if a not in known]
        if unknown or not self.consumer_assignors:
            raise ValueError(f"group.consumer.assignors: unknown {unknown}; known: {sorted(known)}")
        if not (
            self.consumer_min_session_timeout_ms
            <= self.consumer_session_timeout_ms
            <= self.consumer_max_session_timeout_ms
        ):
            raise ValueError("group.consumer.session.timeout.ms must lie within its min/max bounds")
        if not (
            self.consumer_min_heartbeat_interval_ms
            <= self.consumer_heartbeat_interval_ms
            <= self.consumer_max_heartbeat_interval_ms
        ):
            raise ValueError("group.consumer.heartbeat.interval.ms must lie within its min/max bounds")
        if self.consumer_heartbeat_interval_ms >= self.consumer_session_timeout_ms:
            raise ValueError("group.consumer.heartbeat.interval.ms must be lower than the session timeout")
        if self.consumer_min_assignment_interval_ms > self.consumer_max_assignment_interval_ms:
            raise ValueError(
                "group.consumer.max.assignment.interval.ms must be greater than or equal to "
                "group.consumer.min.assignment.interval.ms"
            )
        if not (
            self.consumer_min_assignment_interval_ms
            <= self.consumer_assignment_interval_ms
            <= self.consumer_max_assignment_interval_ms
        ):
            raise ValueError("group.consumer.assignment.interval.ms must lie within its min/max bounds")
        self._check_group_configs()
        if self.min_session_timeout_ms > self.max_session_timeout_ms:
            raise ValueError("group.min.session.timeout.ms exceeds group.max.session.timeout.ms")
        return self

    def _check_group_configs(self) -> None:
        from coordinator.config import (
            CONSUMER_ASSIGNMENT_INTERVAL_MS,
            CONSUMER_HEARTBEAT_INTERVAL_MS,
            CONSUMER_SESSION_TIMEOUT_MS,
            group_config_error,
        )

        bounds = {
            CONSUMER_SESSION_TIMEOUT_MS: (self.consumer_min_session_timeout_ms, self.consumer_max_session_timeout_ms),
            CONSUMER_HEARTBEAT_INTERVAL_MS: (
                self.consumer_min_heartbeat_interval_ms, self.consumer_max_heartbeat_interval_ms
            ),
            CONSUMER_ASSIGNMENT_INTERVAL_MS: (
                self.consumer_min_assignment_interval_ms, self.consumer_max_assignment_interval_ms
            ),
        }
        for group_id, configs in self.group_configs.items():
            err = group_config_error(
                configs,
                session_timeout_ms=self.consumer_session_timeout_ms,
                heartbeat_interval_ms=self.consumer_heartbeat_interval_ms,
                bounds=bounds,
            )
            if err is not None:
                raise ValueError(f"group_configs.{group_id}: {err}")

    def service_configs(self) -> tuple[GroupServiceConfig, CoordinatorConfig]:
        from coordinator.config import CoordinatorConfig, default_assignors
        from translate.classic_rebalance import ClassicGroupConfig
        from translate.group_config import GroupServiceConfig

        assignors = default_assignors()
        coordinator = CoordinatorConfig(
            assignors={name: assignors[name] for name in self.consumer_assignors},
            session_timeout_ms=self.consumer_session_timeout_ms,
            heartbeat_interval_ms=self.consumer_heartbeat_interval_ms,
            max_group_size=self.consumer_max_size,
            member_id_generator=lambda: str(uuid.uuid4()),
            assignment_interval_ms=self.consumer_assignment_interval_ms,
            min_assignment_interval_ms=self.consumer_min_assignment_interval_ms,
            max_assignment_interval_ms=self.consumer_max_assignment_interval_ms,
            # The bounds constrain the per-group overrides (Kafka's GroupConfig), not only the start.
            min_session_timeout_ms=self.consumer_min_session_timeout_ms,
            max_session_timeout_ms=self.consumer_max_session_timeout_ms,
            min_heartbeat_interval_ms=self.consumer_min_heartbeat_interval_ms,
            max_heartbeat_interval_ms=self.consumer_max_heartbeat_interval_ms,
            group_configs={gid: dict(c) for gid, c in self.group_configs.items()},
            offload_enable=self.consumer_assignor_offload_enable,
            offload_min_size=self.consumer_assignor_offload_min_size,
        )
        service = GroupServiceConfig(
            migration_policy=self.migration_policy,
            classic_groups=self.classic_groups,
            convert_builtin_sticky_userdata=self.convert_builtin_sticky_userdata,
            classic=ClassicGroupConfig(
                min_session_timeout_ms=self.min_session_timeout_ms,
                max_session_timeout_ms=self.max_session_timeout_ms,
                initial_rebalance_delay_ms=self.initial_rebalance_delay_ms,
                max_size=self.max_size,
                topic_change_grace_ms=self.translate_topic_change_grace_ms,
            ),
            offsets_retention_ms=max(1, round(self.offsets_retention_minutes * 60_000)),
        )
        return service, coordinator
