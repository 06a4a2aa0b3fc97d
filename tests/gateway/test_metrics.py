"""The operators' endpoint without a broker: exposition format, counters, health, readiness, bad requests."""

from __future__ import annotations

import asyncio
import re
import struct
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer.group import JoinGroupRequest, SyncGroupRequest

from gateway.config.settings import GatewayConfig
from gateway.groups.layer import GroupLayer
from gateway.net import connection_link
from gateway.net.connection import ClientConnection, UpstreamLink
from gateway.net.contracts import HandlerChain
from gateway.net.rewrite import Broker
from gateway.net.server import Gateway
from gateway.net.upstream import UpstreamError
from gateway.ops import admin_http
from gateway.ops.admin_http import MAX_HEAD_BYTES, AdminServer
from gateway.ops.health import Health
from gateway.wire.api_keys import ApiKey

from . import _exposition
from ._groups_support import StubGateway, call, layer_on
from .test_groups_layer import _join_consumer_member, settings, started


async def http(addr: tuple[str, int], raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw`` (asking the server to close after it) and read until it closes: (status, headers, body)."""
    reader, writer = await asyncio.open_connection(*addr)
    try:
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("ascii").split("\r\n")
    version, status, _ = lines[0].split(" ", 2)
    assert version == "HTTP/1.1"
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert int(headers["content-length"]) == len(body)
    return int(status), headers, body


async def get(addr: tuple[str, int], path: str) -> tuple[int, dict[str, str], bytes]:
    return await http(addr, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())


async def scrape(addr: tuple[str, int]) -> dict[str, _exposition.Family]:
    status, headers, body = await get(addr, "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=")
    return _exposition.parse(body.decode("utf-8"))


async def layer_with_endpoint(**kw: Any) -> tuple[GroupLayer, AdminServer, tuple[str, int]]:
    layer = await started(**kw)
    admin = AdminServer(Health(layer.nodes, layer))
    addr = await admin.start("127.0.0.1", 0)
    return layer, admin, addr


async def test_exposition_parses_and_group_counters_follow_the_requests(tmp_path: Path) -> None:
    layer, admin, addr = await layer_with_endpoint(state_dir=str(tmp_path / "state"))
    try:
        before = await scrape(addr)
        assert all(name.startswith(("groupgate_", "kafka_consumergroup_")) for name in before)
        assert before["groupgate_groups"].samples and all(v == 0 for _, _, v in before["groupgate_groups"].samples)
        assert before["groupgate_group_rebalances_total"].value(type="consumer") == 0
        appends_before = before["groupgate_state_log_appends_total"].value()

        layer._on_topics({"t": (uuid.uuid4(), 2)})
        r = await _join_consumer_member(layer, "cg", "t", str(uuid.uuid4()))
        assert r.error_code == 0
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
        j = await call(layer, ApiKey.JOIN_GROUP, 3, JoinGroupRequest[3](
            group_id="classic", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
            protocol_type="consumer", protocols=protocols,
        ))
        assert j.error_code == 0
        s = await call(layer, ApiKey.SYNC_GROUP, 2, SyncGroupRequest[2](
            group_id="classic", generation_id=j.generation_id, member_id=j.member_id, assignments=[],
        ))
        assert s.error_code == 0

        after = await scrape(addr)
        groups = after["groupgate_groups"]
        assert sum(v for _, ls, v in groups.samples if ls["type"] == "consumer") == 1
        assert sum(v for _, ls, v in groups.samples if ls["type"] == "classic") == 1
        assert groups.value(type="classic", state="Stable") == 1
        members = after["groupgate_group_members"]
        assert members.value(group_type="consumer", protocol="consumer") == 1
        assert members.value(group_type="classic", protocol="classic") == 1
        assert members.value(group_type="consumer", protocol="classic") == 0
        rebalances = after["groupgate_group_rebalances_total"]
        # One group epoch per epoch bump the member saw, one classic generation per generation.
        assert rebalances.value(type="consumer") == r.member_epoch
        assert rebalances.value(type="classic") == j.generation_id
        assert after["groupgate_state_log_appends_total"].value() > appends_before
        assert after["groupgate_state_log_appended_bytes_total"].value() > 0
        assert after["groupgate_state_log_fsyncs_total"].value() >= 1
        assert after["groupgate_group_timers"].value() >= 2  # both members' session timers
        assert after["groupgate_offset_commits_total"].value(outcome="accepted") == 0
    finally:
        await admin.stop()
        await layer.stop()


async def test_a_member_expired_by_its_session_timer_is_counted() -> None:
    layer, admin, addr = await layer_with_endpoint()
    try:
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
        j = await call(layer, ApiKey.JOIN_GROUP, 3, JoinGroupRequest[3](
            group_id="quiet", session_timeout_ms=300, rebalance_timeout_ms=300, member_id="",
            protocol_type="consumer", protocols=protocols,
        ))
        await call(layer, ApiKey.SYNC_GROUP, 2, SyncGroupRequest[2](
            group_id="quiet", generation_id=j.generation_id, member_id=j.member_id, assignments=[],
        ))
        assert (await scrape(addr))["groupgate_group_members_expired_total"].value(type="classic") == 0
        await asyncio.sleep(0.8)
        m = await scrape(addr)
        assert m["groupgate_group_members_expired_total"].value(type="classic") == 1
        assert m["groupgate_group_members_expired_total"].value(type="consumer") == 0
        assert m["groupgate_groups"].value(type="classic", state="Empty") == 1
        assert sum(v for _, _, v in m["groupgate_group_timers_fired_total"].samples) >= 1
    finally:
        await admin.stop()
        await layer.stop()


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def _connection(gw: Gateway) -> tuple[ClientConnection, FakeTransport, FakeTransport]:
    conn = ClientConnection(gw, None)
    client, upstream = FakeTransport(), FakeTransport()
    conn.transport = client  # type: ignore[assignment]
    link = UpstreamLink(conn)
    link.transport = upstream  # type: ignore[assignment]
    conn.upstream = link
    gw.connections.add(conn)
    return conn, client, upstream


async def test_requests_bytes_and_local_latency_are_counted_on_the_connection() -> None:
    async def local(conn: Any, header: Any, payload: bytes) -> bytes:
        await asyncio.sleep(0.01)
        return struct.pack(">i", header.correlation_id)

    gw = Gateway(GatewayConfig(upstream="127.0.0.1:1", listen_port=0), HandlerChain(local_handlers={69: local}))
    gw.directory.api_ranges = {2: (0, 10), 69: (0, 1)}
    conn, client, upstream = _connection(gw)
    forwarded = struct.pack(">ihhih", 10, 2, 1, 5, -1)  # ListOffsets v1, header only: forwarded as is
    conn.data_received(forwarded)
    assert upstream.written == [forwarded]
    conn.upstream.data_received(struct.pack(">ii", 4, 5))  # type: ignore[union-attr]
    local_request = struct.pack(">ihhihb", 11, 69, 0, 6, -1, 0)  # flexible header: empty tagged fields
    conn.data_received(local_request)
    for _ in range(50):
        if len(client.written) == 2:
            break
        await asyncio.sleep(0.01)
    assert client.written == [struct.pack(">ii", 4, 5), struct.pack(">ii", 4, 6)]
    conn.data_received(struct.pack(">ihhih", 10, 9999, 0, 7, -1))  # unknown api key: closed
    assert client.closed

    m = _exposition.parse(Health(gw).render().decode())
    requests = m["groupgate_requests_total"]
    assert requests.value(api="ListOffsets", outcome="forwarded") == 1
    assert requests.value(api="ConsumerGroupDescribe", outcome="local") == 1
    assert requests.value(api="unknown", outcome="error") == 1
    assert m["groupgate_client_received_bytes_total"].value() == len(forwarded) + len(local_request) + 14
    assert m["groupgate_client_sent_bytes_total"].value() == 16
    latency = [(n, ls, v) for n, ls, v in m["groupgate_local_request_duration_seconds"].samples]
    count = [v for n, ls, v in latency if n.endswith("_count") and ls["api"] == "ConsumerGroupDescribe"]
    total = [v for n, ls, v in latency if n.endswith("_sum")]
    assert count == [1] and total[0] >= 0.01
    assert m["groupgate_ready"].value() == 0  # never started


async def test_only_a_cluster_wide_failure_counts_as_the_upstream_being_unreachable() -> None:
    gw = Gateway(GatewayConfig(upstream="127.0.0.1:1", listen_port=0, upstream_connect_timeout_s=0.3))
    gw.directory.brokers = {1: Broker(1, "127.0.0.1", 1, None)}  # a broker that refuses connections
    one_broker = ClientConnection(gw, 1)
    one_broker.transport = FakeTransport()  # type: ignore[assignment]
    await connection_link.open_link(one_broker)
    # The client connection stays open (a broker outage is answered per request, docs/operations.md).
    assert not one_broker.closed and gw.directory.unreachable_for() is None
    assert gw.metrics.upstream_connect_failures == 1
    bootstrap = ClientConnection(gw, None)  # tries every known broker and the configured bootstrap list
    bootstrap.transport = FakeTransport()  # type: ignore[assignment]
    await connection_link.open_link(bootstrap)
    assert not bootstrap.closed and gw.directory.unreachable_for() is not None
    assert gw.metrics.upstream_connect_failures == 2  # 127.0.0.1:1 is both the broker and the bootstrap


async def test_readyz_is_503_until_start_up_completes_and_healthz_answers_throughout() -> None:
    gw = Gateway(GatewayConfig(upstream="127.0.0.1:1", listen_port=0, upstream_connect_timeout_s=0.3))
    admin = AdminServer(Health(gw))
    addr = await admin.start("127.0.0.1", 0)
    try:
        status, _, body = await get(addr, "/readyz")
        assert status == 503 and b"listeners not open yet" in body
        status, _, body = await get(addr, "/healthz")
        assert (status, body) == (200, b"ok\n")
        with pytest.raises(UpstreamError):
            await gw.start()  # the upstream never answers: start-up fails after the connect timeout
        status, _, body = await get(addr, "/readyz")
        assert status == 503 and b"upstream unreachable" in body
        m = await scrape(addr)
        assert m["groupgate_upstream_reachable"].value() == 0
        assert m["groupgate_upstream_metadata_failures_total"].value() >= 1
        assert m["groupgate_ready"].value() == 0
        status, _, _ = await get(addr, "/healthz")
        assert status == 200
    finally:
        await admin.stop()
        await gw.stop()


async def test_readyz_waits_for_the_group_layer_and_topic_metadata() -> None:
    stub = StubGateway()
    layer = layer_on(stub, settings())
    admin = AdminServer(Health(stub, layer))  # type: ignore[arg-type]
    addr = await admin.start("127.0.0.1", 0)
    try:
        status, _, body = await get(addr, "/readyz")
        assert status == 503 and b"group state not replayed yet" in body
        await layer.start()  # the stub's upstream is unreachable: no topic metadata
        status, _, body = await get(addr, "/readyz")
        assert status == 503 and b"topic metadata not fetched yet" in body
        layer.watch.loaded = True  # as after a successful metadata fetch
        status, _, body = await get(addr, "/readyz")
        assert (status, body) == (200, b"ready\n")
        assert (await scrape(addr))["groupgate_ready"].value() == 1
    finally:
        await admin.stop()
        await layer.stop()


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", 405),
        (b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        (b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        (b"GET /metrics HTTP/9.9\r\nHost: x\r\n\r\n", 400),
        (b"GET metrics HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nBad Header\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\n\r\n", 400),  # HTTP/1.1 without Host
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (4 * MAX_HEAD_BYTES) + b"\r\n\r\n", 400),
        (b"GET /" + b"a" * (4 * MAX_HEAD_BYTES) + b" HTTP/1.1\r\nHost: x\r\n\r\n", 400),
    ],
)
async def test_bad_requests_get_a_4xx_and_the_endpoint_keeps_serving(raw: bytes, status: int) -> None:
    layer, admin, addr = await layer_with_endpoint()
    try:
        reader, writer = await asyncio.open_connection(*addr)
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        writer.close()
        assert re.match(rb"HTTP/1\.[01] %d " % status, data), data[:80]
        if status == 405:
            assert b"\r\nAllow: GET\r\n" in data
        # a client that connects and vanishes mid-request
        _, w = await asyncio.open_connection(*addr)
        w.write(b"GET /met")
        w.close()
        assert (await get(addr, "/healthz"))[0] == 200
        assert (await scrape(addr))["groupgate_groups"].type == "gauge"
        assert layer.nodes.metrics.connections_total == 0  # nothing reached the Kafka side
    finally:
        await admin.stop()
        await layer.stop()


async def test_a_request_head_that_stops_arriving_is_closed_after_the_head_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(admin_http, "HEAD_TIMEOUT_S", 0.5)
    layer, admin, addr = await layer_with_endpoint()
    try:
        reader, writer = await asyncio.open_connection(*addr)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and nothing more
        await writer.drain()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server, unanswered
        writer.close()
        assert (await get(addr, "/readyz"))[0] in (200, 503)
    finally:
        await admin.stop()
        await layer.stop()
