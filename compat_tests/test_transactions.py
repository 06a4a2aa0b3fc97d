"""Transactions through the gateway on a Kafka 4.4.0 cluster with its default features
(transaction.version 2, KIP-890): the gateway offers Produce and Fetch at the cluster's versions (leader
endpoints rewritten, KIP-951), so clients keep using the implicit partition adds that transaction
version 2 relies on. Each scenario that plain Kafka can run too runs against the broker directly and
through the gateway, and both must end the same.

The Java clients are compat_tests/java/TxnRoundtrip.java (kafka-clients alone, compiled once by the
harness against each release the suite runs: 4.4.0, 3.9.1, 2.8.2) and compat_tests/java/TxnClients.java
(Kafka Streams 4.4.0 and the restart loop); librdkafka through confluent-kafka; kafka-python and aiokafka
with their own transactional producers.
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiokafka
import confluent_kafka
import kafka as kafka_python
import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from compat_tests.harness import java
from compat_tests.harness.probe import roundtrip
from gateway.ops import kafka_dist
from gateway.ops.embedded_kafka import java_binary

pytestmark = pytest.mark.kafka

JAVA_DIR = Path(__file__).resolve().parent / "java"
TXNS, PER_TXN = 6, 5  # every third transaction (k = 2, 5) is aborted
TOPIC_PARTITIONS = 3
JAVA_RELEASES = (kafka_dist.CURRENT_KAFKA, *kafka_dist.LEGACY_KAFKA)


def _roundtrip_classpath(release: str) -> str:
    """TxnRoundtrip compiled against (and run with) kafka-clients of ``release``."""
    try:
        jars = java.tools_classpath(release)
        classes = java.compiled(JAVA_DIR / "TxnRoundtrip.java", jars)
    except (FileNotFoundError, kafka_dist.FetchError) as e:
        pytest.skip(f"cannot build the Java transactional clients of {release}: {e}")
    return f"{classes}:{jars}"


@pytest.fixture(scope="module")
def txn_classpath() -> str:
    dist = kafka_dist.streams()
    try:
        kafka_dist.fetch(dist)
        helpers = java.compiled(JAVA_DIR / "TxnRoundtrip.java", dist.classpath())
        classes = java.compiled(JAVA_DIR / "TxnClients.java", f"{helpers}:{dist.classpath()}")
    except (FileNotFoundError, kafka_dist.FetchError) as e:
        pytest.skip(f"cannot build the Java transactional clients: {e}")
    return f"{classes}:{helpers}:{dist.classpath()}"


def _tool(
    classpath: str, args: list[str], log_dir: Path, *, release: str = kafka_dist.CURRENT_KAFKA, main: str = "TxnClients"
) -> java.JavaTool:
    return java.JavaTool(release, main, args, heap="384m", log_dir=log_dir, classpath=classpath)


def _result(tool: java.JavaTool, timeout_s: float) -> dict[str, Any]:
    tool.wait_for(lambda t: bool(t.named("result")), timeout_s, "result line")
    tool.wait(30)
    return tool.named("result")[-1].data


def _targets(kafka: Any, gateway: Any) -> dict[str, str]:
    if getattr(gateway, "direct", False):
        pytest.skip("--compat-direct: the comparison needs the gateway")
    return {"direct": kafka.bootstrap, "gateway": gateway.bootstrap}


# --- what the gateway advertises ------------------------------------------------------------------


def _api_versions(address: str) -> Any:
    request = ApiVersionsRequest[3](client_software_name="compat", client_software_version="1")
    return roundtrip(address, request, ApiVersionsResponse, 3)


def test_the_gateway_offers_the_clusters_produce_fetch_and_transaction_version(kafka: Any, module_gateway: Any) -> None:
    targets = _targets(kafka, module_gateway)
    seen = {name: _api_versions(address) for name, address in targets.items()}
    ranges = {n: {a.api_key: a.max_version for a in r.api_keys} for n, r in seen.items()}
    features = {n: {f.name: f.max_version_level for f in r.finalized_features} for n, r in seen.items()}
    assert features["direct"]["transaction.version"] == 2  # Kafka 4.4.0's default
    assert features["gateway"]["transaction.version"] == 2
    for api in (0, 1, 26, 28):  # Produce, Fetch, EndTxn, TxnOffsetCommit
        assert ranges["gateway"][api] == ranges["direct"][api]


# --- commit and abort -----------------------------------------------------------------------------


def _expected_committed() -> list[str]:
    return sorted(f"t{k}-{i}" for k in range(TXNS) if k % 3 != 2 for i in range(PER_TXN))


@pytest.mark.parametrize("release", JAVA_RELEASES)
def test_java_transactions_commit_and_abort_alike_direct_and_through_the_gateway(
    kafka: Any, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str],
    java_logs: Path, release: str,
) -> None:
    """kafka-clients 4.4.0 uses transaction version 2 (Produce v12's implicit partition adds, KIP-890);
    3.9.1 and 2.8.2 add partitions with AddPartitionsToTxn themselves, at their own request versions."""
    targets = _targets(kafka, module_gateway)
    classpath = _roundtrip_classpath(release)
    tools = {}
    for name, address in targets.items():
        args = ["roundtrip", address, make_topic(3), names(f"txn-{name}"), names(f"group-{name}"), str(TXNS), str(PER_TXN)]
        tools[name] = _tool(classpath, args, java_logs, release=release, main="TxnRoundtrip").start()
    try:
        results = {name: _result(tool, 120) for name, tool in tools.items()}
    finally:
        for tool in tools.values():
            tool.stop()
    for name, tool in tools.items():
        outcomes = [(e.name, e.data["txn"]) for e in tool.events if e.name in ("committed", "aborted")]
        assert outcomes == [("aborted" if k % 3 == 2 else "committed", k) for k in range(TXNS)], name
    assert results["gateway"] == results["direct"]
    got = results["gateway"]
    assert got["read_committed"] == _expected_committed()  # aborted transactions stay invisible
    assert got["read_uncommitted_count"] == TXNS * PER_TXN  # ... though their records were written
    assert got["group_offset"] == 1000 + 4  # the offset of the last committed transaction (k = 4)


def _read_confluent(address: str, topic: str, isolation: str, expect: int) -> list[str]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": address, "group.id": "unused", "isolation.level": isolation,
         "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in meta.partitions])
        out: list[str] = []
        deadline = time.monotonic() + 60
        quiet_until = None
        # Read until the expected count, then a little longer: anything more is a record that should
        # not be visible.
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(msg.value().decode())
            if len(out) >= expect:
                quiet_until = quiet_until or time.monotonic() + 1.5
                if time.monotonic() >= quiet_until:
                    break
        return sorted(out)
    finally:
        consumer.close()


def _librdkafka_transactions(address: str, topic: str, txn_id: str, group: str) -> dict[str, Any]:
    producer = confluent_kafka.Producer({"bootstrap.servers": address, "transactional.id": txn_id})
    member = confluent_kafka.Consumer({"bootstrap.servers": address, "group.id": group, "enable.auto.commit": False})
    try:
        producer.init_transactions(30)
        for k in range(TXNS):
            producer.begin_transaction()
            for i in range(PER_TXN):
                producer.produce(topic, key=f"t{k}", value=f"t{k}-{i}")
            producer.send_offsets_to_transaction(
                [confluent_kafka.TopicPartition(topic, 0, 1000 + k)], member.consumer_group_metadata(), 30
            )
            if k % 3 == 2:
                producer.flush(30)  # abort_transaction purges what is still queued; these are written, then aborted
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
        committed = member.committed([confluent_kafka.TopicPartition(topic, 0)], timeout=30)
    finally:
        member.close()
    return {
        "read_committed": _read_confluent(address, topic, "read_committed", len(_expected_committed())),
        "read_uncommitted_count": len(_read_confluent(address, topic, "read_uncommitted", TXNS * PER_TXN)),
        "group_offset": committed[0].offset,
    }


def test_librdkafka_transactions_commit_and_abort_alike_direct_and_through_the_gateway(
    kafka: Any, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str]
) -> None:
    targets = _targets(kafka, module_gateway)
    results = {
        name: _librdkafka_transactions(address, make_topic(3), names(f"txn-{name}"), names(f"group-{name}"))
        for name, address in targets.items()
    }
    assert results["gateway"] == results["direct"]
    assert results["gateway"]["read_committed"] == _expected_committed()
    assert results["gateway"]["read_uncommitted_count"] == TXNS * PER_TXN
    assert results["gateway"]["group_offset"] == 1000 + 4


def _assert_commit_and_abort_alike(results: dict[str, dict[str, Any]]) -> None:
    assert results["gateway"] == results["direct"]
    assert results["gateway"]["read_committed"] == _expected_committed()  # aborted transactions stay invisible
    assert results["gateway"]["read_uncommitted_count"] == TXNS * PER_TXN  # ... though their records were written
    assert results["gateway"]["group_offset"] == 1000 + 4  # the offset of the last committed transaction (k = 4)


def _drained(poll: Callable[[], list[str]], expect: int) -> list[str]:
    """What ``poll`` returns until ``expect`` values came, and 1.5 s more: anything further is a record
    that should not be visible."""
    out: list[str] = []
    deadline = time.monotonic() + 60
    quiet_until = None
    while time.monotonic() < deadline:
        out += poll()
        if len(out) >= expect:
            quiet_until = quiet_until or time.monotonic() + 1.5
            if time.monotonic() >= quiet_until:
                break
    return sorted(out)


def _read_kafka_python(address: str, topic: str, isolation: str, expect: int) -> list[str]:
    consumer = kafka_python.KafkaConsumer(
        bootstrap_servers=address, isolation_level=isolation, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    try:
        partitions = [kafka_python.TopicPartition(topic, p) for p in range(TOPIC_PARTITIONS)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)

        def poll() -> list[str]:
            batches = consumer.poll(timeout_ms=200)
            return [r.value.decode() for records in batches.values() for r in records]

        return _drained(poll, expect)
    finally:
        consumer.close()


def _kafka_python_transactions(address: str, topic: str, txn_id: str, group: str) -> dict[str, Any]:
    producer = kafka_python.KafkaProducer(bootstrap_servers=address, transactional_id=txn_id)
    try:
        producer.init_transactions()
        for k in range(TXNS):
            producer.begin_transaction()
            for i in range(PER_TXN):
                producer.send(topic, key=f"t{k}".encode(), value=f"t{k}-{i}".encode())
            producer.send_offsets_to_transaction({kafka_python.TopicPartition(topic, 0): kafka_python.OffsetAndMetadata(1000 + k)}, group)
            if k % 3 == 2:
                producer.flush(30)  # written, then aborted
                producer.abort_transaction()
            else:
                producer.commit_transaction()
    finally:
        producer.close(10)
    reader = kafka_python.KafkaConsumer(bootstrap_servers=address, group_id=group, enable_auto_commit=False)
    try:
        group_offset = reader.committed(kafka_python.TopicPartition(topic, 0))
    finally:
        reader.close()
    return {
        "read_committed": _read_kafka_python(address, topic, "read_committed", len(_expected_committed())),
        "read_uncommitted_count": len(_read_kafka_python(address, topic, "read_uncommitted", TXNS * PER_TXN)),
        "group_offset": group_offset,
    }


def test_kafka_python_transactions_commit_and_abort_alike_direct_and_through_the_gateway(
    kafka: Any, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str]
) -> None:
    targets = _targets(kafka, module_gateway)
    results = {
        name: _kafka_python_transactions(address, make_topic(TOPIC_PARTITIONS), names(f"txn-{name}"), names(f"group-{name}"))
        for name, address in targets.items()
    }
    _assert_commit_and_abort_alike(results)


async def _read_aiokafka(address: str, topic: str, isolation: str, expect: int) -> list[str]:
    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=address, isolation_level=isolation, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        partitions = [aiokafka.TopicPartition(topic, p) for p in range(TOPIC_PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        out: list[str] = []
        deadline = time.monotonic() + 60
        quiet_until = None
        # As _drained, awaiting the consumer's own poll.
        while time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200)
            out += [r.value.decode() for records in batches.values() for r in records]
            if len(out) >= expect:
                quiet_until = quiet_until or time.monotonic() + 1.5
                if time.monotonic() >= quiet_until:
                    break
        return sorted(out)
    finally:
        await consumer.stop()


async def _aiokafka_transactions(address: str, topic: str, txn_id: str, group: str) -> dict[str, Any]:
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=address, transactional_id=txn_id)
    await producer.start()
    try:
        for k in range(TXNS):
            await producer.begin_transaction()
            for i in range(PER_TXN):
                # send_and_wait: the aborted transactions' records are written before the abort.
                await producer.send_and_wait(topic, key=f"t{k}".encode(), value=f"t{k}-{i}".encode())
            await producer.send_offsets_to_transaction({aiokafka.TopicPartition(topic, 0): 1000 + k}, group)
            if k % 3 == 2:
                await producer.abort_transaction()
            else:
                await producer.commit_transaction()
    finally:
        await producer.stop()
    reader = aiokafka.AIOKafkaConsumer(bootstrap_servers=address, group_id=group, enable_auto_commit=False)
    await reader.start()
    try:
        group_offset = await reader.committed(aiokafka.TopicPartition(topic, 0))
    finally:
        await reader.stop()
    return {
        "read_committed": await _read_aiokafka(address, topic, "read_committed", len(_expected_committed())),
        "read_uncommitted_count": len(await _read_aiokafka(address, topic, "read_uncommitted", TXNS * PER_TXN)),
        "group_offset": group_offset,
    }


async def test_aiokafka_transactions_commit_and_abort_alike_direct_and_through_the_gateway(
    kafka: Any, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str]
) -> None:
    targets = _targets(kafka, module_gateway)
    results = {
        name: await _aiokafka_transactions(address, make_topic(TOPIC_PARTITIONS), names(f"txn-{name}"), names(f"group-{name}"))
        for name, address in targets.items()
    }
    _assert_commit_and_abort_alike(results)


# --- Kafka Streams, exactly once --------------------------------------------------------------------


def test_a_streams_exactly_once_v2_app_runs_alike_direct_and_through_the_gateway(
    kafka: Any, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str],
    txn_classpath: str, java_logs: Path,
) -> None:
    targets = _targets(kafka, module_gateway)
    n = 40
    tools = {}
    for name, address in targets.items():
        args = ["streams", address, make_topic(2), make_topic(2), names(f"app-{name}"), str(n)]
        tools[name] = _tool(txn_classpath, args, java_logs).start()
    try:
        results = {name: _result(tool, 150) for name, tool in tools.items()}
    finally:
        for tool in tools.values():
            tool.stop()
    expected = sorted(f"V-{i}" for i in range(n))
    for name, got in results.items():
        errors = [e.data for e in tools[name].named("streams_error")]
        assert not errors, (name, errors)
        assert "RUNNING" in got["states"] and "ERROR" not in got["states"], (name, got["states"])
        assert got["state_before_close"] == "RUNNING", name
        assert got["values"] == expected, name  # every input once: nothing lost, nothing twice


# --- a gateway restart in the middle of a transaction ----------------------------------------------


def test_a_java_producer_recovers_from_a_gateway_restart_mid_transaction(
    module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str],
    txn_classpath: str, java_logs: Path,
) -> None:
    if getattr(module_gateway, "direct", False):
        pytest.skip("--compat-direct: there is no gateway process to restart")
    txns, per_txn = 6, 6
    topic = make_topic(3)
    tool = _tool(
        txn_classpath, ["loop", module_gateway.bootstrap, topic, names("txn"), str(txns), str(per_txn), "1500"], java_logs
    ).start()
    try:
        # Transaction 2 is open (half its records sent and flushed) when the gateway is SIGKILLed.
        tool.wait_for(lambda t: any(e.data.get("txn") == 2 for e in t.named("in_txn")), 90, "transaction 2 under way")
        module_gateway.restart(hard=True)
        tool.wait_for(lambda t: bool(t.named("done")), 120, "all transactions committed")
    finally:
        tool.stop()
    committed = sorted(e.data["txn"] for e in tool.named("committed"))
    assert committed == list(range(txns)), [e.data for e in tool.events]
    expected = [f"t{k}-{i}" for k in range(txns) for i in range(per_txn)]
    seen = _read_confluent(module_gateway.bootstrap, topic, "read_committed", len(expected))
    dupes = [v for v, c in Counter(seen).items() if c > 1]
    assert not dupes, dupes
    assert seen == sorted(expected)


def _commit(producer: confluent_kafka.Producer) -> None:
    for attempt in range(5):
        try:
            producer.commit_transaction(60)
            return
        except confluent_kafka.KafkaException as e:
            # A retriable error leaves the commit's outcome to the same call, made again.
            if not e.args[0].retriable() or e.args[0].txn_requires_abort() or attempt == 4:
                raise


def test_a_librdkafka_producer_recovers_from_a_gateway_restart_mid_transaction(
    module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str]
) -> None:
    if getattr(module_gateway, "direct", False):
        pytest.skip("--compat-direct: there is no gateway process to restart")
    topic = make_topic(3)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": module_gateway.bootstrap, "transactional.id": names("txn"), "transaction.timeout.ms": 60000}
    )
    producer.init_transactions(30)
    committed: list[int] = []
    restarted = False
    k = 0
    while k < 4:
        try:
            producer.begin_transaction()
            for i in range(5):
                producer.produce(topic, key=f"t{k}", value=f"t{k}-{i}")
            producer.flush(30)
            if k == 1 and not restarted:
                module_gateway.restart(hard=True)  # records of transaction 1 written, not yet committed
                restarted = True
            _commit(producer)
            committed.append(k)
            k += 1
        except confluent_kafka.KafkaException as e:
            # What librdkafka's transactional API asks of an application: abort and redo the transaction.
            if not e.args[0].txn_requires_abort():
                raise
            producer.abort_transaction(60)
    assert restarted and committed == [0, 1, 2, 3]
    expected = [f"t{k}-{i}" for k in range(4) for i in range(5)]
    seen = _read_confluent(module_gateway.bootstrap, topic, "read_committed", len(expected))
    assert seen == sorted(expected)  # each committed transaction once, nothing twice


# --- kafka-transactions on a running transaction ----------------------------------------------------


def _transactions_tool(bootstrap: str, *args: str) -> tuple[int, list[str]]:
    """Kafka 4.4.0's ``kafka-transactions.sh --bootstrap-server BOOTSTRAP ARGS``: exit code, stdout rows."""
    cmd = [
        java_binary(), "-Xmx256m", "-Djava.awt.headless=true", "-Dorg.slf4j.simpleLogger.defaultLogLevel=error",
        "-cp", java.tools_classpath(kafka_dist.CURRENT_KAFKA), "org.apache.kafka.tools.TransactionsCommand",
        "--bootstrap-server", bootstrap, *args,
    ]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    return r.returncode, [line.split() for line in (r.stdout + r.stderr).splitlines() if line.strip()]


def _running_transaction_views(bootstrap: str, topic: str, txn_id: str) -> dict[str, Any]:
    """Open a transaction (records written to two partitions, not committed), then what ``list`` and
    ``describe`` print of it; the transaction is committed afterwards."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    for p in (0, 1):
        producer.produce(topic, value=b"open", partition=p)
    producer.flush(30)
    try:
        rc_list, listed = _transactions_tool(bootstrap, "list")
        rc_describe, described = _transactions_tool(bootstrap, "describe", "--transactional-id", txn_id)
    finally:
        producer.commit_transaction(30)
    # Producer ids, start times and durations are the cluster's per run; the header names what is masked.
    [header] = [row for row in listed if row[:1] == ["TransactionalId"]]
    [mine] = [dict(zip(header, row, strict=True)) for row in listed if row[:1] == [txn_id]]
    d_header = described[0]
    d_row = dict(zip(d_header, described[1], strict=True)) if len(described) > 1 else {}
    for key in ("ProducerId", "CurrentTransactionStartTimeMs", "TransactionDurationMs"):
        for row in (mine, d_row):
            if key in row:
                row[key] = "<masked>"
    for row in (mine, d_row):
        row["TransactionalId"] = "<txn>"
        if "TopicPartitions" in row:
            row["TopicPartitions"] = ",".join(sorted(row["TopicPartitions"].replace(topic, "<topic>").split(",")))
    return {"list": (rc_list, header, mine), "describe": (rc_describe, d_header, d_row)}


def test_transactions_tool_lists_and_describes_a_running_transaction_alike_direct_and_through_the_gateway(
    kafka: Any, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str]
) -> None:
    """ListTransactions goes to every broker, DescribeTransactions to the transaction's coordinator
    (FindCoordinator with key type transaction): through the gateway both answer as the cluster does."""
    targets = _targets(kafka, module_gateway)
    views = {
        name: _running_transaction_views(address, make_topic(TOPIC_PARTITIONS), names(f"txn-{name}"))
        for name, address in targets.items()
    }
    direct = views["direct"]
    assert direct["list"][0] == 0 and direct["list"][2]["TransactionState"] == "Ongoing", direct["list"]
    assert direct["describe"][0] == 0, direct["describe"]
    assert direct["describe"][2]["TransactionState"] == "Ongoing", direct["describe"]
    assert direct["describe"][2]["TopicPartitions"] == "<topic>-0,<topic>-1", direct["describe"]
    assert views["gateway"] == direct
