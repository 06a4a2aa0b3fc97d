"""ApiVersions v5 (KIP-1242, Kafka 4.4): a client names the cluster id and node id it expects, and a node
that is not that one answers REBOOTSTRAP_REQUIRED (129). Through the gateway the node is the listener the
connection arrived on, in the table the gateway handed out (gateway/net/node_check.py).

Raw requests against the Kafka 4.4.0 broker and through the gateway give the same answers (the error
answers byte for byte); Kafka 4.4.0's own clients and tools through the gateway send v5 and are never
refused it. The fleet's coordinator nodes and a client whose table is stale after an instance left:
compat_tests/test_fleet_routing.py.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from compat_tests.harness.java import verifiable_consumer, verifiable_producer
from compat_tests.harness.probe import api_versions_v5, cluster_id, metadata_endpoints
from coordinator.errors import Errors
from gateway.ops import kafka_dist

pytestmark = pytest.mark.kafka

REBOOTSTRAP_REQUIRED = int(Errors.REBOOTSTRAP_REQUIRED)
INVALID_REQUEST = int(Errors.INVALID_REQUEST)
RELEASE = kafka_dist.CURRENT_KAFKA


def refused_api_versions(log: Path, since: int = 0) -> list[str]:
    """The gateway log's `request refused` lines about ApiVersions (api key 18), from byte ``since`` on."""
    return [
        line for line in log.read_bytes()[since:].decode(errors="replace").splitlines()
        if "request refused" in line and re.search(r"api.key.{0,4}\b18\b", line)
    ]


def test_a_wrong_cluster_or_node_is_answered_as_the_broker_answers_it(kafka: Any, module_gateway: Any) -> None:
    direct = {e.node_id: e.address for e in metadata_endpoints(kafka.bootstrap)}
    through = {e.node_id: e.address for e in metadata_endpoints(module_gateway.bootstrap)}
    assert direct.keys() == through.keys()
    node = min(direct)
    cluster = cluster_id(kafka.bootstrap)
    assert cluster_id(module_gateway.bootstrap) == cluster  # the cluster id the gateway presents

    cases = {
        "matching": (cluster, node),
        "another cluster": ("AAAAAAAAAAAAAAAAAAAAAA", node),
        "another node": (cluster, node + 7),
        "only a cluster id": (cluster, -1),
        "only a node id": (None, node),
        "neither": (None, -1),
    }
    want = {
        "matching": 0,
        "another cluster": REBOOTSTRAP_REQUIRED,
        "another node": REBOOTSTRAP_REQUIRED,
        "only a cluster id": INVALID_REQUEST,
        "only a node id": INVALID_REQUEST,
        "neither": 0,
    }
    for name, (c, n) in cases.items():
        code, body = api_versions_v5(direct[node], c, n)
        assert code == want[name], (name, "direct", code)  # the broker's own answer first
        got, gw_body = api_versions_v5(through[node], c, n)
        assert got == code, (name, "through the gateway", got)
        if code != 0:
            assert gw_body == body, (name, body.hex(), gw_body.hex())
    # A malformed client software name is INVALID_REQUEST before any id is looked at, as on the broker.
    assert api_versions_v5(direct[node], "AAAAAAAAAAAAAAAAAAAAAA", node, software="-bad-")[0] == INVALID_REQUEST
    assert api_versions_v5(through[node], "AAAAAAAAAAAAAAAAAAAAAA", node, software="-bad-")[0] == INVALID_REQUEST
    # The bootstrap listener is no node of the table a single gateway hands out: whatever node a client
    # expects there, it is at the wrong address (a broker answers so for any id but its own).
    assert api_versions_v5(module_gateway.bootstrap, cluster, node)[0] == REBOOTSTRAP_REQUIRED
    assert api_versions_v5(module_gateway.bootstrap, None, -1)[0] == 0  # a bootstrap connection is not checked


def test_kafka_4_4_clients_and_tools_are_never_refused_api_versions(
    module_gateway: Any, make_topic: Any, names: Any, java_logs: Path
) -> None:
    """Kafka 4.4.0's producer and consumer (classic and consumer protocols) send ApiVersions v5 on every
    connection, with the cluster id and node id once they know the table: the gateway advertises v5, so
    none is refused, and each names the node it reached."""
    log = module_gateway.log_path
    since = log.stat().st_size
    topic, n = make_topic(3), 30
    producer = verifiable_producer(RELEASE, module_gateway.bootstrap, topic, n, log_dir=java_logs).start()
    assert producer.wait(90) == 0, producer.tail()
    consumers = [
        verifiable_consumer(RELEASE, module_gateway.bootstrap, topic, names(f"group-{p}"), group_protocol=p,
                            max_messages=n, log_dir=java_logs).start()
        for p in ("classic", "consumer")
    ]
    try:
        for c in consumers:
            c.wait_for(lambda t: t.named("shutdown_complete") != [], 90, "shutdown after max messages")
    finally:
        for c in consumers:
            c.stop()
    time.sleep(0.5)
    assert refused_api_versions(log, since) == [], refused_api_versions(log, since)
    assert "REBOOTSTRAP_REQUIRED" not in log.read_bytes()[since:].decode(errors="replace")
