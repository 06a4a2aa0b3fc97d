"""Real clients through the gateway against a real broker: nothing lost, nothing doubled, nothing leaked.

Each test drives one client family end to end through ``groupgate serve``: produce, consume in a classic
group, check the clean-run invariants (every record consumed, none twice, no partition owned by two
members at once). Admin operations and the addresses handed to clients are checked separately: a client
must never learn the upstream broker's address, or it would bypass the gateway.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import NewTopic
from kafka import KafkaAdminClient

from compat_tests.harness import probe
from compat_tests.harness.admin import admin, wait_for_leaders
from compat_tests.harness.brokers import ProcessBackend
from compat_tests.harness.clients import (
    AiokafkaConsumer,
    ConfluentConsumer,
    KafkaPythonConsumer,
    produce_aiokafka,
    produce_confluent,
    produce_kafka_python,
    values,
)
from compat_tests.harness.events import EventLog, ProducedRecord, ingest_verifiable_consumer
from compat_tests.harness.invariants import assert_clean_run
from compat_tests.harness.java import (
    ProducerSendSuccess,
    RecordsConsumed,
    consumer_performance,
    parse_consumer_perf,
    parse_producer_perf,
    producer_performance,
    tools_classpath,
    verifiable_consumer,
    verifiable_producer,
)
from gateway.ops import kafka_dist
from gateway.ops.embedded_kafka import java_binary

pytestmark = pytest.mark.kafka

RECORDS = 300
PARTITIONS = 3
GROUP_TIMEOUT_S = 60.0


def _poll_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.2)


def _settled_on(topic: str, members: list[str]) -> Callable[[EventLog], bool]:
    return lambda lg: lg.settled(topic, PARTITIONS, members)


def _start_one_by_one(consumers: list[Any], log: EventLog, topic: str, members: list[str]) -> None:
    """Each member joins once the group has settled on the previous ones.

    Members that join together race the first metadata fetch of a fresh topic; a leader that assigns
    before it knows the topic hands out nothing and forces another round. Joining one by one keeps the
    run to the ordinary "member joins a stable group" rebalance, the path this suite is about.
    """
    for i, c in enumerate(consumers):
        c.start()
        joined = members[: i + 1]
        log.wait_until(_settled_on(topic, joined), GROUP_TIMEOUT_S, f"{joined} assigned")


# --- Python clients -----------------------------------------------------------------------------------


def test_confluent_producer_and_classic_group(module_gateway: Any, make_topic: Any, names: Any) -> None:
    topic, group, log = make_topic(PARTITIONS), names("group"), EventLog()
    members = ["rdkafka-0", "rdkafka-1"]
    consumers = [
        ConfluentConsumer(name=m, log=log, bootstrap=module_gateway.bootstrap, group_id=group, topics=[topic])
        for m in members
    ]
    produced: list[ProducedRecord] = []
    try:
        _start_one_by_one(consumers, log, topic, members)
        produced = produce_confluent(module_gateway.bootstrap, topic, values(topic, RECORDS))
        log.wait_until(lambda lg: lg.covers(produced), GROUP_TIMEOUT_S, "every record consumed")
    finally:
        for c in consumers:
            c.stop()
    assert len(produced) == RECORDS
    assert_clean_run(produced, log)
    assert {r.consumer for r in log.records} == set(members), "the work was not shared by the group"


def test_kafka_python_producer_and_group(module_gateway: Any, make_topic: Any, names: Any) -> None:
    topic, group, log = make_topic(PARTITIONS), names("group"), EventLog()
    members = ["kafka-python-0", "kafka-python-1"]
    consumers = [
        KafkaPythonConsumer(name=m, log=log, bootstrap=module_gateway.bootstrap, group_id=group, topics=[topic])
        for m in members
    ]
    produced: list[ProducedRecord] = []
    try:
        _start_one_by_one(consumers, log, topic, members)
        produced = produce_kafka_python(module_gateway.bootstrap, topic, values(topic, RECORDS))
        log.wait_until(lambda lg: lg.covers(produced), GROUP_TIMEOUT_S, "every record consumed")
    finally:
        for c in consumers:
            c.stop()
    assert_clean_run(produced, log)
    assert {r.consumer for r in log.records} == set(members)


async def _async_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.1)


async def test_aiokafka_producer_and_group(module_gateway: Any, make_topic: Any, names: Any) -> None:
    topic, group, log = make_topic(PARTITIONS), names("group"), EventLog()
    members = ["aiokafka-0", "aiokafka-1"]
    consumers = [AiokafkaConsumer(m, log, module_gateway.bootstrap, group, [topic]) for m in members]
    produced: list[ProducedRecord] = []
    try:
        # One member at a time, as in _start_one_by_one.
        for i, c in enumerate(consumers):
            await c.start()
            joined = members[: i + 1]
            settled = _settled_on(topic, joined)
            await _async_until(lambda: settled(log), GROUP_TIMEOUT_S, f"{joined} assigned")  # noqa: B023
        produced = await produce_aiokafka(module_gateway.bootstrap, topic, values(topic, RECORDS))
        await _async_until(lambda: log.covers(produced), GROUP_TIMEOUT_S, "every record consumed")
    finally:
        for c in consumers:
            await c.stop()
    assert_clean_run(produced, log)
    assert {r.consumer for r in log.records} == set(members)


# --- Java clients -------------------------------------------------------------------------------------


def _produced_by(tool: Any) -> list[ProducedRecord]:
    return [
        ProducedRecord(e.partition.topic, e.partition.partition, e.offset, e.value.encode())
        for e in tool.of_type(ProducerSendSuccess)
    ]


def _consumed_count(tool: Any) -> int:
    return sum(e.count for e in tool.of_type(RecordsConsumed))


def test_java_verifiable_producer_and_consumer_group(
    module_gateway: Any, make_topic: Any, names: Any, java_logs: Any
) -> None:
    release = "4.4.0"
    topic, group, log = make_topic(PARTITIONS), names("group"), EventLog()
    bootstrap = module_gateway.bootstrap
    producer = verifiable_producer(release, bootstrap, topic, RECORDS, log_dir=java_logs).start()
    assert producer.wait(90) == 0, producer.tail()
    produced = _produced_by(producer)
    assert len(produced) == RECORDS, f"{len(produced)} sends acknowledged; errors: {producer.named('producer_send_error')[:3]}"

    consumers = {
        f"java-{i}": verifiable_consumer(release, bootstrap, topic, group, log_dir=java_logs).start() for i in range(2)
    }
    try:
        _poll_until(
            lambda: sum(_consumed_count(t) for t in consumers.values()) >= RECORDS,
            GROUP_TIMEOUT_S,
            "the VerifiableConsumers to consume every record",
        )
    finally:
        for t in consumers.values():
            t.stop()
    for name, t in consumers.items():
        assert t.named("shutdown_complete"), f"{name} did not shut down cleanly: {t.tail()}"
        commits = [e for e in t.named("offsets_committed") if not e.data.get("success")]
        assert not commits, f"{name} had failed commits: {commits[:3]}"
        ingest_verifiable_consumer(log, name, t)
    assert_clean_run(produced, log)


@pytest.mark.parametrize("release", list(kafka_dist.LEGACY_KAFKA))
def test_legacy_java_clients(module_gateway: Any, make_topic: Any, names: Any, java_logs: Any, release: str) -> None:
    """Older releases' VerifiableProducer/VerifiableConsumer (classic protocol, older request versions)."""
    topic, group, log = make_topic(PARTITIONS), names("group"), EventLog()
    bootstrap = module_gateway.bootstrap
    producer = verifiable_producer(release, bootstrap, topic, RECORDS, log_dir=java_logs).start()
    assert producer.wait(90) == 0, producer.tail()
    produced = _produced_by(producer)
    assert len(produced) == RECORDS, producer.tail()

    consumer = verifiable_consumer(release, bootstrap, topic, group, max_messages=RECORDS, log_dir=java_logs)
    consumer.start()
    try:
        # --max-messages makes the tool leave the group and exit once it has consumed them all.
        consumer.wait_for(lambda t: t.named("shutdown_complete") != [], 90, "shutdown after max messages")
    finally:
        consumer.stop()
    ingest_verifiable_consumer(log, f"java-{release}", consumer)
    assert_clean_run(produced, log)


def test_java_perf_tools(module_gateway: Any, make_topic: Any, names: Any, java_logs: Any) -> None:
    topic = make_topic(PARTITIONS)
    bootstrap, n = module_gateway.bootstrap, 2000
    prod = producer_performance("4.4.0", bootstrap, topic, n, log_dir=java_logs).start()
    assert prod.wait(90) == 0, prod.tail()
    summary = parse_producer_perf(prod.lines)
    assert summary is not None and summary.records == n, prod.lines[-3:]
    cons = consumer_performance("4.4.0", bootstrap, topic, n, names("group"), log_dir=java_logs).start()
    assert cons.wait(90) == 0, cons.tail()
    result = parse_consumer_perf(cons.lines)
    assert result is not None and int(result["data.consumed.in.nMsg"]) == n, cons.lines


# --- admin --------------------------------------------------------------------------------------------


def test_admin_operations_through_gateway(module_gateway: Any, kafka: ProcessBackend, names: Any) -> None:
    bootstrap = module_gateway.bootstrap
    client = admin(bootstrap)

    topic = names("admin-topic")
    client.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(timeout=30)
    wait_for_leaders(client, topic, 2)
    assert topic in client.list_topics(timeout=10).topics

    cluster = client.describe_cluster().result(timeout=30)
    assert cluster.nodes, "DescribeCluster through the gateway listed no broker"

    # A group exists once a member has committed; list and describe it through the gateway.
    group = names("group")
    produced = produce_confluent(bootstrap, topic, values(topic, 10))
    log = EventLog()
    consumer = ConfluentConsumer(name="admin-probe", log=log, bootstrap=bootstrap, group_id=group, topics=[topic])
    with consumer:
        log.wait_until(lambda lg: lg.covers(produced), GROUP_TIMEOUT_S, "the probe consumer to read its records")
    listed = client.list_consumer_groups().result(timeout=30)
    assert group in {g.group_id for g in listed.valid}, f"{group} missing from {listed.valid}"
    described = client.describe_consumer_groups([group])[group].result(timeout=30)
    assert described.group_id == group

    kp = _kafka_python_admin(bootstrap)
    try:
        groups = kp.list_groups()
        assert group in {g["group_id"] for g in groups}, groups
        assert kp.describe_cluster()["brokers"]
    finally:
        kp.close()


def _kafka_python_admin(bootstrap: str) -> Any:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)


# --- no upstream address reaches a client -------------------------------------------------------------


def test_clients_never_see_the_upstream_address(module_gateway: Any, kafka: ProcessBackend, names: Any) -> None:
    if getattr(module_gateway, "direct", False):
        pytest.skip("--compat-direct: the broker's own address is the expected answer")
    bootstrap, upstream_port = module_gateway.bootstrap, kafka.port
    group = names("group")

    endpoints = [
        *probe.metadata_endpoints(bootstrap, version=1),
        *probe.metadata_endpoints(bootstrap, version=12),
        *probe.describe_cluster_endpoints(bootstrap, version=0),
    ]
    metadata_nodes = {(e.node_id, e.address) for e in probe.metadata_endpoints(bootstrap, version=12)}
    coordinators = []
    for version in (0, 1, 3, 4):
        coordinators += probe.find_coordinator_endpoints(bootstrap, group, version)
    endpoints += coordinators
    # Each address the gateway hands out must also be one of its own listeners.
    for e in endpoints:
        assert e.port != upstream_port, f"{e.source} leaked the upstream broker {e.address} (node {e.node_id})"
    for e in coordinators:
        # aiokafka and librdkafka resolve the coordinator by node id in Metadata (client-requirements).
        assert (e.node_id, e.address) in metadata_nodes, f"{e.source} names {e} which Metadata does not list"

    # The same through clients' own admin APIs.
    client = admin(bootstrap)
    md = client.list_topics(timeout=10)
    assert all(b.port != upstream_port for b in md.brokers.values()), md.brokers
    cluster = client.describe_cluster().result(timeout=30)
    assert all(n.port != upstream_port for n in cluster.nodes), cluster.nodes
    kp = _kafka_python_admin(bootstrap)
    try:
        brokers = kp.describe_cluster()["brokers"]
        assert brokers and all(b["port"] != upstream_port for b in brokers), brokers
    finally:
        kp.close()


# --- alike direct and through the gateway -------------------------------------------------------------


def _targets(kafka: ProcessBackend, module_gateway: Any) -> dict[str, str]:
    if getattr(module_gateway, "direct", False):
        pytest.skip("--compat-direct: the comparison needs the gateway")
    return {"direct": kafka.bootstrap, "gateway": module_gateway.bootstrap}


def _committed_total(bootstrap: str, group: str, topic: str) -> int:
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    client = admin(bootstrap)  # kept referenced until the future resolves: a collected client never resolves it
    result = client.list_consumer_group_offsets([req])[group].result(30)
    return sum(max(tp.offset, 0) for tp in result.topic_partitions)


def _console_round_trip(bootstrap: str, topic: str, group: str, lines: list[str]) -> dict[str, Any]:
    tools = tools_classpath("4.4.0")
    base = [java_binary(), "-Xmx256m", "-Djava.awt.headless=true", "-Dorg.slf4j.simpleLogger.defaultLogLevel=error", "-cp", tools]
    produced = subprocess.run(
        [*base, "org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", bootstrap, "--topic", topic],
        input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    consumed = subprocess.run(
        [*base, "org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bootstrap, "--topic", topic,
         "--group", group, "--from-beginning", "--max-messages", str(len(lines)), "--timeout-ms", "30000"],
        capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    return {
        "producer exit": produced.returncode,
        "consumer exit": consumed.returncode,
        "consumed": sorted(consumed.stdout.splitlines()),
        # The console consumer commits what it printed when it leaves (auto-commit on close).
        "committed": _committed_total(bootstrap, group, topic),
    }


def test_console_producer_and_consumer_round_trip_alike_direct_and_through_the_gateway(
    kafka: ProcessBackend, module_gateway: Any, make_topic: Any, names: Any
) -> None:
    """kafka-console-producer (stdin lines) then kafka-console-consumer in a group (the gateway
    coordinating it), both of Kafka 4.4.0."""
    lines = [f"console-{i}" for i in range(30)]
    results = {
        t: _console_round_trip(b, make_topic(PARTITIONS), names(f"console-{t}"), lines)
        for t, b in _targets(kafka, module_gateway).items()
    }
    assert results["direct"] == {"producer exit": 0, "consumer exit": 0, "consumed": sorted(lines), "committed": 30}
    assert results["gateway"] == results["direct"]


def _consumer_protocol_fleet(release: str, bootstrap: str, topic: str, group: str, log_dir: Any) -> dict[str, Any]:
    consumers = {
        f"java-{release}-{i}": verifiable_consumer(release, bootstrap, topic, group, group_protocol="consumer", log_dir=log_dir).start()
        for i in range(2)
    }  # fmt: skip
    log = EventLog()
    try:
        _poll_until(lambda: sum(_consumed_count(t) for t in consumers.values()) >= RECORDS, GROUP_TIMEOUT_S, "every record consumed")
    finally:
        for t in consumers.values():
            t.stop()
    failed = []
    for name, t in consumers.items():
        failed += [e.data for e in t.named("offsets_committed") if not e.data.get("success")]
        ingest_verifiable_consumer(log, name, t)
    return {
        "clean shutdowns": sum(bool(t.named("shutdown_complete")) for t in consumers.values()),
        "failed commits": failed,
        "log": log,
        "committed": _committed_total(bootstrap, group, topic),
    }


def test_java_3_9_consumers_with_the_consumer_protocol_alike_direct_and_through_the_gateway(
    kafka: ProcessBackend, module_gateway: Any, make_topic: Any, names: Any, java_logs: Any
) -> None:
    """kafka-clients 3.9.1 with ``group.protocol=consumer`` (KIP-848 as 3.9 shipped it, before its 4.0 GA:
    ConsumerGroupHeartbeat v0) in a group of two, against Kafka 4.4.0 directly and through the gateway."""
    release = "3.9.1"
    targets = _targets(kafka, module_gateway)

    def run(target: str) -> dict[str, Any]:
        topic = make_topic(PARTITIONS)
        produced = produce_confluent(kafka.bootstrap, topic, values(topic, RECORDS))
        outcome = _consumer_protocol_fleet(release, targets[target], topic, names(f"kip848-{target}"), java_logs)
        assert_clean_run(produced, outcome.pop("log"))  # every record once, no partition owned twice
        return outcome

    with ThreadPoolExecutor(max_workers=2) as pool:  # both at once, each its own topic and group
        outcomes = dict(zip(targets, pool.map(run, targets), strict=True))
    assert outcomes["direct"] == {"clean shutdowns": 2, "failed commits": [], "committed": RECORDS}
    assert outcomes["gateway"] == outcomes["direct"]


async def _aiokafka_admin_view(bootstrap: str, topic: str, group: str) -> dict[str, Any]:
    """An aiokafka consumer reads and commits everything and leaves; then what AIOKafkaAdminClient says
    of its (now Empty) group: listed, described, its committed offsets."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        got = 0
        deadline = time.monotonic() + GROUP_TIMEOUT_S
        while got < 30 and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            got += sum(len(records) for records in batches.values())
        await consumer.commit()
    finally:
        await consumer.stop()
    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await client.start()
    try:
        listed = dict(await client.list_consumer_groups())
        (described,) = [g for r in await client.describe_consumer_groups([group]) for g in r.groups]
        offsets = await client.list_consumer_group_offsets(group)
    finally:
        await client.close()
    return {
        "consumed": got,
        "listed as": listed.get(group),
        # DescribeGroups v0-v5 tuples: (error, group, state, protocol type, protocol, members, ...).
        "described": (described[0], described[2], described[3], len(described[5])),
        "offsets": sorted((tp.partition, om.offset) for tp, om in offsets.items() if tp.topic == topic),
    }


async def test_aiokafka_admin_client_alike_direct_and_through_the_gateway(
    kafka: ProcessBackend, module_gateway: Any, make_topic: Any, names: Any
) -> None:
    views = {}
    for target, bootstrap in _targets(kafka, module_gateway).items():
        topic = make_topic(PARTITIONS)
        produced = produce_confluent(kafka.bootstrap, topic, values(topic, 30))
        views[target] = await _aiokafka_admin_view(bootstrap, topic, names(f"aioadmin-{target}"))
        ends = {p: 1 + max(r.offset for r in produced if r.partition == p) for p in {r.partition for r in produced}}
        assert views[target]["offsets"] == sorted(ends.items()), target
    assert views["direct"]["consumed"] == 30
    assert views["direct"]["listed as"] == "consumer" and views["direct"]["described"] == (0, "Empty", "consumer", 0)
    assert views["gateway"] == views["direct"]
