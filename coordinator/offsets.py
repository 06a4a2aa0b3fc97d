"""Offset commit / fetch validation for consumer groups (KIP-848 "OffsetCommit API" as Kafka 4.x does it).

Pure functions the gateway calls before writing or reading offsets; they return Kafka error codes.
Commits do not extend a member's session.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from coordinator.errors import Errors
from coordinator.model import ConsumerGroup

# KIP-848 members must commit with OffsetCommit >= 9 (the version that carries member epochs).
MIN_OFFSET_COMMIT_VERSION_FOR_CONSUMER_PROTOCOL = 9


def _epoch_error(received: int, member_epoch: int, classic: bool) -> Errors:
    if received == member_epoch:
        return Errors.NONE
    return Errors.ILLEGAL_GENERATION if classic else Errors.STALE_MEMBER_EPOCH


def validate_offset_commit(
    group: ConsumerGroup | None,
    member_id: str,
    member_epoch: int,
    api_version: int,
    is_transactional: bool = False,
    partitions: Mapping[uuid.UUID, Iterable[int]] | None = None,
) -> Errors:
    """OffsetCommit (and TxnOffsetCommit with ``is_transactional``) against a consumer group.

    - epoch < 0 on a group without members: accepted (admin tools, manual assignment);
    - otherwise the member must exist (UNKNOWN_MEMBER_ID);
    - a consumer-protocol member below OffsetCommit v9: UNSUPPORTED_VERSION;
    - the epoch must equal the member epoch: STALE_MEMBER_EPOCH (ILLEGAL_GENERATION for classic
      members and for transactional commits).
    A missing group accepts epoch < 0 (the gateway creates a simple group) and answers
    ILLEGAL_GENERATION otherwise, as for classic groups.
    """
    if group is None:
        return Errors.NONE if member_epoch < 0 else Errors.ILLEGAL_GENERATION
    if member_epoch < 0 and not group.members:
        return Errors.NONE
    member = group.members.get(member_id)
    if member is None:
        return Errors.UNKNOWN_MEMBER_ID
    classic = member.classic_metadata is not None
    if not is_transactional and not classic and api_version < MIN_OFFSET_COMMIT_VERSION_FOR_CONSUMER_PROTOCOL:
        return Errors.UNSUPPORTED_VERSION
    err = _epoch_error(member_epoch, member.member_epoch, classic)
    older = member_epoch < member.member_epoch  # (a future epoch is never valid)
    if older and not classic and partitions and _assigned_since(member.assignment_epochs, partitions, member_epoch):
        # KIP-1251: assignmentEpoch(partition) <= client epoch <= member epoch. A commit sent just
        # before a heartbeat moved the member to a new epoch, for partitions it held all along, is
        # no zombie (Kafka 4.3 accepts it; librdkafka's synchronous commit raises otherwise).
        return Errors.NONE
    if err is Errors.STALE_MEMBER_EPOCH and is_transactional:
        return Errors.ILLEGAL_GENERATION
    return err


def _assigned_since(
    epochs: Mapping[uuid.UUID, Mapping[int, int]], partitions: Mapping[uuid.UUID, Iterable[int]], received: int
) -> bool:
    for topic_id, parts in partitions.items():
        since = epochs.get(topic_id)
        for p in parts:
            if since is None or p not in since or since[p] > received:
                return False
    return True


def validate_offset_fetch(group: ConsumerGroup | None, member_id: str | None, member_epoch: int) -> Errors:
    """OffsetFetch v9+: without a member id and with epoch < 0 anyone may read; otherwise the member
    must exist and its epoch match (STALE_MEMBER_EPOCH)."""
    if member_id is None and member_epoch < 0:
        return Errors.NONE
    if group is None:
        return Errors.GROUP_ID_NOT_FOUND
    member = group.members.get(member_id) if member_id is not None else None
    if member is None:
        return Errors.UNKNOWN_MEMBER_ID
    return _epoch_error(member_epoch, member.member_epoch, member.classic_metadata is not None)
