"""The group service's admin and offset APIs across both group types, and replay from bytes."""

from __future__ import annotations

import pytest
from migration_harness import TOPIC_ID, Driver, partitions_of

from coordinator.errors import Errors
from coordinator.records import Record, RecordType
from translate.classic_group import ClassicGroupState
from translate.group_config import GroupServiceConfig, encode_any_record
from translate.group_messages import (
    ConsumerGroupDescribeRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    OffsetCommitCheck,
    OffsetFetchCheck,
)
from translate.group_records import GroupMetadataRecord
from translate.group_service import GroupService


def commit(d: Driver, member_id: str, epoch: int, version: int = 9, transactional: bool = False, group: str = "g") -> int:
    key, _ = d.send(OffsetCommitCheck(group, member_id, epoch, api_version=version, is_transactional=transactional))
    return d.responses[key].error_code  # type: ignore[no-any-return]


def fetch(d: Driver, member_id: str | None, epoch: int) -> int:
    key, _ = d.send(OffsetFetchCheck("g", member_id, epoch))
    return d.responses[key].error_code  # type: ignore[no-any-return]


def mixed(d: Driver) -> tuple[str, str]:
    ids, _ = d.classic_fleet(clients=("a",))
    d.consumer("m1")
    return ids[0], "m1"


# ---- offsets (reference "Offsets") ------------------------------------------------------------
def test_offset_commit_with_negative_epoch_on_a_group_without_members_is_accepted() -> None:
    d = Driver()
    d.consumer("m1")
    d.consumer("m1", epoch=-1, full=False)
    assert commit(d, "", -1) == Errors.NONE


def test_offset_commit_from_an_unknown_member_is_unknown_member_id() -> None:
    d = Driver()
    mixed(d)
    assert commit(d, "ghost", 3) == Errors.UNKNOWN_MEMBER_ID


def test_offset_commit_with_a_stale_epoch_is_illegal_generation_for_classic_members() -> None:
    d = Driver()
    classic, _ = mixed(d)
    epoch = d.cgroup().members[classic].member_epoch
    assert commit(d, classic, epoch) == Errors.NONE
    assert commit(d, classic, epoch + 1) == Errors.ILLEGAL_GENERATION


def test_offset_commit_with_a_stale_epoch_is_stale_member_epoch_for_consumer_members() -> None:
    d = Driver()
    _, consumer = mixed(d)
    epoch = d.cgroup().members[consumer].member_epoch
    assert commit(d, consumer, epoch) == Errors.NONE
    assert commit(d, consumer, epoch - 1) == Errors.STALE_MEMBER_EPOCH
    # Transactional commits map it to ILLEGAL_GENERATION up to TxnOffsetCommit v5; v6 keeps it (KIP-1319).
    assert commit(d, consumer, epoch - 1, version=5, transactional=True) == Errors.ILLEGAL_GENERATION
    assert commit(d, consumer, epoch - 1, version=6, transactional=True) == Errors.STALE_MEMBER_EPOCH


def test_offset_commit_below_v9_from_a_consumer_protocol_member_is_unsupported_version() -> None:
    d = Driver()
    _, consumer = mixed(d)
    assert commit(d, consumer, d.cgroup().members[consumer].member_epoch, version=8) == Errors.UNSUPPORTED_VERSION


def test_offset_fetch_without_member_is_accepted_and_with_a_member_checks_its_epoch() -> None:
    d = Driver()
    _, consumer = mixed(d)
    epoch = d.cgroup().members[consumer].member_epoch
    assert fetch(d, None, -1) == Errors.NONE
    assert fetch(d, consumer, epoch) == Errors.NONE
    assert fetch(d, consumer, epoch - 1) == Errors.STALE_MEMBER_EPOCH


def test_offset_commit_does_not_extend_a_consumer_members_session() -> None:
    d = Driver()
    _, consumer = mixed(d)
    timers = dict(d.timers)
    d.now += 1000
    commit(d, consumer, d.cgroup().members[consumer].member_epoch)
    assert d.timers == timers


def test_offset_checks_on_a_classic_group_follow_classic_rules() -> None:
    d = Driver()
    ids, generation = d.classic_fleet(clients=("a",))
    assert commit(d, ids[0], generation) == Errors.NONE
    assert commit(d, ids[0], generation + 1) == Errors.ILLEGAL_GENERATION
    assert fetch(d, None, -1) == Errors.NONE


# ---- describe, list, delete ------------------------------------------------------------------
def test_describe_groups_describes_a_stable_classic_group_with_metadata_and_assignments() -> None:
    d = Driver()
    ids, _ = d.classic_fleet()
    key, _ = d.send(DescribeGroupsRequest(["g"]))
    group = d.responses[key].groups[0]
    assert (group.error_code, group.group_state, group.protocol_type, group.protocol_data) == (0, "Stable", "consumer", "range")
    assert [m.member_id for m in group.members] == ids
    assert partitions_of(group.members[0].member_assignment) == {"foo": [0, 3]}


def test_describe_groups_of_a_consumer_group_is_group_id_not_found_from_v6_and_dead_before() -> None:
    d = Driver()
    d.consumer("m1")
    key, _ = d.send(DescribeGroupsRequest(["g", "nobody"], api_version=6))
    g, nobody = d.responses[key].groups
    assert g.error_code == nobody.error_code == Errors.GROUP_ID_NOT_FOUND
    # Kafka 4.3.1's messages (GroupMetadataManager.classicGroup).
    assert (g.error_message, nobody.error_message) == ("Group g is not a classic group.", "Group nobody not found.")
    key, _ = d.send(DescribeGroupsRequest(["g"], api_version=5))
    assert (d.responses[key].groups[0].error_code, d.responses[key].groups[0].group_state) == (0, "Dead")


@pytest.mark.parametrize("settled", [False, True])
def test_describe_groups_can_give_consumer_groups_a_classic_view(settled: bool) -> None:
    d = Driver()
    d.service.config.describe_consumer_groups_as_classic = True
    classic, consumer = mixed(d)
    if settled:
        d.heartbeat(classic, d.cgroup().members[classic].member_epoch)
        join = d.join_response(d.join(member_id=classic, client="a", owned={}))
        d.sync(classic, join.generation_id)
        for _ in range(2):
            m = d.cgroup().members[consumer]
            d.consumer(consumer, epoch=m.member_epoch, owned=sorted(m.assigned_partitions.get(TOPIC_ID, ())))
        d.heartbeat(classic, d.cgroup().members[classic].member_epoch)
        join = d.join_response(d.join(member_id=classic, client="a", owned={}))
        d.sync(classic, join.generation_id)
    key, _ = d.send(DescribeGroupsRequest(["g"]))
    group = d.responses[key].groups[0]
    expected = {"Stable": "Stable", "Reconciling": "CompletingRebalance", "Assigning": "PreparingRebalance"}
    assert group.protocol_type == "consumer" and group.group_state == expected[d.cgroup().state().value]
    assert {m.member_id for m in group.members} == {classic, consumer}


def test_consumer_group_describe_knows_only_consumer_groups() -> None:
    d = Driver()
    d.classic_fleet(clients=("a",))
    d.consumer("x", group="h")
    key, _ = d.send(ConsumerGroupDescribeRequest(["g", "h", "nobody"]))
    g, h, nobody = d.responses[key].groups
    assert g.error_code == Errors.GROUP_ID_NOT_FOUND and h.error_code == 0 and h.members[0].member_id == "x"
    # Kafka 4.3.1's messages (GroupMetadataManager.consumerGroup).
    assert (g.error_message, nobody.error_message) == ("Group g is not a consumer group.", "Group nobody not found.")


def test_list_groups_lists_both_group_types_with_filters() -> None:
    d = Driver()
    d.classic_fleet(clients=("a",))
    d.consumer("x", group="h")
    key, _ = d.send(ListGroupsRequest())
    assert {(g.group_id, g.group_type, g.protocol_type) for g in d.responses[key].groups} == {
        ("g", "classic", "consumer"), ("h", "consumer", "consumer"),
    }
    key, _ = d.send(ListGroupsRequest(types_filter=["CONSUMER"]))
    assert [g.group_id for g in d.responses[key].groups] == ["h"]
    key, _ = d.send(ListGroupsRequest(types_filter=["Classic"], states_filter=["stable"]))
    assert [g.group_id for g in d.responses[key].groups] == ["g"]
    key, _ = d.send(ListGroupsRequest(states_filter=["Empty"]))
    assert d.responses[key].groups == []


def test_delete_groups_deletes_empty_groups_of_either_type_and_refuses_others() -> None:
    d = Driver()
    d.send(OffsetCommitCheck("simple", "", -1, api_version=8))
    d.consumer("x", group="h")
    d.consumer("x", epoch=-1, full=False, group="h")
    d.consumer("y", group="busy")
    before = len(d.records)
    key, _ = d.send(DeleteGroupsRequest(["simple", "h", "busy", "nope"]))
    errors = [r.error_code for r in d.responses[key].results]
    assert errors == [Errors.NONE, Errors.NONE, Errors.NON_EMPTY_GROUP, Errors.GROUP_ID_NOT_FOUND]
    new = d.records[before:]
    assert isinstance(new[0], GroupMetadataRecord) and new[0].value is None
    assert any(isinstance(r, Record) and r.type is RecordType.GROUP_METADATA and r.group_id == "h" for r in new)
    assert d.service.classic_groups.group("simple") is None and d.service.coordinator.group("h") is None


def test_native_join_to_an_empty_consumer_group_replaces_it_with_a_classic_group() -> None:
    d = Driver()
    d.consumer("x")
    d.consumer("x", epoch=-1, full=False)
    before = len(d.records)
    d.join(client="a", protocols=("range",))
    assert d.service.coordinator.group("g") is None and d.classic().is_in(ClassicGroupState.EMPTY)
    assert any(isinstance(r, Record) and r.value is None and r.type is RecordType.GROUP_METADATA for r in d.records[before:])


def test_handle_refuses_what_is_not_a_group_request() -> None:
    with pytest.raises(TypeError):
        GroupService().handle(object(), 1, 0)


# ---- replay from bytes -----------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["native", "translate"])
def test_replay_bytes_of_a_full_migration_rebuilds_both_group_types(mode: str) -> None:
    d = Driver(mode=mode)
    if mode == "native":
        ids, _ = d.classic_fleet()
    else:
        ids = []
        for client in ("a", "b", "c"):
            first = d.join_response(d.join(client=client))
            ids.append(d.join_response(d.join(member_id=first.member_id, client=client)).member_id)
    d.consumer("m1")
    d.consumer("m1", epoch=-1, full=False)  # native: back to classic; translate: stays consumer
    d.consumer("x", group="h")
    replayed = GroupService(GroupServiceConfig(classic_groups=mode))
    for record in d.records:
        key, value = encode_any_record(record)
        assert replayed.replay_bytes(key, value)
    assert not replayed.replay_bytes(b"\x00\x01\x00\x01g", b"")  # an offset commit key: not ours
    assert replayed.coordinator.snapshot() == d.service.coordinator.snapshot()
    live, back = d.service.classic_groups.group("g"), replayed.classic_groups.group("g")
    assert (live is None) == (back is None) == (mode == "translate")
    if live is not None and back is not None:
        assert [(m.member_id, m.assignment) for m in back.members.values()] == [
            (m.member_id, m.assignment) for m in live.members.values()
        ]
        assert back.generation_id == live.generation_id
    # After loading, every member's session is armed again.
    loaded = replayed.on_loaded(d.now)
    assert len(loaded.timers) >= len(ids) + 1


def test_translate_mode_describes_its_consumer_groups_with_the_classic_view_by_default() -> None:
    d = Driver(mode="translate")
    first = d.join_response(d.join(client="a"))
    d.join(member_id=first.member_id, client="a")
    key, _ = d.send(DescribeGroupsRequest(["g"]))
    group = d.responses[key].groups[0]
    assert group.error_code == 0 and group.protocol_type == "consumer"
    assert [m.member_id for m in group.members] == [first.member_id]


def test_replay_bytes_takes_connect_group_records_into_the_connect_groups() -> None:
    from coordinator.connect import records as connect_records
    from coordinator.connect.codec import encode as encode_connect_record

    svc = GroupService()
    key, value = encode_connect_record(connect_records.group_epoch("grp", 1))
    assert svc.replay_bytes(key, value) is True
    assert svc.coordinator.group("grp") is None and svc.classic_groups.group("grp") is None
    assert svc.group_kind("grp") == "connect" and svc.connect.group("grp").group_epoch == 1  # type: ignore[union-attr]
