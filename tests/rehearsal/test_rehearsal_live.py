"""`groupgate rehearse live` against a running gateway: the real gateway (``groupgate serve`` in front of the
embedded Kafka 4.3.1 broker) produces its rebalance events to a topic (``--rebalance-events
kafka://BOOTSTRAP/TOPIC``) while a small real consumer group (confluent-kafka clients through the gateway)
joins, loses a member and gets it back. The Structured Streaming view follows the topic during the run:
it must have published figures before the run ended, and its final live.json must equal what the batch
pipeline and the plain-Python oracle compute from the same topic's events afterwards."""

from __future__ import annotations

import json
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rehearsal_compare as C

from rehearsal import oracle, pipeline
from rehearsal.events import parse_event
from rehearsal.live import LIVE_JSON, live_main

pytestmark = pytest.mark.kafka

PARTITIONS = 4
RUN = "live-test"


@pytest.fixture(scope="module")
def broker() -> Iterator[str]:
    if shutil.which("java") is None:
        pytest.skip("no Java runtime: the embedded Kafka broker cannot run")
    from gateway.ops.embedded_kafka import EmbeddedKafka

    with EmbeddedKafka() as k:
        yield k.bootstrap


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)


def topic_lines(bootstrap: str, topic: str) -> list[str]:
    """Every record value of the topic, read to its end offsets."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic]
        tps = [TopicPartition(topic, p, 0) for p in meta.partitions]
        ends = {tp.partition: c.get_watermark_offsets(tp, timeout=10)[1] for tp in tps}
        c.assign(tps)
        lines: list[str] = []
        pos = {p: 0 for p in ends}
        deadline = time.monotonic() + 30
        while any(pos[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None or msg.error():
                continue
            lines.append(msg.value().decode())
            pos[msg.partition()] = msg.offset() + 1
        assert all(pos[p] >= ends[p] for p in ends), (pos, ends)
        return lines
    finally:
        c.close()


def end_offsets_total(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets-probe"})
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic]
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in meta.partitions)
    finally:
        c.close()


class Member:
    """A classic consumer through the gateway, polled until it owns what the test waits for."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.owned: set[int] = set()

        def assigned(_c: Any, tps: list[Any]) -> None:
            self.owned = {tp.partition for tp in tps}

        def revoked(_c: Any, _tps: list[Any]) -> None:
            self.owned = set()

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 300,
                "partition.assignment.strategy": "range",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)

    def poll(self) -> None:
        self.consumer.poll(0.1)


def settle(members: list[Member], want: list[int], timeout_s: float = 40) -> None:
    """Poll every member until each owns the wanted number of partitions."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        if [len(m.owned) for m in members] == want:
            return
    raise AssertionError(f"members own {[sorted(m.owned) for m in members]}, wanted counts {want}")


def test_the_live_command_takes_a_topic_and_refuses_anything_else(tmp_path: Path) -> None:
    from gateway.ops.cli import build_parser
    from rehearsal.commands import cmd_rehearse_live

    args = build_parser().parse_args(
        ["rehearse", "live", "--events", "kafka://h:9092/t", "--out", str(tmp_path), "--until-idle-s", "3"]
    )
    assert args.func is cmd_rehearse_live
    assert (args.events, args.trigger_s, args.until_idle_s, args.max_s) == ("kafka://h:9092/t", 5.0, 3.0, None)
    said: list[str] = []
    # Refused before any Spark session starts: a file is for `rehearse report`, a topic needs a name.
    for bad in ("events.jsonl", "kafka://h:9092"):
        assert live_main(bad, str(tmp_path), echo=said.append) == 2
    assert all("expected kafka://BOOTSTRAP/TOPIC" in line for line in said), said


@pytest.mark.timeout(300)
def test_live_view_of_a_running_gateway_equals_the_batch_report(
    spark_with_kafka: Any, broker: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from compat_tests.harness.brokers import free_port_block
    from compat_tests.harness.gateway_proc import GatewayProcess

    suffix = uuid.uuid4().hex[:8]
    events_topic, data_topic, group = f"rebalance-events-{suffix}", f"orders-{suffix}", f"live-{suffix}"
    create_topic(broker, events_topic, 2)
    create_topic(broker, data_topic, PARTITIONS)
    uri = f"kafka://{broker}/{events_topic}"
    # The first join completes at once instead of after Kafka's 3 s group.initial.rebalance.delay.ms.
    monkeypatch.setenv("GROUPGATE_COORDINATOR_INITIAL_REBALANCE_DELAY_MS", "0")
    gw = GatewayProcess(
        upstream=broker,
        listen_port=free_port_block(3),
        log_dir=tmp_path,
        extra_args=["--rebalance-events", uri, "--rebalance-run", RUN],
    )
    gw.start()

    out = tmp_path / "live"
    said: list[str] = []
    result: list[int] = []
    done = threading.Event()

    def follow() -> None:
        try:
            # Stopped by the test once it has seen every event; the idle bound only ends a view gone astray.
            result.append(live_main(uri, str(out), trigger_s=1.0, until_idle_s=60, max_s=150, stop=done, echo=said.append))
        finally:
            done.set()

    follower = threading.Thread(target=follow, name="rehearse-live")
    follower.start()
    live_during_run: dict[str, Any] | None = None
    members: list[Member] = []
    try:
        a, b = Member(gw.bootstrap, group, data_topic), Member(gw.bootstrap, group, data_topic)
        members += [a, b]
        settle([a, b], [2, 2])
        # Live: the view publishes the join while the group is still running.
        deadline = time.monotonic() + 60
        while live_during_run is None and time.monotonic() < deadline and not done.is_set():
            for m in members:
                m.poll()
            path = out / LIVE_JSON
            if path.exists():
                live_during_run = json.loads(path.read_text())
        b.consumer.close()  # leave
        members.remove(b)
        settle([a], [PARTITIONS])
        c = Member(gw.bootstrap, group, data_topic)  # a member joins again
        members.append(c)
        settle([a, c], [2, 2])
    finally:
        for m in members:
            m.consumer.close()
        gw.stop()  # flushes the gateway's producer
    # The gateway's events are all on the topic now: wait for the view to show them all, then stop it.
    produced = end_offsets_total(broker, events_topic)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not done.is_set():
        path = out / LIVE_JSON
        if path.exists() and json.loads(path.read_text())["summary"]["events"] >= produced:
            break
        time.sleep(0.5)
    done.set()
    follower.join(60)
    assert not follower.is_alive()
    assert result == [0], said
    assert live_during_run is not None, said
    assert 0 < live_during_run["summary"]["events"] < produced
    # The gateway delivered every event it derived (nothing dropped on its bounded queue).
    assert f"dropped=0 sent={produced} " in gw.log_path.read_text(), gw.tail(20)

    live = json.loads((out / LIVE_JSON).read_text())
    assert live["source"] == uri
    assert live["summary"]["events"] == produced
    assert (out / "live.html").exists()

    events = [parse_event(line) for line in topic_lines(broker, events_topic)]
    reference = oracle.compute(events).summary
    assert reference["groups"] == 1 and reference["members"] == 3
    assert reference["client_mixes"]["classic-eager"]["rebalances"] > 0
    assert C.same(live["summary"], reference) == []
    batch = pipeline.summarize(pipeline.compute(pipeline.load_events(spark_with_kafka, [uri])))
    assert C.same(live["summary"], batch) == []
