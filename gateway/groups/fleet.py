"""What the group layer needs of several instances sharing the shards (implemented by
gateway/fleet/membership.py, which the command hands to the layer): joining the instances group once the
listeners are open, the instance that holds each shard, and the fleet's one node table."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from gateway.config.coordinator import CoordinatorSettings
    from gateway.groups.runtime import CoordinatorRuntime
    from gateway.net.routes import ListenerRule
    from gateway.state.topic import KafkaStateStore


class Fleet(Protocol):
    async def start(self) -> None:
        """Join the instances group and serve the shards it assigns."""
        ...

    async def stop(self) -> None:
        """Hand every shard over, then leave the group."""
        ...

    def coordinator(self, shard: int) -> tuple[int, str, int] | None:
        """(node id, host, port) of the instance holding ``shard``; None: this one, or no owner known."""
        ...

    def broker_address(self, node_id: int) -> tuple[str, int] | None:
        """Broker ``node_id``'s listener on the instance that carries it; None: this process's own."""
        ...

    def coordinator_nodes(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every instance's coordinator node."""
        ...


# (runtime, settings, state store, this instance's endpoint, topic refresh, its listener rule) -> Fleet
JoinFleet = Callable[
    ["CoordinatorRuntime", "CoordinatorSettings", "KafkaStateStore", str, Callable[[], Awaitable[None]] | None,
     "ListenerRule | None"],
    Fleet,
]
