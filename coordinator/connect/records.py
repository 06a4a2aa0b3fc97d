"""The records a connect group is made of, and ``apply``: records -> state.

Laid out as consumer groups' records are (one record per key, each a whole-state upsert of its key,
so any order a compacted log keeps replays to the same state; a tombstone's value is None), with key
versions of their own, far from the ones Kafka uses (docs/connect.md, "Records"):

| type | key                   | value                                                             |
| ---- | --------------------- | ----------------------------------------------------------------- |
| 1000 | group                 | ConnectGroupMetadataValue(epoch)                                  |
| 1001 | group, member         | ConnectMemberMetadataValue(url, assignors, ...)                   |
| 1002 | group                 | ConnectTargetMetadataValue(assignment epoch, error, assignor)     |
| 1003 | group, member         | ConnectTargetMemberValue(connectors, tasks, error, version, ...)  |
| 1004 | group, member         | ConnectCurrentAssignmentValue(epochs, state, assigned, pending)   |

The target is one record per worker rather than the draft's single record, so a large group is not
bound by a batch's size (as KIP-848 splits consumer groups' targets).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from coordinator.connect.model import (
    NOTHING,
    ClassicWorkerMetadata,
    ClientAssignor,
    ConnectAssignment,
    ConnectGroup,
    ConnectWorker,
    WorkerState,
    WorkerTarget,
)


class ConnectRecordType(enum.IntEnum):
    GROUP_METADATA = 1000
    MEMBER_METADATA = 1001
    TARGET_METADATA = 1002
    TARGET_MEMBER = 1003
    CURRENT_ASSIGNMENT = 1004


@dataclass(frozen=True, slots=True)
class ConnectGroupMetadataValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class ConnectMemberMetadataValue:
    url: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    assignors: tuple[ClientAssignor, ...]
    classic: ClassicWorkerMetadata | None = None


@dataclass(frozen=True, slots=True)
class ConnectTargetMetadataValue:
    assignment_epoch: int
    error: int
    assignor: str | None


@dataclass(frozen=True, slots=True)
class ConnectTargetMemberValue:
    target: WorkerTarget


@dataclass(frozen=True, slots=True)
class ConnectCurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: WorkerState
    assigned: ConnectAssignment
    pending_revocation: ConnectAssignment
    error: int
    version: int
    metadata: bytes


ConnectRecordValue = (
    ConnectGroupMetadataValue
    | ConnectMemberMetadataValue
    | ConnectTargetMetadataValue
    | ConnectTargetMemberValue
    | ConnectCurrentAssignmentValue
)


@dataclass(frozen=True, slots=True)
class ConnectRecord:
    type: ConnectRecordType
    group_id: str
    sub_key: str | None  # the member id for 1001, 1003 and 1004
    value: ConnectRecordValue | None  # None: tombstone


# Constructors.


def group_epoch(group_id: str, epoch: int) -> ConnectRecord:
    return ConnectRecord(ConnectRecordType.GROUP_METADATA, group_id, None, ConnectGroupMetadataValue(epoch))


def member_metadata(group_id: str, w: ConnectWorker) -> ConnectRecord:
    value = ConnectMemberMetadataValue(
        w.url, w.instance_id, w.client_id, w.client_host, w.rebalance_timeout_ms, w.assignors, w.classic
    )
    return ConnectRecord(ConnectRecordType.MEMBER_METADATA, group_id, w.member_id, value)


def member_metadata_tombstone(group_id: str, member_id: str) -> ConnectRecord:
    return ConnectRecord(ConnectRecordType.MEMBER_METADATA, group_id, member_id, None)


def target_metadata(group_id: str, epoch: int, error: int, assignor: str | None) -> ConnectRecord:
    return ConnectRecord(
        ConnectRecordType.TARGET_METADATA, group_id, None, ConnectTargetMetadataValue(epoch, error, assignor)
    )


def target_member(group_id: str, member_id: str, target: WorkerTarget) -> ConnectRecord:
    return ConnectRecord(ConnectRecordType.TARGET_MEMBER, group_id, member_id, ConnectTargetMemberValue(target))


def target_member_tombstone(group_id: str, member_id: str) -> ConnectRecord:
    return ConnectRecord(ConnectRecordType.TARGET_MEMBER, group_id, member_id, None)


def current_assignment(group_id: str, w: ConnectWorker) -> ConnectRecord:
    value = ConnectCurrentAssignmentValue(
        w.member_epoch, w.previous_member_epoch, w.state, w.assigned, w.pending_revocation, w.error, w.version,
        w.metadata,
    )
    return ConnectRecord(ConnectRecordType.CURRENT_ASSIGNMENT, group_id, w.member_id, value)


def current_assignment_tombstone(group_id: str, member_id: str) -> ConnectRecord:
    return ConnectRecord(ConnectRecordType.CURRENT_ASSIGNMENT, group_id, member_id, None)


def group_tombstones(group_id: str) -> list[ConnectRecord]:
    return [
        ConnectRecord(ConnectRecordType.TARGET_METADATA, group_id, None, None),
        ConnectRecord(ConnectRecordType.GROUP_METADATA, group_id, None, None),
    ]


# Replay.


def _group(groups: dict[str, ConnectGroup], group_id: str) -> ConnectGroup:
    g = groups.get(group_id)
    if g is None:
        g = groups[group_id] = ConnectGroup(group_id)
    return g


def _worker(group: ConnectGroup, member_id: str) -> ConnectWorker:
    w = group.workers.get(member_id)
    if w is None:
        w = group.workers[member_id] = ConnectWorker(member_id)
    return w


def _release(group: ConnectGroup, member_id: str, a: ConnectAssignment) -> None:
    for c in a.connectors:
        if group.connector_owners.get(c) == member_id:
            del group.connector_owners[c]
    for t in a.tasks:
        if group.task_owners.get(t) == member_id:
            del group.task_owners[t]


def _own(group: ConnectGroup, member_id: str, a: ConnectAssignment) -> None:
    for c in a.connectors:
        group.connector_owners[c] = member_id
    for t in a.tasks:
        group.task_owners[t] = member_id


def _set_current(group: ConnectGroup, w: ConnectWorker, v: ConnectCurrentAssignmentValue | None) -> None:
    _release(group, w.member_id, w.assigned)
    _release(group, w.member_id, w.pending_revocation)
    if v is None:
        w.member_epoch = w.previous_member_epoch = 0
        w.state = WorkerState.STABLE
        w.assigned = w.pending_revocation = NOTHING
        w.error = w.version = 0
        w.metadata = b""
        return
    w.member_epoch = v.member_epoch
    w.previous_member_epoch = v.previous_member_epoch
    w.state = v.state
    w.assigned = v.assigned
    w.pending_revocation = v.pending_revocation
    w.error = v.error
    w.version = v.version
    w.metadata = v.metadata
    _own(group, w.member_id, v.assigned)
    _own(group, w.member_id, v.pending_revocation)


def apply(groups: dict[str, ConnectGroup], record: ConnectRecord) -> None:
    rtype = record.type
    v = record.value
    gid = record.group_id
    mid = record.sub_key
    if rtype is ConnectRecordType.GROUP_METADATA:
        if v is None:
            g = groups.pop(gid, None)
            if g is not None:
                g.dead = True
            return
        assert isinstance(v, ConnectGroupMetadataValue)
        _group(groups, gid).group_epoch = v.epoch
    elif rtype is ConnectRecordType.MEMBER_METADATA:
        assert mid is not None
        g = _group(groups, gid)
        if v is None:
            w = g.workers.pop(mid, None)
            if w is not None:
                _set_current(g, w, None)
            return
        assert isinstance(v, ConnectMemberMetadataValue)
        w = _worker(g, mid)
        w.url = v.url
        w.instance_id = v.instance_id
        w.client_id = v.client_id
        w.client_host = v.client_host
        w.rebalance_timeout_ms = v.rebalance_timeout_ms
        w.assignors = v.assignors
        w.classic = v.classic
    elif rtype is ConnectRecordType.TARGET_METADATA:
        if v is None:
            return
        assert isinstance(v, ConnectTargetMetadataValue)
        g = _group(groups, gid)
        g.assignment_epoch = v.assignment_epoch
        g.assignment_error = v.error
        g.assignor = v.assignor
    elif rtype is ConnectRecordType.TARGET_MEMBER:
        assert mid is not None
        g = _group(groups, gid)
        if v is None:
            g.target.pop(mid, None)
        else:
            assert isinstance(v, ConnectTargetMemberValue)
            g.target[mid] = v.target
    elif rtype is ConnectRecordType.CURRENT_ASSIGNMENT:
        assert mid is not None
        g = _group(groups, gid)
        if v is None:
            w2 = g.workers.get(mid)
            if w2 is not None:
                _set_current(g, w2, None)
            return
        assert isinstance(v, ConnectCurrentAssignmentValue)
        _set_current(g, _worker(g, mid), v)


def replay(records: Iterable[ConnectRecord]) -> dict[str, ConnectGroup]:
    groups: dict[str, ConnectGroup] = {}
    for r in records:
        apply(groups, r)
    return groups
