"""The runtime serving only the shards its instance owns in a fleet (gateway/groups/runtime.py acquire/release):
NOT_COORDINATOR for the others, served only once loaded, drained and flushed before it is released."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator

import pytest
from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer.group import HeartbeatRequest

from coordinator.messages import ConsumerGroupHeartbeatRequest
from gateway.groups.runtime import NOT_OWNED, CoordinatorRuntime, ShardUnloaded
from gateway.groups.shard_state import ShardState
from gateway.state.log import Record
from gateway.wire.api_keys import ApiKey
from translate.group_parts import consumer_group
from translate.group_service import GroupService

from ._groups_support import call
from .test_groups_layer import started
from .test_runtime import NOT_COORDINATOR, groups_in_distinct_shards, member


class _SlowLog:
    """A shard log shared by the instances of a test (the topic partition), whose syncs wait for
    ``gate`` so that a request can be caught in flight."""

    def __init__(self, shard: int, records: list[Record]) -> None:
        self.shard = shard
        self.records = records
        self.pending: list[Record] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.closed = False

    def replay(self) -> Iterator[Record]:
        return iter(list(self.records))

    def append(self, records: Iterable[Record]) -> None:
        assert not self.closed, "appended after the shard was released"
        self.pending.extend(records)

    def unsynced(self) -> bool:
        return True  # every sync runs, as a log that cannot tell

    async def sync(self) -> None:
        await self.gate.wait()
        self.records.extend(self.pending)
        self.pending.clear()

    def close(self) -> None:
        self.closed = True
        self.pending.clear()  # never acknowledged: dropped, as the cluster store drops them


class _SharedStore:
    """The state topic as several instances see it: one record list per shard."""

    def __init__(self, shards: int) -> None:
        self.shards = shards
        self.records: dict[int, list[Record]] = {n: [] for n in range(shards)}
        self.opened: list[int] = []
        self.logs: dict[int, _SlowLog] = {}

    def instance(self) -> _InstanceStore:
        return _InstanceStore(self)


class _InstanceStore:
    def __init__(self, shared: _SharedStore) -> None:
        self.shared = shared
        self.shards = shared.shards

    async def open(self) -> None:
        pass

    async def open_shard(self, shard: int) -> _SlowLog:
        self.shared.opened.append(shard)
        log = _SlowLog(shard, self.shared.records[shard])
        self.shared.logs[shard] = log
        return log

    async def close(self) -> None:
        pass


def _join(group: str, member_id: str) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=0, rebalance_timeout_ms=30000,
        subscribed_topic_names=["t"], topic_partitions=[],
    )


async def _runtime(store: _InstanceStore) -> CoordinatorRuntime:
    rt = CoordinatorRuntime(store.shards, new_service=GroupService, store=store)  # type: ignore[arg-type]
    rt.serve_only_owned()
    await rt.load()
    rt.start()
    return rt


async def test_an_instance_serves_only_the_shards_it_acquired_and_only_after_loading_them() -> None:
    shared = _SharedStore(3)
    rt = await _runtime(shared.instance())
    try:
        mine, other = groups_in_distinct_shards(3, 2)
        assert shared.opened == [] and rt.held() == []  # nothing opened (nor fenced) before assignment
        with pytest.raises(ShardUnloaded, match="another instance"):
            await rt.call(mine, _join(mine, "m1"))
        assert rt.unloaded is None  # shards of other instances do not make this one unready
        await rt.acquire([rt.shard_of(mine)])
        assert shared.opened == [rt.shard_of(mine)] and rt.held() == [rt.shard_of(mine)]
        assert (await rt.call(mine, _join(mine, "m1"))).error_code == 0
        with pytest.raises(ShardUnloaded):
            await rt.call(other, _join(other, "m2"))
        assert rt.group_ids() == [mine]
    finally:
        await rt.stop()


async def test_a_shard_released_drains_its_in_flight_call_and_flushes_before_the_next_owner_loads_it() -> None:
    shared = _SharedStore(2)
    a, b = await _runtime(shared.instance()), await _runtime(shared.instance())
    try:
        (group,) = groups_in_distinct_shards(2, 1)
        n = a.shard_of(group)
        await a.acquire([n])
        first = await a.call(group, _join(group, "m1"))
        assert first.error_code == 0
        log = shared.logs[n]
        log.gate.clear()  # the next write is in flight until the gate opens
        in_flight = asyncio.ensure_future(a.call(group, _join(group, "m2")))
        await asyncio.sleep(0.01)
        assert not in_flight.done()
        release = asyncio.ensure_future(a.release([n], timeout_s=5.0))
        await asyncio.sleep(0.05)
        # Draining: the release waits for the write; a request arriving now is turned away.
        assert not release.done()
        with pytest.raises(ShardUnloaded):
            await a.call(group, _join(group, "m3"))
        log.gate.set()
        await release
        reply = await in_flight
        assert reply.error_code == 0  # answered: its records were flushed before the handover
        assert log.closed and a.held() == [] and a.shard_for(group).state is ShardState.UNOWNED
        assert a.shard_for(group).reason == NOT_OWNED
        assert a.shard_for(group).service.group_count() == 0  # the memory is gone
        with pytest.raises(ShardUnloaded):
            await a.call(group, _join(group, "m4"))
        # The next owner reads both members, with their epochs.
        await b.acquire([n])
        cg = consumer_group(b.shard_for(group).service, group)
        assert cg is not None
        members = sorted(cg.members)
        assert members == ["m1", "m2"]
        again = await b.call(group, ConsumerGroupHeartbeatRequest(group_id=group, member_id="m1", member_epoch=first.member_epoch))
        assert again.error_code == 0
    finally:
        await a.stop()
        await b.stop()


async def test_a_request_parked_at_release_is_answered_not_coordinator() -> None:
    layer = await started()
    try:
        (group,) = groups_in_distinct_shards(layer.runtime.shard_count, 1)
        member_id, generation = await member(layer, group)
        n = layer.runtime.shard_of(group)
        assert layer.runtime.shard_for(group).state is ShardState.ACTIVE
        await layer.runtime.release([n], timeout_s=1.0)
        h = await call(layer, ApiKey.HEARTBEAT, 2, HeartbeatRequest[2](group_id=group, generation_id=generation, member_id=member_id))
        assert h.error_code == NOT_COORDINATOR
        d = await call(layer, ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest[5](groups=[group]))
        assert d.groups[0].error_code == NOT_COORDINATOR
        # A listing is this instance's groups (none now), not an error: the others list theirs.
        ls = await call(layer, ApiKey.LIST_GROUPS, 2, ListGroupsRequest[2]())
        assert ls.error_code == 0 and group not in [g[0] for g in ls.groups]
        await layer.runtime.acquire([n])
        h = await call(layer, ApiKey.HEARTBEAT, 2, HeartbeatRequest[2](group_id=group, generation_id=generation, member_id=member_id))
        # Memory state only in this test (no store): the group is gone, the member is told to rejoin.
        assert h.error_code != NOT_COORDINATOR
    finally:
        await layer.stop()
