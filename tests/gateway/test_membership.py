"""The instances group's callbacks (gateway/fleet/membership.py) on a real runtime, without a cluster: what an
assignment hands over and takes over, the rejoin after a handover, a lost membership, and the coordinator
node every instance names for a shard."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition
from kafka.protocol.metadata import FindCoordinatorRequest

from gateway.config.coordinator import CoordinatorSettings
from gateway.fleet.assignor import FleetAssignment, MemberClaim
from gateway.fleet.membership import COORDINATOR_NODE_BASE, FleetMembership, ShardAssignor, _Listener
from gateway.groups.runtime import CoordinatorRuntime
from gateway.groups.shard_state import ShardState
from gateway.loop_thread import LoopThread
from gateway.wire.api_keys import ApiKey

from ._groups_support import call
from .test_groups_layer import started
from .test_runtime import groups_in_distinct_shards
from .test_runtime_ownership import _runtime, _SharedStore

TOPIC = "__state"


class _Coordinator:
    def __init__(self) -> None:
        self.member_id = "member-1"
        self.rejoins = 0

    def request_rejoin(self) -> None:
        self.rejoins += 1


class _Consumer:
    def __init__(self) -> None:
        self._coordinator = _Coordinator()
        self.paused: list[TopicPartition] = []

    def pause(self, *tps: TopicPartition) -> None:
        self.paused.extend(tps)


def _fleet(rt: CoordinatorRuntime, endpoint: str = "10.0.0.1:9092") -> tuple[FleetMembership, _Consumer]:
    settings = CoordinatorSettings(instances_group="gg-instances", state_store="kafka")
    store: Any = SimpleNamespace(topic=TOPIC, client_id="gg", clients=LoopThread("gg-clients"))
    fleet = FleetMembership(rt, settings, store, endpoint)
    consumer = _Consumer()
    fleet._consumer = consumer  # type: ignore[assignment]
    return fleet, consumer


def _table(owners: list[str | None], epoch: int) -> FleetAssignment:
    endpoints = {"member-1": "10.0.0.1:9092", "member-2": "10.0.0.2:9092"}
    return FleetAssignment((), epoch, endpoints, tuple(owners), {"member-1": 0, "member-2": 1})


async def _settle(fleet: FleetMembership) -> None:
    while fleet._loading:
        await asyncio.sleep(0.01)


async def test_an_assignment_takes_over_new_shards_and_hands_over_missing_ones_then_rejoins() -> None:
    shared = _SharedStore(4)
    rt = await _runtime(shared.instance())
    fleet, consumer = _fleet(rt)
    try:
        fleet.table = _table(["member-1"] * 4, 1)
        await fleet.assigned([TopicPartition(TOPIC, n) for n in range(4)])
        await _settle(fleet)
        assert rt.held() == [0, 1, 2, 3] and all(s.state is ShardState.ACTIVE for s in rt.shards)
        assert len(consumer.paused) == 4  # never fetched
        assert consumer._coordinator.rejoins == 0
        # The metadata of the next join claims what is held, with the epoch it was got in.
        meta = ShardAssignor(fleet).metadata([TOPIC])
        assert MemberClaim.decode(meta.user_data) == MemberClaim("10.0.0.1:9092", (0, 1, 2, 3), 1, 0)

        fleet.table = _table(["member-1", "member-1", None, None], 2)
        await fleet.assigned([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
        # Handed over before the callback returned, then a rejoin so that the next round places them.
        assert rt.held() == [0, 1] and shared.logs[2].closed and shared.logs[3].closed
        assert consumer._coordinator.rejoins == 1
        assert fleet.epoch == 2
    finally:
        await rt.stop()


async def test_a_rebalance_keeps_the_shards_served_unless_the_membership_was_lost() -> None:
    shared = _SharedStore(2)
    rt = await _runtime(shared.instance())
    fleet, consumer = _fleet(rt)
    try:
        fleet.table = _table(["member-1", "member-1"], 1)
        await fleet.assigned([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
        await _settle(fleet)
        await fleet.before_join()  # an ordinary rebalance: eager revocation is not acted on
        assert rt.held() == [0, 1] and all(s.state is ShardState.ACTIVE for s in rt.shards)
        consumer._coordinator.member_id = ""  # expired by the cluster: the others may take the shards
        await fleet.before_join()
        assert rt.held() == [] and fleet.epoch == 0
    finally:
        await rt.stop()


class _ThreadRecordingConsumer(_Consumer):
    """Records the thread each call into the consumer is made on."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []
        outer = self

        class _Recording(_Coordinator):
            def request_rejoin(self) -> None:
                outer.threads.append(threading.current_thread().name)
                super().request_rejoin()

        self._coordinator = _Recording()

    def pause(self, *tps: TopicPartition) -> None:
        self.threads.append(threading.current_thread().name)
        super().pause(*tps)


async def test_callbacks_on_the_consumers_loop_use_the_runtime_on_the_gateways_and_call_the_consumer_on_its_own() -> None:
    """The consumer runs on the store's client loop: the rebalance callbacks it calls there hand shards
    over and take them over on the gateway's loop (the runtime's), and what that code asks of the consumer
    (pause, rejoin) is done back on the consumer's loop."""
    shared = _SharedStore(2)
    rt = await _runtime(shared.instance())
    fleet, _ = _fleet(rt)
    consumer = _ThreadRecordingConsumer()
    fleet._consumer = consumer  # type: ignore[assignment]
    clients = fleet._clients
    fleet._home = asyncio.get_running_loop()
    listener = _Listener(fleet)
    try:
        fleet.table = _table(["member-1", "member-1"], 1)
        await clients.run(listener.on_partitions_assigned({TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)}))
        await _settle(fleet)
        assert rt.held() == [0, 1] and all(s.state is ShardState.ACTIVE for s in rt.shards)
        fleet.table = _table(["member-1", None], 2)
        await clients.run(listener.on_partitions_revoked(set()))
        await clients.run(listener.on_partitions_assigned({TopicPartition(TOPIC, 0)}))
        assert rt.held() == [0] and shared.logs[1].closed
        await clients.run(asyncio.sleep(0))  # a turn of the consumer's loop: what was handed to it ran
        assert consumer.threads == ["gg-clients"] * 3 and consumer._coordinator.rejoins == 1
    finally:
        await asyncio.to_thread(clients.stop)
        await rt.stop()


async def test_every_instance_names_the_same_coordinator_node_for_a_shard() -> None:
    shared = _SharedStore(3)
    rt1, rt2 = await _runtime(shared.instance()), await _runtime(shared.instance())
    try:
        one, _ = _fleet(rt1, "10.0.0.1:9092")
        two, _ = _fleet(rt2, "10.0.0.2:9092")
        table = _table(["member-2", "member-1", None], 3)
        one.table = two.table = table
        assert one.coordinator(0) == two.coordinator(0) == (COORDINATOR_NODE_BASE + 1, "10.0.0.2", 9092)
        assert one.coordinator(1) == two.coordinator(1) == (COORDINATOR_NODE_BASE, "10.0.0.1", 9092)
        assert one.coordinator(2) is None  # in transit
    finally:
        await rt1.stop()
        await rt2.stop()


async def test_find_coordinator_in_a_fleet_answers_the_owners_node_or_retriable_while_in_transit() -> None:
    layer = await started(**{"state.topic.num.partitions": 4})
    try:
        elsewhere, in_transit = groups_in_distinct_shards(4, 2)
        owners = {layer.runtime.shard_of(elsewhere): (COORDINATOR_NODE_BASE + 1, "10.0.0.2", 9092)}
        layer.handlers.fleet_coordinator = owners.get
        r = await call(layer, ApiKey.FIND_COORDINATOR, 4, FindCoordinatorRequest[4](key_type=0, coordinator_keys=[elsewhere, in_transit]))
        assert [(c.key, c.node_id, c.host, c.port, c.error_code) for c in r.coordinators] == [
            (elsewhere, COORDINATOR_NODE_BASE + 1, "10.0.0.2", 9092, 0),
            (in_transit, -1, "", -1, 15),  # COORDINATOR_NOT_AVAILABLE: retried
        ]
    finally:
        await layer.stop()
