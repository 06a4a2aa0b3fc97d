"""Offset-commit validation of consumer groups, case by case as Kafka 4.3.1's consumer group decides it
(KIP-848 epochs with KIP-1251 assignment epochs), for consumer-protocol and classic members alike."""

from __future__ import annotations

import uuid

import pytest

from coordinator.errors import Errors
from coordinator.model import ClassicMemberMetadata, ConsumerGroup, ConsumerGroupMember, MemberState
from coordinator.offsets import validate_offset_commit
from coordinator.records import CurrentMemberAssignmentValue, Record, RecordType
from coordinator.replay import apply

T = uuid.UUID(int=0xA1)
CLASSIC = ClassicMemberMetadata(45_000, (("range", b""),))


def group(classic: bool, epoch: int = 7, since: dict[int, int] | None = None) -> ConsumerGroup:
    """One member at ``epoch`` holding partitions of T since the given epochs (partition -> epoch)."""
    held = since if since is not None else {0: 5, 1: 7}
    m = ConsumerGroupMember(
        "m", classic_metadata=CLASSIC if classic else None, member_epoch=epoch,
        assigned_partitions={T: frozenset(held)}, assignment_epochs={T: dict(held)},
    )
    return ConsumerGroup("g", group_epoch=epoch, members={"m": m})


@pytest.mark.parametrize("classic", [False, True], ids=["consumer", "classic"])
def test_older_epoch_needs_every_partition_assigned_by_then(classic: bool) -> None:
    g = group(classic)
    refused = Errors.ILLEGAL_GENERATION if classic else Errors.STALE_MEMBER_EPOCH
    # Partition 0 is held since epoch 5: a commit at 6 (generation - 1 for a classic member) passes.
    assert validate_offset_commit(g, "m", 6, 9, partitions={T: [0]}) is Errors.NONE
    assert validate_offset_commit(g, "m", 5, 9, partitions={T: [0]}) is Errors.NONE
    assert validate_offset_commit(g, "m", 4, 9, partitions={T: [0]}) is refused
    # Partition 1 only since 7: one stale partition refuses the whole commit.
    assert validate_offset_commit(g, "m", 6, 9, partitions={T: [0, 1]}) is refused
    # A partition it does not hold, a topic the gateway cannot name, a future epoch.
    assert validate_offset_commit(g, "m", 6, 9, partitions={T: [2]}) is refused
    assert validate_offset_commit(g, "m", 6, 9, partitions=None) is refused
    assert validate_offset_commit(g, "m", 8, 9, partitions={T: [0]}) is refused
    # Nothing to commit: no partition can fail (Kafka validates per partition).
    assert validate_offset_commit(g, "m", 6, 9, partitions={}) is Errors.NONE
    assert validate_offset_commit(g, "m", 7, 9, partitions={T: [2]}) is Errors.NONE


def test_classic_member_may_commit_below_v9_and_consumer_member_may_not() -> None:
    assert validate_offset_commit(group(True), "m", 7, 8, partitions={T: [0]}) is Errors.NONE
    assert validate_offset_commit(group(False), "m", 7, 8, partitions={T: [0]}) is Errors.UNSUPPORTED_VERSION
    # The version check comes before the epoch check, as in Kafka.
    assert validate_offset_commit(group(False), "m", 9, 8) is Errors.UNSUPPORTED_VERSION


@pytest.mark.parametrize("classic", [False, True], ids=["consumer", "classic"])
def test_transactional_commits(classic: bool) -> None:
    g = group(classic)
    # A producer committing outside any membership is accepted even while the group has members.
    assert validate_offset_commit(g, "", -1, 5, is_transactional=True) is Errors.NONE
    # ... but not with an instance id, nor a non-transactional one.
    assert validate_offset_commit(g, "", -1, 5, True, group_instance_id="i") is Errors.UNKNOWN_MEMBER_ID
    assert validate_offset_commit(g, "", -1, 9) is Errors.UNKNOWN_MEMBER_ID
    # Stale epochs are ILLEGAL_GENERATION for transactional commits, whatever the member type.
    assert validate_offset_commit(g, "m", 8, 5, True, {T: [0]}) is Errors.ILLEGAL_GENERATION
    assert validate_offset_commit(g, "m", 6, 5, True, {T: [1]}) is Errors.ILLEGAL_GENERATION
    assert validate_offset_commit(g, "m", 6, 5, True, {T: [0]}) is Errors.NONE
    # Transactional commits have no minimum version for consumer-protocol members.
    assert validate_offset_commit(g, "m", 7, 0, True, {T: [0]}) is Errors.NONE


def test_members_and_empty_groups() -> None:
    g = group(False)
    assert validate_offset_commit(g, "other", 7, 9) is Errors.UNKNOWN_MEMBER_ID
    assert validate_offset_commit(ConsumerGroup("g"), "", -1, 9) is Errors.NONE
    assert validate_offset_commit(None, "", -1, 9) is Errors.NONE
    assert validate_offset_commit(None, "m", 3, 9) is Errors.ILLEGAL_GENERATION


def _assignment(epoch: int, assigned: set[int], pending: set[int]) -> Record:
    value = CurrentMemberAssignmentValue(
        epoch, epoch - 1, MemberState.UNREVOKED_PARTITIONS if pending else MemberState.STABLE,
        {T: frozenset(assigned)} if assigned else {}, {T: frozenset(pending)} if pending else {},
    )
    return Record(RecordType.CURRENT_MEMBER_ASSIGNMENT, "g", "m", value)


def test_partitions_pending_revocation_keep_the_epoch_they_were_assigned_at() -> None:
    groups: dict[str, ConsumerGroup] = {"g": ConsumerGroup("g")}
    groups["g"].members["m"] = ConsumerGroupMember("m")
    apply(groups, _assignment(3, {0, 1}, set()))
    apply(groups, _assignment(4, {0, 1, 2}, set()))
    apply(groups, _assignment(6, {0}, {1, 2}))  # 1 and 2 are being revoked
    m = groups["g"].members["m"]
    assert m.assignment_epochs == {T: {0: 3, 1: 3, 2: 4}}
    g = groups["g"]
    assert validate_offset_commit(g, "m", 4, 9, partitions={T: [1, 2]}) is Errors.NONE
    assert validate_offset_commit(g, "m", 3, 9, partitions={T: [2]}) is Errors.STALE_MEMBER_EPOCH
    apply(groups, _assignment(7, {0}, set()))  # revoked: no longer committable at an older epoch
    assert validate_offset_commit(g, "m", 6, 9, partitions={T: [1]}) is Errors.STALE_MEMBER_EPOCH
    assert validate_offset_commit(g, "m", 6, 9, partitions={T: [0]}) is Errors.NONE
