"""Classic group -> consumer group on the first ConsumerGroupHeartbeat with epoch 0 (KIP-848
"Supporting Online Consumer Group Upgrade"; Kafka's preconditions and records)."""

from __future__ import annotations

import pytest
from migration_harness import SESSION, TOPIC, TOPIC_ID, Driver, assignment_bytes

from coordinator.errors import Errors
from coordinator.model import MemberState
from coordinator.records import Record, RecordType
from coordinator.timers import session_key
from translate.classic_group import ClassicGroupState
from translate.classic_messages import JoinGroupResponse, SyncGroupResponse
from translate.conversion import MigrationPolicy
from translate.group_messages import OffsetCommitCheck
from translate.group_records import GroupMetadataRecord
from translate.group_service import GroupService


def test_upgrade_of_missing_group_creates_a_consumer_group() -> None:
    d = Driver()
    assert d.consumer("m1").error_code == 0
    assert d.cgroup().members["m1"].member_epoch == 1


@pytest.mark.parametrize("policy", ["bidirectional", "upgrade", "downgrade", "disabled"])
def test_upgrade_deletes_an_empty_classic_group_whatever_the_policy(policy: str) -> None:
    d = Driver(policy=policy)
    # A simple group: offsets committed outside any generation.
    d.send(OffsetCommitCheck("g", "", -1, api_version=8))
    assert d.classic().is_in(ClassicGroupState.EMPTY)
    before = len(d.records)
    assert d.consumer("m1").error_code == 0
    new = d.records[before:]
    assert isinstance(new[0], GroupMetadataRecord) and new[0].value is None
    assert d.cgroup().members["m1"].member_epoch == 1


@pytest.mark.parametrize("policy", ["downgrade", "disabled"])
def test_upgrade_refused_when_policy_disallows_upgrade_returns_group_id_not_found(policy: str) -> None:
    d = Driver(policy=policy)
    d.classic_fleet()
    before = len(d.records)
    response = d.consumer("m1")
    assert response.error_code == Errors.GROUP_ID_NOT_FOUND
    assert d.records[before:] == [] and d.classic().is_in(ClassicGroupState.STABLE)


def test_upgrade_refused_when_protocol_type_is_not_consumer_returns_group_id_not_found() -> None:
    d = Driver()
    d.classic_fleet(protocol_type="connect")
    assert d.consumer("m1").error_code == Errors.GROUP_ID_NOT_FOUND
    assert d.classic().protocol_type == "connect"


def test_upgrade_refused_when_group_exceeds_consumer_group_max_size_returns_group_id_not_found() -> None:
    d = Driver(max_group_size=2)
    d.classic_fleet()
    assert d.consumer("m1").error_code == Errors.GROUP_ID_NOT_FOUND
    assert len(d.classic().members) == 3


def test_upgrade_of_a_full_group_answers_group_max_size_reached_and_keeps_it_classic() -> None:
    d = Driver(max_group_size=3)
    d.classic_fleet()
    assert d.consumer("m1").error_code == Errors.GROUP_MAX_SIZE_REACHED
    assert d.classic().is_in(ClassicGroupState.STABLE)


def test_upgrade_refused_when_an_assignment_carries_custom_user_data() -> None:
    d = Driver()
    ids, generation = d.classic_fleet()
    d.classic().members[ids[0]].assignment = assignment_bytes({TOPIC: [0]}, user_data=b"custom")
    assert d.consumer("m1").error_code == Errors.GROUP_ID_NOT_FOUND


def test_upgrade_refused_when_a_subscription_is_malformed_returns_group_id_not_found() -> None:
    d = Driver()
    ids, _ = d.classic_fleet()
    d.classic().members[ids[1]].supported_protocols[0].metadata = b"\x00\x01\x00\x00\x00\x05ab"
    assert d.consumer("m1").error_code == Errors.GROUP_ID_NOT_FOUND
    assert d.classic().is_in(ClassicGroupState.STABLE)


def test_upgrade_treats_an_empty_classic_assignment_as_no_partitions() -> None:
    d = Driver()
    keys = [d.join(client=c) for c in ("a", "b")]
    ids = [d.join_response(k).member_id for k in keys]
    keys = [d.join(member_id=m, client=c) for m, c in zip(ids, ("a", "b"), strict=True)]
    d.advance(1)
    # Joined, never synced: CompletingRebalance with empty assignments.
    assert d.classic().is_in(ClassicGroupState.COMPLETING_REBALANCE)
    assert d.consumer("m1").error_code == 0
    group = d.cgroup()
    assert all(not group.members[m].assigned_partitions for m in ids)


def test_upgrade_answers_pending_join_and_sync_with_rebalance_in_progress() -> None:
    d = Driver()
    keys = [d.join(client=c) for c in ("a", "b")]
    ids = [d.join_response(k).member_id for k in keys]
    keys = [d.join(member_id=m, client=c) for m, c in zip(ids, ("a", "b"), strict=True)]
    d.advance(1)
    generation = d.join_response(keys[0]).generation_id
    follower = next(m for m in ids if m != d.classic().leader_id)
    sync_key = d.sync(follower, generation)  # parked until the leader syncs
    assert sync_key not in d.responses
    d.consumer("m1")
    body = d.responses[sync_key]
    assert isinstance(body, SyncGroupResponse) and body.error_code == Errors.REBALANCE_IN_PROGRESS
    # A JoinGroup parked in the next rebalance too.
    d2 = Driver()
    ids2, generation2 = d2.classic_fleet()
    parked = d2.join(member_id=ids2[0], client="a")  # the leader's rejoin starts a rebalance
    assert parked not in d2.responses
    d2.consumer("m1")
    body = d2.responses[parked]
    assert isinstance(body, JoinGroupResponse) and body.error_code == Errors.REBALANCE_IN_PROGRESS


def test_upgrade_of_a_group_still_in_its_first_rebalance_does_not_crash() -> None:
    d = Driver()
    keys = [d.join(client=c) for c in ("a", "b")]
    ids = [d.join_response(k).member_id for k in keys]
    keys = [d.join(member_id=m, client=c) for m, c in zip(ids, ("a", "b"), strict=True)]
    assert d.classic().is_in(ClassicGroupState.PREPARING_REBALANCE) and d.classic().protocol_name is None
    response = d.consumer("m1")
    assert response.error_code == 0
    for k in keys:
        assert d.join_response(k).error_code == Errors.REBALANCE_IN_PROGRESS
    # The classic members rejoin the consumer group through the per-member translation.
    rejoin = d.join_response(d.join(member_id=ids[0], client="a"))
    assert rejoin.error_code == 0 and rejoin.generation_id == d.cgroup().group_epoch


def test_upgraded_group_keeps_generation_as_epochs_and_last_assignment_as_current_and_target() -> None:
    d = Driver()
    ids, generation = d.classic_fleet({"a": {TOPIC: [0, 1]}, "b": {TOPIC: [2, 3], "gone": [0]}, "c": {TOPIC: [4, 5]}})
    before = len(d.records)
    timers_before = dict(d.timers)
    d.consumer("m1")
    group = d.cgroup()
    converted = d.records[before:]
    # Before the joiner's own records: epoch = target epoch = generation, members at the generation.
    epoch_record = next(r for r in converted if isinstance(r, Record) and r.type is RecordType.GROUP_METADATA)
    assert epoch_record.value.epoch == generation  # type: ignore[union-attr]
    for mid, parts in zip(ids, ([0, 1], [2, 3], [4, 5]), strict=True):
        m = group.members[mid]
        assert m.member_epoch == m.previous_member_epoch == generation and m.state is MemberState.STABLE
        # "gone" is not a known topic: dropped.
        assert dict(m.assigned_partitions) == {TOPIC_ID: frozenset(parts)}
        assert m.classic_metadata is not None and m.classic_metadata.session_timeout_ms == SESSION
        assert m.classic_metadata.supported_protocols[0][0] == "range"
        assert m.subscribed_topic_names == {TOPIC} and m.client_id in ("a", "b", "c")
    targets_written = {
        r.sub_key: r.value.partitions for r in converted  # type: ignore[union-attr]
        if isinstance(r, Record) and r.type is RecordType.TARGET_ASSIGNMENT_MEMBER and r.sub_key in ids
    }
    assert targets_written[ids[0]] == {TOPIC_ID: frozenset([0, 1])}
    # Sessions restart with each member's classic session timeout; classic timers are gone.
    for mid in ids:
        assert d.timers[session_key("g", mid)] == d.now + SESSION
        assert ("classic-heartbeat", "g", mid) in timers_before and ("classic-heartbeat", "g", mid) not in d.timers


def test_upgrade_records_come_in_kafkas_order() -> None:
    d = Driver()
    ids, generation = d.classic_fleet()
    before = len(d.records)
    d.consumer("m1")
    kinds = []
    for r in d.records[before:]:
        kinds.append("tombstone" if isinstance(r, GroupMetadataRecord) else (r.type.name, r.sub_key))
    n = len(ids)
    assert kinds[0] == "tombstone"
    assert kinds[1 : 1 + n] == [("MEMBER_METADATA", m) for m in ids]
    assert kinds[1 + n] == ("GROUP_METADATA", None)
    assert kinds[2 + n : 2 + 2 * n] == [("TARGET_ASSIGNMENT_MEMBER", m) for m in ids]
    assert kinds[2 + 2 * n] == ("TARGET_ASSIGNMENT_METADATA", None)
    assert kinds[3 + 2 * n : 3 + 3 * n] == [("CURRENT_MEMBER_ASSIGNMENT", m) for m in ids]
    # Then the joiner's heartbeat: its subscription, partition metadata, epoch + 1, ...
    assert kinds[3 + 3 * n : 6 + 3 * n] == [("MEMBER_METADATA", "m1"), ("PARTITION_METADATA", None), ("GROUP_METADATA", None)]
    assert d.cgroup().group_epoch == generation + 1


def test_classic_members_behind_the_upgraded_group_are_told_to_rejoin_by_heartbeat() -> None:
    d = Driver()
    ids, generation = d.classic_fleet()
    d.consumer("m1")
    assert all(d.heartbeat(m, generation) == Errors.REBALANCE_IN_PROGRESS for m in ids)
    join = d.join_response(d.join(member_id=ids[0], client="a"))
    assert join.generation_id == generation + 1 and join.leader == ""


def test_consumer_heartbeat_with_a_classic_static_members_instance_id_replaces_it() -> None:
    d2 = Driver()
    keys = [d2.join(client=c, instance_id=f"i-{c}") for c in ("a", "b")]
    d2.advance(1)
    gen = d2.join_response(keys[0]).generation_id
    leader = d2.classic().leader_id
    d2.sync(leader, gen, {m: assignment_bytes({TOPIC: [0, 1, 2] if m == leader else [3, 4, 5]}) for m in d2.classic().members})
    for m in d2.classic().members:
        if m != leader:
            d2.sync(m, gen)
    old = d2.classic().static_members["i-a"]
    old_parts = sorted(d2.classic().members[old].assignment)
    assert old_parts
    response = d2.consumer("new-a", instance_id="i-a", assignor=None)
    assert response.error_code == 0
    g = d2.cgroup()
    assert old not in g.members and g.static_members["i-a"] == "new-a"
    assert not g.members["new-a"].uses_classic_protocol
    assert g.target_assignment["new-a"] == {TOPIC_ID: frozenset([0, 1, 2] if old == leader else [3, 4, 5])}
    assert response.member_epoch == gen


def test_replay_of_upgrade_records_rebuilds_identical_state() -> None:
    d = Driver()
    d.classic_fleet()
    d.consumer("m1")
    replayed = GroupService()
    for r in d.records:
        replayed.replay(r)
    assert replayed.classic_groups.group("g") is None
    assert replayed.coordinator.snapshot() == d.service.coordinator.snapshot()


@pytest.mark.parametrize("text", ["BIDIRECTIONAL", "Upgrade", "downgrade", " disabled "])
def test_migration_policy_setting_is_case_insensitive(text: str) -> None:
    assert MigrationPolicy.parse(text).value == text.strip().lower()
    with pytest.raises(ValueError):
        MigrationPolicy.parse("sideways")


def test_upgraded_members_session_expiry_fences_them_with_their_classic_timeout() -> None:
    d = Driver()
    ids, generation = d.classic_fleet()
    d.consumer("m1")
    scheduled = [k for k in d.timers if k == session_key("g", ids[0])]
    assert scheduled
    d.advance(SESSION + 1)
    # Nobody heartbeated: the classic members are fenced (and m1's longer session survives).
    assert set(d.cgroup().members) == {"m1"}


def test_only_a_joining_heartbeat_converts_a_classic_group() -> None:
    d = Driver()
    d.classic_fleet()
    response = d.consumer("m1", epoch=5, owned=[])
    assert response.error_code == Errors.GROUP_ID_NOT_FOUND
    assert d.classic().is_in(ClassicGroupState.STABLE)


def test_consumer_static_member_not_released_is_unreleased_instance_id_only_across_consumer_members() -> None:
    d = Driver()
    assert d.consumer("m1", instance_id="i1").error_code == 0
    assert d.consumer("m2", instance_id="i1").error_code == Errors.UNRELEASED_INSTANCE_ID
