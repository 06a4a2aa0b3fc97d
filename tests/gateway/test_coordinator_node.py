"""The node the gateway names as its groups' coordinator (FindCoordinator) is one the cluster's metadata
lists: when that broker leaves the metadata (SIGKILLed, fenced by the controller) while its listener is kept
open for broker_absent_grace_s, the coordinator moves to the next listed node, as a Kafka coordinator
moves with its partition's leadership. librdkafka drops every node its last Metadata did not list, the
coordinator included, and a new member told that node again and again was never admitted
(compat_tests/test_cluster_state_store.py, the state partition's leader killed)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from kafka.protocol.admin import ListGroupsRequest
from kafka.protocol.consumer.group import JoinGroupRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from gateway.config.coordinator import CoordinatorSettings
from gateway.groups.layer import GroupLayer
from gateway.net.rewrite import Broker
from gateway.wire.api_keys import ApiKey

from ._groups_support import StubConnection, StubGateway, call, layer_on

PORTS = {1: 19093, 2: 19094, 3: 19095}


class ThreeListeners(StubGateway):
    """A gateway in front of a 3-broker cluster: one listener per broker."""

    def __init__(self) -> None:
        super().__init__()
        self.broker_ports = dict(PORTS)

    def addr_of(self, node_id: int) -> tuple[str, int] | None:
        return ("127.0.0.1", PORTS[node_id]) if node_id in PORTS else None


def upstream(*nodes: int) -> list[Broker]:
    return [Broker(n, f"broker-{n}", 9092, None) for n in nodes]


@asynccontextmanager
async def running_layer() -> AsyncIterator[tuple[ThreeListeners, GroupLayer]]:
    gw = ThreeListeners()
    settings = CoordinatorSettings.model_validate({"initial_rebalance_delay_ms": 0, "upstream_check_s": 0})
    layer = layer_on(gw, settings)
    await layer.start()
    try:
        yield gw, layer
    finally:
        await layer.stop()


async def coordinator(layer: GroupLayer, group: str) -> tuple[int, int, int]:
    r = await call(layer, ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest[3](key=group, key_type=0))
    return r.error_code, r.node_id, r.port


async def test_the_coordinator_moves_off_a_broker_that_left_the_metadata_and_groups_are_listed_there() -> None:
    async with running_layer() as (gw, layer):
        gw.directory.observe(upstream(1, 2, 3))
        assert await coordinator(layer, "g") == (0, 1, PORTS[1])

        # Broker 1 dies: the cluster's metadata no longer lists it, while the gateway keeps its listener.
        gw.directory.observe(upstream(2, 3))
        assert 1 in gw.broker_ports and 1 in gw.directory.absent_since
        assert await coordinator(layer, "g") == (0, 2, PORTS[2])

        # ListGroups follows the coordinator: admin clients ask the listed nodes only.
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
        joined: Any = await call(layer, ApiKey.JOIN_GROUP, 3, JoinGroupRequest[3](
            group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            protocol_type="consumer", protocols=protocols,
        ))  # fmt: skip
        assert joined.error_code == 0
        listing = ListGroupsRequest[5](states_filter=[], types_filter=[])
        listed = await call(layer, ApiKey.LIST_GROUPS, 5, listing, StubConnection(2))
        assert [g.group_id for g in listed.groups] == ["g"]
        assert (await call(layer, ApiKey.LIST_GROUPS, 5, listing, StubConnection(1))).groups == []

        # Back in the metadata: the lowest listed node again.
        gw.directory.observe(upstream(1, 2, 3))
        assert await coordinator(layer, "g") == (0, 1, PORTS[1])


async def test_with_no_broker_listed_yet_the_lowest_listener_is_named() -> None:
    async with running_layer() as (_, layer):
        assert await coordinator(layer, "g") == (0, 1, PORTS[1])
