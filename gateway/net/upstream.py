"""The upstream side: what the gateway knows about the real brokers, and how it asks them.

BrokerDirectory is the metadata cache (node id -> upstream host:port). It is refreshed periodically by the
gateway's own Metadata requests and also whenever a Metadata or DescribeCluster response passes through
to a client, so a broker that joins is served at once. A broker missing from metadata keeps its listener
for ``broker_absent_grace_s`` because rolling restarts drop brokers briefly.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from gateway.config.settings import GatewayConfig
from gateway.logging import get_logger
from gateway.net.rewrite import ApiRanges, Broker, gateway_api_ranges, narrow_features, narrowed_apis
from gateway.security import credentials, sasl
from gateway.security.tls import connect_kwargs, note_upstream_failure, upstream_context
from gateway.wire import codec, frames
from gateway.wire.api_keys import ApiKey

log = get_logger("gateway.net.upstream")

_CLIENT_ID = "groupgate"
# Versions of the gateway's own requests: flexible ApiVersions (KIP-511), Metadata with topic ids.
_API_VERSIONS_V = 3
_METADATA_V = 12


class UpstreamError(ConnectionError):
    pass


class UpstreamAuthError(UpstreamError):
    """The cluster refused the gateway's own SASL credentials, or wants SASL and none are configured.
    Not retried: the same credentials would be refused again (start-up fails with this message)."""


def upstream_credentials(config: GatewayConfig) -> sasl.Credentials | None:
    """The gateway's SASL credentials; a password file that became unreadable is an UpstreamAuthError."""
    try:
        return credentials.upstream_sasl(config)
    except ValueError as e:
        raise UpstreamAuthError(str(e)) from None


async def open_authenticated(
    host: str, port: int, tls: ssl.SSLContext | None, credentials: sasl.Credentials | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, int]:
    """A connection of the gateway's own to a broker, SASL-authenticated when credentials are configured;
    with the session lifetime the broker granted (ms, 0 = unlimited)."""
    reader, writer = await asyncio.open_connection(host, port, **connect_kwargs(tls, host))
    lifetime_ms = 0
    if credentials is not None:
        try:
            lifetime_ms = await sasl.authenticate(reader, writer, credentials)
        except sasl.AuthenticationFailed as e:
            writer.close()
            raise UpstreamAuthError(f"{host}:{port}: {e}") from None
        except BaseException:
            writer.close()
            raise
    return reader, writer, lifetime_ms


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    # Small requests and responses must not wait for Nagle's algorithm (asyncio and uvloop set it too).
    sock = transport.get_extra_info("socket")
    try:
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except (OSError, AttributeError):
        pass


async def request_once(
    host: str,
    port: int,
    api_key: int,
    version: int,
    msg: Any,
    timeout_s: float,
    tls: ssl.SSLContext | None = None,
    credentials: sasl.Credentials | None = None,
) -> Any:
    """Open a connection (TLS when ``tls`` is given, SASL-authenticated when ``credentials`` are), send
    one request, decode its response, close."""

    async def go() -> Any:
        reader, writer, _ = await open_authenticated(host, port, tls, credentials)
        try:
            msg.with_header(correlation_id=1, client_id=_CLIENT_ID)
            writer.write(bytes(msg.encode(version=version, header=True, framed=True)))
            await writer.drain()
            (size,) = frames._SIZE.unpack(await reader.readexactly(4))
            payload = await reader.readexactly(size)
            if frames.response_correlation_id(payload) != 1:
                raise UpstreamError(f"{host}:{port} answered with a foreign correlation id")
            return codec.decode_response(api_key, version, payload)[1]
        finally:
            writer.close()

    try:
        return await asyncio.wait_for(go(), timeout_s)
    except UpstreamAuthError:
        raise  # an OSError too (ConnectionError), but no connection problem: not to be retried
    except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
        note_upstream_failure(tls, host, port, e)
        raise UpstreamError(f"{host}:{port}: {type(e).__name__}: {e}") from e


class BrokerDirectory:
    def __init__(self, config: GatewayConfig, on_change: Callable[[], None] | None = None) -> None:
        self.config = config
        self.on_change = on_change
        # The client TLS context of every upstream connection (None: the brokers speak plaintext).
        self.tls = upstream_context(config)
        self.brokers: dict[int, Broker] = {}
        self.absent_since: dict[int, float] = {}
        self.upstream_api: dict[int, tuple[int, int]] = {}
        self.local_api: dict[int, tuple[int, int]] = {}
        self.api_ranges: ApiRanges = {}
        self.cluster_id: str | None = None
        # What the gateway offers less of than the cluster (kind -> reason), as last logged.
        self.narrowed: dict[str, str] = {}
        self._rr = itertools.count()
        # Since when every attempt to reach the upstream failed (None: the last one succeeded).
        self.failing_since: float | None = None
        self.last_error = ""
        self.refresh_failures = 0

    # --- observation -----------------------------------------------------------------------------------

    def observe(self, brokers: list[Broker]) -> None:
        """A complete broker list (Metadata/DescribeCluster response) from the upstream cluster."""
        now = time.monotonic()
        changed = False
        present = set()
        for b in brokers:
            present.add(b.node_id)
            if self.brokers.get(b.node_id) != b:
                if b.node_id in self.brokers:
                    log.info("broker moved", node_id=b.node_id, upstream=f"{b.host}:{b.port}")
                else:
                    log.info("broker discovered", node_id=b.node_id, upstream=f"{b.host}:{b.port}")
                self.brokers[b.node_id] = b
                changed = True
            self.absent_since.pop(b.node_id, None)
        for node in list(self.brokers):
            if node in present or not brokers:
                continue
            since = self.absent_since.setdefault(node, now)
            if now - since >= self.config.broker_absent_grace_s:
                log.info("broker left the cluster", node_id=node)
                del self.brokers[node]
                del self.absent_since[node]
                changed = True
        if changed and self.on_change is not None:
            self.on_change()

    def set_local_api(self, local: Mapping[int, tuple[int, int]]) -> None:
        """APIs the gateway answers itself (the group layer), overriding the upstream's ranges."""
        self.local_api = dict(local)
        self.api_ranges = gateway_api_ranges(self.upstream_api, self.local_api)

    def observe_api_versions(self, upstream: Mapping[int, tuple[int, int]]) -> None:
        self.upstream_api = dict(upstream)
        self.api_ranges = gateway_api_ranges(self.upstream_api, self.local_api)

    def note_narrowed(self, narrowed: list[tuple[str, str]] | None) -> None:
        """Log each API range or feature level the gateway withholds from clients, once per kind and
        reason (every client's ApiVersions response is narrowed the same way)."""
        for kind, reason in narrowed or ():
            if self.narrowed.get(kind) != reason:
                self.narrowed[kind] = reason
                log.info("advertising less than the cluster offers", kind=kind, reason=reason)

    # --- choosing an upstream --------------------------------------------------------------------------

    def candidates(self) -> list[tuple[str, int]]:
        """Upstream addresses to try for a bootstrap connection: known live brokers in rotation, then the
        configured bootstrap list."""
        live = [(b.host, b.port) for n, b in sorted(self.brokers.items()) if n not in self.absent_since]
        if live:
            k = next(self._rr) % len(live)
            live = live[k:] + live[:k]
        for addr in self.config.upstream_addresses():
            if addr not in live:
                live.append(addr)
        return live

    def address(self, node_id: int) -> tuple[str, int] | None:
        b = self.brokers.get(node_id)
        return None if b is None else (b.host, b.port)

    # --- reachability (readiness) ----------------------------------------------------------------------

    def upstream_ok(self) -> None:
        self.failing_since = None

    def upstream_failed(self, error: str) -> None:
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        self.last_error = error

    def unreachable_for(self) -> float | None:
        """Seconds since the upstream stopped answering, or None while it answers."""
        since = self.failing_since
        return None if since is None else time.monotonic() - since

    # --- refresh ---------------------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Ask one reachable upstream for ApiVersions and the full broker list. Raises UpstreamError."""
        timeout = self.config.upstream_request_timeout_s
        credentials = upstream_credentials(self.config)
        errors = []
        for host, port in self.candidates():
            av = None
            try:
                av = await request_once(
                    host,
                    port,
                    ApiKey.API_VERSIONS,
                    _API_VERSIONS_V,
                    ApiVersionsRequest[_API_VERSIONS_V](
                        client_software_name="groupgate", client_software_version="0.1.0"
                    ),
                    timeout,
                    self.tls,
                    credentials,
                )
                md = await request_once(
                    host,
                    port,
                    ApiKey.METADATA,
                    _METADATA_V,
                    MetadataRequest[_METADATA_V](topics=[]),
                    timeout,
                    self.tls,
                    credentials,
                )
            except UpstreamAuthError as e:
                self.upstream_failed(str(e))
                raise
            except UpstreamError as e:
                if av is not None and credentials is None:
                    # ApiVersions answered, Metadata closed the connection: what a SASL listener does
                    # to a client that did not authenticate. Ask it, to say so rather than retry.
                    await self._refuse_if_sasl(host, port, timeout)
                errors.append(str(e))
                continue
            if av.error_code == 0:
                upstream = {a.api_key: (a.min_version, a.max_version) for a in av.api_keys}
                self.observe_api_versions(upstream)
                self.note_narrowed(
                    narrowed_apis(upstream, self.api_ranges, self.local_api) + narrow_features(av, self.api_ranges)
                )
            self.upstream_ok()
            self.cluster_id = md.cluster_id
            self.observe([Broker(b.node_id, b.host, b.port, b.rack) for b in md.brokers])
            return
        self.refresh_failures += 1
        error = "no upstream broker answered: " + "; ".join(errors)
        self.upstream_failed(error)
        raise UpstreamError(error)

    async def _refuse_if_sasl(self, host: str, port: int, timeout_s: float) -> None:
        async def probe() -> list[str] | None:
            reader, writer = await asyncio.open_connection(host, port, **connect_kwargs(self.tls, host))
            try:
                return await sasl.offered_mechanisms(reader, writer)
            finally:
                writer.close()

        try:
            offered = await asyncio.wait_for(probe(), timeout_s)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, sasl.AuthenticationFailed):
            return
        if offered is not None:
            error = (
                f"{host}:{port} requires SASL authentication (mechanisms {', '.join(offered)}) and no upstream "
                "credentials are configured: set upstream_sasl_mechanism, upstream_sasl_username and "
                "upstream_sasl_password (or upstream_sasl_password_file)"
            )
            self.upstream_failed(error)
            raise UpstreamAuthError(error)

    async def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                await self.refresh()
                return
            except UpstreamAuthError:
                raise
            except UpstreamError as e:
                if time.monotonic() >= deadline:
                    raise
                log.warning("upstream not reachable yet", error=str(e))
                await asyncio.sleep(0.5)

    async def refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.metadata_refresh_s)
            try:
                await self.refresh()
            except UpstreamError as e:
                log.warning("metadata refresh failed", error=str(e))
