"""Connect group records <-> key/value bytes, laid out as consumer groups' records are
(``coordinator.records.codec``): a key is the int16 record type (1000-1004) followed by the group id
(and member id); a value is int16 version 0 followed by flexible fields. The layouts are in
``coordinator/connect/schemas/*.json``. ``encode(record) -> (key, value | None)``, ``decode(key, value)``.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.api_data import ApiData

from coordinator.connect import records as cr
from coordinator.connect.model import (
    ClassicWorkerMetadata,
    ClientAssignor,
    ConnectAssignment,
    WorkerState,
    WorkerTarget,
)

_SCHEMAS = "coordinator.connect.schemas"


class ConnectGroupMetadataKey(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


class ConnectGroupMetadataValue(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


class ConnectGroupMemberMetadataKey(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


class ConnectGroupMemberMetadataValue(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


class ConnectGroupTargetAssignmentMetadataKey(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


class ConnectGroupTargetAssignmentMetadataValue(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


class ConnectGroupTargetAssignmentMemberKey(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


class ConnectGroupTargetAssignmentMemberValue(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


class ConnectGroupCurrentMemberAssignmentKey(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


class ConnectGroupCurrentMemberAssignmentValue(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


T = cr.ConnectRecordType
_KEYS: dict[cr.ConnectRecordType, Any] = {
    T.GROUP_METADATA: ConnectGroupMetadataKey,
    T.MEMBER_METADATA: ConnectGroupMemberMetadataKey,
    T.TARGET_METADATA: ConnectGroupTargetAssignmentMetadataKey,
    T.TARGET_MEMBER: ConnectGroupTargetAssignmentMemberKey,
    T.CURRENT_ASSIGNMENT: ConnectGroupCurrentMemberAssignmentKey,
}
_WITH_MEMBER = {T.MEMBER_METADATA, T.TARGET_MEMBER, T.CURRENT_ASSIGNMENT}
KEY_VERSIONS = frozenset(int(t) for t in T)


def _units(cls: Any, a: ConnectAssignment) -> Any:
    # Sorted, so that equal assignments encode to equal bytes.
    return cls.ConnectorsAndTasks(
        connectors=sorted(a.connectors),
        tasks=[cls.ConnectorsAndTasks.ConnectorTaskId(connector=c, task=n) for c, n in sorted(a.tasks)],
    )


def _from_units(d: Any) -> ConnectAssignment:
    return ConnectAssignment(frozenset(d.connectors), frozenset((t.connector, t.task) for t in d.tasks))


def _classic(d: Any) -> ClassicWorkerMetadata | None:
    if d is None:
        return None
    return ClassicWorkerMetadata(d.session_timeout_ms, tuple((p.name, bytes(p.metadata)) for p in d.supported_protocols))


def encode_key(record: cr.ConnectRecord) -> bytes:
    fields: dict[str, Any] = {"group_id": record.group_id}
    if record.type in _WITH_MEMBER:
        fields["member_id"] = record.sub_key
    return bytes(_KEYS[record.type](**fields).encode(version=int(record.type)))


def encode_value(record: cr.ConnectRecord) -> bytes | None:
    v = record.value
    data: Any
    if v is None:
        return None
    if isinstance(v, cr.ConnectGroupMetadataValue):
        data = ConnectGroupMetadataValue(epoch=v.epoch)
    elif isinstance(v, cr.ConnectMemberMetadataValue):
        c = ConnectGroupMemberMetadataValue
        kw: dict[str, Any] = dict(
            url=v.url, instance_id=v.instance_id, client_id=v.client_id, client_host=v.client_host,
            rebalance_timeout_ms=v.rebalance_timeout_ms,
            assignors=[
                c.Assignor(name=a.name, minimum_version=a.minimum_version, maximum_version=a.maximum_version,
                           reason=a.reason, metadata_version=a.version, metadata=a.metadata)
                for a in v.assignors
            ],
        )
        if v.classic is not None:
            # A tagged field: records of workers on the new protocol (and older records) carry none.
            cm = c.ClassicMemberMetadata
            kw["classic_member_metadata"] = cm(
                session_timeout_ms=v.classic.session_timeout_ms,
                supported_protocols=[cm.ClassicProtocol(name=n, metadata=md) for n, md in v.classic.protocols],
            )
        data = c(**kw)
    elif isinstance(v, cr.ConnectTargetMetadataValue):
        data = ConnectGroupTargetAssignmentMetadataValue(
            assignment_epoch=v.assignment_epoch, error=v.error, assignor=v.assignor
        )
    elif isinstance(v, cr.ConnectTargetMemberValue):
        c = ConnectGroupTargetAssignmentMemberValue
        t = v.target
        data = c(assigned=_units(c, t.assignment), error=t.error, metadata_version=t.version, metadata=t.metadata)
    elif isinstance(v, cr.ConnectCurrentAssignmentValue):
        c = ConnectGroupCurrentMemberAssignmentValue
        data = c(
            member_epoch=v.member_epoch, previous_member_epoch=v.previous_member_epoch, state=int(v.state),
            assigned=_units(c, v.assigned), pending_revocation=_units(c, v.pending_revocation), error=v.error,
            metadata_version=v.version, metadata=v.metadata,
        )
    else:  # pragma: no cover - exhaustive above
        raise TypeError(f"unknown record value {v!r}")
    return bytes(data.encode(version=0))


def encode(record: cr.ConnectRecord) -> tuple[bytes, bytes | None]:
    return encode_key(record), encode_value(record)


def decode(key: bytes, value: bytes | None) -> cr.ConnectRecord:
    rtype = cr.ConnectRecordType(int.from_bytes(key[:2], "big", signed=True))
    k = _KEYS[rtype].decode(key)
    sub_key = k.member_id if rtype in _WITH_MEMBER else None
    if value is None:
        return cr.ConnectRecord(rtype, k.group_id, sub_key, None)
    out: cr.ConnectRecordValue
    if rtype is T.GROUP_METADATA:
        out = cr.ConnectGroupMetadataValue(ConnectGroupMetadataValue.decode(value).epoch)
    elif rtype is T.MEMBER_METADATA:
        d = ConnectGroupMemberMetadataValue.decode(value)
        out = cr.ConnectMemberMetadataValue(
            d.url, d.instance_id, d.client_id, d.client_host, d.rebalance_timeout_ms,
            tuple(
                ClientAssignor(a.name, a.minimum_version, a.maximum_version, a.reason, a.metadata_version, bytes(a.metadata))
                for a in d.assignors
            ),
            _classic(d.classic_member_metadata),
        )
    elif rtype is T.TARGET_METADATA:
        d = ConnectGroupTargetAssignmentMetadataValue.decode(value)
        out = cr.ConnectTargetMetadataValue(d.assignment_epoch, d.error, d.assignor)
    elif rtype is T.TARGET_MEMBER:
        d = ConnectGroupTargetAssignmentMemberValue.decode(value)
        out = cr.ConnectTargetMemberValue(WorkerTarget(_from_units(d.assigned), d.error, d.metadata_version, bytes(d.metadata)))
    else:
        d = ConnectGroupCurrentMemberAssignmentValue.decode(value)
        out = cr.ConnectCurrentAssignmentValue(
            d.member_epoch, d.previous_member_epoch, WorkerState(d.state), _from_units(d.assigned),
            _from_units(d.pending_revocation), d.error, d.metadata_version, bytes(d.metadata),
        )
    return cr.ConnectRecord(rtype, k.group_id, sub_key, out)
