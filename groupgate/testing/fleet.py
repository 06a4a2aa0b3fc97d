"""Several gateway instances sharing one cluster's groups (docs/gateway.md, "Several instances"): one state
topic and one instances group, so that the instances split the shards and take a lost one's over."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from groupgate.testing._net import metric
from groupgate.testing.base import Gateway, unique_name
from groupgate.testing.events import Event, select
from groupgate.testing.settings import GatewaySettings

# The instances group's timings: a killed instance's shards move after the session timeout (the broker's
# group.min.session.timeout.ms, 6 s by default, is the shortest the cluster allows).
# Six shards rather than 50: instances hand shards over one by one, so a fleet settles in a second or two.
FLEET_COORDINATOR: dict[str, Any] = {
    "state_topic_num_partitions": 6,
    "instances_session_timeout_ms": 6000,
    "instances_heartbeat_interval_ms": 500,
    "instances_rebalance_timeout_ms": 10000,
}


def fleet_settings(settings: GatewaySettings, name: str | None = None) -> GatewaySettings:
    """``settings`` made into a fleet member's: group state in a topic of its own, one instances group."""
    name = name or unique_name("groupgate-fleet")
    chosen = settings.coordinator_values()
    coordinator = {k: v for k, v in FLEET_COORDINATOR.items() if k not in chosen}
    coordinator.update(
        {
            "state_topic": chosen.get("state_topic", f"{name}-state"),
            "state_transactional_id_prefix": chosen.get("state_transactional_id_prefix", f"{name}-"),
            "instances_group": chosen.get("instances_group", f"{name}-instances"),
        }
    )
    return settings.replace(state="kafka", **coordinator)


class GatewayFleet:
    """``size`` gateways made by ``make(settings, index)`` with one fleet's settings.

    ``bootstrap`` lists every instance (a client that loses one carries on with another);
    ``gateways[i]`` is each instance's own handle (``kill()``, ``restart()``, ``bootstrap``).
    """

    def __init__(
        self, make: Callable[[GatewaySettings, int], Gateway], size: int = 2, settings: GatewaySettings | None = None
    ) -> None:
        if size < 1:
            raise ValueError("a fleet has at least one instance")
        self.settings = fleet_settings(settings or GatewaySettings())
        self._make = make
        self.size = size
        self.gateways: list[Gateway] = []

    def start(self) -> GatewayFleet:
        try:
            for i in range(self.size):
                gw = self._make(self.settings, i)
                self.gateways.append(gw)
                gw.start()
            self.wait_settled()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_settled(self, timeout_s: float = 60.0) -> None:
        """Until the live instances own every shard between them, each once (their /metrics)."""
        deadline = time.monotonic() + timeout_s
        last: list[float | None] = []
        while time.monotonic() < deadline:
            live = [gw for gw in self.gateways if getattr(gw, "alive", lambda: True)()]
            owned = [metric(gw.readyz_url, "state_shards_owned") for gw in live]
            total = metric(live[0].readyz_url, "state_shards") if live else None
            last = [*owned, total]
            if total and None not in owned and sum(o or 0 for o in owned) == total and all(owned):
                return
            time.sleep(0.2)
        raise TimeoutError(f"the fleet did not settle within {timeout_s}s (owned per instance, total: {last})")

    @property
    def bootstrap(self) -> str:
        return ",".join(gw.bootstrap for gw in self.gateways)

    @property
    def upstream(self) -> str:
        return self.gateways[0].upstream

    def __iter__(self) -> Iterator[Gateway]:
        return iter(self.gateways)

    def __getitem__(self, i: int) -> Gateway:
        return self.gateways[i]

    def __len__(self) -> int:
        return len(self.gateways)

    def kill(self, i: int) -> None:
        self.gateways[i].kill()

    def restart(self, i: int, *, hard: bool = True, settle: bool = True) -> None:
        """Restart instance ``i``; with ``settle``, return once the fleet owns every shard again."""
        self.gateways[i].restart(hard=hard)
        if settle:
            self.wait_settled()

    def events(self, group: str | None = None, event: str | None = None) -> list[Event]:
        """Every instance's rebalance events, in time order."""
        merged = [e for gw in self.gateways for e in gw.events(group, event)]
        return select(sorted(merged, key=lambda e: (e.get("ts_ms", 0), e.get("seq", 0))))

    def stop(self) -> None:
        for gw in reversed(self.gateways):
            gw.stop()

    def __enter__(self) -> GatewayFleet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
