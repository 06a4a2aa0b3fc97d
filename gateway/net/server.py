"""The gateway process: a bootstrap listener and one listener per upstream broker (port-per-broker).

A client that bootstraps on the bootstrap listener is forwarded to any live broker; the rewritten Metadata
it receives names, for each node id, the gateway listener mapped to that node (config.broker_port), and
every request arriving on that listener goes to that node. Listeners open as brokers appear in metadata
and close once a broker has been gone longer than the grace period.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from pydantic import ValidationError

from gateway.config.settings import GatewayConfig, PortMappingError
from gateway.logging import get_logger
from gateway.metrics import GatewayMetrics
from gateway.net.connection import ClientConnection
from gateway.net.contracts import LocalHandler, PassthroughAuthorizer
from gateway.net.limits import ConnectionLimits
from gateway.net.refusals import RefusalLog
from gateway.net.rewrite import Broker
from gateway.net.routes import ListenerRule
from gateway.net.unreachable import Replies
from gateway.net.upstream import BrokerDirectory
from gateway.security.sasl_server import Terminator
from gateway.security.tls import TlsAcceptor, server_context

log = get_logger("gateway.net.server")


class FleetNodes(Protocol):
    def broker_address(self, node_id: int) -> tuple[str, int] | None:
        """Broker ``node_id``'s listener on the instance that carries it; None: this process's own."""
        ...

    def coordinator_nodes(self) -> list[tuple[int, str, int]]:
        """(node id, host, port) of every instance's coordinator node."""
        ...


class Gateway:
    """In-process API: ``gw = Gateway(config); await gw.start(); gw.bootstrap; await gw.stop()``.

    ``local_handlers`` maps an api key to ``async handler(conn, header, payload) -> response payload``:
    the gateway answers that API itself on every listener instead of forwarding it. ``payload`` is the
    request without its size prefix (decode it with ``codec.decode_request``); the handler returns the
    response header + body (``codec.encode_response``); its answer still leaves in request order.
    ``local_api`` lists the version ranges of those APIs for ApiVersions and the request check.
    """

    def __init__(
        self,
        config: GatewayConfig,
        local_handlers: Mapping[int, LocalHandler] | None = None,
        local_api: Mapping[int, tuple[int, int]] | None = None,
    ) -> None:
        self.config = config
        self.local_handlers: dict[int, LocalHandler] = dict(local_handlers or {})
        self.directory = BrokerDirectory(config, on_change=self._schedule_reconcile)
        self.directory.set_local_api(local_api or {})
        self.connections: set[ClientConnection] = set()
        # The last upstream answers to ApiVersions / Metadata / DescribeCluster, replayed to the same
        # requests while the upstream is unreachable (gateway/net/unreachable.py).
        self.replies = Replies()
        self.metrics = GatewayMetrics()
        self.limits = ConnectionLimits(config, self.metrics, self.connections)
        # Refused requests, logged once per client and kind (gateway/net/refusals.py).
        self.refusals = RefusalLog()
        # SASL termination (gateway/security/sasl_server.py): the users and key sets every connection checks against.
        self.sasl_terminator = Terminator.from_config(config)
        # ... and the authorization of what its clients send through (gateway/authz/data.py), installed by
        # the group layer, which owns the ACL cache; None: passed on under the gateway's rights.
        self.data_authz: PassthroughAuthorizer | None = None
        # TLS listeners: each accepted connection completes its handshake before a ClientConnection exists.
        tls = server_context(config)
        self._tls = None if tls is None else TlsAcceptor(tls)
        self._bootstrap_server: asyncio.Server | None = None
        self._bootstrap_port = 0
        self._listeners: dict[int, asyncio.Server] = {}
        self._ports: dict[int, int] = {}  # node id -> bound port, kept for the life of the process
        self._unmappable: set[int] = set()
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._started = False
        # Several instances (gateway/fleet/membership.py): the instance whose listener names each broker, and the
        # instances' coordinator nodes listed beside the brokers. None: this process's own listeners only.
        self.fleet: FleetNodes | None = None

    # --- addresses -------------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return f"{self.config.client_host()}:{self._bootstrap_port}"

    @property
    def serving(self) -> bool:
        """Listeners are open (start() completed and stop() not called)."""
        return self._started

    @property
    def tls_handshake_failures(self) -> int | None:
        """Client TLS handshakes that failed or timed out; None when the listeners are plaintext."""
        return None if self._tls is None else self._tls.handshake_failures

    @property
    def broker_ports(self) -> dict[int, int]:
        return {n: self._ports[n] for n in self._listeners}

    def _own_addr(self, node_id: int) -> tuple[str, int] | None:
        if node_id in self._listeners:
            return self.config.client_host(), self._ports[node_id]
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
        if own is None or self.fleet is None:
            return own
        return self.fleet.broker_address(node_id) or own

    def listed_nodes(self) -> list[Broker]:
        """Nodes listed beside the brokers in Metadata and DescribeCluster: a fleet's coordinator nodes."""
        if self.fleet is None:
            return []
        return [Broker(n, host, port) for n, host, port in self.fleet.coordinator_nodes()]

    def listener_rule(self) -> ListenerRule | None:
        """How this process numbers its broker listeners, for the other instances of a fleet (None: its
        ports are chosen by the OS one by one, which nobody else can compute)."""
        base = self.config.effective_port_base()
        if base is None:
            return None
        # Known brokers whose listener did not open (its port held by another process) are published as
        # unserved, so that the fleet routes them to an instance that does serve them.
        unserved = frozenset(n for n in self.directory.brokers if n not in self._listeners)
        return ListenerRule(self.config.client_host(), base, self.config.node_id_base, self.config.max_brokers,
                            dict(self.config.broker_ports), unserved)

    # --- lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.directory.wait_ready(self.config.upstream_connect_timeout_s)
        ephemeral = self.config.listen_port == 0 and self.config.broker_port_base is None
        for attempt in range(20):
            port = await self._open_bootstrap()
            if not ephemeral:
                await self._reconcile()
                break
            # An ephemeral bootstrap port P still yields a fixed mapping (broker ports from P+1): the same
            # one a restart with ``--listen HOST:P`` produces, so clients' cached addresses stay valid.
            try:
                self.config = GatewayConfig.model_validate({**self.config.model_dump(), "listen_port": port})
                self.directory.config = self.config
                if await self._reconcile() == 0:
                    break
            except ValidationError:
                pass
            log.info(
                "broker ports after the ephemeral bootstrap port are taken; retrying",
                port=port,
                attempt=attempt,
            )
            await self._close_listeners()
            self.config = self.config.model_copy(update={"listen_port": 0})
        self._spawn(self.directory.refresh_forever())
        self._spawn(self.limits.sweep_forever())
        self._install_accept_error_handler()
        self._started = True
        log.info(
            "gateway serving",
            bootstrap=self.bootstrap,
            max_connections=self.limits.max_connections,
            nofile=self.limits.nofile,
            brokers={n: f"{self.config.client_host()}:{p}" for n, p in self.broker_ports.items()},
            upstream=self.config.upstream,
        )

    def _install_accept_error_handler(self) -> None:
        """A failed accept (EMFILE...) is reported through the loop's exception handler, with a traceback
        each time the loop retries; route those to one rate-limited warning (gateway/net/limits.py)."""
        loop = asyncio.get_running_loop()
        previous = loop.get_exception_handler()
        limits = self.limits

        def handler(lp: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            if limits.loop_exception(lp, context):
                return
            if previous is not None:
                previous(lp, context)
            else:
                lp.default_exception_handler(context)

        loop.set_exception_handler(handler)

    async def _open_bootstrap(self) -> int:
        self._bootstrap_server = await asyncio.get_running_loop().create_server(
            self._client_factory(None),
            self.config.listen_host,
            self.config.listen_port,
            reuse_address=True,
        )
        self._bootstrap_port = int(self._bootstrap_server.sockets[0].getsockname()[1])
        return self._bootstrap_port

    def _client_factory(self, node: int | None) -> Callable[[], asyncio.Protocol]:
        def factory() -> asyncio.Protocol:
            return ClientConnection(self, node)

        return factory if self._tls is None else self._tls.wrap(factory)

    async def _close_listeners(self) -> None:
        servers = [s for s in [self._bootstrap_server, *self._listeners.values()] if s is not None]
        for s in servers:
            s.close()
        for s in servers:
            await s.wait_closed()
        self._listeners.clear()
        self._ports.clear()
        self._bootstrap_server = None

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        if self._tls is not None:
            self._tls.close()
        for c in list(self.connections):
            c.close()
        await self._close_listeners()
        if self._started:
            log.info("gateway stopped")
        self._started = False

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- listeners -------------------------------------------------------------------------------------

    def _schedule_reconcile(self) -> None:
        if not self._started:
            return  # start() opens the first listeners itself, once the port mapping is settled
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self._spawn(self._reconcile())

    async def _reconcile(self) -> int:
        """Open a listener for every known broker, close those of brokers that left; returns bind failures."""
        failures = 0
        async with self._lock:
            loop = asyncio.get_running_loop()
            wanted = set(self.directory.brokers)
            for node in sorted(wanted - set(self._listeners)):
                try:
                    port = self.config.broker_port(node)
                except PortMappingError as e:
                    if node not in self._unmappable:
                        log.error(
                            "broker cannot be served: no port for its node id", node_id=node, error=str(e)
                        )
                        self._unmappable.add(node)
                    continue
                port = port or self._ports.get(node, 0)

                try:
                    server = await loop.create_server(
                        self._client_factory(node), self.config.listen_host, port, reuse_address=True
                    )
                except OSError as e:
                    log.error("cannot open broker listener", node_id=node, port=port, error=str(e))
                    failures += 1
                    continue
                self._ports[node] = server.sockets[0].getsockname()[1]
                self._listeners[node] = server
                log.info(
                    "broker listener open",
                    node_id=node,
                    listen=f"{self.config.listen_host}:{self._ports[node]}",
                )
            for node in sorted(set(self._listeners) - wanted):
                server = self._listeners.pop(node)
                server.close()
                for c in [c for c in self.connections if c.node_id == node]:
                    c.close()
                log.info("broker listener closed", node_id=node)
        return failures
