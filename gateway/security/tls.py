"""TLS on both sides of the gateway: the client listeners and the connections to the upstream brokers.

Client side: every listener (bootstrap and per-broker) accepts plain TCP and then runs the TLS handshake
itself (``loop.start_tls``), so a client that fails the handshake (a plaintext client, an untrusted or
missing client certificate) is logged with its address and only its connection closes. The connection's
ClientConnection is created once the handshake is done and sees an ordinary transport.

Upstream side: one client context for every connection the gateway opens to a broker; the server name
(SNI and the certificate check) is the host the broker advertises in metadata, or the configured
bootstrap host.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gateway.logging import get_logger

if TYPE_CHECKING:
    from gateway.config.settings import GatewayConfig

log = get_logger("gateway.security.tls")

# A client that opens a connection and does not finish the handshake is dropped after this long.
HANDSHAKE_TIMEOUT_S = 10.0


class TlsConfigError(ValueError):
    """Certificate or key files that cannot be used."""


def _readable(setting: str, path: str) -> None:
    p = Path(path)
    if not p.is_file():
        raise TlsConfigError(f"{setting}={path}: no such file")
    try:
        with p.open("rb") as f:
            f.read(1)
    except OSError as e:
        raise TlsConfigError(f"{setting}={path}: cannot be read: {e.strerror or e}") from e


def _check_validity(setting: str, path: str, now: float | None = None) -> None:
    """Refuse a certificate outside its validity period: OpenSSL loads it without complaint, and every
    peer would then fail the handshake long after start-up."""
    try:
        decoded = ssl._ssl._test_decode_cert(path)  # type: ignore[attr-defined]  # the file's first certificate
        not_before = ssl.cert_time_to_seconds(decoded["notBefore"])
        not_after = ssl.cert_time_to_seconds(decoded["notAfter"])
    except (AttributeError, KeyError, ValueError, ssl.SSLError) as e:
        # Unreadable here means load_cert_chain reports it (or this Python lacks the decoder): no verdict.
        log.debug("certificate validity not checked", setting=setting, path=path, error=str(e))
        return
    now = time.time() if now is None else now
    dates = f"valid from {decoded['notBefore']} until {decoded['notAfter']}"
    if now >= not_after:
        raise TlsConfigError(f"{setting}={path}: the certificate has expired ({dates})")
    if now < not_before:
        raise TlsConfigError(f"{setting}={path}: the certificate is not valid yet ({dates})")


def _load_chain(ctx: ssl.SSLContext, cert_setting: str, cert: str, key_setting: str, key: str) -> None:
    _readable(cert_setting, cert)
    _readable(key_setting, key)
    _check_validity(cert_setting, cert)
    try:
        ctx.load_cert_chain(cert, key)
    except ssl.SSLError as e:
        reason = "the key does not match the certificate" if "KEY_VALUES_MISMATCH" in str(e) else str(e)
        raise TlsConfigError(f"{cert_setting}={cert} / {key_setting}={key}: {reason}") from e


def _load_ca(ctx: ssl.SSLContext, setting: str, path: str) -> None:
    _readable(setting, path)
    try:
        ctx.load_verify_locations(cafile=path)
    except (ssl.SSLError, ValueError) as e:
        raise TlsConfigError(f"{setting}={path}: not a PEM CA bundle: {e}") from e


def server_context(config: GatewayConfig) -> ssl.SSLContext | None:
    """The listeners' context, or None when they speak plaintext. Raises TlsConfigError."""
    if config.listener_tls_cert is None or config.listener_tls_key is None:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(
        ctx, "listener_tls_cert", config.listener_tls_cert, "listener_tls_key", config.listener_tls_key
    )
    if config.listener_tls_client_ca is not None:
        _load_ca(ctx, "listener_tls_client_ca", config.listener_tls_client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def upstream_context(config: GatewayConfig) -> ssl.SSLContext | None:
    """The context for connections to the brokers, or None when they speak plaintext. Raises TlsConfigError."""
    if not config.upstream_tls:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if config.upstream_tls_ca is not None:
        _load_ca(ctx, "upstream_tls_ca", config.upstream_tls_ca)
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if config.upstream_tls_cert is not None and config.upstream_tls_key is not None:
        _load_chain(
            ctx, "upstream_tls_cert", config.upstream_tls_cert, "upstream_tls_key", config.upstream_tls_key
        )
    # Without the host check the chain is still verified (Kafka's empty ssl.endpoint.identification.algorithm).
    ctx.check_hostname = config.upstream_tls_check_hostname
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def check(config: GatewayConfig) -> None:
    """Load every configured certificate and key once, so bad files are a configuration error at start-up."""
    server_context(config)
    upstream_context(config)


# --- upstream connections -----------------------------------------------------------------------------


def connect_kwargs(ctx: ssl.SSLContext | None, host: str) -> dict[str, Any]:
    """Extra arguments of open_connection/create_connection for a connection to broker ``host``."""
    if ctx is None:
        return {}
    return {"ssl": ctx, "server_hostname": host, "ssl_handshake_timeout": HANDSHAKE_TIMEOUT_S}


def note_upstream_failure(ctx: ssl.SSLContext | None, host: str, port: int, error: BaseException) -> str:
    """Log a failed TLS handshake with a broker (with its address); returns the error's description."""
    text = str(error) or type(error).__name__
    if ctx is not None and isinstance(error, ssl.SSLError):
        text = f"TLS handshake failed: {text}"
        log.warning("TLS handshake with an upstream broker failed", broker=f"{host}:{port}", error=str(error))
    return text


# --- client listeners ---------------------------------------------------------------------------------


class _Handshaking(asyncio.Protocol):
    """Holds a connection while its handshake completes; keeps what arrives before the handover."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.lost = False

    def data_received(self, data: bytes) -> None:
        self.received.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


class _Accepting(asyncio.Protocol):
    """The protocol of a freshly accepted TCP connection: hands it to the TLS handshake."""

    def __init__(self, acceptor: TlsAcceptor, factory: Callable[[], asyncio.Protocol]) -> None:
        self.acceptor = acceptor
        self.factory = factory
        # Bytes read before start_tls took the transport over: the start of the client's handshake.
        # (asyncio honours the pause below; uvloop starts reading right after connection_made anyway.)
        self.early: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.pause_reading()  # type: ignore[attr-defined]
        self.acceptor.spawn(self.acceptor.handshake(transport, self))  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        self.early.append(data)


def _feed(protocol: Any, data: bytes) -> None:
    """Hand ``data`` to a protocol as if its transport had read it."""
    if not hasattr(protocol, "get_buffer"):
        protocol.data_received(data)
        return
    view = memoryview(data)
    while view:
        buf = protocol.get_buffer(len(view))
        n = min(len(buf), len(view))
        buf[:n] = view[:n]
        protocol.buffer_updated(n)
        view = view[n:]


class TlsAcceptor:
    """Wraps listener protocol factories so that their connections speak TLS."""

    def __init__(self, ctx: ssl.SSLContext) -> None:
        self.ctx = ctx
        self._tasks: set[asyncio.Task[None]] = set()
        self.handshake_failures = 0

    def wrap(self, factory: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: _Accepting(self, factory)

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def handshake(self, transport: asyncio.Transport, accepting: _Accepting) -> None:
        peer = transport.get_extra_info("peername")
        holder = _Handshaking()
        loop = asyncio.get_running_loop()
        try:
            starting = loop.create_task(
                loop.start_tls(
                    transport, holder, self.ctx, server_side=True, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S
                )
            )
            # One step: start_tls has paused reading, installed its protocol and queued that protocol's
            # connection_made and the resumption of reading. What was read before goes in right after
            # them, ahead of anything read later.
            await asyncio.sleep(0)
            early, accepting.early = accepting.early, []
            tls_protocol = transport.get_protocol()
            if early and tls_protocol is not accepting:
                loop.call_soon(_feed, tls_protocol, b"".join(early))
            tls_transport = await starting
        except asyncio.CancelledError:
            transport.abort()
            raise
        except Exception as e:  # noqa: BLE001 - any failure ends this one connection only
            self.handshake_failures += 1
            log.warning(
                "TLS handshake with a client failed; closing its connection",
                peer=peer,
                error=str(e) or type(e).__name__,
            )
            transport.abort()
            return
        if holder.lost or tls_transport is None:
            return
        app = accepting.factory()
        tls_transport.set_protocol(app)
        app.connection_made(tls_transport)
        for data in holder.received:
            app.data_received(data)  # type: ignore[attr-defined]

    def close(self) -> None:
        """Abandon the handshakes in progress (the gateway is stopping)."""
        for t in list(self._tasks):
            t.cancel()
