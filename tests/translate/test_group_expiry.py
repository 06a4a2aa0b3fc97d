"""GroupService.expire_empty_groups: classic and consumer groups (converted ones too) Empty for
offsets.retention.minutes are deleted with tombstones; the time they became Empty survives replay."""

from __future__ import annotations

from typing import Any

import pytest
from migration_harness import TOPIC, Driver, identity
from test_conversion_downgrade import mixed_group, settle

from coordinator.messages import ConsumerGroupHeartbeatRequest
from coordinator.records import Record
from translate.classic_group import ClassicGroupState
from translate.group_config import GroupServiceConfig, encode_any_record
from translate.group_messages import DescribeGroupsRequest, OffsetCommitCheck
from translate.group_records import GroupMetadataRecord
from translate.group_service import GroupService
from translate.rebalance_events import RebalanceEventDeriver

RETENTION = 600_000


def driver(**kw: Any) -> Driver:
    return Driver(offsets_retention_ms=RETENTION, **kw)


def replayed(d: Driver) -> GroupService:
    """A restarted service: every record through its bytes, as the state log holds them."""
    fresh = GroupService(GroupServiceConfig(offsets_retention_ms=RETENTION))
    for r in d.records:
        fresh.replay_bytes(*encode_any_record(r))
    return fresh


def expire(d: Driver, at: int) -> list[Any]:
    d.now = at
    return d.absorb(d.service.expire_empty_groups(at)).records


def last_values(d: Driver, group: str = "g") -> dict[tuple[Any, ...], Any]:
    """The last value of every key the group wrote: what log compaction keeps."""
    out: dict[tuple[Any, ...], Any] = {}
    for r in d.records:
        if isinstance(r, GroupMetadataRecord) and r.group_id == group:
            out[("classic",)] = r.value
        elif isinstance(r, Record) and r.group_id == group:
            out[(int(r.type), r.sub_key)] = r.value
    return out


def emptied_classic_group(d: Driver) -> int:
    ids, _ = d.classic_fleet()
    d.advance(5)
    d.leave(*(identity(m) for m in ids))
    assert d.classic().is_in(ClassicGroupState.EMPTY)
    return d.now


def test_an_empty_classic_group_expires_after_the_retention_with_a_tombstone() -> None:
    d = driver()
    emptied = emptied_classic_group(d)
    record = d.records[-1]
    assert isinstance(record, GroupMetadataRecord) and record.value is not None
    assert record.value.current_state_timestamp == emptied and not record.value.members
    assert expire(d, emptied + RETENTION - 1) == []
    assert d.service.classic_groups.group("g") is not None
    tombstones = expire(d, emptied + RETENTION)
    assert tombstones == [GroupMetadataRecord("g", None)]
    assert d.service.classic_groups.group("g") is None
    assert set(last_values(d).values()) == {None}
    key, _ = d.send(DescribeGroupsRequest(["g"]))
    assert d.responses[key].groups[0].group_state == "Dead"


def test_a_classic_group_rejoined_before_the_deadline_is_kept() -> None:
    d = driver()
    emptied = emptied_classic_group(d)
    d.now = emptied + RETENTION - 1
    d.classic_fleet(clients=("x",))
    assert expire(d, emptied + 10 * RETENTION) == []
    assert d.classic().is_in(ClassicGroupState.STABLE)


def test_replay_restores_when_a_classic_group_became_empty() -> None:
    d = driver()
    emptied = emptied_classic_group(d)
    fresh = replayed(d)
    group = fresh.classic_groups.group("g")
    assert group is not None and group.state_timestamp_ms == emptied
    assert fresh.expire_empty_groups(emptied + RETENTION - 1).records == []
    # Already empty long enough when loaded: gone at the first check.
    assert fresh.expire_empty_groups(emptied + 5 * RETENTION).records == [GroupMetadataRecord("g", None)]
    assert fresh.classic_groups.group("g") is None


def test_a_classic_record_without_a_timestamp_is_stamped_at_the_first_check() -> None:
    d = driver()
    emptied_classic_group(d)
    old = d.records[-1]
    assert isinstance(old, GroupMetadataRecord) and old.value is not None
    old.value.current_state_timestamp = -1
    old.value_version = 1  # v0/v1 values have no CurrentStateTimestamp
    fresh = replayed(d)
    stamp = fresh.expire_empty_groups(50_000_000).records
    assert len(stamp) == 1 and isinstance(stamp[0], GroupMetadataRecord)
    assert stamp[0].value is not None and stamp[0].value.current_state_timestamp == 50_000_000
    assert fresh.expire_empty_groups(50_000_000 + RETENTION - 1).records == []
    assert fresh.expire_empty_groups(50_000_000 + RETENTION).records == [GroupMetadataRecord("g", None)]


def test_simple_groups_and_groups_never_joined_expire_too() -> None:
    d = driver()
    d.send(OffsetCommitCheck("simple", "", -1, api_version=8))  # a commit outside any generation
    first = d.join_response(d.join(client="a", group="half"))  # MEMBER_ID_REQUIRED, then nothing
    created = d.now
    # The member id handed out keeps the group while that member may still join.
    assert expire(d, created + RETENTION) == [GroupMetadataRecord("simple", None)]
    assert d.service.classic_groups.group("half") is not None and first.member_id
    d.advance(10 * RETENTION)  # its join timeout passes
    assert expire(d, d.now) == [GroupMetadataRecord("half", None)]
    assert not d.service.classic_groups.groups


def test_an_empty_consumer_group_expires_after_the_retention() -> None:
    d = driver()
    assert d.consumer("m1").error_code == 0
    d.now += 1_000
    emptied = d.now
    d.consumer("m1", epoch=-1, full=False)
    assert d.cgroup().empty_since_ms == emptied
    assert expire(d, emptied + RETENTION - 1) == []
    records = expire(d, emptied + RETENTION)
    assert records and all(isinstance(r, Record) and r.value is None for r in records)
    assert d.service.coordinator.group("g") is None
    assert set(last_values(d).values()) == {None}
    fresh = replayed(d)
    assert fresh.coordinator.group("g") is None and fresh.classic_groups.group("g") is None


def test_a_consumer_group_rejoined_before_the_deadline_is_kept_and_replay_keeps_its_empty_since() -> None:
    d = driver()
    d.consumer("m1")
    emptied = d.now
    d.consumer("m1", epoch=-1, full=False)
    fresh = replayed(d)
    group = fresh.coordinator.group("g")
    assert group is not None and group.empty_since_ms == emptied
    d.now = emptied + RETENTION - 1
    assert d.consumer("m2").error_code == 0
    assert expire(d, emptied + 3 * RETENTION) == []
    assert list(d.cgroup().members) == ["m2"]


def test_an_upgraded_group_that_empties_expires_as_a_consumer_group() -> None:
    d = driver()
    ids, m1 = mixed_group(d)  # classic group converted by a consumer-protocol member
    d.leave(*(identity(m) for m in ids))
    settle(d, [])
    d.now += 1_000
    emptied = d.now
    d.consumer(m1, epoch=d.cgroup().members[m1].member_epoch, full=False)
    d.consumer(m1, epoch=-1, full=False)  # the only member left: no downgrade
    assert not d.cgroup().members and d.cgroup().empty_since_ms == emptied
    assert expire(d, emptied + RETENTION - 1) == []
    expire(d, emptied + RETENTION)
    assert d.service.coordinator.group("g") is None and d.service.classic_groups.group("g") is None
    assert set(last_values(d).values()) == {None}


def test_a_downgraded_group_that_empties_expires_as_a_classic_group() -> None:
    d = driver()
    ids, m1 = mixed_group(d)
    d.consumer(m1, epoch=-1, full=False)  # the last consumer-protocol member leaves: back to classic
    assert d.service.coordinator.group("g") is None
    d.now += 1_000
    d.leave(*(identity(m) for m in ids))
    emptied = d.now
    assert d.classic().is_in(ClassicGroupState.EMPTY)
    assert expire(d, emptied + RETENTION - 1) == []
    assert expire(d, emptied + RETENTION) == [GroupMetadataRecord("g", None)]
    assert set(last_values(d).values()) == {None}


def test_translate_mode_groups_of_classic_members_expire_as_consumer_groups() -> None:
    d = driver(mode="translate")
    first = d.join_response(d.join(client="a"))
    joined = d.join_response(d.join(member_id=first.member_id, client="a"))
    assert joined.error_code == 0
    d.now += 1_000
    emptied = d.now
    d.leave(identity(first.member_id))
    assert d.cgroup().empty_since_ms == emptied
    assert expire(d, emptied + RETENTION - 1) == []
    expire(d, emptied + RETENTION)
    assert d.service.coordinator.group("g") is None


def test_only_the_groups_past_their_deadline_go() -> None:
    d = driver()
    d.consumer("live", group="busy")
    d.consumer("m1", group="early")
    d.consumer("m1", epoch=-1, full=False, group="early")
    d.now += RETENTION // 2
    d.consumer("m1", group="late")
    d.consumer("m1", epoch=-1, full=False, group="late")
    expire(d, d.now + RETENTION // 2)
    assert set(d.service.coordinator.state.groups) == {"busy", "late"}


def test_the_event_deriver_forgets_expired_groups_without_writing_events() -> None:
    d = driver()
    events: list[dict[str, Any]] = []
    deriver = RebalanceEventDeriver(d.service, events.append, run="unit")
    join = ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="m1", member_epoch=0, rebalance_timeout_ms=30_000,
        subscribed_topic_names=[TOPIC], topic_partitions=[],
    )
    d.absorb(deriver.handle(join, next(d.keys), d.now))
    d.consumer("m1", epoch=-1, full=False)
    assert "g" in deriver.groups
    written = len(events)
    result = deriver.expire_empty_groups(d.now + RETENTION)
    assert result.records and "g" not in deriver.groups and len(events) == written


@pytest.mark.parametrize("retention", [0, -5])
def test_the_retention_must_be_positive(retention: int) -> None:
    with pytest.raises(ValueError):
        GroupServiceConfig(offsets_retention_ms=retention)
