"""The lag watch (gateway/groups/lag.py) on a scripted cluster, and how /metrics serves its snapshots.

The real cluster is exercised in compat_tests/test_metrics_families.py; here the cluster's answers are
scripted (one layer, mocked below it) to reach the failure paths: a group whose offsets cannot be read, a
partition whose leader does not answer, a refresh that reads nothing."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace as NS
from typing import Any

import pytest

from gateway.groups.lag import LagSnapshot, LagWatch, PartitionLag
from gateway.net.upstream import UpstreamError
from gateway.ops.health import Health
from gateway.wire.api_keys import ApiKey

from . import _exposition
from ._groups_support import StubGateway
from .test_groups_layer import started


class ScriptedCluster:
    """What LagWatch asks of an UpstreamClient, answered from ``committed`` and ``ends``."""

    def __init__(self) -> None:
        self.committed: dict[str, dict[tuple[str, int], int]] = {}
        self.ends: dict[tuple[str, int], int] = {}
        self.unreachable_groups: set[str] = set()
        self.down_leaders: set[int] = set()
        self.down = False

    def version(self, api_key: int, wanted: int) -> int:
        return wanted

    async def coordinator(self, group_id: str) -> tuple[str, int]:
        if self.down or group_id in self.unreachable_groups:
            raise UpstreamError("no coordinator")
        return ("c", 1)

    def forget_coordinator(self, group_id: str) -> None:
        pass

    async def send(self, addr: Any, api_key: int, version: int, msg: Any) -> Any:
        assert api_key == ApiKey.OFFSET_FETCH
        groups = []
        for g in msg.groups:
            by_topic: dict[str, list[Any]] = {}
            for (t, p), off in sorted(self.committed.get(g.group_id, {}).items()):
                by_topic.setdefault(t, []).append(NS(partition_index=p, committed_offset=off, error_code=0))
            groups.append(NS(group_id=g.group_id, error_code=0,
                             topics=[NS(name=t, partitions=ps) for t, ps in by_topic.items()]))
        return NS(groups=groups)

    async def send_any(self, api_key: int, version: int, msg: Any, node_id: int | None = None) -> Any:
        if self.down:
            raise UpstreamError("down")
        if api_key == ApiKey.METADATA:
            names = [t.name for t in msg.topics]
            return NS(topics=[
                NS(name=n, error_code=0, partitions=[
                    NS(partition_index=p, leader_id=p) for (t, p) in sorted(self.ends) if t == n
                ]) for n in names
            ])
        assert api_key == ApiKey.LIST_OFFSETS
        if node_id in self.down_leaders:
            raise UpstreamError("leader down")
        return NS(topics=[
            NS(name=t.name, partitions=[
                NS(partition_index=p.partition_index, error_code=0, offset=self.ends[t.name, p.partition_index])
                for p in t.partitions
            ]) for t in msg.topics
        ])


def _rows(snapshot: LagSnapshot, group: str) -> list[tuple[str, int, int, int]]:
    return [(r.topic, r.partition, r.committed, r.lag) for r in snapshot.groups[group]]


async def test_lag_is_log_end_minus_committed_and_what_cannot_be_read_keeps_its_last_values() -> None:
    cluster = ScriptedCluster()
    cluster.ends = {("t", 0): 100, ("t", 1): 50, ("t", 2): 7}
    cluster.committed = {"a": {("t", 0): 90, ("t", 1): 50}, "b": {("t", 2): 3}}
    groups = ["a", "b", "c"]
    watch = LagWatch(cluster, lambda: groups, 0.01)  # type: ignore[arg-type]
    s = await watch.refresh()
    assert _rows(s, "a") == [("t", 0, 90, 10), ("t", 1, 50, 0)]  # partition 2: no commit, left out
    assert _rows(s, "b") == [("t", 2, 3, 4)]
    assert _rows(s, "c") == []  # a group that committed nothing

    # b's coordinator cannot be reached, partition 0's leader does not answer: their last values stay.
    cluster.unreachable_groups = {"b"}
    cluster.down_leaders = {0}
    cluster.committed["a"] = {("t", 0): 95, ("t", 1): 50}
    cluster.ends[("t", 1)] = 60
    s = await watch.refresh()
    assert _rows(s, "a") == [("t", 0, 95, 5), ("t", 1, 50, 10)]  # the last end offset (100) of partition 0
    assert _rows(s, "b") == [("t", 2, 3, 4)]

    # Nothing readable: the refresh fails, the previous snapshot stays whole, the failure is counted.
    cluster.down = True
    with pytest.raises(UpstreamError):
        await watch.refresh()
    assert watch.snapshot is s
    task = asyncio.ensure_future(watch.run_forever())
    try:
        for _ in range(100):
            if watch.failures >= 2:
                break
            await asyncio.sleep(0.01)
        assert watch.failures >= 2 and watch.snapshot is s
    finally:
        task.cancel()


async def test_a_scrape_serves_the_lag_of_the_last_snapshot_written_out() -> None:
    layer = await started(lag_refresh_s=0)
    try:
        health = Health(StubGateway(), layer)  # type: ignore[arg-type]
        assert layer.lag.on_snapshot == health.on_lag_snapshot  # the watch hands each snapshot over
        m = _exposition.parse(health.render().decode())
        assert m["kafka_consumergroup_lag"].samples == [] and m["groupgate_lag_snapshot_timestamp_seconds"].value() == 0
        first = LagSnapshot({"g": (PartitionLag("t", 0, 5, 12), PartitionLag("t", 1, 1, 1))}, 1234.5, 0.25)
        layer.lag.snapshot = first  # refreshed, not written out yet: scrapes still serve the previous text
        assert _exposition.parse(health.render().decode())["kafka_consumergroup_lag"].samples == []
        await health.on_lag_snapshot(first)
        m = _exposition.parse(health.render().decode())
        assert m["kafka_consumergroup_lag"].value(consumergroup="g", topic="t", partition="0") == 7
        assert m["kafka_consumergroup_lag"].value(consumergroup="g", topic="t", partition="1") == 0
        assert m["kafka_consumergroup_current_offset"].value(consumergroup="g", partition="0") == 5
        assert m["kafka_consumergroup_lag_sum"].value(consumergroup="g", topic="t") == 7
        assert m["kafka_consumergroup_current_offset_sum"].value(consumergroup="g", topic="t") == 6
        assert m["groupgate_lag_snapshot_timestamp_seconds"].value() == 1234.5
        assert m["groupgate_lag_refresh_duration_seconds"].value() == 0.25
    finally:
        await layer.stop()
