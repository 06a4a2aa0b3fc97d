"""Consumer group -> classic group when the last consumer-protocol member leaves (KIP-848
"Supporting Online Consumer Group Upgrade"; Kafka's preconditions and resulting classic group)."""

from __future__ import annotations

import pytest
from migration_harness import SESSION, TOPIC, TOPIC_ID, Driver, identity, partitions_of

from coordinator.errors import Errors
from coordinator.records import Record, RecordType
from coordinator.timers import rebalance_key, session_key
from translate.classic_group import ClassicGroupState
from translate.group_records import GroupMetadataRecord
from translate.group_service import GroupService
from translate.result import timer_key


def mixed_group(d: Driver, protocols: tuple[str, ...] = ("range",), sub_version: int = 1,
                consumer_instance: str | None = None, assignor: str | None = "uniform") -> tuple[list[str], str]:
    """A classic fleet upgraded by one consumer-protocol member, everyone reconciled."""
    ids, _ = d.classic_fleet(protocols=protocols, sub_version=sub_version)
    response = d.consumer("m1", instance_id=consumer_instance, assignor=assignor)
    assert response.error_code == 0
    epoch = d.cgroup().group_epoch
    settle(d, ids, protocols, sub_version, consumer_instance)
    assert d.cgroup().state().value == "Stable" and d.cgroup().group_epoch == epoch
    return ids, "m1"


def settle(d: Driver, ids: list[str], protocols: tuple[str, ...] = ("range",), sub_version: int = 1,
           consumer_instance: str | None = None) -> None:
    """Every member heartbeats (classic members rejoin when told to) until the group is Stable."""
    clients = {mid: mid.split("-")[0] for mid in ids}
    for _ in range(4):
        for mid in ids:
            member = d.cgroup().members[mid]
            if d.heartbeat(mid, member.member_epoch) == Errors.REBALANCE_IN_PROGRESS:
                owned = sorted(member.assigned_partitions.get(TOPIC_ID, ()))
                join = d.join_response(d.join(member_id=mid, client=clients[mid], protocols=protocols,
                                              sub_version=sub_version, owned={TOPIC: owned}))
                d.sync(mid, join.generation_id)
        m1 = d.cgroup().members["m1"]
        d.consumer("m1", epoch=m1.member_epoch, owned=sorted(m1.assigned_partitions.get(TOPIC_ID, ())),
                   instance_id=consumer_instance)


def assert_downgraded(d: Driver, ids: list[str], epoch: int, targets: dict[str, list[int]]) -> None:
    classic = d.classic()
    assert d.service.coordinator.group("g") is None
    assert classic.generation_id == epoch and classic.protocol_type == "consumer"
    assert list(classic.members) == ids and classic.leader_id == ids[0]
    # A member left: straight to PreparingRebalance with the join timer armed.
    assert classic.is_in(ClassicGroupState.PREPARING_REBALANCE)
    assert timer_key("classic-join", "g") in d.timers
    for mid in ids:
        assert partitions_of(classic.members[mid].assignment) == ({TOPIC: targets[mid]} if targets[mid] else {})
        assert session_key("g", mid) not in d.timers and timer_key("classic-heartbeat", "g", mid) in d.timers


def test_downgrade_when_the_last_consumer_member_leaves_with_a_heartbeat() -> None:
    d = Driver()
    ids, m1 = mixed_group(d)
    group = d.cgroup()
    epoch = group.group_epoch
    targets = {mid: sorted(group.target_assignment[mid].get(TOPIC_ID, ())) for mid in ids}
    before = len(d.records)
    response = d.consumer(m1, epoch=-1, full=False)
    assert response.error_code == 0 and response.member_epoch == -1
    assert_downgraded(d, ids, epoch, targets)
    # Records: the consumer group's tombstones, then the classic group's record.
    new = d.records[before:]
    assert all(isinstance(r, Record) and r.value is None for r in new[:-1])
    assert isinstance(new[-1], GroupMetadataRecord) and new[-1].value is not None
    assert new[-1].value.generation == epoch and new[-1].value.leader == ids[0]
    kinds = [r.type for r in new[:-1]]  # type: ignore[union-attr]
    assert kinds[:4] == [RecordType.CURRENT_MEMBER_ASSIGNMENT] * 4 and kinds[-1] is RecordType.GROUP_METADATA


def test_downgrade_when_the_last_consumer_member_session_times_out() -> None:
    d = Driver()
    ids, m1 = mixed_group(d)
    epoch = d.cgroup().group_epoch
    targets = {mid: sorted(d.cgroup().target_assignment[mid].get(TOPIC_ID, ())) for mid in ids}
    d.absorb(d.service.on_timer(session_key("g", m1), d.now))
    assert_downgraded(d, ids, epoch, targets)


def test_downgrade_when_the_last_consumer_member_misses_its_revocation_deadline() -> None:
    d = Driver()
    ids, m1 = mixed_group(d)
    # Two classic members leave: m1 and the last classic member share the partitions.
    d.leave(identity(ids[1]), identity(ids[2]))
    settle(d, ids[:1])
    assert len(d.cgroup().members[m1].assigned_partitions.get(TOPIC_ID, ())) == 3
    # A new classic member makes m1 give a partition up; m1 never acknowledges.
    first = d.join_response(d.join(client="d"))
    join = d.join_response(d.join(member_id=first.member_id, client="d"))
    assert join.error_code == 0
    owned = sorted(d.cgroup().members[m1].assigned_partitions.get(TOPIC_ID, ()))
    d.consumer(m1, epoch=d.cgroup().members[m1].member_epoch, owned=owned)
    assert rebalance_key("g", m1) in d.timers
    d.absorb(d.service.on_timer(rebalance_key("g", m1), d.timers[rebalance_key("g", m1)]))
    assert d.service.coordinator.group("g") is None and d.classic().generation_id > 0
    assert list(d.classic().members) == [ids[0], first.member_id]


def test_downgrade_when_the_last_consumer_member_is_removed_by_classic_leave_group() -> None:
    d = Driver()
    ids, m1 = mixed_group(d, consumer_instance="i-m1")
    epoch = d.cgroup().group_epoch
    targets = {mid: sorted(d.cgroup().target_assignment[mid].get(TOPIC_ID, ())) for mid in ids}
    response = d.leave(identity("", "i-m1"))  # an admin removing the static member by instance id
    assert response.members[0].error_code == Errors.NONE
    assert_downgraded(d, ids, epoch, targets)


def test_no_downgrade_on_a_static_members_temporary_leave() -> None:
    d = Driver()
    _, m1 = mixed_group(d, consumer_instance="i-m1")
    response = d.consumer(m1, epoch=-2, instance_id="i-m1", full=False)
    assert response.member_epoch == -2
    assert d.cgroup().members[m1].member_epoch == -2


@pytest.mark.parametrize("policy", ["upgrade", "disabled"])
def test_no_downgrade_when_policy_disallows_downgrade(policy: str) -> None:
    d = Driver(policy="bidirectional")
    ids, m1 = mixed_group(d)
    d.service.converter.policy = d.service.converter.policy.parse(policy)
    epoch = d.cgroup().group_epoch
    d.consumer(m1, epoch=-1, full=False)
    group = d.cgroup()
    assert set(group.members) == set(ids) and group.group_epoch == epoch + 1


def test_no_downgrade_while_other_consumer_members_remain() -> None:
    d = Driver()
    ids, m1 = mixed_group(d)
    assert d.consumer("m2").error_code == 0
    d.consumer(m1, epoch=-1, full=False)
    assert set(d.cgroup().members) == {*ids, "m2"}


def test_no_downgrade_when_the_leaving_member_is_the_only_member() -> None:
    d = Driver()
    d.consumer("m1")
    d.consumer("m1", epoch=-1, full=False)
    assert d.cgroup().members == {}


def test_no_downgrade_when_remaining_members_exceed_the_classic_max_size() -> None:
    d = Driver()
    ids, m1 = mixed_group(d)
    d.service.config.classic.max_size = 2  # group.max.size
    d.consumer(m1, epoch=-1, full=False)
    assert set(d.cgroup().members) == set(ids)


def test_classic_members_behind_the_group_epoch_get_illegal_generation_after_downgrade() -> None:
    d = Driver()
    ids, m1 = mixed_group(d)
    epoch = d.cgroup().group_epoch
    # m2 joins and leaves: the classic members are now behind the group epoch.
    d.consumer("m2")
    behind = d.cgroup().members[ids[0]].member_epoch
    assert behind < d.cgroup().group_epoch
    d.consumer("m2", epoch=-1, full=False)
    d.consumer(m1, epoch=-1, full=False)
    classic = d.classic()
    assert classic.generation_id > epoch
    assert d.heartbeat(ids[0], behind) == Errors.ILLEGAL_GENERATION
    # A member at the generation learns about the rebalance instead.
    assert d.heartbeat(ids[0], classic.generation_id) == Errors.REBALANCE_IN_PROGRESS


def test_downgraded_protocol_is_the_one_most_members_list_first() -> None:
    d = Driver()
    ids, m1 = mixed_group(d, protocols=("range", "roundrobin"))
    # Two of three members now prefer roundrobin.
    for mid, client in zip(ids[1:], ("b", "c"), strict=True):
        owned = sorted(d.cgroup().members[mid].assigned_partitions.get(TOPIC_ID, ()))
        d.join(member_id=mid, client=client, protocols=("roundrobin", "range"), owned={TOPIC: owned})
    d.consumer(m1, epoch=-1, full=False)
    assert d.classic().protocol_name == "roundrobin"


def test_downgraded_assignment_uses_each_members_subscription_version() -> None:
    d = Driver()
    ids, m1 = mixed_group(d, sub_version=3)
    d.consumer(m1, epoch=-1, full=False)
    for mid in ids:
        assert int.from_bytes(d.classic().members[mid].assignment[:2], "big") == 3


def test_downgraded_group_rebalances_under_the_classic_protocol() -> None:
    d = Driver()
    ids, m1 = mixed_group(d)
    d.consumer(m1, epoch=-1, full=False)
    generation = d.classic().generation_id
    keys = [d.join(member_id=mid, client=c) for mid, c in zip(ids, ("a", "b", "c"), strict=True)]
    joins = [d.join_response(k) for k in keys]
    assert all(j.error_code == 0 and j.generation_id == generation + 1 for j in joins)
    assert sum(1 for j in joins if j.members) == 1  # one leader, client-side assignment again
    assert d.timers[timer_key("classic-heartbeat", "g", ids[0])] == d.now + SESSION


def test_replay_of_downgrade_records_rebuilds_the_classic_group() -> None:
    d = Driver()
    ids, m1 = mixed_group(d)
    d.consumer(m1, epoch=-1, full=False)
    replayed = GroupService()
    for r in d.records:
        replayed.replay(r)
    assert replayed.coordinator.group("g") is None
    live, back = d.classic(), replayed.classic_groups.group("g")
    assert back is not None
    assert (back.generation_id, back.protocol_type, back.protocol_name, back.leader_id) == (
        live.generation_id, live.protocol_type, live.protocol_name, live.leader_id
    )
    assert [(m.member_id, m.assignment, m.session_timeout_ms) for m in back.members.values()] == [
        (m.member_id, m.assignment, m.session_timeout_ms) for m in live.members.values()
    ]


def test_downgrade_when_a_classic_join_takes_over_the_last_consumer_static_member() -> None:
    d = Driver()
    # Same subscription, no server assignor: the classic restart changes nothing the assignor sees.
    ids, m1 = mixed_group(d, consumer_instance="i-m1", assignor=None)
    group = d.cgroup()
    old_target = sorted(group.target_assignment[m1].get(TOPIC_ID, ()))
    epoch = group.group_epoch
    key = d.join(client="m1", instance_id="i-m1")  # the same instance restarted on the classic protocol
    join = d.join_response(key)
    assert join.error_code == 0 and join.generation_id == epoch
    classic = d.classic()
    assert d.service.coordinator.group("g") is None
    # The group stays Stable: the new member has the old one's place and target assignment.
    assert classic.is_in(ClassicGroupState.STABLE) and classic.generation_id == epoch
    assert classic.static_members["i-m1"] == join.member_id and m1 not in classic.members
    sync = d.sync_response(d.sync(join.member_id, join.generation_id, instance_id="i-m1"))
    assert sync.error_code == 0 and partitions_of(sync.assignment) == {TOPIC: old_target}
    assert d.heartbeat(ids[0], epoch) == Errors.NONE


def test_no_downgrade_when_a_classic_join_takes_over_a_static_member_while_consumer_members_remain() -> None:
    d = Driver()
    mixed_group(d, consumer_instance="i-m1")
    d.consumer("m2")
    join = d.join_response(d.join(client="m1", instance_id="i-m1"))
    assert join.error_code == 0
    assert d.cgroup().static_members["i-m1"] == join.member_id


def test_classic_takeover_of_the_last_consumer_member_with_a_new_subscription_rebalances() -> None:
    d = Driver()
    mixed_group(d, consumer_instance="i-m1")  # m1 chose a server assignor: the classic restart drops it
    epoch = d.cgroup().group_epoch
    join = d.join_response(d.join(client="m1", instance_id="i-m1"))
    assert join.error_code == 0
    classic = d.classic()
    assert classic.generation_id == epoch + 1 and classic.is_in(ClassicGroupState.PREPARING_REBALANCE)
