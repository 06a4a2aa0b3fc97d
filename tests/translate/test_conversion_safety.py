"""Online conversions never give a partition to a member while another member may still hold it.

A classic member may hold more than its classic assignment says: a rebalance resets the assignment
being handed out while the member still consumes the last one it synced (eager members until they
rejoin, cooperative ones until they revoke), and a cooperative member reports what it owns in its
subscription. The converted group counts all of that as the member's current assignment (its
target stays the classic assignment, as in Kafka), so the joiner waits for those partitions.
"""

from __future__ import annotations

from migration_harness import TOPIC, TOPIC_ID, Driver, assignment_bytes, identity, partitions_of
from test_conversion_downgrade import mixed_group

from coordinator.errors import Errors
from coordinator.records import Record, RecordType
from translate.classic_group import ClassicGroupState
from translate.group_service import GroupService

ALL = frozenset(range(6))


def held_by_others(d: Driver, member_id: str) -> set[int]:
    group = d.cgroup()
    return {
        p for mid, m in group.members.items() if mid != member_id for p in m.assigned_partitions.get(TOPIC_ID, ())
    }


def assert_single_owner(d: Driver) -> None:
    seen: dict[int, str] = {}
    for mid, m in d.cgroup().members.items():
        for p in (*m.assigned_partitions.get(TOPIC_ID, ()), *m.partitions_pending_revocation.get(TOPIC_ID, ())):
            assert seen.setdefault(p, mid) == mid, f"partition {p}: {seen[p]} and {mid}"


def rebalancing_fleet(d: Driver) -> dict[str, dict[str, list[int]]]:
    """A Stable classic group of three that starts a new generation; the generation is answered
    (CompletingRebalance) but a member leaves before the leader syncs, which resets every
    classic assignment while the members still hold the ones they synced. Returns the two
    remaining members' synced partitions."""
    ids, _ = d.classic_fleet()
    synced = {mid: partitions_of(d.classic().members[mid].assignment) for mid in ids[:2]}
    # A rejoin with a new subscription (v1: it lists what it owns) starts a rebalance.
    d.join(member_id=ids[0], client="a", owned=synced[ids[0]])
    assert d.classic().is_in(ClassicGroupState.PREPARING_REBALANCE)
    for mid, client in zip(ids[1:], ("b", "c"), strict=True):
        d.join(member_id=mid, client=client)
    assert d.classic().is_in(ClassicGroupState.COMPLETING_REBALANCE)
    d.leave(identity(ids[2]))
    classic = d.classic()
    assert classic.is_in(ClassicGroupState.PREPARING_REBALANCE)
    assert all(m.assignment == b"" for m in classic.members.values())
    return synced


def test_a_rebalance_keeps_each_members_last_synced_assignment() -> None:
    d = Driver()
    synced = rebalancing_fleet(d)
    for mid, partitions in synced.items():
        assert partitions and partitions_of(d.classic().members[mid].synced_assignment) == partitions


def test_upgrading_a_rebalancing_group_counts_the_last_synced_assignment_as_held() -> None:
    d = Driver()
    synced = {mid: frozenset(parts[TOPIC]) for mid, parts in rebalancing_fleet(d).items()}
    ids = list(synced)
    response = d.consumer("m1")
    assert response.error_code == 0
    group = d.cgroup()
    for mid in ids:
        # Current: what the member may still hold; target: the (reset) classic assignment, as Kafka.
        assert group.members[mid].assigned_partitions == {TOPIC_ID: synced[mid]}
    given = {p for tp in response.assignment or [] for p in tp.partitions}
    assert given.isdisjoint(held_by_others(d, "m1")), given
    assert_single_owner(d)
    # The classic members are sent back to JoinGroup, where they give up what moved.
    assert all(d.heartbeat(mid, group.members[mid].member_epoch) == Errors.REBALANCE_IN_PROGRESS for mid in ids)


def test_partitions_a_cooperative_member_reports_owning_are_held_after_the_upgrade() -> None:
    d = Driver()
    # Joined and never synced: its classic assignment is empty, but its subscription owns 4 and 5.
    first = d.join_response(d.join(client="a", protocols=("cooperative-sticky",), owned={TOPIC: [4, 5]}))
    d.join(member_id=first.member_id, client="a", protocols=("cooperative-sticky",), owned={TOPIC: [4, 5]})
    d.advance(1)
    assert d.classic().is_in(ClassicGroupState.COMPLETING_REBALANCE)
    response = d.consumer("m1")
    assert response.error_code == 0
    group = d.cgroup()
    assert group.members[first.member_id].assigned_partitions == {TOPIC_ID: frozenset({4, 5})}
    given = {p for tp in response.assignment or [] for p in tp.partitions}
    assert given.isdisjoint({4, 5})
    assert_single_owner(d)


def test_two_members_that_may_hold_one_partition_delay_the_upgrade() -> None:
    d = Driver()
    ids, generation = d.classic_fleet(protocols=("cooperative-sticky",))
    # "b" rejoins claiming a partition "a" was synced: the classic rebalance has to settle it first.
    a_parts = partitions_of(d.classic().members[ids[0]].assignment)[TOPIC]
    b_parts = partitions_of(d.classic().members[ids[1]].assignment)[TOPIC]
    d.join(member_id=ids[1], client="b", protocols=("cooperative-sticky",), owned={TOPIC: [*b_parts, a_parts[0]]})
    before = len(d.records)
    response = d.consumer("m1")
    assert response.error_code == Errors.COORDINATOR_LOAD_IN_PROGRESS
    # Nothing changed: still the classic group, nothing written.
    assert d.classic().generation_id == generation and len(d.records) == before
    assert d.service.coordinator.group("g") is None


def test_an_upgrade_right_after_a_downgrade_counts_the_current_assignment_as_held() -> None:
    d = Driver()
    ids, m1 = mixed_group(d)
    # A new classic member: the target moves partitions away from members that still own them.
    first = d.join_response(d.join(client="d"))
    assert d.join_response(d.join(member_id=first.member_id, client="d")).error_code == 0
    group = d.cgroup()
    current = {mid: frozenset(m.assigned_partitions.get(TOPIC_ID, ())) for mid, m in group.members.items()}
    moved = any(
        current[mid] - group.target_assignment.get(mid, {}).get(TOPIC_ID, frozenset()) for mid in ids
    )
    assert moved
    # The last consumer-protocol member leaves (downgrade), and a new one arrives (upgrade) at once.
    assert d.consumer(m1, epoch=-1, full=False).error_code == 0
    classic = d.classic()
    for mid in ids:
        assert frozenset(partitions_of(classic.members[mid].synced_assignment).get(TOPIC, ())) == current[mid]
    response = d.consumer("m2")
    assert response.error_code == 0
    for mid in ids:
        assert d.cgroup().members[mid].assigned_partitions.get(TOPIC_ID, frozenset()) == current[mid]
    given = {p for tp in response.assignment or [] for p in tp.partitions}
    assert given.isdisjoint(held_by_others(d, "m2"))
    assert_single_owner(d)


def test_a_static_takeover_upgrade_refreshes_partition_metadata_and_assigns_added_partitions() -> None:
    d = Driver(partitions=4)
    key = d.join(client="a", instance_id="i-a")
    d.advance(1)
    join = d.join_response(key)
    d.sync(join.member_id, join.generation_id, {join.member_id: assignment_bytes({TOPIC: [0, 1, 2, 3]})},
           instance_id="i-a")
    d.absorb(d.service.on_metadata({TOPIC: (TOPIC_ID, 6)}, d.now))  # two partitions added
    before = len(d.records)
    response = d.consumer("new-a", instance_id="i-a", assignor=None)  # the same subscription
    assert response.error_code == 0
    kinds = [r.type for r in d.records[before:] if isinstance(r, Record)]
    assert RecordType.PARTITION_METADATA in kinds
    group = d.cgroup()
    assert group.group_epoch == join.generation_id + 1 and group.assignment_epoch == group.group_epoch
    assert group.target_assignment["new-a"] == {TOPIC_ID: ALL}
    owned = sorted(p for tp in response.assignment or [] for p in tp.partitions)
    for _ in range(2):
        response = d.consumer("new-a", epoch=response.member_epoch, owned=owned, instance_id="i-a", full=False)
        assert response.error_code == 0
        if response.assignment is not None:
            owned = sorted(p for tp in response.assignment for p in tp.partitions)
    assert d.assigned("new-a") == sorted(ALL)


def test_replay_of_a_rebalancing_upgrade_rebuilds_the_same_consumer_group() -> None:
    d = Driver()
    rebalancing_fleet(d)
    assert d.consumer("m1").error_code == 0
    replayed = GroupService()
    for r in d.records:
        replayed.replay(r)
    assert replayed.classic_groups.group("g") is None
    assert replayed.coordinator.snapshot() == d.service.coordinator.snapshot()


def test_a_replayed_classic_group_keeps_the_stored_assignment_as_synced() -> None:
    d = Driver()
    d.classic_fleet()
    replayed = GroupService()
    for r in d.records:
        replayed.replay(r)
    group = replayed.classic_groups.group("g")
    assert group is not None and group.members
    for mid, m in group.members.items():
        assert m.synced_assignment == m.assignment == d.classic().members[mid].assignment



def replayed(d: Driver) -> GroupService:
    """A service rebuilt from the records (a failover), fed the metadata, then loaded."""
    service = GroupService()
    for r in d.records:
        service.replay(r)
    service.on_metadata({TOPIC: (TOPIC_ID, d.partitions)}, d.now)
    service.on_loaded(d.now)
    return service


def test_a_failover_during_the_rebalance_after_a_downgrade_starts_it_again() -> None:
    d = Driver()
    ids, m1 = mixed_group(d)
    assert d.consumer(m1, epoch=-1, full=False).error_code == 0  # downgrade: a rebalance starts
    assert d.classic().is_in(ClassicGroupState.PREPARING_REBALANCE)
    # The stored targets leave out what m1 had; the rebalance is not in any record.
    given = {p for m in d.classic().members.values() for p in partitions_of(m.assignment).get(TOPIC, [])}
    assert given < set(ALL)
    group = replayed(d).classic_groups.group("g")
    assert group is not None and group.is_in(ClassicGroupState.PREPARING_REBALANCE)


def test_a_replayed_classic_group_that_assigns_every_partition_stays_stable() -> None:
    d = Driver()
    d.classic_fleet()
    group = replayed(d).classic_groups.group("g")
    assert group is not None and group.is_in(ClassicGroupState.STABLE)
