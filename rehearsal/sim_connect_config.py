"""The settings of a simulated connect group (rehearsal/sim_connect.py) and its units: the connectors and
tasks it runs, and their partition-shaped names in the event log (``events.CONNECTOR_PREFIX``,
``events.TASK_PREFIX``)."""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.connect.model import ConnectAssignment
from coordinator.connect.service import ConnectConfig
from rehearsal import events as ev

GROUP_ID = "connect-cluster"
ASSIGNOR = "sessioned"
SCENARIOS: tuple[str, ...] = ("rolling-restart", "crashes")
# Connect's defaults: rebalance.timeout.ms and scheduled.rebalance.max.delay.ms.
REBALANCE_TIMEOUT_MS = 60_000
SCHEDULED_REBALANCE_DELAY_MS = 300_000
_COORDINATOR = ConnectConfig()


@dataclass(frozen=True, slots=True)
class ConnectSimConfig:
    seed: int
    scenario: str = "rolling-restart"
    workers: int = 3
    connectors: int = 4
    tasks_per_connector: int = 3
    # How many workers the crashes scenario kills (one after another); default a fifth, at least one.
    disturbances: int | None = None
    scheduled_delay_ms: int = SCHEDULED_REBALANCE_DELAY_MS
    rebalance_timeout_ms: int = REBALANCE_TIMEOUT_MS
    # The coordinator's settings (ConnectConfig's defaults are the gateway's for every connect group).
    session_timeout_ms: int = _COORDINATOR.session_timeout_ms
    heartbeat_interval_ms: int = _COORDINATOR.heartbeat_interval_ms
    network_ms: tuple[int, int] = (1, 5)
    # Starting / stopping a batch of connectors and tasks, and the assignor's own work.
    start_stop_ms: tuple[int, int] = (20, 300)
    compute_ms: tuple[int, int] = (1, 20)
    # Rolling restart: how long a stopped worker stays down, and the pause before the next one.
    restart_gap_ms: tuple[int, int] = (500, 3_000)
    restart_pace_ms: tuple[int, int] = (5_000, 10_000)
    # Crashes: the time between kills and how long the supervisor takes to start the worker again.
    crash_spacing_ms: tuple[int, int] = (20_000, 40_000)
    crash_restart_ms: tuple[int, int] = (1_000, 5_000)

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ValueError(f"unknown connect scenario {self.scenario!r}; known: {', '.join(SCENARIOS)}")
        if self.workers < 1 or self.connectors < 1 or self.tasks_per_connector < 0:
            raise ValueError("a connect rehearsal needs workers >= 1, connectors >= 1 and tasks >= 0")

    @property
    def kills(self) -> int:
        return self.disturbances if self.disturbances is not None else max(1, self.workers // 5)


def connector_names(n: int) -> list[str]:
    return [f"conn-{i:02d}" for i in range(n)]


def all_units(cfg: ConnectSimConfig) -> ConnectAssignment:
    names = connector_names(cfg.connectors)
    return ConnectAssignment(
        frozenset(names), frozenset((c, t) for c in names for t in range(cfg.tasks_per_connector))
    )


def unit_tps(a: ConnectAssignment) -> list[tuple[str, int]]:
    """A connect assignment as the event log's partition-shaped units."""
    return sorted([(ev.CONNECTOR_PREFIX + c, 0) for c in a.connectors] + [(ev.TASK_PREFIX + c, t) for c, t in a.tasks])
