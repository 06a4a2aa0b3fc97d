"""The group layer runs the empty-group expiry every offsets.retention.check.interval.ms and persists
its tombstones: an expired group is gone from memory and from the replayed state log."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import DescribeGroupsRequest
from kafka.protocol.consumer.group import JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest
from pydantic import ValidationError

from gateway.config.coordinator import CoordinatorSettings
from gateway.groups.layer import GroupLayer
from gateway.state.file_store import shard_dirs
from gateway.state.log import FileStateLog
from gateway.wire.api_keys import ApiKey
from translate.group_records import decode_key

from ._groups_support import StubGateway, call, layer_on

PROTOCOLS = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01meta")]


async def started(state_dir: Path, **kw: Any) -> GroupLayer:
    settings = CoordinatorSettings.model_validate(
        {
            "initial_rebalance_delay_ms": 0,
            "min_session_timeout_ms": 200,
            "upstream_check_s": 0,
            "state_dir": str(state_dir),
            "offsets.retention.minutes": 0.02,  # 1.2 s
            "offsets.retention.check.interval.ms": 50,
            **kw,
        }
    )
    layer = layer_on(StubGateway(), settings)
    await layer.start()
    return layer


async def join(layer: GroupLayer, group: str) -> str:
    """One member joins and syncs: a Stable group, persisted."""
    r = await call(layer, ApiKey.JOIN_GROUP, 3, JoinGroupRequest[3](
        group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
        protocol_type="consumer", protocols=PROTOCOLS,
    ))
    assert r.error_code == 0
    member = str(r.member_id)
    assignment = [SyncGroupRequest.SyncGroupRequestAssignment(member_id=member, assignment=b"a")]
    s = await call(layer, ApiKey.SYNC_GROUP, 1, SyncGroupRequest[1](
        group_id=group, generation_id=r.generation_id, member_id=member, assignments=assignment,
    ))
    assert s.error_code == 0
    return member


async def state(layer: GroupLayer, group: str) -> str:
    d = await call(layer, ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest[5](groups=[group]))
    return str(d.groups[0].group_state)


async def test_an_empty_group_is_deleted_after_the_retention_and_does_not_come_back(tmp_path: Path) -> None:
    layer = await started(tmp_path)
    try:
        gone = await join(layer, "gone")
        await join(layer, "live")
        r = await call(layer, ApiKey.LEAVE_GROUP, 1, LeaveGroupRequest[1](group_id="gone", member_id=gone))
        assert r.error_code == 0 and await state(layer, "gone") == "Empty"
        for _ in range(200):
            if await state(layer, "gone") == "Dead":
                break
            await asyncio.sleep(0.05)
        assert await state(layer, "gone") == "Dead"
        assert layer.counters["groups_expired"] == 1
        assert await state(layer, "live") == "Stable"
    finally:
        await layer.stop()
    kept = set()
    for shard in shard_dirs(tmp_path):  # every shard's log
        log = FileStateLog(shard)
        try:
            kept |= {decode_key(r.key) for r in log.replay()}
        finally:
            log.close()
    assert kept == {"live"}
    # A restart replays no trace of it.
    again = await started(tmp_path, **{"offsets.retention.minutes": 10_080})
    try:
        assert await state(again, "gone") == "Dead"
        assert set(again.runtime.group_ids()) == {"live"}
    finally:
        await again.stop()


def test_the_retention_settings_take_kafkas_names_and_defaults() -> None:
    service, _ = CoordinatorSettings().service_configs()
    assert service.offsets_retention_ms == 10080 * 60_000  # offsets.retention.minutes: 7 days
    assert CoordinatorSettings().offsets_retention_check_interval_ms == 600_000
    s = CoordinatorSettings.model_validate(
        {"offsets.retention.minutes": 0.1, "offsets.retention.check.interval.ms": 500}
    )
    assert s.service_configs()[0].offsets_retention_ms == 6_000
    assert s.offsets_retention_check_interval_ms == 500


def test_a_retention_or_interval_that_is_not_positive_is_refused() -> None:
    for bad in ({"offsets.retention.minutes": 0}, {"offsets.retention.check.interval.ms": 0}):
        with pytest.raises(ValidationError):
            CoordinatorSettings.model_validate(bad)
