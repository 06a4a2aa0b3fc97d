"""The two ways a group ends at the service: DeleteGroups (an admin's request, routed to the group type
that holds each id) and the periodic expiry of groups left Empty for ``offsets.retention.minutes``.
Either way the group's records are tombstoned. Connect groups are deleted by DeleteGroups when empty;
they do not expire yet."""

from __future__ import annotations

from coordinator.connect import records as connect_records
from coordinator.errors import Errors
from coordinator.outcome import Outcome
from translate.group_messages import DeletableGroupResult, DeleteGroupsRequest, DeleteGroupsResponse
from translate.group_parts import GroupParts


def delete_groups(svc: GroupParts, out: Outcome, request: DeleteGroupsRequest, now_ms: int) -> DeleteGroupsResponse:
    results = []
    for gid in request.group_ids:
        if svc.classic_groups.group(gid) is not None:
            error, classic = svc.classic_groups.delete_group(gid, now_ms)
            out.take(classic)
        elif svc.connect.group(gid) is not None:
            error = _delete_connect_group(svc, out, gid)
        else:
            res = svc.coordinator.delete_group(gid)
            error = res.response
            out.take(res)
        results.append(DeletableGroupResult(gid, int(error)))
    return DeleteGroupsResponse(results)


def _delete_connect_group(svc: GroupParts, out: Outcome, group_id: str) -> Errors:
    """An empty connect group is deleted with tombstones of its records; one with workers is not."""
    group = svc.connect.group(group_id)
    assert group is not None
    if group.workers:
        return Errors.NON_EMPTY_GROUP
    records = [connect_records.target_member_tombstone(group_id, mid) for mid in sorted(group.target)]
    records.extend(connect_records.group_tombstones(group_id))
    for r in records:
        svc.connect.replay(r)
    out.records.extend(records)
    return Errors.NONE


def expire_empty_groups(svc: GroupParts, now_ms: int) -> Outcome:
    """Kafka's periodic group cleanup, for the caller to run every
    ``offsets.retention.check.interval.ms``: classic and consumer groups (converted ones too) that
    have been Empty for ``offsets.retention.minutes`` are deleted with tombstones of all their
    records. A group that got a member back in time is not Empty and stays. Committed offsets are
    the cluster's: it expires them by its own retention (docs/operations.md)."""
    out = Outcome()
    retention = svc.config.offsets_retention_ms
    _, classic = svc.classic_groups.expire_empty_groups(now_ms, retention)
    out.take(classic)
    out.take(svc.coordinator.expire_empty_groups(now_ms, retention))
    return out
