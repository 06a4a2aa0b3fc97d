"""The instances group's member on a real broker keeps its membership while the gateway's event loop is
held: its consumer runs on the state store's client loop (gateway/loop_thread.py), so its heartbeats do
not wait for turns of a loop whose core is full."""

from __future__ import annotations

import asyncio
import time
import uuid

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from gateway.config.coordinator import CoordinatorSettings
from gateway.fleet.membership import FleetMembership
from gateway.ops.embedded_kafka import EmbeddedKafka
from gateway.state.topic import KafkaStateStore

from .test_runtime_ownership import _runtime, _SharedStore

SHARDS = 2
SESSION_MS = 6_000  # the broker's group.min.session.timeout.ms by default


async def _until(what: str, check: object, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not in {timeout_s} s: {what}"
        await asyncio.sleep(0.05)


async def test_the_instances_member_keeps_its_membership_while_the_gateways_loop_is_held(
    kafka_broker: EmbeddedKafka,
) -> None:
    suffix = uuid.uuid4().hex[:8]
    topic = f"state-{suffix}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, SHARDS, 1)])
    finally:
        await admin.close()
    store = KafkaStateStore(kafka_broker.bootstrap, shards=SHARDS, topic=topic, client_id=f"gg-{suffix}")
    settings = CoordinatorSettings(
        instances_group=f"instances-{suffix}", state_store="kafka", instances_session_timeout_ms=SESSION_MS,
        instances_heartbeat_interval_ms=500, instances_rebalance_timeout_ms=SESSION_MS,
    )
    rt = await _runtime(_SharedStore(SHARDS).instance())
    fleet = FleetMembership(rt, settings, store, "127.0.0.1:9092")
    try:
        await fleet.start()
        await _until("every shard held", lambda: rt.held() == list(range(SHARDS)) and not fleet._loading)
        generation, assignments = fleet.generation, fleet.assignments
        assert generation >= 1 and assignments >= 1

        # The gateway's loop (this test's) gets no turn for longer than the session timeout, as when every
        # turn serves thousands of connections.
        time.sleep(SESSION_MS / 1000 + 3)
        await asyncio.sleep(2)  # a member the cluster expired would be rejoining now

        assert (fleet.generation, fleet.assignments) == (generation, assignments)
        assert rt.held() == list(range(SHARDS)) and not fleet._lost()
    finally:
        await fleet.stop()
        await rt.stop()
        await store.close()
