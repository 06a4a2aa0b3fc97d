"""SASL termination enforces the cluster's ACLs for the principal a client authenticated as
(gateway/authz/data.py; docs/gateway.md, "Authorization of passed-through requests under SASL
termination"): the broker sees only the gateway's User:admin, yet alice gets what she would get from
the broker directly, the same error codes included."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AclOperation, ResourceType
from kafka.record.memory_records import MemoryRecordsBuilder

from compat_tests.harness.admin import create_topic
from compat_tests.harness.sasl import (
    ALICE,
    WAIT_S,
    confluent_conf,
    frame,
    grant,
    java_props,
    java_round_trip,
    plain_authenticate,
    read_response,
    sasl_gateway,
)
from gateway.ops.embedded_kafka import EmbeddedKafka
from gateway.security.sasl_server import add_user
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]



def _produce(bootstrap: str, topic: str, values: list[bytes]) -> list[Any]:
    """The delivery errors (None: delivered) of ``values`` produced as alice."""
    p = Producer({**confluent_conf(bootstrap, "SCRAM-SHA-256", ALICE), "acks": "all", "message.timeout.ms": 10000})
    results: list[Any] = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, _m: results.append(err))
    p.flush(WAIT_S)
    return results


def _consume(bootstrap: str, topic: str, group: str, want: set[bytes]) -> set[bytes]:
    c = Consumer({**confluent_conf(bootstrap, "SCRAM-SHA-256", ALICE), "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: set[bytes] = set()
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while not want <= got and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.add(m.value())
    finally:
        c.close()
    return got


def _batch() -> bytes:
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 16)
    b.append(timestamp=None, key=b"k", value=b"raw", headers=[])
    b.close()
    return bytes(b.buffer())


def _raw_requests(bootstrap: str, *topics: str) -> dict[str, dict[str, set[int]]]:
    """One Produce v9 of a record batch to partition 0 of each of ``topics`` as alice (PLAIN), then one
    Fetch, Metadata and ListOffsets of them: the error codes by topic of each."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        assert plain_authenticate(s, 1, ALICE).error_code == 0
        cls = codec.REQUESTS[ApiKey.PRODUCE]
        tcls = cls.TopicProduceData
        req = cls[9](transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
            tcls(name=t, partition_data=[tcls.PartitionProduceData(index=0, records=_batch())]) for t in topics])
        s.sendall(frame(req, 9, 3))
        payload = read_response(s)
        assert payload is not None, "connection closed"
        body = codec.decode_response(ApiKey.PRODUCE, 9, payload)[1]
        produced = {t.name: {p.error_code for p in t.partition_responses} for t in body.responses}
        # A Fetch (v12: by name, no session) of the same topics from offset 0.
        fcls = codec.REQUESTS[ApiKey.FETCH]
        ftcls = fcls.FetchTopic
        fetch = fcls[12](
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, rack_id="", forgotten_topics_data=[],
            topics=[ftcls(topic=t, partitions=[ftcls.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1 << 16)]) for t in topics],
        )
        s.sendall(frame(fetch, 12, 4))
        payload = read_response(s)
        assert payload is not None, "connection closed"
        fetched = codec.decode_response(ApiKey.FETCH, 12, payload)[1]
        assert fetched.error_code == 0
        for t in fetched.responses:
            for p in t.partitions:
                assert (p.error_code == 0) == bool(p.records), (t.topic, p)  # records only where allowed
        read = {t.topic: {p.error_code for p in t.partitions} for t in fetched.responses}
        # Metadata naming the topics (no auto-creation) and ListOffsets (latest) of them.
        mcls = codec.REQUESTS[ApiKey.METADATA]
        s.sendall(frame(mcls[12](topics=[mcls.MetadataRequestTopic(topic_id=None, name=t) for t in topics],
                                  allow_auto_topic_creation=False, include_topic_authorized_operations=False), 12, 5))
        payload = read_response(s)
        assert payload is not None, "connection closed"
        described = {t.name: {t.error_code} for t in codec.decode_response(ApiKey.METADATA, 12, payload)[1].topics}
        lcls = codec.REQUESTS[2]
        ltcls = lcls.ListOffsetsTopic
        s.sendall(frame(lcls[7](replica_id=-1, isolation_level=0, topics=[ltcls(name=t, partitions=[
            ltcls.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)]) for t in topics]), 7, 6))
        payload = read_response(s)
        assert payload is not None, "connection closed"
        listed = {t.name: {p.error_code for p in t.partitions} for t in codec.decode_response(2, 7, payload)[1].topics}
        return {"produce": produced, "fetch": read, "metadata": described, "list_offsets": listed}


def test_termination_enforces_the_clusters_acls_for_the_client(
    sasl_kafka: EmbeddedKafka, tmp_path: Path, names: Callable[[str], str], java_logs: Path
) -> None:
    allowed, refused = create_topic(sasl_kafka.bootstrap, names("a"), 1), create_topic(sasl_kafka.bootstrap, names("b"), 1)
    java_topic = create_topic(sasl_kafka.bootstrap, names("java"), 1)  # the Java round trip counts every record
    group = names("group")
    grant(
        sasl_kafka,
        (ResourceType.TOPIC, allowed, "User:alice", AclOperation.WRITE),
        (ResourceType.TOPIC, allowed, "User:alice", AclOperation.READ),
        (ResourceType.GROUP, group + "-direct", "User:alice", AclOperation.READ),
        (ResourceType.GROUP, group + "-gateway", "User:alice", AclOperation.READ),
        (ResourceType.GROUP, group + "-java", "User:alice", AclOperation.READ),
        (ResourceType.TOPIC, java_topic, "User:alice", AclOperation.WRITE),
        (ResourceType.TOPIC, java_topic, "User:alice", AclOperation.READ),
    )
    creds = tmp_path / "users.json"
    add_user(creds, *ALICE)
    # authorization is left at auto: on under termination, with no acceptance of the gateway's rights.
    settings = {
        "listener_sasl_mode": "terminate",
        "listener_sasl_credentials_file": str(creds),
        "super.users": "User:admin",
    }
    with sasl_gateway(sasl_kafka, tmp_path, settings, extra_args=("--log-level", "debug")) as gw:
        outcomes = {}
        for name, bootstrap in {"direct": sasl_kafka.sasl_bootstrap, "gateway": gw.bootstrap}.items():
            values = [f"{name}-{i}".encode() for i in range(5)]
            ok = _produce(bootstrap, allowed, values)
            assert ok == [None] * len(values), (name, ok)
            denied = _produce(bootstrap, refused, [b"x"])
            assert len(denied) == 1 and denied[0] is not None, (name, denied)
            assert _consume(bootstrap, allowed, f"{group}-{name}", set(values)) >= set(values), name
            # One request naming both topics: A written, B refused (through the gateway: A forwarded
            # alone and B's refusal merged into the broker's answer).
            outcomes[name] = (denied[0].code(), _raw_requests(bootstrap, refused), _raw_requests(bootstrap, allowed, refused))
        assert outcomes["direct"][0] == KafkaError.TOPIC_AUTHORIZATION_FAILED
        # TOPIC_AUTHORIZATION_FAILED on the partition
        assert outcomes["direct"][1] == dict.fromkeys(("produce", "fetch", "metadata", "list_offsets"), {refused: {29}})
        assert outcomes["direct"][2] == dict.fromkeys(("produce", "fetch", "metadata", "list_offsets"),
                                                      {allowed: {0}, refused: {29}})
        assert outcomes["gateway"] == outcomes["direct"]
        assert "not-authorized:0" in gw.log_path.read_text()  # refused by the gateway, not by the broker
        # Kafka's own clients: the idempotent producer's InitProducerId without a transactional id passes on
        # alice's WRITE on a topic (KIP-679); Kafka 4.3's Produce and Fetch (topic ids) and Metadata versions
        # are checked; the consumer, which asks for a fetch session, is served without one.
        java_round_trip(gw.bootstrap, java_props("SCRAM-SHA-512", ALICE), java_topic, f"{group}-java", java_logs)
