"""What a simulation run is made of, derived from its seed: the scenario and its parameters.

``scenario_config(seed)`` picks the scenario as ``seed % len(available scenarios)`` (any 1,000
consecutive seeds cover all of them) and draws everything else from its own generator, so a run is
reproduced from the seed alone. The draws keep their order: a new parameter is drawn last, so that
the seeds already known keep meaning the same runs.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rehearsal.sim_assignors import COOPERATIVE_ASSIGNOR, EAGER_ASSIGNORS
from rehearsal.sim_endpoint import EndpointConfig, ServiceEndpoint

# How a roll is paced (the simulator's rolling upgrades and restarts, and the real rolls a fleet calibration
# plays against them: compat_tests/upgrade/fleet_roll.py): members start within START_SPREAD_MS of the group's
# start; the first step comes ROLL_FIRST_MS plus a gap after it, each next one a gap later; a stopped member's
# successor starts ROLL_RESTART_MS after the stop; GRACEFUL_SHARE of the steps stop their member cleanly (a
# LeaveGroup), the others kill it (its session timeout fences it).
START_SPREAD_MS = 400
ROLL_FIRST_MS = 2_000
ROLL_GAP_MS = (1_500, 4_000)
ROLL_RESTART_MS = (10, 1_500)
GRACEFUL_SHARE = 0.8

# Scenarios; the seed picks one (seed modulo the list), so any 1,000 consecutive seeds cover all.
SCENARIOS: tuple[str, ...] = (
    "classic-eager",
    "classic-cooperative",
    "consumer",
    "translate-eager",
    "translate-cooperative",
    "mixed",
    "upgrade-translate",
    "downgrade-translate",
    "downgrade-native",
    "upgrade-native",
)


@dataclass(slots=True)
class SimConfig:
    seed: int
    scenario: str
    classic_mode: str
    members: int
    topics: dict[str, int]
    subscribed: frozenset[str]
    classic_assignor: str
    server_assignor: str | None
    loss_rate: float
    crashes: int
    slow_members: int
    topic_changes: int
    active_ms: int
    rolling_reuse_ids: bool
    static_members: bool = False
    scale_outs: int = 0
    scale_ins: int = 0
    failovers: int = 0
    checkpoint_every: int = 100
    quiet_limit_ms: int = 120_000
    max_steps: int = 60_000
    graceful_share: float = GRACEFUL_SHARE
    # When a roll's first step may come (before its gap): ROLL_FIRST_MS after the group's start, later for a
    # fleet whose members take long to reach the group or whose gateway delays its first rebalance.
    roll_first_ms: int = ROLL_FIRST_MS


def scenario_config(seed: int, scenario: str | None = None, scenarios: tuple[str, ...] | None = None) -> SimConfig:
    """Everything about a run, derived from its seed (the scenario: seed modulo the available ones)."""
    rng = random.Random(seed * 7919 + 17)
    if scenario is None:
        scenarios = scenarios or available_scenarios()
        scenario = scenarios[seed % len(scenarios)]
    cooperative = "cooperative" in scenario or (scenario not in ("classic-eager", "translate-eager") and rng.random() < 0.5)
    n_topics = rng.randint(1, 3)
    topics = {f"topic-{i}": rng.randint(1, 6) for i in range(n_topics)}
    subscribed = frozenset(t for t in topics if t == "topic-0" or rng.random() < 0.7)
    native = scenario.startswith("classic") or scenario.endswith("-native")
    static_members = rng.random() < 0.3
    topic_changes = rng.choice((0, 0, 1))
    if static_members and native:
        # A classic group of static members can end up with no client that knows it leads: a static
        # leader restarted after partitions were added while it was down skips the assignment
        # (KIP-814) and takes the new metadata as its baseline; a group downgraded by a static
        # takeover has a leader that joined as a follower. Nobody then asks for a rebalance when
        # partitions are added: client-side assignment's blind spot (docs/simulation.md).
        topic_changes = 0
    config = SimConfig(
        seed=seed,
        scenario=scenario,
        classic_mode="native" if native else "translate",
        members=rng.randint(2, 6),
        topics=topics,
        subscribed=subscribed,
        classic_assignor=COOPERATIVE_ASSIGNOR if cooperative else rng.choice(EAGER_ASSIGNORS),
        server_assignor=rng.choice((None, "uniform", "range")),
        loss_rate=rng.choice((0.0, 0.0, 0.02, 0.08)),
        crashes=rng.choice((0, 0, 1, 2)),
        slow_members=rng.choice((0, 0, 1, 2)),
        topic_changes=topic_changes,
        active_ms=rng.randint(8_000, 20_000),
        rolling_reuse_ids=rng.random() < 0.5,
        static_members=static_members,
        scale_outs=rng.choice((0, 0, 1)),
        scale_ins=rng.choice((0, 0, 1)),
        failovers=rng.choice((0, 0, 1)),
    )
    if static_members and native and cooperative:
        # Likewise a static member that dies between giving partitions up and rejoining (KIP-429's
        # second round) comes back without a rebalance, and nobody rejoins for what it gave up.
        config.crashes = 0
    return config


_AVAILABLE: dict[Any, tuple[str, ...]] = {}


def available_scenarios(endpoint_factory: Callable[[EndpointConfig, int], ServiceEndpoint] = ServiceEndpoint) -> tuple[str, ...]:
    """The scenarios the entry point can run: native upgrades need classic -> consumer conversion."""
    if endpoint_factory not in _AVAILABLE:
        probe = endpoint_factory(EndpointConfig(), 0)
        _AVAILABLE[endpoint_factory] = tuple(s for s in SCENARIOS if s != "upgrade-native" or probe.supports_conversion)
    return _AVAILABLE[endpoint_factory]
