"""Every metric family of the operators' endpoint against a running gateway in front of a real broker.

A KIP-848 group with two consumer-protocol members and one classic member (translated inside it) commits
offsets below the log end; a classic group with one member does the same; a classic group whose
protocol type is not "consumer" is asked to convert and refuses; a classic group converts to a consumer
group and back. The scrape then shows kafka_exporter's families with the true member count and lag of
each group (where kafka_exporter reports 0 members for a consumer group), Kafka's group-coordinator
families, the migration families and the per-instance ones, every value checked against what the test
did and what the broker holds.
"""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from kafka.protocol.consumer.group import JoinGroupRequest, JoinGroupResponse

from compat_tests.harness.admin import create_topic
from compat_tests.harness.brokers import ProcessBackend, free_port_block
from compat_tests.harness.clients import produce_confluent, values
from compat_tests.harness.gateway_proc import GatewayProcess
from compat_tests.harness.names import unique
from compat_tests.harness.probe import find_coordinator_endpoints, roundtrip
from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from tests.gateway import _exposition

pytestmark = pytest.mark.kafka

CONFIG = """
[coordinator]
initial_rebalance_delay_ms = 0
upstream_check_s = 0
lag_refresh_s = 0.3
"group.consumer.heartbeat.interval.ms" = 500
"group.consumer.min.heartbeat.interval.ms" = 200
"""
PARTITIONS = 3
RECORDS = 60
COMMITTED = 2  # the offset every group commits on every partition
GROUP_ID_NOT_FOUND = 69


@pytest.fixture
def metrics_gateway(kafka: ProcessBackend, tmp_path: Path) -> Iterator[GatewayProcess]:
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG)
    metrics = f"127.0.0.1:{free_port_block(1)}"
    gw = GatewayProcess(
        upstream=kafka.bootstrap,
        listen_port=free_port_block(3),
        log_dir=tmp_path,
        extra_args=["--config", str(config), "--state-dir", str(tmp_path / "state"), "--metrics-listen", metrics],
    )
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


def _scrape(gw: GatewayProcess) -> dict[str, _exposition.Family]:
    metrics = gw.extra_args[gw.extra_args.index("--metrics-listen") + 1]
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=")
        return _exposition.parse(r.read().decode())


def _wait(gw: GatewayProcess, what: str, check: Callable[[dict[str, _exposition.Family]], bool],
          timeout_s: float = 60) -> dict[str, _exposition.Family]:
    deadline = time.monotonic() + timeout_s
    m = _scrape(gw)
    while not check(m):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n--- gateway log tail:\n{gw.tail(60)}")
        time.sleep(0.3)
        m = _scrape(gw)
    return m


def _samples(fam: _exposition.Family, **labels: str) -> dict[tuple[str, ...], float]:
    return {
        tuple(ls[k] for k in sorted(ls) if k not in labels): v
        for n, ls, v in fam.samples
        if n == fam.name and all(ls.get(k) == x for k, x in labels.items())
    }


def _consumer(gw: GatewayProcess, group: str, protocol: str, name: str) -> Any:
    conf: dict[str, Any] = {
        "bootstrap.servers": gw.bootstrap, "group.id": group, "client.id": name, "group.protocol": protocol,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    }
    if protocol == "classic":
        conf.update({"session.timeout.ms": 10_000, "heartbeat.interval.ms": 500})
    return confluent_kafka.Consumer(conf)


def _poll_until(consumers: list[Any], done: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "consumers did not settle"
        for c in consumers:
            c.poll(0.1)


def _end_offsets(kafka: ProcessBackend, topic: str) -> dict[int, int]:
    c = confluent_kafka.Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"watermarks-{uuid.uuid4()}"})
    try:
        return {p: c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p), timeout=10)[1]
                for p in range(PARTITIONS)}
    finally:
        c.close()


def _commit(c: Any, topic: str) -> None:
    c.commit(offsets=[confluent_kafka.TopicPartition(topic, p, COMMITTED) for p in range(PARTITIONS)],
             asynchronous=False)


def _refused_conversion(gw: GatewayProcess, group: str) -> None:
    """A classic group of protocol type "connect" with one member; a KIP-848 member asks to join it."""
    (coordinator,) = find_coordinator_endpoints(gw.bootstrap, group, 3)
    protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="x", metadata=b"")]
    j = roundtrip(coordinator.address, JoinGroupRequest[3](
        group_id=group, session_timeout_ms=120_000, rebalance_timeout_ms=120_000, member_id="",
        protocol_type="connect", protocols=protocols,
    ), JoinGroupResponse, 3)
    assert j.error_code == 0, j
    hb = roundtrip(coordinator.address, ConsumerGroupHeartbeatRequest[1](
        group_id=group, member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout_ms=30_000,
        subscribed_topic_names=["t"], server_assignor=None, topic_partitions=[],
    ), ConsumerGroupHeartbeatResponse, 1)
    assert hb.error_code == GROUP_ID_NOT_FOUND, hb


def test_every_family_against_a_running_gateway(
    kafka: ProcessBackend, metrics_gateway: GatewayProcess, make_topic: Callable[..., str],
    names: Callable[[str], str],
) -> None:
    gw = metrics_gateway
    topic = make_topic(PARTITIONS)
    produce_confluent(kafka.bootstrap, topic, values("v", RECORDS))
    ends = _end_offsets(kafka, topic)
    assert sum(ends.values()) == RECORDS and all(e > COMMITTED for e in ends.values()), ends
    kip848, classic, converting, connect = names("kip848"), names("classic"), names("converting"), names("connect")

    first = _scrape(gw)
    # Before any group: every family is declared, the per-group ones without samples.
    for family in ("kafka_consumergroup_members", "kafka_consumergroup_lag", "kafka_consumergroup_current_offset"):
        assert first[family].type == "gauge" and first[family].samples == []
    assert first["groupgate_group_coordinator_group_count"].value(protocol="consumer") == 0

    a = _consumer(gw, kip848, "consumer", "a")
    b = _consumer(gw, kip848, "consumer", "b")
    t = _consumer(gw, kip848, "classic", "translated")
    c = _consumer(gw, classic, "classic", "c")
    up = _consumer(gw, converting, "classic", "up-classic")
    up2: Any = None
    consumers = [a, b, t, c, up]
    try:
        a.subscribe([topic])
        c.subscribe([topic])
        up.subscribe([topic])
        _poll_until([a, c, up], lambda: len(a.assignment()) == PARTITIONS and len(c.assignment()) == PARTITIONS
                    and len(up.assignment()) == PARTITIONS)
        _commit(a, topic)
        _commit(c, topic)
        b.subscribe([topic])
        t.subscribe([topic])
        # A classic group converted online: a KIP-848 member joins it, then leaves (back to classic).
        up2 = _consumer(gw, converting, "consumer", "up-consumer")
        consumers.append(up2)
        up2.subscribe([topic])
        _poll_until(consumers, lambda: bool(up2.assignment()) and bool(b.assignment()) and bool(t.assignment()))
        m = _wait(gw, "the conversion", lambda m: m["groupgate_group_conversions_total"].value(
            from_type="classic", to_type="consumer") == 1)
        up2.close()
        consumers.remove(up2)
        m = _wait(gw, "the conversion back", lambda m: m["groupgate_group_conversions_total"].value(
            from_type="consumer", to_type="classic") == 1)
        _refused_conversion(gw, connect)

        def settled(m: dict[str, _exposition.Family]) -> bool:
            members = _samples(m["kafka_consumergroup_members"])
            lag = _samples(m["kafka_consumergroup_lag"], consumergroup=kip848)
            return members.get((kip848,)) == 3 and len(lag) == PARTITIONS and members.get((classic,)) == 1

        for cons in consumers:
            cons.poll(0.1)
        m = _wait(gw, "members and lag of every group", settled)

        # kafka_exporter's families: the gateway's member counts (3 in the KIP-848 group: two consumer-
        # protocol members and a translated classic one), lag = log end - committed, from the broker.
        members = _samples(m["kafka_consumergroup_members"])
        assert members[(kip848,)] == 3 and members[(classic,)] == 1 and members[(connect,)] == 1
        assert members[(converting,)] == 1
        for g in (kip848, classic):
            current = _samples(m["kafka_consumergroup_current_offset"], consumergroup=g)
            lag = _samples(m["kafka_consumergroup_lag"], consumergroup=g)
            assert current == {(str(p), topic): COMMITTED for p in range(PARTITIONS)}, current
            assert lag == {(str(p), topic): ends[p] - COMMITTED for p in range(PARTITIONS)}, lag
            assert m["kafka_consumergroup_lag_sum"].value(consumergroup=g, topic=topic) == RECORDS - PARTITIONS * COMMITTED
            assert m["kafka_consumergroup_current_offset_sum"].value(consumergroup=g, topic=topic) == PARTITIONS * COMMITTED
        assert m["groupgate_lag_snapshot_timestamp_seconds"].value() > time.time() - 60
        assert m["groupgate_lag_refresh_failures_total"].value() == 0

        # Members by protocol (the migration view) and groups by type.
        gm = m["groupgate_group_members"]
        assert gm.value(group_type="consumer", protocol="consumer") == 2
        assert gm.value(group_type="consumer", protocol="classic") == 1
        assert gm.value(group_type="classic", protocol="classic") == 3  # classic, converting (back), connect
        groups = m["groupgate_groups"]
        assert sum(v for (_, ls, v) in groups.samples if ls["type"] == "consumer") == 1
        assert sum(v for (_, ls, v) in groups.samples if ls["type"] == "classic") == 3
        assert m["groupgate_group_conversions_refused_total"].value(
            from_type="classic", to_type="consumer", reason="protocol_type") == 1
        assert m["groupgate_group_conversions_refused_total"].value(
            from_type="classic", to_type="consumer", reason="policy") == 0

        # Kafka's group-coordinator metrics under their Prometheus names.
        k = "groupgate_group_coordinator_"
        assert m[k + "group_count"].value(protocol="consumer") == 1
        assert m[k + "group_count"].value(protocol="classic") == 3
        consumer_states = _samples(m[k + "consumer_group_count"])
        assert set(consumer_states) == {("empty",), ("assigning",), ("reconciling",), ("stable",), ("dead",)}
        assert sum(consumer_states.values()) == 1
        classic_states = _samples(m[k + "classic_group_count"])
        assert sum(classic_states.values()) == 3 and ("preparing_rebalance",) in classic_states
        assert m[k + "consumer_group_rebalances_total"].value() >= 2  # at least one epoch per joining member
        assert m[k + "classic_group_completed_rebalances_total"].value() >= 2
        for hist in ("event_processing_time_seconds", "batch_flush_time_seconds"):
            count = [v for n, _, v in m[k + hist].samples if n.endswith("_count")]
            assert count and count[0] > 0, hist
        assert m[k + "event_queue_size"].value() >= 0

        # Per instance: one instance, no instances group, every shard its own.
        assert m["groupgate_state_shards_owned"].value() == m["groupgate_state_shards"].value() > 0
        assert m["groupgate_instances_group_generation"].value() == 0
    finally:
        for cons in consumers:
            cons.close()

    # Members leave: the count follows at once; the committed offsets (and so the lag) stay.
    after = _wait(gw, "the members gone", lambda m: _samples(m["kafka_consumergroup_members"]).get((kip848,)) == 0)
    assert after["kafka_consumergroup_lag"].value(consumergroup=kip848, topic=topic, partition="0") == ends[0] - COMMITTED


def test_per_instance_families_of_two_instances_sharing_the_shards(kafka: ProcessBackend, tmp_path: Path) -> None:
    """Two instances split the shards: each reports the shards it owns and the same instances group
    generation; a group's members are reported by the instance that serves it only; when one instance
    leaves, the other's generation moves on and it owns every shard."""
    from compat_tests.test_fleet_membership import SHARDS, Fleet, _group_on, _split
    from compat_tests.test_fleet_membership import _wait as fleet_wait

    fleet = Fleet(kafka, tmp_path)
    try:
        a, b = _split(fleet)
        topic = create_topic(kafka.bootstrap, unique("metrics-fleet"), PARTITIONS)
        group = _group_on(fleet.owned(a), "metrics-fleet")
        (coordinator,) = find_coordinator_endpoints(a.bootstrap, group, 3)
        hb = roundtrip(coordinator.address, ConsumerGroupHeartbeatRequest[1](
            group_id=group, member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout_ms=30_000,
            subscribed_topic_names=[topic], server_assignor=None, topic_partitions=[],
        ), ConsumerGroupHeartbeatResponse, 1)
        assert hb.error_code == 0, hb

        ma, mb = _scrape(a), _scrape(b)
        generation = ma["groupgate_instances_group_generation"].value()
        assert generation >= 1 and mb["groupgate_instances_group_generation"].value() == generation
        assert ma["groupgate_state_shards_owned"].value() == len(fleet.owned(a)) == SHARDS // 2
        assert mb["groupgate_state_shards_owned"].value() == len(fleet.owned(b)) == SHARDS // 2
        assert _samples(ma["kafka_consumergroup_members"]).get((group,)) == 1
        assert (group,) not in _samples(mb["kafka_consumergroup_members"])

        b.stop()
        fleet_wait("the remaining instance serves every shard", lambda: len(fleet.owned(a)) == SHARDS, 60, fleet)
        after = _wait(a, "a new generation", lambda m: m["groupgate_instances_group_generation"].value() > generation)
        assert after["groupgate_state_shards_owned"].value() == SHARDS
    finally:
        fleet.stop()
