"""`groupgate rehearse report kafka://BOOTSTRAP/TOPIC` against a real broker: a small simulated fleet's
events are produced to a topic (one record per event line, keyed by group), and the report read from the
topic through Spark's Kafka connector must give the plain-Python oracle's tables and summary for the same
events read from the files. Plus how the connector is resolved (rehearsal/spark_kafka.py)."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rehearsal_compare as C

from rehearsal import events as E
from rehearsal import oracle, spark_kafka
from rehearsal.cli import report_main, simulate_main
from rehearsal.tables import TABLES

PARTITIONS = 3


def test_connector_resolution_pins_the_token_provider_and_leaves_out_what_pyspark_ships() -> None:
    assert spark_kafka.patch_releases("4.0.1") == "[4.0.0],[4.0.1]"
    assert spark_kafka.patch_releases("4.1.0") == "[4.1.0]"
    assert spark_kafka.patch_releases("4.1.0.dev0") == "[4.1.0.dev0]"
    dist = spark_kafka.distribution("4.0.1")
    assert dist.artifacts == ("org.apache.spark:spark-sql-kafka-0-10_2.13:4.0.1",)
    assert dist.managed == ("org.apache.spark:spark-token-provider-kafka-0-10_2.13:[4.0.0],[4.0.1]",)
    pytest.importorskip("pyspark", reason="pyspark is in the 'rehearsal' extra")
    jars = {p.name for p in spark_kafka.pyspark_jars_dir().glob("*.jar")}
    for shipped in ("scala-library", "spark-core_2.13", "hadoop-client-api", "slf4j-api", "zstd-jni"):
        assert shipped in dist.exclude
        assert any(name.startswith(shipped + "-") for name in jars), shipped
    assert not {"kafka-clients", "spark-token-provider-kafka-0-10_2.13", "commons-pool2"} & set(dist.exclude)


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    if shutil.which("java") is None:
        pytest.skip("no Java runtime: the embedded Kafka broker cannot run")
    from gateway.ops.embedded_kafka import EmbeddedKafka

    with EmbeddedKafka() as k:
        yield k.bootstrap


def produce(bootstrap: str, topic: str, sim: Path) -> dict[int, int]:
    """Every event line of the simulation's files, in file order, keyed by group; records per partition."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(30)
    per_partition: dict[int, int] = {}
    failures: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))
        else:
            per_partition[msg.partition()] = per_partition.get(msg.partition(), 0) + 1

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for path in E.event_files([sim]):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                producer.produce(topic, key=json.loads(line)["group"], value=line, on_delivery=delivered)
                producer.poll(0)
    assert producer.flush(30) == 0
    assert failures == []
    return per_partition


@pytest.mark.kafka
@pytest.mark.timeout(600)
def test_report_from_a_kafka_topic_equals_the_oracle(
    spark_with_kafka: Any, bootstrap: str, tmp_path: Path
) -> None:
    spark = spark_with_kafka
    sim = tmp_path / "sim"
    said: list[str] = []
    code = simulate_main(4, 3, "rolling-upgrade", 5, str(sim), "all", topics="orders:4,audit:2", echo=said.append)
    assert code == 0, said
    topic = f"rehearsal-events-{uuid.uuid4().hex[:8]}"
    per_partition = produce(bootstrap, topic, sim)
    # Keyed by group, the four groups' events spread over more than one partition (so more than one
    # Spark partition): the report must bring each group's events together from there.
    assert len(per_partition) > 1, per_partition

    out = tmp_path / "report"
    said = []
    assert report_main([f"kafka://{bootstrap}/{topic}"], str(out), echo=said.append) == 0, said
    assert any("with the Kafka connector" in line for line in said)

    reference = oracle.compute(E.read_events([sim]))
    assert reference.summary["events"] == sum(per_partition.values())
    summary = json.loads((out / "summary.json").read_text())
    assert C.same(summary, C.as_reported(reference.summary)) == []
    tables = {name: [r.asDict() for r in spark.read.parquet(str(out / name)).collect()] for name in TABLES}
    for name in ("ownership_intervals", "partition_unavailability", "member_rebalances", "group_summary"):
        assert tables[name], f"{name}: the fleet should produce rows"
    assert C.table_differences(tables, reference) == []
