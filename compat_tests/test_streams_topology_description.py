"""StreamsGroupTopologyDescriptionUpdate (api key 93, KIP-1331, Kafka 4.4): a streams group member pushes
its topology's description when the coordinator's heartbeat answer sets TopologyDescriptionRequired
(StreamsGroupHeartbeat v1). A Kafka 4.4.0 broker asks for it only when
``group.streams.topology.description.plugin.class`` names a StreamsGroupTopologyDescriptionPlugin (Kafka
ships ``org.apache.kafka.server.streams.InMemoryTopologyDescriptionPlugin`` in kafka-server); without one
it never sets the flag and Kafka Streams 4.4.0 never sends the request. The setting is static, so this
module starts its own broker with it (and a gateway in front of it) instead of the session's broker.

The gateway routes key 93 to the streams group's coordinator in the cluster (gateway/groups/cluster.py
``ROUTED_ONE``). Kafka Streams 4.4.0 (compat_tests/java/StreamsApp.java) against the broker and through
the gateway: StreamsGroupDescribe v1 with the topology description shows the same description, stored
(status AVAILABLE), both ways; raw key 93 requests of a member, of an unknown member and of an unknown group get
the same answers.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from compat_tests.harness.admin import create_topic
from compat_tests.harness.brokers import free_port_block
from compat_tests.harness.clients import produce_confluent, values
from compat_tests.harness.gateway_proc import GatewayProcess
from compat_tests.harness.probe import find_coordinator_endpoints, roundtrip
from compat_tests.test_cluster_groups import StreamsApp, _processed
from coordinator.errors import Errors
from gateway.ops import kafka_dist
from gateway.ops.embedded_kafka import EmbeddedKafka
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey

pytestmark = pytest.mark.kafka

RELEASE = kafka_dist.CURRENT_KAFKA
PLUGIN = "org.apache.kafka.server.streams.InMemoryTopologyDescriptionPlugin"
UPDATE = ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE
AVAILABLE = 3  # StreamsGroupDescribe v1 TopologyDescriptionStatus (KIP-1331): the description is stored


@pytest.fixture(scope="module")
def described_kafka() -> Iterator[EmbeddedKafka]:
    broker = EmbeddedKafka(heap="384m", overrides={"group.streams.topology.description.plugin.class": PLUGIN})
    broker.start()
    try:
        yield broker
    finally:
        broker.cleanup()


@pytest.fixture(scope="module")
def targets(
    request: pytest.FixtureRequest, described_kafka: EmbeddedKafka, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    if request.config.getoption("--compat-direct"):
        pytest.skip("--compat-direct: the comparison needs the gateway")
    gw = GatewayProcess(
        upstream=described_kafka.bootstrap, listen_port=free_port_block(3), log_dir=tmp_path_factory.mktemp("gateway")
    )
    gw.start()
    try:
        yield {"direct": described_kafka.bootstrap, "gateway": gw.bootstrap}
    finally:
        gw.stop()


def _coordinator(bootstrap: str, group: str) -> str:
    (c,) = find_coordinator_endpoints(bootstrap, group, 3, timeout_s=60.0)
    return c.address


def _describe(bootstrap: str, group: str) -> Any:
    req = codec.REQUESTS[ApiKey.STREAMS_GROUP_DESCRIBE][1](
        group_ids=[group], include_authorized_operations=False, include_topology_description=True
    )
    return roundtrip(_coordinator(bootstrap, group), req, codec.RESPONSES[ApiKey.STREAMS_GROUP_DESCRIBE], 1).groups[0]


def _description(group: Any, names: dict[str, str]) -> Any:
    """The stored description as plain data, the test's topic names masked."""

    def mask(s: str | None) -> str | None:
        return names.get(s, s) if s is not None else None

    def node(n: Any) -> tuple[Any, ...]:
        return (n.name, n.node_type, [mask(t) for t in n.source_topics], mask(n.sink_topic), list(n.stores), list(n.successors))

    d = group.topology_description
    if d is None:
        return None
    return (
        [(s.subtopology_id, [node(n) for n in s.nodes]) for s in d.subtopologies],
        [(node(g.source), node(g.processor)) for g in d.global_stores],
    )


def test_kafka_streams_pushes_its_topology_description_alike_direct_and_through_the_gateway(
    described_kafka: EmbeddedKafka, targets: dict[str, str], names: Callable[[str], str]
) -> None:
    """Kafka Streams 4.4.0 with ``group.protocol=streams`` sends StreamsGroupTopologyDescriptionUpdate once
    the coordinator asks for it; the broker's plugin stores it, and StreamsGroupDescribe v1 shows it."""
    out = {}
    for label, bootstrap in targets.items():
        source = create_topic(described_kafka.bootstrap, names(f"src-{label}"), 2)
        sink = create_topic(described_kafka.bootstrap, names(f"sink-{label}"), 2)
        produce_confluent(described_kafka.bootstrap, source, values("d", 5))
        app_id = names(f"app-{label}")
        with tempfile.TemporaryDirectory(prefix="groupgate-streams-") as state_dir:
            app = StreamsApp(RELEASE, "StreamsApp", [bootstrap, app_id, source, sink, state_dir, "streams"])
            with app:
                app.wait_for(lambda t: "STATE RUNNING" in t.lines and _processed(t) >= 5, 90.0, "RUNNING, 5 processed")
                deadline = time.monotonic() + 30
                while (g := _describe(bootstrap, app_id)).topology_description_status != AVAILABLE:
                    assert time.monotonic() < deadline, (label, g.topology_description_status)
                    time.sleep(0.3)
                masked = {source: "<source>", sink: "<sink>"}
                out[label] = {
                    "error": g.error_code,
                    "state": g.group_state,
                    "status": g.topology_description_status,
                    "description": _description(g, masked),
                    # The same, read through the other address.
                    "described elsewhere": _description(
                        _describe(described_kafka.bootstrap if label == "gateway" else targets["gateway"], app_id), masked
                    ),
                }
    broker = out["direct"]
    assert broker["error"] == 0 and broker["status"] == AVAILABLE, broker
    (subtopology,) = broker["description"][0]
    assert sorted(n[1] for n in subtopology[1]) == [1, 2, 2, 3], broker  # source, mapValues, peek, sink
    assert broker["described elsewhere"] == broker["description"]
    assert out["gateway"] == broker


def _join(coordinator: str, group: str, topic: str) -> tuple[str, int, bool]:
    """A streams member joined with a raw StreamsGroupHeartbeat v1: (member id, epoch, the answer's
    TopologyDescriptionRequired)."""
    cls = codec.REQUESTS[ApiKey.STREAMS_GROUP_HEARTBEAT][1]
    topology = cls.Topology(epoch=0, subtopologies=[cls.Topology.Subtopologies(
        subtopology_id="0", source_topics=[topic], source_topic_regex=[], state_changelog_topics=[],
        repartition_sink_topics=[], repartition_source_topics=[], copartition_groups=[],
    )])  # fmt: skip
    member = uuid.uuid4().hex
    r = roundtrip(coordinator, cls(
        group_id=group, member_id=member, member_epoch=0, endpoint_information_epoch=0, rebalance_timeout_ms=30000,
        topology=topology, active_tasks=[], standby_tasks=[], warmup_tasks=[], process_id=uuid.uuid4().hex,
        client_tags=[], task_offsets=None, task_end_offsets=None, shutdown_application=False,
    ), codec.RESPONSES[ApiKey.STREAMS_GROUP_HEARTBEAT], 1)  # fmt: skip
    assert r.error_code == 0, (r.error_code, r.error_message)
    return member, r.member_epoch, r.topology_description_required


def _update(coordinator: str, group: str, member: str, topic: str) -> tuple[int, str | None]:
    cls = codec.REQUESTS[UPDATE][0]
    node = {"name": "KSTREAM-SOURCE-0000000000", "node_type": 1, "source_topics": [topic], "sink_topic": None,
            "stores": [], "successors": []}  # fmt: skip
    sub = cls.TopologyDescription.Subtopologies
    req = cls(
        group_id=group, member_id=member, topology_epoch=0,
        topology_description=cls.TopologyDescription(
            subtopologies=[sub(subtopology_id="0", nodes=[sub.Nodes(**node)])], global_stores=[],
        ),
    )  # fmt: skip
    r = roundtrip(coordinator, req, codec.RESPONSES[UPDATE], 0)
    return int(r.error_code), r.error_message


def test_raw_topology_description_updates_are_answered_alike_direct_and_through_the_gateway(
    described_kafka: EmbeddedKafka, targets: dict[str, str], names: Callable[[str], str]
) -> None:
    """A member's push, an unknown member's and one for a group that does not exist: the same error code
    and message (group and member ids masked) from the broker and through the gateway."""
    topic = create_topic(described_kafka.bootstrap, names("topic"), 1)
    out = {}
    for label, bootstrap in targets.items():
        group = names(f"raw-{label}")
        coordinator = _coordinator(bootstrap, group)
        member, _, required = _join(coordinator, group, topic)
        stranger = uuid.uuid4().hex

        def masked(answer: tuple[int, str | None], group: str = group, member: str = stranger) -> tuple[int, str]:
            return answer[0], (answer[1] or "").replace(group, "<group>").replace(member, "<member>")

        out[label] = {
            "required on join": required,
            "unknown member": masked(_update(coordinator, group, stranger, topic)),
            "unknown group": masked(_update(_coordinator(bootstrap, group + "-x"), group + "-x", member, topic), group + "-x", member),
            "member": masked(_update(coordinator, group, member, topic)),
            "described": _describe(bootstrap, group).topology_description_status,
        }
    broker = out["direct"]
    # Kafka 4.4.0's own answers first: the join asks for the description, the member's push is stored.
    assert broker["required on join"] is True, broker
    assert broker["member"] == (0, "") and broker["described"] == AVAILABLE, broker
    assert broker["unknown member"] == (int(Errors.UNKNOWN_MEMBER_ID), "Member <member> is not a member of group <group>."), broker
    assert broker["unknown group"] == (int(Errors.GROUP_ID_NOT_FOUND), "Group <group> not found."), broker
    assert out["gateway"] == broker
