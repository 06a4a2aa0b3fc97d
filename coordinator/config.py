"""Coordinator configuration (Kafka's ``group.consumer.*`` settings) and the assignor registry.

``CoordinatorConfig.assignors`` maps a server assignor name to an object implementing
``coordinator.assignors.api.ServerAssignor``; the first entry is the default (Kafka's
``group.consumer.assignors``). ``default_assignors()`` builds ``{"uniform", "range"}`` from
coordinator/assignors lazily.

Per-group overrides (Kafka's dynamic group configs ``consumer.session.timeout.ms``,
``consumer.heartbeat.interval.ms``, ``consumer.assignment.interval.ms``,
``consumer.assignor.offload.enable``) live in
``CoordinatorConfig.group_configs``; ``validate_group_config`` refuses a value outside the broker's
``group.consumer.min/max.*`` bounds as Kafka's ``GroupConfig.validate`` does, and the effective value
(``session_timeout_for`` etc.) is clamped into the bounds as Kafka's ``GroupConfig.evaluate`` does,
so that bounds narrowed later still apply.

Member ids for v0 joins come from ``member_id_generator``: the gateway passes one backed by real
randomness (e.g. ``lambda: str(uuid.uuid4())``); the default is seeded, for simulations and tests.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from coordinator.assignors.api import ServerAssignor

if TYPE_CHECKING:
    from coordinator.model import ConsumerGroup


def default_assignors() -> dict[str, ServerAssignor]:
    """Kafka's default ``group.consumer.assignors`` = [uniform, range], imported on first use."""
    from coordinator.assignors.range import RangeAssignor  # type: ignore[import-not-found,unused-ignore]
    from coordinator.assignors.uniform import UniformAssignor  # type: ignore[import-not-found,unused-ignore]

    uniform: ServerAssignor = UniformAssignor()
    rng: ServerAssignor = RangeAssignor()
    return {"uniform": uniform, "range": rng}


def seeded_member_ids(seed: int = 0) -> Callable[[], str]:
    rnd = random.Random(seed)
    return lambda: str(uuid.UUID(int=rnd.getrandbits(128), version=4))


# Kafka's dynamic group config names (GroupConfig) for consumer groups.
CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"
CONSUMER_ASSIGNMENT_INTERVAL_MS = "consumer.assignment.interval.ms"
# KIP-1263, a boolean (kept as 1 / 0 among the integers): offload this group's target computations.
CONSUMER_ASSIGNOR_OFFLOAD_ENABLE = "consumer.assignor.offload.enable"
GROUP_CONFIG_NAMES = (
    CONSUMER_SESSION_TIMEOUT_MS,
    CONSUMER_HEARTBEAT_INTERVAL_MS,
    CONSUMER_ASSIGNMENT_INTERVAL_MS,
    CONSUMER_ASSIGNOR_OFFLOAD_ENABLE,
)


# members x subscribed partitions from which a group's target is computed off the driver's loop
DEFAULT_OFFLOAD_MIN_SIZE = 1_000_000


def _clamp(value: int, low: int | None, high: int | None) -> int:
    if low is not None and value < low:
        return low
    if high is not None and value > high:
        return high
    return value


def group_config_error(
    configs: Mapping[str, int],
    *,
    session_timeout_ms: int,
    heartbeat_interval_ms: int,
    bounds: Mapping[str, tuple[int | None, int | None]],
) -> str | None:
    """Kafka's ``GroupConfig.validate`` for the consumer group configs: an unknown name, a value below
    the type's floor (0 for the assignment interval, else 1) or outside the broker's min/max bounds,
    and a session timeout not above the heartbeat interval (the broker's where not overridden) are
    refused. Returns the reason, or None when valid."""
    for name, value in configs.items():
        if name not in GROUP_CONFIG_NAMES:
            return f"Unknown group config name: {name}"
        if name == CONSUMER_ASSIGNOR_OFFLOAD_ENABLE:
            if value not in (0, 1):  # True / False, or 1 / 0 as read from the cluster
                return f"{name} must be true or false"
            continue
        floor = 0 if name == CONSUMER_ASSIGNMENT_INTERVAL_MS else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < floor:
            return f"{name} must be an integer of at least {floor}"
        low, high = bounds.get(name, (None, None))
        if (low is not None and value < low) or (high is not None and value > high):
            return f"{name} must be in the range {low} to {high} inclusive."
    if CONSUMER_SESSION_TIMEOUT_MS in configs or CONSUMER_HEARTBEAT_INTERVAL_MS in configs:
        session = configs.get(CONSUMER_SESSION_TIMEOUT_MS, session_timeout_ms)
        heartbeat = configs.get(CONSUMER_HEARTBEAT_INTERVAL_MS, heartbeat_interval_ms)
        if session <= heartbeat:
            return f"{CONSUMER_SESSION_TIMEOUT_MS} must be greater than {CONSUMER_HEARTBEAT_INTERVAL_MS}"
    return None


@dataclass(slots=True)
class CoordinatorConfig:
    assignors: Mapping[str, ServerAssignor] = field(default_factory=dict)
    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_group_size: int | None = None  # group.consumer.max.size (unbounded by default)
    member_id_generator: Callable[[], str] = field(default_factory=seeded_member_ids)
    # KIP-1263: a group computes a new target assignment at most once per interval (the first one of
    # a group at once); 0 computes on every epoch bump (Kafka < 4.3).
    assignment_interval_ms: int = 1_000  # group.consumer.assignment.interval.ms
    min_assignment_interval_ms: int = 0  # group.consumer.min.assignment.interval.ms
    max_assignment_interval_ms: int = 15_000  # group.consumer.max.assignment.interval.ms
    # Bounds of the per-group session timeout / heartbeat interval (group.consumer.min/max.*). None:
    # unbounded; the gateway passes Kafka's defaults (45000/60000, 5000/15000).
    min_session_timeout_ms: int | None = None
    max_session_timeout_ms: int | None = None
    min_heartbeat_interval_ms: int | None = None
    max_heartbeat_interval_ms: int | None = None
    # KIP-1263 group.consumer.assignor.offload.enable: False = every target is computed inline (a driver
    # that runs no jobs, e.g. the simulator, leaves it so); True = a heartbeat whose group has at least
    # ``offload_min_size`` members x subscribed partitions hands its computation to the driver as an
    # ``AssignmentJob`` instead (the group's first computation always runs inline). A group's
    # ``consumer.assignor.offload.enable`` overrides it for that group.
    offload_enable: bool = False
    offload_min_size: int = DEFAULT_OFFLOAD_MIN_SIZE
    # Per-group overrides: group id -> {Kafka group config name: value}.
    group_configs: dict[str, dict[str, int]] = field(default_factory=dict)
    # The layer above may choose a group's assignor itself (translate mode: a purely classic group's
    # common protocol, computed by the built-in strategy of that name); None from it, or no hook, leaves
    # the choice to KIP-848's selection. A pure function of the group: it is called for every target
    # computation and every describe.
    group_assignor: Callable[[ConsumerGroup], tuple[str, ServerAssignor] | None] | None = None

    def __post_init__(self) -> None:
        if not self.assignors:
            self.assignors = default_assignors()
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("heartbeat interval must be lower than the session timeout")
        if not 0 <= self.min_assignment_interval_ms <= self.max_assignment_interval_ms:
            raise ValueError(
                "group.consumer.max.assignment.interval.ms must be greater than or equal to "
                "group.consumer.min.assignment.interval.ms (both at least 0)"
            )
        if not self.min_assignment_interval_ms <= self.assignment_interval_ms <= self.max_assignment_interval_ms:
            raise ValueError("group.consumer.assignment.interval.ms must lie within its min/max bounds")
        for name, value, low, high in (
            ("group.consumer.session.timeout.ms", self.session_timeout_ms,
             self.min_session_timeout_ms, self.max_session_timeout_ms),
            ("group.consumer.heartbeat.interval.ms", self.heartbeat_interval_ms,
             self.min_heartbeat_interval_ms, self.max_heartbeat_interval_ms),
        ):
            if _clamp(value, low, high) != value:
                raise ValueError(f"{name} must lie within its min/max bounds")
        for group_id, configs in self.group_configs.items():
            err = self.validate_group_config(configs)
            if err is not None:
                raise ValueError(f"group {group_id!r}: {err}")

    def _bounds(self, name: str) -> tuple[int | None, int | None]:
        if name == CONSUMER_SESSION_TIMEOUT_MS:
            return self.min_session_timeout_ms, self.max_session_timeout_ms
        if name == CONSUMER_HEARTBEAT_INTERVAL_MS:
            return self.min_heartbeat_interval_ms, self.max_heartbeat_interval_ms
        return self.min_assignment_interval_ms, self.max_assignment_interval_ms

    def validate_group_config(self, configs: Mapping[str, int]) -> str | None:
        """Kafka's ``GroupConfig.validate`` for the consumer group configs (see ``group_config_error``)."""
        return group_config_error(
            configs,
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            bounds={name: self._bounds(name) for name in GROUP_CONFIG_NAMES},
        )

    def _effective(self, group_id: str, name: str, default: int) -> int:
        value = self.group_configs.get(group_id, {}).get(name)
        if value is None:
            return default
        low, high = self._bounds(name)
        return _clamp(value, low, high)  # GroupConfig.evaluate: bounds narrowed since still apply

    def session_timeout_for(self, group_id: str) -> int:
        return self._effective(group_id, CONSUMER_SESSION_TIMEOUT_MS, self.session_timeout_ms)

    def heartbeat_interval_for(self, group_id: str) -> int:
        return self._effective(group_id, CONSUMER_HEARTBEAT_INTERVAL_MS, self.heartbeat_interval_ms)

    def assignment_interval_for(self, group_id: str) -> int:
        return self._effective(group_id, CONSUMER_ASSIGNMENT_INTERVAL_MS, self.assignment_interval_ms)

    def offload_min_size_for(self, group_id: str) -> int | None:
        """The group's offload threshold (KIP-1263): None when its computations run inline."""
        enabled = self.group_configs.get(group_id, {}).get(CONSUMER_ASSIGNOR_OFFLOAD_ENABLE)
        on = self.offload_enable if enabled is None else bool(enabled)
        return self.offload_min_size if on else None

    @property
    def default_assignor(self) -> str:
        return next(iter(self.assignors))
