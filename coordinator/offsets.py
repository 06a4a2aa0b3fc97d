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
# TxnOffsetCommit from this version answers a consumer member's stale epoch STALE_MEMBER_EPOCH and an
# unknown group GROUP_ID_NOT_FOUND (KIP-1319); before, both are ILLEGAL_GENERATION.
TXN_OFFSET_COMMIT_STALE_EPOCH_VERSION = 6


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
    group_instance_id: str | None = None,
) -> Errors:
    """OffsetCommit (and TxnOffsetCommit with ``is_transactional``) against a consumer group, as
    Kafka 4.3's consumer group validates it (KIP-848 with KIP-1251 assignment epochs):

    - epoch < 0 on a group without members: accepted (admin tools, manual assignment);
    - a transactional commit without member id, generation or instance id: accepted (a producer
      that commits outside any membership);
    - otherwise the member must exist (UNKNOWN_MEMBER_ID);
    - a consumer-protocol member below OffsetCommit v9: UNSUPPORTED_VERSION;
    - the member's own epoch: accepted; a newer one: refused;
    - an older epoch (KIP-1251): accepted when every committed partition is one the member holds
      (assigned or pending revocation) since that epoch or earlier; refused otherwise, including
      for partitions of topics the gateway cannot name (``partitions`` None).
    Refusals are STALE_MEMBER_EPOCH for consumer-protocol members and ILLEGAL_GENERATION for
    classic members; a transactional commit below TxnOffsetCommit v6 turns STALE_MEMBER_EPOCH into
    ILLEGAL_GENERATION, which older transactional producers know (Kafka 4.4, KIP-1319). A missing group accepts epoch < 0 (the gateway creates a simple
    group) and answers ILLEGAL_GENERATION otherwise, as for classic groups.
    """
    if group is None:
        return Errors.NONE if member_epoch < 0 else Errors.ILLEGAL_GENERATION
    if member_epoch < 0 and not group.members:
        return Errors.NONE
    if is_transactional and member_epoch == -1 and member_id == "" and group_instance_id is None:
        return Errors.NONE
    member = group.members.get(member_id)
    if member is None:
        return Errors.UNKNOWN_MEMBER_ID
    classic = member.classic_metadata is not None
    if not is_transactional and not classic and api_version < MIN_OFFSET_COMMIT_VERSION_FOR_CONSUMER_PROTOCOL:
        return Errors.UNSUPPORTED_VERSION
    if member_epoch == member.member_epoch:
        return Errors.NONE
    stale_as_illegal = is_transactional and api_version < TXN_OFFSET_COMMIT_STALE_EPOCH_VERSION
    refused = Errors.ILLEGAL_GENERATION if classic or stale_as_illegal else Errors.STALE_MEMBER_EPOCH
    if member_epoch > member.member_epoch:
        return refused  # a future epoch is never valid
    # KIP-1251: assignmentEpoch(partition) <= received epoch < member epoch. A commit sent just before
    # a heartbeat (or, for a classic member, a rejoin) moved the member to a new epoch, for partitions
    # it held all along, is no zombie: Kafka 4.3 accepts it, classic members included.
    if partitions is not None and _assigned_since(member.assignment_epochs, partitions, member_epoch):
        return Errors.NONE
    return refused


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
