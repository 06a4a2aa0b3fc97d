"""Offset commits of consumer-protocol members racing their own epoch bump (KIP-1251 assignment epochs).

A member commits at epoch N while a heartbeat moves it to N+2 without changing what it holds (a
predecessor leaving and a classic member joining, milliseconds apart). Kafka 4.3 accepts such a
commit when every committed partition was assigned at or before N; refusing it made librdkafka's
synchronous commit raise, and the client left the group for good.
"""

from __future__ import annotations

from migration_harness import TOPIC, TOPIC_ID, Driver

from coordinator.errors import Errors
from coordinator.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from translate.group_messages import OffsetCommitCheck
from translate.group_service import GroupService

PARTITIONS = 6


def heartbeat(
    d: Driver, member_id: str, epoch: int, owned: list[int] | None = None, *, join: bool = False
) -> ConsumerGroupHeartbeatResponse:
    """A heartbeat as librdkafka sends it: full on join, otherwise the owned partitions only."""
    if join:
        request = ConsumerGroupHeartbeatRequest(
            group_id="g", member_id=member_id, member_epoch=epoch, rebalance_timeout_ms=300_000,
            subscribed_topic_names=[TOPIC], topic_partitions=[],
        )
    else:
        request = ConsumerGroupHeartbeatRequest(
            group_id="g", member_id=member_id, member_epoch=epoch, rebalance_timeout_ms=-1,
            topic_partitions=[TopicPartitions(TOPIC_ID, sorted(owned))] if owned is not None else None,
        )
    key, _ = d.send(request)
    return d.responses[key]  # type: ignore[no-any-return]


def commit(d: Driver, member_id: str, epoch: int, partitions: tuple[int, ...]) -> int:
    key, _ = d.send(OffsetCommitCheck("g", member_id, epoch, api_version=9, partitions=((TOPIC, partitions),)))
    return d.responses[key].error_code  # type: ignore[no-any-return]


def settle(d: Driver, members: list[str], rounds: int = 4) -> None:
    for _ in range(rounds):
        for m in members:
            heartbeat(d, m, d.cgroup().members[m].member_epoch, owned=d.assigned(m))


def test_commit_of_kept_partitions_at_the_epoch_just_left_behind_is_accepted() -> None:
    d = Driver(partitions=PARTITIONS)
    ids = [f"K{i}" for i in range(5)]
    for m in ids:
        heartbeat(d, m, 0, join=True)
    settle(d, ids)
    group = d.cgroup()
    assert group.state().value == "Stable"
    before = group.group_epoch
    k4_epoch = group.members["K4"].member_epoch
    # K0 (consumer protocol) leaves; a classic member joins within milliseconds: two epoch bumps.
    heartbeat(d, "K0", -1)
    first = d.join_response(d.join(client="c0.3"))
    assert d.join_response(d.join(member_id=first.member_id, client="c0.3")).error_code == Errors.NONE
    response = heartbeat(d, "K4", k4_epoch, owned=d.assigned("K4"))
    assert response.member_epoch == before + 2 and response.assignment is None
    held = tuple(d.assigned("K4"))
    assert held
    # The commit K4 had in flight carries the epoch it just left behind.
    assert commit(d, "K4", k4_epoch, held) == Errors.NONE
    # Still fenced: a partition it does not hold at that epoch, and any epoch above its own.
    other = next(p for p in range(PARTITIONS) if p not in held)
    assert commit(d, "K4", k4_epoch, (other,)) == Errors.STALE_MEMBER_EPOCH
    assert commit(d, "K4", before + 3, held) == Errors.STALE_MEMBER_EPOCH


def test_partition_newly_assigned_needs_the_epoch_it_was_assigned_at() -> None:
    d = Driver(partitions=PARTITIONS)
    heartbeat(d, "A", 0, join=True)
    settle(d, ["A"], rounds=1)
    heartbeat(d, "B", 0, join=True)  # A must give up half of its partitions to B
    settle(d, ["A", "B"])
    b = d.cgroup().members["B"]
    got = tuple(d.assigned("B"))
    assert got
    assert commit(d, "B", b.member_epoch, got) == Errors.NONE
    assert commit(d, "B", b.member_epoch - 1, got) == Errors.STALE_MEMBER_EPOCH


def test_assignment_epochs_are_rebuilt_by_replay() -> None:
    d = Driver(partitions=PARTITIONS)
    ids = ["A", "B", "C"]
    for m in ids:
        heartbeat(d, m, 0, join=True)
    settle(d, ids)
    live = {m: d.cgroup().members[m].assignment_epochs for m in ids}
    for m in ids:
        epochs = live[m].get(TOPIC_ID, {})
        assert set(epochs) == set(d.assigned(m))
        assert all(e <= d.cgroup().members[m].member_epoch for e in epochs.values())
    replayed = GroupService()
    for record in d.records:
        replayed.replay(record)
    group = replayed.coordinator.group("g")
    assert group is not None
    assert {m: group.members[m].assignment_epochs for m in ids} == live
