"""Connection limits of a real ``groupgate serve`` child in front of the real broker.

Memory: what clients that send part of a large request and leave cost the gateway process (VmRSS from
/proc), with and without the request memory budget (``queued.max.request.bytes``), and what a client
that sends Fetches and never reads its responses costs. Descriptors: ``max.connections`` derived from
a low RLIMIT_NOFILE, refusals that are logged once and leave readiness alone. The admin endpoint under
many idle connections.
"""

from __future__ import annotations

import re
import selectors
import socket
import struct
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import confluent_kafka
from kafka.protocol.admin import DescribeGroupsRequest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import MetadataRequest

from compat_tests.harness.brokers import ProcessBackend, free_port_block
from compat_tests.harness.clients import produce_confluent, values
from compat_tests.harness.gateway_proc import GatewayProcess

MiB = 1 << 20
MB = 1_000_000
# A Produce request frame that declares 100 MB (within the 100 MiB max_frame_bytes) and never completes.
DECLARED = 100 * MB
ROUNDS = 3
CLIENTS = 24
SENT = 16 * MiB


def _rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS line")


def _addr(hostport: str) -> tuple[str, int]:
    host, _, port = hostport.rpartition(":")
    return host, int(port)


class Served:
    """A gateway child with its admin endpoint."""

    def __init__(self, proc: GatewayProcess, admin: str) -> None:
        self.proc = proc
        self.admin = admin

    @property
    def bootstrap(self) -> str:
        return self.proc.bootstrap

    @property
    def pid(self) -> int:
        assert self.proc.pid is not None
        return self.proc.pid

    def rss(self) -> int:
        return _rss_bytes(self.pid)

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://{self.admin}{path}", timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metric(self, name: str) -> float:
        status, text = self.get("/metrics")
        assert status == 200
        m = re.search(rf"^groupgate_{re.escape(name)} (\S+)$", text, re.MULTILINE)
        assert m is not None, name
        return float(m.group(1))

    def wait_connections(self, n: int, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.metric("client_connections") == n:
                return
            time.sleep(0.1)
        raise AssertionError(f"open client connections stay at {self.metric('client_connections')}, not {n}")

    def log(self) -> str:
        return self.proc.log_path.read_text(errors="replace")


@contextmanager
def _serve(kafka: ProcessBackend, tmp_path: Path, settings: dict[str, int], nofile: int | None = None) -> Iterator[Served]:
    config = tmp_path / "gateway.toml"
    config.write_text("".join(f'"{k}" = {v}\n' for k, v in settings.items()))
    admin = f"127.0.0.1:{free_port_block(1)}"
    proc = GatewayProcess(
        upstream=kafka.bootstrap,
        listen_port=free_port_block(4),
        log_dir=tmp_path,
        extra_args=["--config", str(config), "--metrics-listen", admin, "--log-format", "json"],
        nofile=nofile,
    )
    proc.start()
    try:
        yield Served(proc, admin)
    finally:
        proc.stop()


def _partial_frames(bootstrap: str, n: int, sent: int, timeout_s: float) -> tuple[list[socket.socket], int]:
    """``n`` connections, each sending the first ``sent`` bytes of a Produce frame declaring ``DECLARED``
    bytes, for at most ``timeout_s`` (a gateway that stops reading them leaves the rest unsent).
    Returns the sockets (still open) and the bytes handed to the kernel."""
    socks = [socket.create_connection(_addr(bootstrap), timeout=10) for _ in range(n)]
    head = struct.pack(">ihhih", DECLARED, 0, 9, 1, -1)
    chunk = b"\x00" * MiB
    left: dict[socket.socket, int] = {}
    sel = selectors.DefaultSelector()
    for s in socks:
        s.sendall(head)
        s.setblocking(False)
        left[s] = sent - len(head)
        sel.register(s, selectors.EVENT_WRITE)
    total = n * len(head)
    deadline = time.monotonic() + timeout_s
    while left and time.monotonic() < deadline:
        for key, _ in sel.select(0.1):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            try:
                k = s.send(chunk[: min(len(chunk), left[s])])
            except BlockingIOError:
                continue
            total += k
            left[s] -= k
            if not left[s]:
                sel.unregister(s)
                del left[s]
    sel.close()
    return socks, total


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "closed by the gateway"
        out += chunk
    return out


def _closed_by_gateway(socks: list[socket.socket], wait_s: float) -> int:
    """How many of ``socks`` the gateway closes within ``wait_s`` (they send nothing)."""
    sel = selectors.DefaultSelector()
    for s in socks:
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    closed = 0
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and sel.get_map():
        for key, _ in sel.select(0.1):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            try:
                data = s.recv(1)
            except ConnectionResetError:
                data = b""
            assert not data, "the gateway sent something unasked"
            sel.unregister(s)
            closed += 1
    sel.close()
    return closed


def _close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


def _produce_and_consume(bootstrap: str, topic: str, group: str, n: int = 20) -> None:
    """Produce ``n`` records and read them back in a consumer group (KIP-848), committing: the group
    coordinator, passthrough produce and fetch all work."""
    payloads = values(group, n)
    produce_confluent(bootstrap, topic, payloads, timeout_s=20)
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    seen: set[bytes] = set()
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(seen) < n and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=100, timeout=0.5):
                if msg.error() is None and msg.value() in payloads:
                    seen.add(msg.value())
        assert len(seen) == n, f"consumed {len(seen)} of {n} through the gateway"
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def test_closed_connections_give_their_memory_back(kafka, tmp_path, make_topic, names):
    """Without a budget every partial frame is buffered in full; what matters is that it all goes back."""
    topic = make_topic(1)
    with _serve(kafka, tmp_path, {"queued.max.request.bytes": -1}) as gw:
        _produce_and_consume(gw.bootstrap, topic, names("warmup"))
        baseline = gw.rss()
        peaks = []
        for r in range(ROUNDS):
            socks, sent = _partial_frames(gw.bootstrap, CLIENTS, SENT, timeout_s=30)
            assert sent == CLIENTS * SENT  # nothing holds these clients back
            deadline = time.monotonic() + 10
            while gw.rss() < baseline + CLIENTS * SENT // 2 and time.monotonic() < deadline:
                time.sleep(0.05)  # the gateway reads what the kernel holds for it
            peaks.append(gw.rss())
            # Meanwhile another client is served: passthrough and the group coordinator.
            _produce_and_consume(gw.bootstrap, topic, names(f"round{r}"))
            _close_all(socks)
            gw.wait_connections(0)
        # The allocator hands freed buffers back to the OS a moment after the closes (on a loaded machine
        # the last RSS reading can come first): give it a few seconds, not forever.
        deadline = time.monotonic() + 10
        while (after := gw.rss()) >= baseline + 100 * MB and time.monotonic() < deadline:
            time.sleep(0.2)
    print(f"RSS MB: baseline {baseline / MB:.0f}, peaks {[round(p / MB) for p in peaks]}, after {after / MB:.0f}")
    assert min(peaks) > baseline + CLIENTS * SENT // 2  # the rounds did load the gateway
    assert after < baseline + 100 * MB


def test_request_memory_budget_bounds_what_partial_frames_hold(kafka, tmp_path, make_topic, names):
    """With queued.max.request.bytes at 256 MiB, 9 frames of 100 MB: three reserve their size and are
    read, the rest are muted until those go (here: the partial-request timeout closes them)."""
    topic = make_topic(1)
    clients = 9
    settings = {"queued.max.request.bytes": 256 * MiB, "partial_request_timeout_ms": 1500}
    with _serve(kafka, tmp_path, settings) as gw:
        _produce_and_consume(gw.bootstrap, topic, names("warmup"))
        baseline = gw.rss()
        socks, sent = _partial_frames(gw.bootstrap, clients, SENT, timeout_s=1)
        held = gw.rss()
        assert gw.metric("client_connections_muted") > 0
        assert gw.metric("queued_request_bytes") >= 256 * MiB
        # The reading ones run into the partial-request timeout, the muted ones get their turn and run
        # into it too: every connection is closed by the gateway, and the budget is free again.
        deadline = time.monotonic() + 60
        while gw.metric("client_connections") > 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert gw.metric("client_connections") == 0
        assert gw.metric("queued_request_bytes") == 0
        assert gw.metric('client_connections_closed_total{reason="partial_request"}') == clients
        _produce_and_consume(gw.bootstrap, topic, names("after"))
        _close_all(socks)
        after = gw.rss()
        log = gw.log()
    print(f"RSS MB: baseline {baseline / MB:.0f}, held {held / MB:.0f}, after {after / MB:.0f}; sent {sent / MB:.0f}")
    # 3 readers x 16 MiB at most, plus what one chunk per muted connection may add.
    assert held < baseline + 100 * MB
    assert "request frame not completed in time" in log
    assert after < baseline + 100 * MB


def _fetch(topic: str, max_bytes: int) -> object:
    FT = FetchRequest.FetchTopic
    FP = FT.FetchPartition
    return FetchRequest[4](
        replica_id=-1,
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        topics=[FT(topic=topic, partitions=[FP(partition=0, fetch_offset=0, partition_max_bytes=max_bytes)])],
    )


def test_a_client_that_never_reads_its_fetches_is_held_back(kafka, tmp_path, make_topic, names):
    topic = make_topic(1)
    produce_confluent(kafka.bootstrap, topic, [b"x" * 100_000] * 100, timeout_s=30)  # ~10 MB
    with _serve(kafka, tmp_path, {}) as gw:
        _produce_and_consume(gw.bootstrap, topic, names("warmup"), n=5)
        baseline = gw.rss()
        # 300 Fetches of the same ~8 MB: ~2.4 GB of responses if the gateway read them all for this client.
        msg = _fetch(topic, 8 * MiB)
        sock = socket.create_connection(_addr(gw.bootstrap), timeout=10)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.setblocking(False)
        pending = b""
        requests = 0
        deadline = time.monotonic() + 8
        while requests < 300 and time.monotonic() < deadline:
            if not pending:
                msg.with_header(correlation_id=requests, client_id="no-reader")  # type: ignore[attr-defined]
                pending = bytes(msg.encode(version=4, header=True, framed=True))  # type: ignore[attr-defined]
                requests += 1
            try:
                pending = pending[sock.send(pending) :]
            except BlockingIOError:
                time.sleep(0.05)
        time.sleep(1)  # whatever the gateway would still buffer, it has by now
        held = gw.rss()
        # Everyone else is still served meanwhile.
        _produce_and_consume(gw.bootstrap, topic, names("other"), n=5)
        sock.close()
        gw.wait_connections(0)
    print(f"RSS MB: baseline {baseline / MB:.0f}, held {held / MB:.0f}; fetches sent {requests}")
    assert held < baseline + 100 * MB


def _still_open(sock: socket.socket) -> bool:
    """Whether the gateway has not closed ``sock`` (non-blocking, nothing to read)."""
    try:
        return bool(sock.recv(1))  # the gateway sends nothing unasked: data would be a bug shown later
    except BlockingIOError:
        return True
    except ConnectionResetError:
        return False


def _metadata_answered(sock: socket.socket, corr: int) -> bool:
    msg = MetadataRequest[1](topics=None)
    msg.with_header(correlation_id=corr, client_id="first")
    sock.sendall(bytes(msg.encode(version=1, header=True, framed=True)))
    size = struct.unpack(">i", _recv_exact(sock, 4))[0]
    return bool(struct.unpack(">i", _recv_exact(sock, size)[:4])[0] == corr)


def test_descriptor_limit_refuses_cleanly_and_stays_ready(kafka, tmp_path):
    # 400 descriptors: 160 kept free, 240 for clients and their upstream links together.
    with _serve(kafka, tmp_path, {}, nofile=400) as gw:
        budget = 240
        assert gw.metric("client_connections_max") == budget
        first = socket.create_connection(_addr(gw.bootstrap), timeout=10)
        assert _metadata_answered(first, 5)  # its link is open: two descriptors
        assert gw.metric("client_upstream_links") == 1
        # Clients that ask nothing of the cluster hold one descriptor each.
        socks = [socket.create_connection(_addr(gw.bootstrap), timeout=10) for _ in range(300)]
        admitted = budget - 2
        refused = _closed_by_gateway(socks, wait_s=3.0)
        assert refused == 300 - admitted
        assert gw.metric("client_connections") == admitted + 1
        assert gw.metric("client_connections_refused_total") == refused
        # An admitted client whose first request for the cluster would need one more descriptor for its
        # link is closed alone.
        needy = next(s for s in socks if _still_open(s))
        msg = MetadataRequest[1](topics=None)
        msg.with_header(correlation_id=6, client_id="needy")
        needy.sendall(bytes(msg.encode(version=1, header=True, framed=True)))
        assert _closed_by_gateway([needy], wait_s=5.0) == 1
        assert gw.metric("client_connections_refused_total") == refused + 1
        # The first client is still served, readiness is unaffected, and so is liveness.
        assert _metadata_answered(first, 7)
        assert gw.get("/readyz")[0] == 200
        assert gw.get("/healthz")[0] == 200
        _close_all(socks)
        first.close()
        gw.wait_connections(0)
        log = gw.log()
    assert log.count("max.connections reached") == 1
    assert log.count("no descriptor left for its upstream link") == 1
    assert "Traceback" not in log
    assert "upstream broker unreachable" not in log


def test_a_client_that_never_reads_local_answers_is_held_back(kafka, tmp_path):
    """Answers the gateway makes itself (the group coordinator's) do not wait on the upstream: only the
    client's own write buffer can hold back a client that sends and never reads."""
    with _serve(kafka, tmp_path, {}) as gw:
        baseline = gw.rss()
        # DescribeGroups of 2,000 groups with long ids: ~0.8 MB asked, ~0.9 MB answered, each time.
        msg = DescribeGroupsRequest[5](groups=[f"{i:05d}" + "g" * 395 for i in range(2000)], include_authorized_operations=False)
        msg.with_header(correlation_id=1, client_id="no-reader")
        raw = bytes(msg.encode(version=5, header=True, framed=True))
        sock = socket.create_connection(_addr(gw.bootstrap), timeout=10)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(sock, selectors.EVENT_WRITE)
        requests = 0
        pending = b""
        # Until 200 are sent, or the gateway has taken nothing for 1.5 s (it stopped reading).
        deadline = time.monotonic() + 20
        stalled_at = time.monotonic() + 1.5
        while requests < 200 and time.monotonic() < min(deadline, stalled_at):
            if not pending:
                pending, requests = raw, requests + 1
            if sel.select(0.1):
                pending = pending[sock.send(pending) :]
                stalled_at = time.monotonic() + 1.5
        sel.close()
        time.sleep(1)
        held = gw.rss()
        status, _ = gw.get("/readyz")
        sock.close()
        gw.wait_connections(0)
    print(f"RSS MB: baseline {baseline / MB:.0f}, held {held / MB:.0f}; requests sent {requests}")
    assert status == 200
    assert held < baseline + 100 * MB
