"""The gateway's rebalance event log (--rebalance-events): wire requests in, schema-valid JSON lines out."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from gateway.config.settings import load_config
from gateway.groups.layer import GroupLayer
from gateway.ops.cli import _flags, build_parser
from gateway.wire.api_keys import ApiKey
from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest
from rehearsal import oracle
from rehearsal.events import read_events, validate_logs

from ._groups_support import call
from .test_groups_layer import started


async def _heartbeat(layer: GroupLayer, member: str, epoch: int, owned: list[int] | None, topic_id: uuid.UUID) -> Any:
    tps = None if owned is None else [
        ConsumerGroupHeartbeatRequest[1].TopicPartitions(topic_id=topic_id, partitions=owned)
    ] if owned else []
    req = ConsumerGroupHeartbeatRequest[1](
        group_id="cg", member_id=member, member_epoch=epoch, rebalance_timeout_ms=5000,
        subscribed_topic_names=["t"] if epoch == 0 else None, topic_partitions=tps,
    )
    return await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, req)


def test_the_options_reach_the_coordinator_settings(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["serve", "--upstream", "127.0.0.1:9093", "--rebalance-events", str(tmp_path / "e.jsonl"), "--rebalance-run", "r7"]
    )
    config = load_config(None, _flags(args), environ={})
    assert config.coordinator.rebalance_events == str(tmp_path / "e.jsonl")
    assert config.coordinator.rebalance_run == "r7"
    default = load_config(None, _flags(build_parser().parse_args(["serve"])), environ={})
    assert default.coordinator.rebalance_events is None and default.coordinator.rebalance_run == "gateway"


async def test_off_by_default_the_service_is_called_directly() -> None:
    layer = await started()
    try:
        assert layer.events is None and all(s.calls is s.service for s in layer.runtime.shards)
    finally:
        await layer.stop()


async def test_the_layer_writes_valid_events_and_continues_the_log_after_a_restart(tmp_path: Path) -> None:
    log = tmp_path / "events" / "gateway.jsonl"
    topic_id = uuid.uuid4()
    kw = {
        "state_dir": str(tmp_path / "state"), "rebalance_events": str(log), "rebalance_run": "r1",
        # KIP-1263 batching off: m2's join is to be assigned at once, not when the interval ends.
        "consumer_assignment_interval_ms": 0,
    }
    layer = await started(**kw)
    try:
        layer._on_topics({"t": (topic_id, 3)})
        m1, m2 = str(uuid.uuid4()), str(uuid.uuid4())
        r = await _heartbeat(layer, m1, 0, [], topic_id)
        await _heartbeat(layer, m1, r.member_epoch, [0, 1, 2], topic_id)
        r2 = await _heartbeat(layer, m2, 0, [], topic_id)
        r = await _heartbeat(layer, m1, r.member_epoch, [0, 1, 2], topic_id)
        kept = sorted(p for tp in r.assignment.topic_partitions for p in tp.partitions)
        await _heartbeat(layer, m1, r.member_epoch, kept, topic_id)
        r2 = await _heartbeat(layer, m2, r2.member_epoch, [], topic_id)
        moved = sorted(p for tp in r2.assignment.topic_partitions for p in tp.partitions)
        assert moved and sorted(kept + moved) == [0, 1, 2]
        await _heartbeat(layer, m2, r2.member_epoch, moved, topic_id)
    finally:
        await layer.stop()
    lines = log.read_text().splitlines()
    # structlog wrote exactly the event: no level, timestamp or logger keys around it.
    first = json.loads(lines[0])
    assert first["run"] == "r1" and not {"level", "timestamp", "logger"} & first.keys()
    assert validate_logs([log]) == []
    events = list(read_events([log]))
    assert [e.seq for e in events] == list(range(len(events)))
    kinds = [(e.event, e.member) for e in events if e.event in ("partitions_assigned", "partitions_revoked")]
    assert kinds == [("partitions_assigned", m1), ("partitions_revoked", m1), ("partitions_assigned", m2)]
    metrics = oracle.compute(events)
    assert metrics.double_ownership == []
    assert {e.client_mix for e in events} == {"consumer"}

    # A restart replays the group: the log goes on (seq, client_mix) and m1 keeps its partitions.
    again = await started(**kw)
    try:
        again._on_topics({"t": (topic_id, 3)})
        await _heartbeat(again, m1, r.member_epoch, None, topic_id)
    finally:
        await again.stop()
    assert validate_logs([log]) == []
    after = list(read_events([log]))[len(events):]
    assert after and [e.seq for e in after] == list(range(len(events), len(events) + len(after)))
    restored = {e.member: sorted(p.partition for p in e.partitions) for e in after if e.event == "partitions_assigned"}
    assert restored == {m1: kept, m2: moved}
    assert not [e for e in after if e.event == "member_joined"]
    assert oracle.compute(read_events([log])).double_ownership == []


async def test_reopen_continues_in_a_new_file_after_rotation(tmp_path: Path) -> None:
    log = tmp_path / "gateway.jsonl"
    topic_id = uuid.uuid4()
    layer = await started(rebalance_events=str(log), rebalance_run="rot")
    try:
        layer._on_topics({"t": (topic_id, 2)})
        m1, m2 = str(uuid.uuid4()), str(uuid.uuid4())
        r = await _heartbeat(layer, m1, 0, [], topic_id)
        await _heartbeat(layer, m1, r.member_epoch, [0, 1], topic_id)
        rotated = tmp_path / "gateway.jsonl.1"
        log.rename(rotated)  # what logrotate does before it signals the gateway
        assert layer.events is not None
        layer.events.reopen()
        await _heartbeat(layer, m2, 0, [], topic_id)
    finally:
        await layer.stop()
    before = [json.loads(x) for x in rotated.read_text().splitlines()]
    after = [json.loads(x) for x in log.read_text().splitlines()]
    assert before and after
    assert any(e["event"] == "member_joined" and e["member"] == m2 for e in after)
    assert not any(e.get("member") == m2 for e in before)
    # One log in two files: seq goes on, and the group keeps its client_mix.
    assert [e["seq"] for e in before + after] == list(range(len(before) + len(after)))
    assert {e["client_mix"] for e in before + after} == {"consumer"}
    assert validate_logs([rotated, log]) == []


# --- kafka://BOOTSTRAP/TOPIC: the events go to a topic through a bounded queue -----------------------------


def test_kafka_uri_is_parsed_and_checked() -> None:
    from gateway.groups.rebalance_log import parse_kafka_uri

    assert parse_kafka_uri("kafka://a:9092,b:9092/events") == ("a:9092,b:9092", "events")
    for bad in ("kafka://a:9092", "kafka:///events", "kafka://a:9092/x/y", "file:///tmp/x"):
        with pytest.raises(ValueError):
            parse_kafka_uri(bad)


def test_an_unreachable_topic_never_blocks_the_writer_and_counts_what_it_drops() -> None:
    """Nothing listens on the port: the producer thread keeps retrying the connection while the queue
    fills; every put returns at once and each line beyond the queue's limit is counted as dropped."""
    import socket

    from gateway.groups.rebalance_log import KafkaEventSink

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the sink connects: refused
    sink = KafkaEventSink(f"kafka://127.0.0.1:{port}/events", limit=10)
    try:
        for i in range(50):
            sink.put("g", f'{{"seq":{i}}}')  # a queue put each (put_nowait): no network on this path
        assert sink.dropped == 40
        assert sink.sent == 0
    finally:
        sink.close(timeout_s=1)
    assert sink.dropped == 50  # closed before the cluster was reachable: the queued ones are dropped too


def test_a_malformed_kafka_uri_is_a_settings_error() -> None:
    from pydantic import ValidationError

    from gateway.config.coordinator import CoordinatorSettings

    assert CoordinatorSettings(rebalance_events="kafka://h:9092/t", ephemeral_state=True).rebalance_events
    with pytest.raises(ValidationError, match="kafka://BOOTSTRAP/TOPIC"):
        CoordinatorSettings(rebalance_events="kafka://h:9092", ephemeral_state=True)
