"""OffsetCommit / TxnOffsetCommit and OffsetFetch checked against the group that holds the id, before
the gateway writes the offsets through to the cluster or reads them from there.

A consumer group checks member epochs (KIP-848, with the partitions a commit names resolved to topic
ids: coordinator/offsets.py); a classic group checks generations (translate/classic_coordinator.py).
A classic member's accepted commit also counts as a sign of life (Kafka's classic coordinator
completes its heartbeat). A connect group's id takes commits outside any generation while it has no
workers, and a worker's at its member epoch (STALE_MEMBER_EPOCH otherwise), as a consumer group does;
it never becomes a classic "simple" group.
"""

from __future__ import annotations

import uuid

from coordinator.errors import Errors
from coordinator.outcome import Outcome
from translate.group_messages import OffsetCheckResponse, OffsetCommitCheck, OffsetFetchCheck
from translate.group_parts import GroupParts, consumer_group


def offset_commit_check(svc: GroupParts, out: Outcome, request: OffsetCommitCheck, now_ms: int) -> OffsetCheckResponse:
    error = validate_offset_commit(svc, request, now_ms)
    if error == Errors.NONE and not request.is_transactional and request.member_id:
        out.take(svc.classic_groups.offset_committed(request.group_id, request.member_id, now_ms))
    return OffsetCheckResponse(error)


def _connect_commit(svc: GroupParts, check: OffsetCommitCheck) -> Errors | None:
    group = svc.connect.group(check.group_id)
    if group is None:
        return None
    if check.generation_id < 0 and not check.member_id:
        return Errors.NONE if not group.workers else Errors.UNKNOWN_MEMBER_ID
    worker = group.workers.get(check.member_id)
    if worker is None:
        return Errors.UNKNOWN_MEMBER_ID
    return Errors.NONE if check.generation_id == worker.member_epoch else Errors.STALE_MEMBER_EPOCH


def validate_offset_commit(svc: GroupParts, check: OffsetCommitCheck, now_ms: int) -> Errors:
    connect = _connect_commit(svc, check)
    if connect is not None:
        return connect
    group = consumer_group(svc, check.group_id)
    if group is not None:
        partitions: dict[uuid.UUID, set[int]] | None = None
        if check.partitions is not None:
            topics = svc.coordinator.state.topics
            partitions = {}
            for name, parts in check.partitions:
                meta = topics.get(name)
                if meta is None:
                    partitions = None  # an unknown topic: only the exact epoch is valid
                    break
                partitions.setdefault(meta.topic_id, set()).update(parts)
        return svc.coordinator.validate_offset_commit(
            check.group_id, check.member_id, check.generation_id, check.api_version, check.is_transactional,
            partitions, check.group_instance_id,
        )
    return svc.classic_groups.validate_offset_commit(
        check.group_id, check.member_id, check.generation_id, check.group_instance_id,
        check.api_version, now_ms, check.is_transactional,
    )


def validate_offset_fetch(svc: GroupParts, check: OffsetFetchCheck) -> Errors:
    if svc.connect.group(check.group_id) is not None:
        return Errors.NONE
    if svc.classic_groups.group(check.group_id) is not None:
        return svc.classic_groups.validate_offset_fetch(check.group_id)
    return svc.coordinator.validate_offset_fetch(check.group_id, check.member_id, check.member_epoch)
