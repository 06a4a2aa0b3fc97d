"""The gateway process: a bootstrap listener and one listener per upstream broker (port-per-broker).

A client that bootstraps on the bootstrap listener is forwarded to any live broker; the rewritten Metadata
it receives names, for each node id, the gateway listener mapped to that node (config.broker_port), and
every request arriving on that listener goes to that node. Listeners open as brokers appear in metadata
and close once a broker has been gone longer than the grace period.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from gateway.config.settings import GatewayConfig, PortMappingError
from gateway.logging import get_logger
from gateway.metrics import GatewayMetrics
from gateway.net import acceptor
from gateway.net.connection import ClientConnection
from gateway.net.contracts import HandlerChain, LocalHandler, PassthroughAuthorizer
from gateway.net.limits import ConnectionLimits
from gateway.net.nodes import NodeTable
from gateway.net.refusals import RefusalLog
from gateway.net.rewrite import Broker
from gateway.net.unreachable import Replies
from gateway.net.upstream import BrokerDirectory
from gateway.security.sasl_server import Terminator
from gateway.security.tls import TlsAcceptor, server_context

log = get_logger("gateway.net.server")


class Gateway:
    """In-process API: ``gw = Gateway(config, chain); await gw.start(); gw.bootstrap; await gw.stop()``.

    ``chain`` (net/contracts.py ``HandlerChain``) is what the gateway answers itself and how it authorizes
    what it passes through, given at construction: nothing is installed into it later. ``directory``,
    ``nodes`` and ``refusals`` are shared with whoever built the chain (the group layer reads the brokers,
    names its coordinator from the node table and logs its refusals once per client like the gateway's).
    """

    def __init__(
        self,
        config: GatewayConfig,
        chain: HandlerChain | None = None,
        *,
        directory: BrokerDirectory | None = None,
        nodes: NodeTable | None = None,
        refusals: RefusalLog | None = None,
    ) -> None:
        self.config = config
        chain = chain or HandlerChain()
        self.local_handlers: dict[int, LocalHandler] = dict(chain.local_handlers)
        self.directory = directory or BrokerDirectory(config)
        self.directory.on_change = self._schedule_reconcile
        self.directory.set_local_api(chain.local_api)
        self.nodes = nodes or NodeTable(config, self.directory)
        self.connections: set[ClientConnection] = set()
        # The last upstream answers to ApiVersions / Metadata / DescribeCluster, replayed to the same
        # requests while the upstream is unreachable (gateway/net/unreachable.py).
        self.replies = Replies()
        self.metrics = GatewayMetrics()
        self.limits = ConnectionLimits(config, self.metrics, self.connections)
        # Refused requests, logged once per client and kind (gateway/net/refusals.py).
        self.refusals = refusals or RefusalLog()
        # SASL termination (gateway/security/sasl_server.py): the users and key sets every connection checks against.
        self.sasl_terminator = Terminator.from_config(config)
        # ... and the authorization of what its clients send through (gateway/authz/data.py, built by the group
        # layer, which owns the ACL cache); None: passed on under the gateway's rights.
        self.data_authz: PassthroughAuthorizer | None = chain.passthrough_authz
        # TLS listeners: each accepted connection completes its handshake before a ClientConnection exists.
        tls = server_context(config)
        self._tls = None if tls is None else TlsAcceptor(tls)
        # Listening sockets accepted by the gateway itself, on either event loop (gateway/net/acceptor.py).
        self._bootstrap_server: acceptor.Listener | None = None
        self._listeners: dict[int, acceptor.Listener] = {}
        self._unmappable: set[int] = set()
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._started = False

    # --- addresses -------------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return self.nodes.bootstrap

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
        return self.nodes.broker_ports

    def addr_of(self, node_id: int) -> tuple[str, int] | None:
        """The address clients use for ``node_id`` (gateway/net/nodes.py)."""
        return self.nodes.addr_of(node_id)

    def listed_nodes(self) -> list[Broker]:
        return self.nodes.listed_nodes()

    def presented_node_ids(self, node_id: int | None) -> frozenset[int] | None:
        return self.nodes.presented_node_ids(node_id)

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
                self.directory.config = self.nodes.config = self.config
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
            self.config = self.nodes.config = self.config.model_copy(update={"listen_port": 0})
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
        self._bootstrap_server = await acceptor.listen(
            self._client_factory(None),
            self.config.listen_host,
            self.config.listen_port,
            reuse_address=True,
            backlog=self.config.socket_listen_backlog_size,
        )
        self.nodes.bootstrap_port = int(self._bootstrap_server.sockets[0].getsockname()[1])
        return self.nodes.bootstrap_port

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
        self.nodes.open.clear()
        self.nodes.ports.clear()
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
                port = port or self.nodes.ports.get(node, 0)

                try:
                    server = await acceptor.listen(
                        self._client_factory(node), self.config.listen_host, port, reuse_address=True,
                        backlog=self.config.socket_listen_backlog_size,
                    )
                except OSError as e:
                    log.error("cannot open broker listener", node_id=node, port=port, error=str(e))
                    failures += 1
                    continue
                self.nodes.ports[node] = server.sockets[0].getsockname()[1]
                self._listeners[node] = server
                self.nodes.open.add(node)
                log.info(
                    "broker listener open",
                    node_id=node,
                    listen=f"{self.config.listen_host}:{self.nodes.ports[node]}",
                )
            for node in sorted(set(self._listeners) - wanted):
                server = self._listeners.pop(node)
                self.nodes.open.discard(node)
                server.close()
                for c in [c for c in self.connections if c.node_id == node]:
                    c.close()
                log.info("broker listener closed", node_id=node)
        return failures
