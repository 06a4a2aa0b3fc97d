"""Coordinator configuration (Kafka's ``group.consumer.*`` settings) and the assignor registry.

``CoordinatorConfig.assignors`` maps a server assignor name to an object implementing
``coordinator.assignors.api.ServerAssignor``; the first entry is the default (Kafka's
``group.consumer.assignors``). ``default_assignors()`` builds ``{"uniform", "range"}`` from
coordinator/assignors lazily.

Member ids for v0 joins come from ``member_id_generator``: the gateway passes one backed by real
randomness (e.g. ``lambda: str(uuid.uuid4())``); the default is seeded, for simulations and tests.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from coordinator.assignors.api import ServerAssignor


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


@dataclass(slots=True)
class CoordinatorConfig:
    assignors: Mapping[str, ServerAssignor] = field(default_factory=dict)
    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_group_size: int | None = None  # group.consumer.max.size (unbounded by default)
    member_id_generator: Callable[[], str] = field(default_factory=seeded_member_ids)

    def __post_init__(self) -> None:
        if not self.assignors:
            self.assignors = default_assignors()
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("heartbeat interval must be lower than the session timeout")

    @property
    def default_assignor(self) -> str:
        return next(iter(self.assignors))
