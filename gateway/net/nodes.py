"""The gateway's node table: the address clients are given for each node, from the listeners this process
opened and, in a fleet, the instance whose listener carries each broker.

The listeners (gateway/net/server.py) record what they bound here; the group layer asks it for the
coordinator's address and, once this instance joined a fleet, routes it through the fleet's table
(``route_through``). Both get the same table at construction; neither reaches into the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from gateway.config.settings import PortMappingError
from gateway.net.rewrite import Broker
from gateway.net.routes import ListenerRule

if TYPE_CHECKING:
    from gateway.config.settings import GatewayConfig
    from gateway.net.upstream import BrokerDirectory


class FleetNodes(Protocol):
    def broker_address(self, node_id: int) -> tuple[str, int] | None:
        """Broker ``node_id``'s listener on the instance that carries it; None: this process's own."""
        ...

    def coordinator_nodes(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every instance's coordinator node."""
        ...


class NodeTable:
    def __init__(self, config: GatewayConfig, directory: BrokerDirectory) -> None:
        self.config = config  # replaced by the listeners when an ephemeral bootstrap port settles the mapping
        self.directory = directory
        self.bootstrap_port = 0
        # node id -> bound port, kept for the life of the process (a listener reopened gets the same one)
        self.ports: dict[int, int] = {}
        self.open: set[int] = set()  # nodes whose listener is open now
        # Several instances (gateway/fleet/membership.py): the instance whose listener names each broker, and
        # the instances' coordinator nodes listed beside the brokers. None: this process's listeners only.
        self._fleet: FleetNodes | None = None

    def route_through(self, fleet: FleetNodes | None) -> None:
        """From now on, name each broker as the fleet does (None: this process's own listeners again)."""
        self._fleet = fleet

    @property
    def bootstrap(self) -> str:
        return f"{self.config.client_host()}:{self.bootstrap_port}"

    @property
    def broker_ports(self) -> dict[int, int]:
        """The brokers this process serves now, and their ports."""
        return {n: self.ports[n] for n in self.open}

    def _own_addr(self, node_id: int) -> tuple[str, int] | None:
        if node_id in self.open:
            return self.config.client_host(), self.ports[node_id]
        if node_id not in self.directory.brokers:
            return None
        try:
            port = self.config.broker_port(node_id)
        except PortMappingError:
            return None
        # A fixed port is known before its listener opens (it is being opened now); an OS-chosen one is not.
        return (self.config.client_host(), port) if port else None

    def addr_of(self, node_id: int) -> tuple[str, int] | None:
        """The address clients use for ``node_id``, or None when the gateway does not serve it: this
        process's listener for it, or in a fleet the listener of the instance that carries the broker
        (the same in every instance's answers)."""
        own = self._own_addr(node_id)
        if own is None or self._fleet is None:
            return own
        return self._fleet.broker_address(node_id) or own

    def listed_nodes(self) -> list[Broker]:
        """Nodes listed beside the brokers in Metadata and DescribeCluster: a fleet's coordinator nodes."""
        if self._fleet is None:
            return []
        return [Broker(n, host, port) for n, host, port in self._fleet.coordinator_nodes()]

    def presented_node_ids(self, node_id: int | None) -> frozenset[int] | None:
        """The node ids clients were given for the listener ``node_id`` (None: the bootstrap listener), which
        an ApiVersions v5 request arriving there must name (gateway/net/node_check.py): a broker listener is
        its broker; the bootstrap listener is, in a fleet, this instance's coordinator node, and otherwise no
        node at all. None while a fleet instance does not know its own coordinator node yet (no table)."""
        if node_id is not None:
            return frozenset((node_id,))
        if self._fleet is None:
            return frozenset()
        own = (self.config.client_host(), self.bootstrap_port)
        ids = frozenset(n for n, host, port in self._fleet.coordinator_nodes() if (host, port) == own)
        return ids or None

    def listener_rule(self) -> ListenerRule | None:
        """How this process numbers its broker listeners, for the other instances of a fleet (None: its
        ports are chosen by the OS one by one, which nobody else can compute)."""
        base = self.config.effective_port_base()
        if base is None:
            return None
        # Known brokers whose listener did not open (its port held by another process) are published as
        # unserved, so that the fleet routes them to an instance that does serve them.
        unserved = frozenset(n for n in self.directory.brokers if n not in self.open)
        return ListenerRule(self.config.client_host(), base, self.config.node_id_base, self.config.max_brokers,
                            dict(self.config.broker_ports), unserved)
