"""Connection limits on a gateway in front of the real broker: max.connections, connections.max.idle.ms,
the partial-request timeout, the listen backlog; the admin endpoint under idle connections; the limits' arithmetic."""

from __future__ import annotations

import asyncio
import errno
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest

from gateway.config.settings import GatewayConfig
from gateway.net.limits import connection_cap
from gateway.net.server import Gateway
from gateway.ops.admin_http import MAX_CONNECTIONS, AdminServer
from gateway.ops.embedded_kafka import EmbeddedKafka
from gateway.ops.health import Health
from gateway.ops.runner import GatewayThread

from . import wire
from ._groups_support import StubGateway


def _metadata(sock: socket.socket, corr: int) -> int:
    wire.send(sock, MetadataRequest[12](topics=[]), 12, corr)
    return int(struct.unpack_from(">i", wire.recv_frame(sock))[0])


@pytest.fixture(scope="module")
def limited(kafka_broker: EmbeddedKafka) -> Iterator[GatewayThread]:
    config = GatewayConfig(
        upstream=kafka_broker.bootstrap,
        listen_port=0,
        log_level="warning",
        max_connections=4,
        connections_max_idle_ms=600,
        partial_request_timeout_ms=600,
    )
    with GatewayThread(config) as gw:
        yield gw


def _drained(gw: GatewayThread, timeout: float = 10.0) -> bool:
    assert gw.gateway is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not gw.gateway.connections:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.kafka
def test_connections_over_max_connections_are_closed_and_the_others_served(limited):
    gw = limited.gateway
    assert _drained(limited)
    refused_before = gw.metrics.connections_refused
    socks = [wire.connect(limited.bootstrap) for _ in range(4)]
    try:
        for i, s in enumerate(socks):
            assert _metadata(s, i) == i  # all four admitted (and the connection is really up)
        extra = [wire.connect(limited.bootstrap) for _ in range(3)]
        for s in extra:
            assert wire.closed_by_peer(s, timeout=5)
            s.close()
        assert gw.metrics.connections_refused == refused_before + 3
        assert Health(gw).not_ready() == []  # refusals are not upstream failures
        assert gw.directory.unreachable_for() is None
        for i, s in enumerate(socks):
            assert _metadata(s, 10 + i) == 10 + i
    finally:
        for s in socks:
            s.close()
    assert _drained(limited)
    with wire.connect(limited.bootstrap) as s:  # a freed place is taken again
        assert _metadata(s, 99) == 99


@pytest.mark.kafka
def test_idle_connections_are_closed_and_busy_ones_kept(limited, kafka_broker):
    gw = limited.gateway
    topic = f"idle-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    producer.send(topic, b"one").get(timeout=30)  # creates the topic; offset 1 is its end
    producer.close()
    assert _drained(limited)
    idle_before = gw.metrics.connections_closed_idle
    idle = wire.connect(limited.bootstrap)
    busy = wire.connect(limited.bootstrap)
    polling = wire.connect(limited.bootstrap)
    try:
        # A long-poll Fetch outstanding for longer than the idle timeout keeps its connection.
        ft = FetchRequest.FetchTopic
        fetch = FetchRequest[4](
            replica_id=-1, max_wait_ms=1500, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            topics=[ft(topic=topic, partitions=[ft.FetchPartition(partition=0, fetch_offset=1, partition_max_bytes=1 << 20)])],
        )
        wire.send(polling, fetch, 4, correlation_id=77)
        deadline = time.monotonic() + 1.5
        corr = 0
        while time.monotonic() < deadline:
            corr += 1
            assert _metadata(busy, corr) == corr
            time.sleep(0.1)
        assert wire.closed_by_peer(idle, timeout=5)
        assert struct.unpack_from(">i", wire.recv_frame(polling))[0] == 77
        assert _metadata(busy, 1000) == 1000
        assert _metadata(polling, 1001) == 1001
        assert gw.metrics.connections_closed_idle == idle_before + 1
    finally:
        for s in (idle, busy, polling):
            s.close()


@pytest.mark.kafka
def test_a_request_trickled_in_too_slowly_is_closed(limited):
    """Slowloris: bytes keep coming (so the connection is never idle) but the frame never completes."""
    gw = limited.gateway
    assert _drained(limited)
    before = gw.metrics.connections_closed_partial
    sock = wire.connect(limited.bootstrap)
    try:
        sock.sendall(struct.pack(">ihhih", 200, 3, 12, 5, -1))
        closed = False
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not closed:
            try:
                sock.sendall(b"\x00")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
            time.sleep(0.1)
        assert closed or wire.closed_by_peer(sock, timeout=1)
        assert gw.metrics.connections_closed_partial == before + 1
        # A large frame that keeps arriving in pieces but completes in time is served.
        with wire.connect(limited.bootstrap) as ok:
            msg = MetadataRequest[12](topics=[])
            msg.with_header(correlation_id=3, client_id="x" * 1000)
            raw = bytes(msg.encode(version=12, header=True, framed=True))
            for i in range(0, len(raw), 100):
                ok.sendall(raw[i : i + 100])
                time.sleep(0.02)
            assert struct.unpack_from(">i", wire.recv_frame(ok))[0] == 3
    finally:
        sock.close()


async def test_idle_admin_connections_do_not_starve_the_probes() -> None:
    admin = AdminServer(Health(StubGateway()))  # type: ignore[arg-type]
    host, port = await admin.start("127.0.0.1", 0)
    idle: list[asyncio.StreamWriter] = []
    try:
        for _ in range(MAX_CONNECTIONS + 72):
            _, w = await asyncio.open_connection(host, port)
            w.write(b"GET /hea")  # and nothing more: waits for its head until the timeout
            idle.append(w)
        await asyncio.sleep(0.1)
        for path, expected in (("/healthz", b"ok\n"), ("/readyz", b"ready\n"), ("/healthz", b"ok\n")):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            data = await asyncio.wait_for(reader.read(), 2)
            writer.close()
            assert data.startswith(b"HTTP/1.1 200 ") and data.endswith(expected), data
        assert admin.evicted >= 72  # the oldest waiting connections made room, the probes were never refused
    finally:
        for w in idle:
            w.close()
        await admin.stop()


def test_max_connections_is_lowered_to_what_the_descriptors_serve() -> None:
    assert connection_cap(2_147_483_647, None) == 2_147_483_647
    assert connection_cap(2_147_483_647, 1024) == 1024 - 256  # one each; links are counted as they open
    assert connection_cap(100, 1024) == 100
    assert connection_cap(2_147_483_647, 400) == 400 - 160
    assert connection_cap(2_147_483_647, 100) == 2  # too few to serve anyone safely: one client and its link


def _until(condition: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.kafka
def test_a_client_holds_a_second_descriptor_only_once_it_needs_the_cluster(kafka_broker):
    """A client costs one descriptor, and one more once its first request for the cluster opens its
    upstream link; when that link would exceed the descriptors, that client alone is closed."""
    config = GatewayConfig(upstream=kafka_broker.bootstrap, listen_port=0, log_level="warning")
    with GatewayThread(config) as gw:
        gateway = gw.gateway
        assert gateway is not None
        metrics = gateway.metrics
        gateway.limits.descriptors = 3  # what a small RLIMIT_NOFILE leaves for clients and links
        refused = metrics.connections_refused
        a = wire.connect(gw.bootstrap)
        b = c = d = None
        try:
            assert _metadata(a, 1) == 1  # a and its link: 2 descriptors
            assert metrics.upstream_links == 1
            b = wire.connect(gw.bootstrap)  # 3: admitted, and no link while it asks nothing of the cluster
            assert _until(lambda: len(gateway.connections) == 2)
            assert metrics.upstream_links == 1 and metrics.connections_refused == refused
            c = wire.connect(gw.bootstrap)  # a fourth descriptor: refused at accept
            assert wire.closed_by_peer(c, timeout=5)
            assert metrics.connections_refused == refused + 1
            wire.send(b, MetadataRequest[12](topics=[]), 12, 2)  # b's link would be a fourth: b is closed
            assert wire.closed_by_peer(b, timeout=5)
            assert metrics.connections_refused == refused + 2 and metrics.upstream_links == 1
            assert _metadata(a, 3) == 3  # the others are served as before
            d = wire.connect(gw.bootstrap)  # b's descriptor is free again
            assert _metadata(a, 4) == 4 and _until(lambda: len(gateway.connections) == 2)
            assert metrics.connections_refused == refused + 2
        finally:
            for s in (a, b, c, d):
                if s is not None:
                    s.close()


def test_kafka_names_are_accepted() -> None:
    config = GatewayConfig.model_validate(
        {"queued.max.request.bytes": 1024, "max.connections": 7, "connections.max.idle.ms": 5}
    )
    assert (config.queued_max_request_bytes, config.max_connections, config.connections_max_idle_ms) == (1024, 7, 5)
    default = GatewayConfig()
    assert default.connections_max_idle_ms == 600_000  # Kafka's default


def _dial_while_busy(gw: GatewayThread, clients: int, busy_s: float = 3.0) -> int:
    """Hold the gateway's event loop for ``busy_s`` while ``clients`` connect at once, each giving up
    after half a second; returns how many connected (completed by the kernel, queued for accept)."""
    host, port = gw.bootstrap.rsplit(":", 1)
    connected: list[socket.socket] = []
    lock = threading.Lock()
    go = threading.Event()

    def dial() -> None:
        s = socket.socket()
        s.settimeout(0.5)
        go.wait()
        try:
            s.connect((host, int(port)))
        except OSError:
            s.close()
            return
        with lock:
            connected.append(s)

    threads = [threading.Thread(target=dial) for _ in range(clients)]
    for t in threads:
        t.start()  # all waiting at the starting line before the loop is held
    held = threading.Event()
    gw.loop.call_soon_threadsafe(lambda: (held.set(), time.sleep(busy_s)))
    assert held.wait(10)
    go.set()
    for t in threads:
        t.join()
    for s in connected:
        s.close()
    return len(connected)


@pytest.mark.kafka
@pytest.mark.parametrize(("backlog", "expect_all"), [(None, True), (16, False)])
def test_a_fleet_connecting_while_the_loop_is_busy_waits_in_the_listen_backlog(kafka_broker, backlog, expect_all):
    settings: dict[str, Any] = {"upstream": kafka_broker.bootstrap, "listen_port": 0, "log_level": "warning"}
    if backlog is not None:
        settings["socket.listen.backlog.size"] = backlog
    with GatewayThread(GatewayConfig.model_validate(settings)) as gw:
        clients = 300
        connected = _dial_while_busy(gw, clients)
        if expect_all:  # the default queues them all; they are served once the loop is free
            assert connected == clients
            with wire.connect(gw.bootstrap) as s:
                assert _metadata(s, 1) == 1
        else:  # a small backlog: the kernel drops the attempts past it (the setting reaches listen(2))
            assert connected <= backlog + 1, connected


async def test_failed_accepts_are_counted_instead_of_reported_one_by_one() -> None:
    """asyncio reports every failed accept (EMFILE...) to the loop's exception handler, with a traceback,
    up to 100 times per wake-up; the gateway takes those over and passes everything else on."""
    loop = asyncio.get_running_loop()
    passed_on: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: passed_on.append(context))
    gw = Gateway(GatewayConfig(upstream="127.0.0.1:1", listen_port=0))
    gw._install_accept_error_handler()
    emfile = OSError(errno.EMFILE, "Too many open files")
    for _ in range(100):
        loop.call_exception_handler({"message": "socket.accept() out of system resource", "exception": emfile})
    loop.call_exception_handler({"message": "something else", "exception": ValueError("x")})
    assert gw.metrics.accept_errors == 100
    assert [c["message"] for c in passed_on] == ["something else"]


class _Reader:
    """What the budget sees of a client connection: its reservation and its pause reasons."""

    def __init__(self, name: str) -> None:
        self.name, self.reserved, self.closed, self.paused = name, 0, False, set[str]()

    def pause(self, reason: str) -> None:
        self.paused.add(reason)

    def resume(self, reason: str) -> None:
        self.paused.discard(reason)

    def __repr__(self) -> str:
        return self.name


def test_frames_begun_while_the_budget_is_reached_wait_uncounted_and_get_their_turn_in_order() -> None:
    from gateway.config.settings import GatewayConfig
    from gateway.metrics import GatewayMetrics
    from gateway.net.limits import ConnectionLimits

    conns: set[Any] = set()
    limits = ConnectionLimits(GatewayConfig(**{"queued.max.request.bytes": 250}), GatewayMetrics(), conns)
    a, b, c, d, e = (_Reader(n) for n in "abcde")
    conns.update((a, b, c, d, e))

    def start(conn: _Reader, size: int) -> None:  # a frame of ``size`` bytes has its size read
        conn.reserved = size
        limits.reserve(conn, size)  # type: ignore[arg-type]

    def finish(conn: _Reader) -> None:
        delta, conn.reserved = -conn.reserved, 0
        limits.reserve(conn, delta)  # type: ignore[arg-type]

    start(a, 100)
    start(b, 100)
    start(c, 100)  # 300 >= 250: the budget is reached; the others are muted
    assert limits.reserved == 300 and limits.exhausted and d.paused == e.paused == {"memory"}
    # A chunk the loop had already read for d and e begins their frames: they wait, counted nowhere.
    start(d, 100)
    start(e, 100)
    assert limits.reserved == 300 and list(limits.waiting) == [d, e] and d.paused == {"memory"}
    finish(a)  # 200 < 250: d, the first to wait, is admitted (overshooting, as the last admitted may)
    assert limits.reserved == 300 and not d.paused and list(limits.waiting) == [e] and e.paused == {"memory"}
    limits.release(e)  # e closes while waiting: nothing of it was counted
    assert limits.reserved == 300 and not limits.waiting
    for conn in (b, c, d):
        finish(conn)
    assert limits.reserved == 0 and not limits.exhausted and not limits.muted
    assert not any(conn.paused for conn in (a, b, c, d))
