"""Empty consumer groups expire offsets.retention.minutes after they became empty (coordinator rule)."""

from __future__ import annotations

from cg_helpers import Driver

from coordinator import records as rec
from coordinator.records import RecordType
from coordinator.records.codec import decode, encode
from coordinator.service import ConsumerGroupCoordinator

RETENTION = 60_000
G = "g"


def _emptied_at(d: Driver, at: int, group: str = G) -> None:
    """One member joins, gets its assignment, and leaves at ``at``."""
    d.topics({"foo": 2})
    r = d.hb(group, "A", 0)
    d.hb(group, "A", r.member_epoch, {"foo": [0, 1]})
    d.now = at
    assert d.hb(group, "A", -1).member_epoch == -1


def _replayed(d: Driver) -> ConsumerGroupCoordinator:
    """A fresh coordinator rebuilt from the bytes of every record (what a restart reads)."""
    fresh = ConsumerGroupCoordinator(d.coord.state.config)
    for r in d.records:
        fresh.replay_bytes(*encode(r))
    return fresh


def test_the_record_written_when_the_last_member_leaves_says_since_when_the_group_is_empty() -> None:
    d = Driver()
    _emptied_at(d, 5_000)
    last = [r for r in d.records if r.type is RecordType.GROUP_METADATA][-1]
    assert last.value == rec.GroupMetadataValue(d.group(G).group_epoch, 5_000)
    assert d.group(G).empty_since_ms == 5_000
    # While members are in, the record carries no time.
    joined = [r for r in d.records if r.type is RecordType.GROUP_METADATA][0]
    assert joined.value is not None and joined.value.empty_since_ms == -1


def test_an_empty_group_expires_after_the_retention_with_tombstones_of_all_its_records() -> None:
    d = Driver()
    _emptied_at(d, 5_000)
    early = d.keep(d.coord.expire_empty_groups(5_000 + RETENTION - 1, RETENTION))
    assert early.response == [] and not early.records and d.coord.group(G) is not None
    res = d.keep(d.coord.expire_empty_groups(5_000 + RETENTION, RETENTION))
    assert res.response == [G]
    assert d.coord.group(G) is None
    assert all(r.value is None and r.group_id == G for r in res.records)
    # Every key the group ever wrote ends with a tombstone: log compaction drops them all.
    last: dict[tuple[int, str | None], object] = {}
    for r in d.records:
        if r.group_id == G:
            last[(int(r.type), r.sub_key)] = r.value
    assert last and all(v is None for v in last.values())
    assert _replayed(d).group(G) is None


def test_a_member_joining_before_the_deadline_keeps_the_group_and_a_new_emptiness_starts_over() -> None:
    d = Driver()
    _emptied_at(d, 5_000)
    d.now = 5_000 + RETENTION - 10
    d.hb(G, "B", 0)
    assert d.group(G).empty_since_ms == -1
    assert d.keep(d.coord.expire_empty_groups(5_000 + 2 * RETENTION, RETENTION)).response == []
    assert d.coord.group(G) is not None
    d.now = 200_000
    d.hb(G, "B", -1)
    assert d.keep(d.coord.expire_empty_groups(200_000 + RETENTION - 1, RETENTION)).response == []
    assert d.keep(d.coord.expire_empty_groups(200_000 + RETENTION, RETENTION)).response == [G]


def test_replay_restores_when_the_group_became_empty_and_a_long_empty_group_goes_at_the_first_check() -> None:
    d = Driver()
    _emptied_at(d, 5_000)
    fresh = _replayed(d)
    group = fresh.group(G)
    assert group is not None and group.empty_since_ms == 5_000
    assert fresh.snapshot() == d.coord.snapshot()
    # Loaded long after its deadline: the first check deletes it.
    assert fresh.expire_empty_groups(5_000 + 10 * RETENTION, RETENTION).response == [G]


def test_a_group_whose_records_do_not_say_since_when_it_is_empty_is_stamped_at_the_first_check() -> None:
    fresh = ConsumerGroupCoordinator(Driver().coord.state.config)
    # What a state log written before the time was recorded holds for an emptied group.
    fresh.replay(rec.group_epoch("old", 7))
    fresh.replay(rec.target_epoch("old", 7))
    first = fresh.expire_empty_groups(1_000_000, RETENTION)
    assert first.response == []
    assert [r.value for r in first.records] == [rec.GroupMetadataValue(7, 1_000_000)]
    assert fresh.expire_empty_groups(1_000_000 + RETENTION - 1, RETENTION).response == []
    assert fresh.expire_empty_groups(1_000_000 + RETENTION, RETENTION).response == ["old"]


def test_the_empty_since_time_round_trips_through_the_record_bytes() -> None:
    r = rec.group_epoch("g", 3, 1_700_000_000_123)
    assert decode(*encode(r)) == r
    plain = rec.group_epoch("g", 3)
    key, value = encode(plain)
    assert value is not None and value.endswith(b"\x00")  # no tagged field while the group has members
    assert decode(key, value) == plain


def test_groups_with_members_never_expire() -> None:
    d = Driver()
    d.topics({"foo": 2})
    d.hb(G, "A", 0)
    assert d.coord.expire_empty_groups(10**12, RETENTION).response == []
    assert d.coord.group(G) is not None
