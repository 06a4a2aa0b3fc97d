"""KIP-951 leader endpoints in Produce v10+ / Fetch v16+ responses: found by walking the structure,
rewritten only when present, everything else byte for byte as the broker sent it."""

from __future__ import annotations

import uuid

import pytest

from gateway.net import node_endpoints
from gateway.wire import codec, frames
from gateway.wire.api_keys import ApiKey

UPSTREAM_HOST = "10.9.8.7"
GATEWAY = {1: ("gw.example", 19001), 2: ("gw.example", 19002)}
RECORDS = b"\x00" * 61 + b"batch-bytes" * 40  # opaque to the walk: only its length matters


def addr_of(node_id: int) -> tuple[str, int] | None:
    return GATEWAY.get(node_id)


def _produce(version: int, endpoints: list[tuple[int, str, int, str | None]] | None, host: str = UPSTREAM_HOST):
    R = codec.RESPONSES[ApiKey.PRODUCE]
    T = R.TopicProduceResponse
    P = T.PartitionProduceResponse
    E = P.BatchIndexAndErrorMessage
    parts = [
        P(index=0, error_code=0, base_offset=41, log_append_time_ms=-1, log_start_offset=0,
          record_errors=[E(batch_index=3, batch_index_error_message="bad")], error_message=None),
        P(index=1, error_code=6, base_offset=-1, log_start_offset=-1, record_errors=[], error_message="moved",
          current_leader=P.LeaderIdAndEpoch(leader_id=2, leader_epoch=7)),
    ]
    topic = T(topic_id=uuid.UUID(int=7), partition_responses=parts) if version >= 13 else T(
        name="orders", partition_responses=parts
    )
    kw = {}
    if endpoints is not None:
        kw["node_endpoints"] = [R.NodeEndpoint(node_id=n, host=h, port=p, rack=r) for n, h, p, r in endpoints]
    return R[version](responses=[topic, topic], throttle_time_ms=5, **kw)


def _fetch(version: int, endpoints: list[tuple[int, str, int, str | None]] | None, records: bytes = RECORDS):
    R = codec.RESPONSES[ApiKey.FETCH]
    T = R.FetchableTopicResponse
    P = T.PartitionData
    A = P.AbortedTransaction
    parts = [
        P(partition_index=0, error_code=0, high_watermark=100, last_stable_offset=90, log_start_offset=0,
          aborted_transactions=[A(producer_id=9, first_offset=12), A(producer_id=10, first_offset=50)],
          preferred_read_replica=-1, records=records),
        P(partition_index=1, error_code=6, high_watermark=-1, aborted_transactions=None,
          current_leader=P.LeaderIdAndEpoch(leader_id=2, leader_epoch=7), records=None),
        P(partition_index=2, error_code=0, high_watermark=3, aborted_transactions=[], records=b""),
    ]
    kw = {}
    if endpoints is not None:
        kw["node_endpoints"] = [R.NodeEndpoint(node_id=n, host=h, port=p, rack=r) for n, h, p, r in endpoints]
    return R[version](
        throttle_time_ms=0, error_code=0, session_id=77,
        responses=[T(topic_id=uuid.UUID(int=3), partitions=parts)], **kw,
    )


def _frame(api_key: int, version: int, msg) -> bytes:
    return frames.frame(codec.encode_response(api_key, version, 1234, msg))


CASES = [(ApiKey.PRODUCE, v, _produce) for v in range(10, 14)] + [(ApiKey.FETCH, v, _fetch) for v in range(16, 19)]


@pytest.mark.parametrize(("api_key", "version", "build"), CASES)
def test_a_response_without_endpoints_passes_untouched(api_key, version, build) -> None:
    frame = _frame(api_key, version, build(version, None))
    assert node_endpoints.rewrite_frame(api_key, version, frame, addr_of) is None
    # the walk lands exactly on the top-level tagged fields: an empty set, the frame's last byte
    body = frames.skip_tagged_fields(frame, 8)
    assert node_endpoints.find_tagged_fields(api_key, version, frame, body) == len(frame) - 1


@pytest.mark.parametrize(("api_key", "version", "build"), CASES)
def test_endpoints_point_at_the_gateway_and_the_rest_is_byte_exact(api_key, version, build) -> None:
    upstream = [(1, UPSTREAM_HOST, 9093, "r1"), (2, UPSTREAM_HOST, 9094, None)]
    frame = _frame(api_key, version, build(version, upstream))
    out = node_endpoints.rewrite_frame(api_key, version, frame, addr_of)
    assert out is not None
    expected = _frame(api_key, version, build(version, [(1, "gw.example", 19001, "r1"), (2, "gw.example", 19002, None)]))
    assert out == expected
    assert UPSTREAM_HOST.encode() not in out
    # the result decodes, with the records as they were
    _, msg = codec.decode_response(api_key, version, out[4:])
    assert [(e.node_id, e.host, e.port, e.rack) for e in msg.node_endpoints] == [
        (1, "gw.example", 19001, "r1"),
        (2, "gw.example", 19002, None),
    ]
    if api_key == ApiKey.FETCH:
        assert bytes(msg.responses[0].partitions[0].records) == RECORDS


@pytest.mark.parametrize(("api_key", "version", "build"), CASES)
def test_a_node_the_gateway_does_not_serve_is_left_out(api_key, version, build) -> None:
    frame = _frame(api_key, version, build(version, [(3, UPSTREAM_HOST, 9095, None), (1, UPSTREAM_HOST, 9093, None)]))
    out = node_endpoints.rewrite_frame(api_key, version, frame, addr_of)
    assert out == _frame(api_key, version, build(version, [(1, "gw.example", 19001, None)]))


def test_a_rewrite_of_an_already_rewritten_response_changes_nothing() -> None:
    frame = _frame(ApiKey.FETCH, 18, _fetch(18, [(1, "gw.example", 19001, None)]))
    assert node_endpoints.rewrite_frame(ApiKey.FETCH, 18, frame, addr_of) == frame


def test_other_top_level_tagged_fields_are_kept() -> None:
    # A tagged field the gateway does not know (a later Kafka's) rides along unchanged after tag 0.
    base = _frame(ApiKey.FETCH, 17, _fetch(17, [(1, UPSTREAM_HOST, 9093, None)]))
    body = frames.skip_tagged_fields(base, 8)
    start = node_endpoints.find_tagged_fields(ApiKey.FETCH, 17, base, body)
    assert base[start] == 1  # one tagged field: NodeEndpoints
    unknown = b"\x05\x03abc"  # tag 5, 3 bytes
    frame = bytearray(base[:start]) + b"\x02" + base[start + 1 :] + unknown
    frame[:4] = (len(frame) - 4).to_bytes(4, "big")
    out = node_endpoints.rewrite_frame(ApiKey.FETCH, 17, bytes(frame), addr_of)
    assert out is not None and out.endswith(unknown) and b"gw.example" in out
    assert UPSTREAM_HOST.encode() not in out


@pytest.mark.parametrize(("api_key", "version", "build"), CASES)
def test_a_truncated_response_is_refused_not_passed(api_key, version, build) -> None:
    frame = _frame(api_key, version, build(version, [(1, UPSTREAM_HOST, 9093, None)]))
    for cut in (9, 20, len(frame) // 2, len(frame) - 3):
        short = frame[:cut]
        with pytest.raises(Exception):  # noqa: B017, PT011 - any error: the caller closes the connection
            node_endpoints.rewrite_frame(api_key, version, short, addr_of)


def test_versions_before_kip_951_carry_no_endpoints() -> None:
    assert not node_endpoints.carries_endpoints(ApiKey.PRODUCE, 9)
    assert node_endpoints.carries_endpoints(ApiKey.PRODUCE, 10)
    assert not node_endpoints.carries_endpoints(ApiKey.FETCH, 15)
    assert node_endpoints.carries_endpoints(ApiKey.FETCH, 16)
    assert not node_endpoints.carries_endpoints(ApiKey.METADATA, 13)


# --- on the connection ----------------------------------------------------------------------------------


class _Transport:
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

    def get_extra_info(self, name: str, default=None):
        return default


def _connection():
    from gateway.config.settings import GatewayConfig
    from gateway.net.connection import ClientConnection, UpstreamLink
    from gateway.net.rewrite import Broker
    from gateway.net.server import Gateway

    gw = Gateway(GatewayConfig(upstream="127.0.0.1:1", listen_port=19000))
    gw.directory.brokers = {1: Broker(1, UPSTREAM_HOST, 9093, None)}
    gw.directory.api_ranges = {ApiKey.PRODUCE: (3, 13), ApiKey.FETCH: (4, 18)}
    conn = ClientConnection(gw, None)
    client, upstream = _Transport(), _Transport()
    conn.transport = client
    link = UpstreamLink(conn)
    link.transport = upstream
    conn.upstream = link
    return gw, conn, client


def _fetch_request(corr: int) -> bytes:
    # Forwarded without being read: the header is all the gateway looks at.
    return frames.frame(bytes.fromhex("0001 0012") + corr.to_bytes(4, "big") + b"\xff\xff\x00")


def test_the_connection_passes_fetch_responses_without_endpoints_as_the_same_bytes() -> None:
    _, conn, client = _connection()
    conn.data_received(_fetch_request(1234))
    frame = _frame(ApiKey.FETCH, 18, _fetch(18, None))
    conn.upstream.data_received(frame)
    assert client.written[0] is frame  # not rebuilt, not copied


def test_the_connection_rewrites_endpoints_to_its_own_addresses() -> None:
    gw, conn, client = _connection()
    conn.data_received(_fetch_request(1234))
    conn.upstream.data_received(
        _frame(ApiKey.FETCH, 18, _fetch(18, [(1, UPSTREAM_HOST, 9093, None), (7, UPSTREAM_HOST, 9099, None)]))
    )
    host, port = gw.addr_of(1)
    assert client.written == [_frame(ApiKey.FETCH, 18, _fetch(18, [(1, host, port, None)]))]
    assert not client.closed


def test_the_connection_closes_on_a_response_it_cannot_walk() -> None:
    _, conn, client = _connection()
    conn.data_received(_fetch_request(1234))
    frame = _frame(ApiKey.FETCH, 18, _fetch(18, [(1, UPSTREAM_HOST, 9093, None)]))
    broken = frames.frame(frame[4:-12])  # a whole frame, but its body stops short
    conn.upstream.data_received(broken)
    assert client.written == [] and client.closed


BIG_RECORDS = bytes(range(256)) * 2000  # stands for record batches: never read, only skipped by size


def _in_reads(protocol, stream: bytes, per_read: int) -> None:
    for i in range(0, len(stream), per_read):
        protocol.data_received(stream[i : i + per_read])


def test_a_large_fetch_response_in_many_reads_goes_back_byte_exact() -> None:
    _, conn, client = _connection()
    conn.data_received(_fetch_request(1234))
    frame = _frame(ApiKey.FETCH, 18, _fetch(18, None, BIG_RECORDS))
    _in_reads(conn.upstream, frame, 60_001)
    assert client.written == [frame] and not client.closed


def test_a_large_fetch_response_in_many_reads_still_gets_its_endpoints_rewritten() -> None:
    gw, conn, client = _connection()
    conn.data_received(_fetch_request(1234))
    endpoints = [(1, UPSTREAM_HOST, 9093, None), (7, UPSTREAM_HOST, 9099, None)]
    # the last read splits the top-level tagged fields that hold the endpoints
    frame = _frame(ApiKey.FETCH, 18, _fetch(18, endpoints, BIG_RECORDS))
    _in_reads(conn.upstream, frame, len(frame) - 20)
    host, port = gw.addr_of(1)
    assert client.written == [_frame(ApiKey.FETCH, 18, _fetch(18, [(1, host, port, None)], BIG_RECORDS))]
    assert not client.closed


def test_pipelined_responses_in_one_read_go_back_in_request_order() -> None:
    _, conn, client = _connection()
    conn.data_received(b"".join(_fetch_request(corr) for corr in (1, 2, 3)))  # pipelined requests too

    def fetch(corr: int, records: bytes) -> bytes:
        return frames.frame(codec.encode_response(ApiKey.FETCH, 18, corr, _fetch(18, None, records)))

    stream = fetch(1, RECORDS) + fetch(2, BIG_RECORDS) + fetch(3, RECORDS)
    conn.upstream.data_received(stream)
    assert client.written == [fetch(1, RECORDS), fetch(2, BIG_RECORDS), fetch(3, RECORDS)]


def test_a_large_produce_request_in_many_reads_is_forwarded_whole_once() -> None:
    from kafka.protocol.producer import ProduceRequest

    _, conn, client = _connection()
    msg = ProduceRequest[9](transactional_id=None, acks=1, timeout_ms=1000,
                            topic_data=[("t", [(0, BIG_RECORDS)])])
    msg.with_header(correlation_id=55, client_id="cli")
    frame = bytes(msg.encode(version=9, header=True, framed=True))
    _in_reads(conn, frame[:3], 1)  # the size prefix straddles reads
    _in_reads(conn, frame[3:], 50_000)
    assert conn.upstream.transport.written == [frame]
    assert len(conn.pending) == 1 and conn.reserved == 0
