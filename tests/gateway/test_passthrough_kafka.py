"""Real clients through the gateway in front of a real broker."""

from __future__ import annotations

import struct
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.protocol.admin import DescribeClusterRequest
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest

from gateway.wire import codec

from . import wire

pytestmark = pytest.mark.kafka


def _gateway_addresses(gw):
    host = gw.bootstrap.rpartition(":")[0]
    return {(host, p) for p in gw.gateway.broker_ports.values()}


def test_produce_and_consume_through_the_gateway(gateway):
    topic = f"pt-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=gateway.bootstrap, acks="all")
    for i in range(200):
        producer.send(topic, key=b"k%d" % (i % 7), value=b"v%d" % i)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=gateway.bootstrap,
        group_id=f"g-{topic}",
        auto_offset_reset="earliest",
        consumer_timeout_ms=20000,
        enable_auto_commit=False,
    )
    values = []
    for record in consumer:
        values.append(record.value)
        if len(values) == 200:
            break
    consumer.commit()
    committed = consumer.committed(next(iter(consumer.assignment())))
    consumer.close()
    assert sorted(values) == sorted(b"v%d" % i for i in range(200))
    assert committed == 200


def test_acks_zero_produce_does_not_block_later_responses(gateway):
    topic = f"a0-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=gateway.bootstrap, acks=0)
    for i in range(50):
        producer.send(topic, value=b"x%d" % i)
    producer.flush(30)
    # metadata requests on the same connections are still answered after acks=0 produce requests
    assert producer.partitions_for(topic) == {0}
    producer.close()


@pytest.mark.parametrize("version", [0, 1, 4, 9, 12, 13])
def test_metadata_names_only_gateway_addresses(gateway, kafka_broker, version):
    msg = wire.request(gateway.bootstrap, MetadataRequest[version](topics=[]), version)
    brokers = {(b.host, b.port) for b in msg.brokers}
    assert brokers and brokers <= _gateway_addresses(gateway)
    assert kafka_broker.port not in {p for _, p in brokers}


@pytest.mark.parametrize("version", [0, 3, 4, 6])
def test_find_coordinator_names_a_gateway_listener(gateway, version):
    if version >= 4:
        req = FindCoordinatorRequest[version](key_type=0, coordinator_keys=["ga", "gb"])
    else:
        req = FindCoordinatorRequest[version](key="ga")
    deadline = 0
    while True:  # the offsets topic may still be loading right after start-up
        msg = wire.request(gateway.bootstrap, req, version)
        entries = msg.coordinators if version >= 4 else [msg]
        if all(e.error_code == 0 for e in entries) or deadline > 50:
            break
        deadline += 1
        import time

        time.sleep(0.2)
    for e in entries:
        assert e.error_code == 0
        assert (e.host, e.port) in _gateway_addresses(gateway)
    # the coordinator's node id is listed with the same address in Metadata (aiokafka/librdkafka need it)
    md = wire.request(gateway.bootstrap, MetadataRequest[12](topics=[]), 12)
    listed = {b.node_id: (b.host, b.port) for b in md.brokers}
    assert all(listed[e.node_id] == (e.host, e.port) for e in entries)


def test_describe_cluster_names_only_gateway_addresses(gateway):
    msg = wire.request(
        gateway.bootstrap, DescribeClusterRequest[0](include_cluster_authorized_operations=False), 0
    )
    assert msg.error_code == 0
    assert {(b.host, b.port) for b in msg.brokers} <= _gateway_addresses(gateway)


def test_api_versions_are_capped_and_keep_the_requested_version(gateway, kafka_broker):
    request = ApiVersionsRequest[3](client_software_name="t", client_software_version="1")
    msg = wire.request(gateway.bootstrap, request, 3)
    direct = wire.request(kafka_broker.bootstrap, request, 3)
    ranges = {a.api_key: (a.min_version, a.max_version) for a in msg.api_keys}
    cluster = {a.api_key: (a.min_version, a.max_version) for a in direct.api_keys}
    assert msg.error_code == 0
    # Produce and Fetch at the cluster's versions (leader endpoints rewritten); DescribeQuorum capped
    assert ranges[0] == cluster[0] and ranges[1] == cluster[1]
    assert ranges[55][1] <= 1
    # and with them the cluster's transaction.version (KIP-890), which needs Produce v12+
    finalized = {f.name: f.max_version_level for f in msg.finalized_features}
    assert finalized["transaction.version"] == {f.name: f.max_version_level for f in direct.finalized_features}[
        "transaction.version"
    ]
    # ApiVersions up to the cluster's (v5 on Kafka 4.4: KIP-1242's node check, answered by the gateway)
    assert ranges[18] == cluster[18] and ranges[18][1] <= codec.codec_max_version(18)
    v0 = wire.request(gateway.bootstrap, ApiVersionsRequest[0](), 0)
    assert {a.api_key for a in v0.api_keys} == set(ranges)


def _invalid_api_versions(address):
    """ApiVersions v3 with a ClientSoftwareName Kafka refuses ("!!"), then a valid v0 on the same connection."""
    bad = struct.pack(">hhih", 18, 3, 5, -1) + b"\x00" + b"\x03!!" + b"\x021" + b"\x00"
    good = struct.pack(">hhih", 18, 0, 6, -1)
    with wire.connect(address) as sock:
        sock.sendall(struct.pack(">i", len(bad)) + bad + struct.pack(">i", len(good)) + good)
        first = wire.recv_frame(sock)
        second = wire.recv_frame(sock)
    return first, codec.decode_response(18, 0, second)[1]


def test_invalid_api_versions_request_is_answered_as_the_broker_answers_it(gateway, kafka_broker):
    direct, _ = _invalid_api_versions(kafka_broker.bootstrap)
    through, after = _invalid_api_versions(gateway.bootstrap)
    # INVALID_REQUEST in the request's own version (no api keys listed), and the connection stays usable.
    assert through == direct
    assert struct.unpack_from(">ih", through) == (5, 42)
    assert after.error_code == 0 and after.api_keys
