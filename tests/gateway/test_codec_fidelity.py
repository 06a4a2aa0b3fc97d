"""Decoding and re-encoding a real broker's responses must not change a byte: the rewriters change only
addresses, so everything else a client receives is exactly what the broker sent."""

from __future__ import annotations

import pytest
from kafka import KafkaProducer
from kafka.protocol.admin import DescribeClusterRequest
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest

from gateway.wire import codec

from . import wire

pytestmark = pytest.mark.kafka


def _raw(bootstrap: str, msg, version: int) -> bytes:
    with wire.connect(bootstrap) as sock:
        wire.send(sock, msg, version, correlation_id=5)
        return wire.recv_frame(sock)


def _requests():
    for v in range(0, 14):
        yield MetadataRequest[v](topics=None if v >= 1 else [], allow_auto_topic_creation=False), v
    for v in range(0, 7):
        yield (
            (
                FindCoordinatorRequest[v](key_type=0, coordinator_keys=["fid"])
                if v >= 4
                else FindCoordinatorRequest[v](key="fid")
            ),
            v,
        )
    for v in range(0, 3):
        yield DescribeClusterRequest[v](include_cluster_authorized_operations=True), v
    for v in range(0, 5):
        yield (
            (
                ApiVersionsRequest[v](client_software_name="t", client_software_version="1")
                if v >= 3
                else ApiVersionsRequest[v]()
            ),
            v,
        )


def test_reencoding_real_responses_is_byte_identical(kafka_broker):
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    producer.send("fidelity", b"x").get(30)
    producer.close()
    checked = 0
    for msg, version in _requests():
        payload = _raw(kafka_broker.bootstrap, msg, version)
        head, body = codec.decode_response(msg.API_KEY, version, payload)
        assert head + codec.encode_body(body, version) == payload, (msg.API_KEY, version)
        checked += 1
    assert checked == 14 + 7 + 3 + 5
