"""A classic member inside a consumer group, through the group service: the behaviours of Kafka's
per-member translation not covered by test_classic_member_in_consumer_group.py."""

from __future__ import annotations

from migration_harness import (
    REBALANCE,
    SESSION,
    TOPIC,
    TOPIC_ID,
    Driver,
    assignment_bytes,
    identity,
    metadata,
    partitions_of,
)

from coordinator.errors import Errors
from coordinator.model import MemberState
from coordinator.timers import session_key
from translate.classic_messages import JoinGroupRequest, JoinGroupRequestProtocol, SyncGroupRequest
from translate.result import timer_key


def consumer_group_with_classic_member(d: Driver, **join: object) -> tuple[str, int]:
    assert d.consumer("m1").error_code == 0
    first = d.join_response(d.join(client="a", **join))  # type: ignore[arg-type]
    member_id = first.member_id
    if first.error_code == Errors.MEMBER_ID_REQUIRED:
        first = d.join_response(d.join(member_id=member_id, client="a", **join))  # type: ignore[arg-type]
    assert first.error_code == 0, first
    return first.member_id, first.generation_id


def test_classic_join_with_session_timeout_out_of_bounds_is_invalid_session_timeout() -> None:
    d = Driver()
    d.consumer("m1")
    assert d.join_response(d.join(session=1000)).error_code == Errors.INVALID_SESSION_TIMEOUT
    assert d.join_response(d.join(session=1_800_001)).error_code == Errors.INVALID_SESSION_TIMEOUT


def test_classic_join_v0_uses_the_session_timeout_as_rebalance_timeout() -> None:
    d = Driver()
    d.consumer("m1")
    key, _ = d.send(JoinGroupRequest("g", 12_000, "", "consumer", [JoinGroupRequestProtocol("range", metadata())],
                                     rebalance_timeout_ms=99_000, api_version=0, client_id="old"))
    response = d.join_response(key)
    assert response.error_code == 0
    assert d.cgroup().members[response.member_id].rebalance_timeout_ms == 12_000


def test_classic_join_into_a_full_consumer_group_is_group_max_size_reached() -> None:
    d = Driver(max_group_size=1)
    d.consumer("m1")
    first = d.join_response(d.join(client="a"))
    assert d.join_response(d.join(member_id=first.member_id, client="a")).error_code == Errors.GROUP_MAX_SIZE_REACHED


def test_classic_dynamic_member_rejoining_with_a_forgotten_id_is_created_again() -> None:
    d = Driver()
    d.consumer("m1")
    response = d.join_response(d.join(member_id="forgotten", client="a"))
    assert response.error_code == 0 and response.member_id == "forgotten"
    assert d.cgroup().members["forgotten"].uses_classic_protocol


def test_classic_static_join_with_unknown_instance_or_other_member_id_is_refused() -> None:
    d = Driver()
    member_id, _ = consumer_group_with_classic_member(d, instance_id="s1")
    assert d.join_response(d.join(member_id=member_id, instance_id="other")).error_code == Errors.UNKNOWN_MEMBER_ID
    assert d.join_response(d.join(member_id="impostor", instance_id="s1")).error_code == Errors.FENCED_INSTANCE_ID


def test_classic_subscription_comes_from_the_first_protocol_and_never_sets_a_server_assignor() -> None:
    d = Driver()
    d.consumer("m1")
    protocols = [
        JoinGroupRequestProtocol("range", metadata(topics=(TOPIC,))),
        JoinGroupRequestProtocol("roundrobin", metadata(topics=("other",))),
    ]
    key, _ = d.send(JoinGroupRequest("g", SESSION, "", "consumer", protocols, REBALANCE, "s1", client_id="a"))
    response = d.join_response(key)
    member = d.cgroup().members[response.member_id]
    assert member.subscribed_topic_names == {TOPIC} and member.server_assignor is None
    assert response.protocol_name == "range" and response.leader == "" and not response.skip_assignment
    assert timer_key("classic-member-sync", "g", response.member_id) in d.timers
    assert d.timers[session_key("g", response.member_id)] == d.now + SESSION


def test_classic_sync_to_a_missing_or_empty_group_is_unknown_member_id() -> None:
    d = Driver()
    assert d.sync_response(d.sync("x", 1)).error_code == Errors.UNKNOWN_MEMBER_ID
    d.consumer("m1")
    d.consumer("m1", epoch=-1, full=False)
    assert d.sync_response(d.sync("x", 1)).error_code == Errors.UNKNOWN_MEMBER_ID


def test_classic_sync_with_another_protocol_name_is_inconsistent_group_protocol() -> None:
    d = Driver()
    member_id, generation = consumer_group_with_classic_member(d)
    key, _ = d.send(SyncGroupRequest("g", generation, member_id, None, "consumer", "roundrobin"))
    assert d.sync_response(key).error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    key, _ = d.send(SyncGroupRequest("g", generation, member_id, None, "connect", None))
    assert d.sync_response(key).error_code == Errors.INCONSISTENT_GROUP_PROTOCOL


def test_classic_sync_behind_the_group_epoch_is_rebalance_in_progress_and_arms_the_join_timer() -> None:
    d = Driver()
    member_id, generation = consumer_group_with_classic_member(d)
    d.consumer("m2")
    assert d.sync_response(d.sync(member_id, generation)).error_code == Errors.REBALANCE_IN_PROGRESS
    assert timer_key("classic-member-join", "g", member_id) in d.timers


def test_classic_sync_ignores_the_clients_assignment_and_cancels_the_sync_timer() -> None:
    d = Driver()
    member_id, generation = consumer_group_with_classic_member(d)
    sync = d.sync_response(d.sync(member_id, generation, {member_id: assignment_bytes({TOPIC: [0, 1, 2, 3, 4, 5]})}))
    assert sync.error_code == 0
    assert partitions_of(sync.assignment).get(TOPIC, []) == sorted(
        d.cgroup().members[member_id].assigned_partitions.get(TOPIC_ID, ())
    )
    assert timer_key("classic-member-sync", "g", member_id) not in d.timers


def test_classic_sync_returns_current_partitions_not_those_pending_revocation() -> None:
    d = Driver(mode="translate")
    first = d.join_response(d.join(client="a"))
    join = d.join_response(d.join(member_id=first.member_id, client="a"))
    member_id = join.member_id
    sync = d.sync_response(d.sync(member_id, join.generation_id))
    assert partitions_of(sync.assignment) == {TOPIC: list(range(6))}
    d.consumer("m2")
    # Rejoin still owning everything: half must be revoked first.
    join = d.join_response(d.join(member_id=member_id, client="a", owned={TOPIC: list(range(6))}))
    member = d.cgroup().members[member_id]
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    pending = sorted(member.partitions_pending_revocation.get(TOPIC_ID, ()))
    kept = sorted(member.assigned_partitions.get(TOPIC_ID, ()))
    sync = d.sync_response(d.sync(member_id, join.generation_id))
    assert len(pending) == 3 and partitions_of(sync.assignment) == {TOPIC: kept}


def test_classic_heartbeat_asks_for_rejoin_once_awaited_partitions_are_released() -> None:
    d = Driver()
    a, gen_a = consumer_group_with_classic_member(d)
    d.sync(a, gen_a)
    # m1 holds partitions; a newcomer classic member waits for some of them.
    first = d.join_response(d.join(client="b"))
    b_join = d.join_response(d.join(member_id=first.member_id, client="b"))
    b = b_join.member_id
    d.sync(b, b_join.generation_id)
    m1 = d.cgroup().members["m1"]
    assert d.cgroup().members[b].state is MemberState.UNRELEASED_PARTITIONS
    assert d.heartbeat(b, b_join.generation_id) == Errors.NONE
    # m1 acknowledges its revocation: the partitions b waits for are free now.
    target = sorted(d.cgroup().target_assignment["m1"].get(TOPIC_ID, ()))
    d.consumer("m1", epoch=m1.member_epoch, owned=sorted(m1.assigned_partitions.get(TOPIC_ID, ())))
    d.consumer("m1", epoch=d.cgroup().members["m1"].member_epoch, owned=target)
    assert d.heartbeat(b, b_join.generation_id) == Errors.REBALANCE_IN_PROGRESS


def test_classic_leave_batch_bumps_the_group_epoch_once() -> None:
    d = Driver(mode="translate")
    ids = []
    for client in ("a", "b", "c"):
        first = d.join_response(d.join(client=client))
        ids.append(d.join_response(d.join(member_id=first.member_id, client=client)).member_id)
    epoch = d.cgroup().group_epoch
    response = d.leave(identity(ids[0]), identity(ids[1]))
    assert [m.error_code for m in response.members] == [Errors.NONE, Errors.NONE]
    assert d.cgroup().group_epoch == epoch + 1 and set(d.cgroup().members) == {ids[2]}


def test_classic_static_member_leaving_is_removed_outright() -> None:
    d = Driver()
    member_id, _ = consumer_group_with_classic_member(d, instance_id="s1")
    assert d.leave(identity(member_id, "s1")).members[0].error_code == Errors.NONE
    assert member_id not in d.cgroup().members and "s1" not in d.cgroup().static_members


def test_classic_leave_refuses_a_consumer_protocol_member_by_member_id() -> None:
    d = Driver()
    classic, _ = consumer_group_with_classic_member(d)
    response = d.leave(identity(classic), identity("m1"), identity("nobody"))
    assert [m.error_code for m in response.members] == [
        Errors.NONE, Errors.UNKNOWN_MEMBER_ID, Errors.UNKNOWN_MEMBER_ID,
    ]
    assert classic not in d.cgroup().members and "m1" in d.cgroup().members


def test_classic_leave_with_the_wrong_member_id_for_an_instance_is_fenced() -> None:
    d = Driver()
    consumer_group_with_classic_member(d, instance_id="s1")
    assert d.leave(identity("impostor", "s1")).members[0].error_code == Errors.FENCED_INSTANCE_ID


def test_classic_member_session_expiry_fences_it_with_an_epoch_bump() -> None:
    d = Driver()
    member_id, _ = consumer_group_with_classic_member(d)
    epoch = d.cgroup().group_epoch
    d.absorb(d.service.on_timer(session_key("g", member_id), d.now + SESSION))
    assert member_id not in d.cgroup().members and d.cgroup().group_epoch == epoch + 1
    assert timer_key("classic-member-sync", "g", member_id) not in d.timers


def test_classic_rejoin_bumps_the_group_epoch_only_when_its_subscription_changes() -> None:
    d = Driver()
    member_id, _ = consumer_group_with_classic_member(d)
    epoch = d.cgroup().group_epoch
    d.join(member_id=member_id, client="a")
    assert d.cgroup().group_epoch == epoch
    key, _ = d.send(JoinGroupRequest("g", SESSION, member_id, "consumer",
                                     [JoinGroupRequestProtocol("range", metadata(topics=(TOPIC, "bar")))],
                                     REBALANCE, client_id="a"))
    assert d.join_response(key).error_code == 0
    assert d.cgroup().group_epoch == epoch + 1
