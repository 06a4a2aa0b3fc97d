"""APIs answered by the gateway itself (the group layer's hook) keep the per-connection response order."""

from __future__ import annotations

import asyncio
import struct

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from gateway.config.settings import GatewayConfig
from gateway.net.contracts import HandlerChain
from gateway.ops.runner import GatewayThread
from gateway.wire import codec
from gateway.wire.protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse

from . import wire

pytestmark = pytest.mark.kafka


async def slow_describe(conn, header, payload):
    _, req = codec.decode_request(69, header.api_version, payload)
    if req.group_ids[0].startswith("now-"):
        pass  # answered without waiting: the connection steps the handler at once, no task
    elif req.group_ids[0].startswith("soon-"):
        await asyncio.sleep(0)  # suspends once, carried on by a task
    else:
        await asyncio.sleep(0.3)  # answered long after the requests behind it were forwarded
    groups = [ConsumerGroupDescribeResponse.DescribedGroup(error_code=69, group_id=g) for g in req.group_ids]
    return codec.encode_response(
        69,
        header.api_version,
        header.correlation_id,
        ConsumerGroupDescribeResponse[header.api_version](groups=groups),
    )


@pytest.fixture(scope="module")
def local_gateway(kafka_broker):
    config = GatewayConfig(upstream=kafka_broker.bootstrap, listen_port=0, log_level="warning")
    with GatewayThread(config, HandlerChain(local_handlers={69: slow_describe}, local_api={69: (0, 1)})) as gw:
        yield gw


def test_local_answer_keeps_request_order(local_gateway):
    with wire.connect(local_gateway.bootstrap) as sock:
        wire.send(
            sock,
            ConsumerGroupDescribeRequest[1](group_ids=["ga", "gb"], include_authorized_operations=False),
            1,
            1,
        )
        wire.send(sock, MetadataRequest[12](topics=[]), 12, 2)
        wire.send(
            sock, ConsumerGroupDescribeRequest[0](group_ids=["gc"], include_authorized_operations=False), 0, 3
        )
        wire.send(sock, MetadataRequest[12](topics=[]), 12, 4)
        frames = [wire.recv_frame(sock) for _ in range(4)]
    assert [struct.unpack_from(">i", f)[0] for f in frames] == [1, 2, 3, 4]
    _, first = codec.decode_response(69, 1, frames[0])
    assert [(g.group_id, g.error_code) for g in first.groups] == [("ga", 69), ("gb", 69)]


def test_pipelined_answers_that_wait_or_not_keep_request_order(local_gateway):
    """Handlers that finish at once, suspend briefly or wait long, pipelined in one write with a forwarded
    request among them: every answer in correlation order, each the answer to its own request."""
    kinds = ["now-a", "slow-b", "now-c", None, "soon-d", "now-e", "soon-f", "now-g"]
    with wire.connect(local_gateway.bootstrap) as sock:
        out = b""
        for corr, group in enumerate(kinds, start=1):
            if group is None:
                msg, version = MetadataRequest[12](topics=[]), 12
            else:
                msg, version = ConsumerGroupDescribeRequest[1](group_ids=[group], include_authorized_operations=False), 1
            msg.with_header(correlation_id=corr, client_id="t")
            out += msg.encode(version=version, header=True, framed=True)
        sock.sendall(out)
        frames = [wire.recv_frame(sock) for _ in kinds]
    assert [struct.unpack_from(">i", f)[0] for f in frames] == list(range(1, len(kinds) + 1))
    for group, frame in zip(kinds, frames, strict=True):
        if group is not None:
            _, answer = codec.decode_response(69, 1, frame)
            assert [g.group_id for g in answer.groups] == [group]


def test_local_api_is_advertised(local_gateway):
    msg = wire.request(
        local_gateway.bootstrap,
        ApiVersionsRequest[3](client_software_name="t", client_software_version="1"),
        3,
    )
    assert {a.api_key: (a.min_version, a.max_version) for a in msg.api_keys}[69] == (0, 1)


def test_version_outside_local_range_is_refused(local_gateway):
    with wire.connect(local_gateway.bootstrap) as sock:
        sock.sendall(struct.pack(">ihhih", 11, 69, 2, 5, -1) + b"\x00")  # v2 is beyond the codec: close
        assert wire.closed_by_peer(sock)
