"""What a classic Connect worker inside a connect group reads and is handed, in Connect's bytes
(translate/connect_protocol.py): its JoinGroup protocols read as assignors, the group as its leader reads it,
and the incremental assignment a SyncGroup hands it (translate/connect_classic_worker.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from coordinator.connect.messages import AssignorSpec, PreparedWorker
from coordinator.connect.model import NO_TARGET, REASON_NONE, ConnectAssignment, ConnectGroup, ConnectWorker
from translate.classic_messages import JoinGroupRequestProtocol, JoinGroupResponseMember
from translate.connect_protocol import (
    NO_ERROR,
    ExtendedAssignment,
    WorkerMetadata,
    decode_assignment,
    decode_metadata,
    encode_metadata,
    running,
)


@dataclasses.dataclass(frozen=True, slots=True)
class ClassicJoin:
    """A classic worker's JoinGroup read: its assignors, URL, config offset and what it runs."""

    assignors: tuple[AssignorSpec, ...]
    url: str
    config_offset: int
    runs: ConnectAssignment


def read_protocols(protocols: Sequence[JoinGroupRequestProtocol]) -> ClassicJoin:
    """The worker's incremental protocols (version 1+) as assignors; ValueError when it has none or a
    metadata cannot be read. Eager ``default`` (version 0) is left out: its workers stop everything at
    every rebalance, which a per-worker translation cannot follow."""
    specs: list[AssignorSpec] = []
    first: WorkerMetadata | None = None
    for p in protocols:
        md = decode_metadata(p.metadata)
        if md.version < 1:
            continue
        first = first or md
        bare = encode_metadata(WorkerMetadata(md.version, md.url, md.config_offset, None))
        specs.append(AssignorSpec(p.name, md.version, md.version, REASON_NONE, md.version, bare))
    if first is None:
        raise ValueError("the worker offers no incremental Connect protocol (compatible or sessioned)")
    return ClassicJoin(tuple(specs), first.url, first.config_offset, running(first.allocation))


def delivery(
    group: ConnectGroup, worker: ConnectWorker, owned_at_join: ConnectAssignment, delay_given: bytes | None
) -> tuple[ExtendedAssignment, bytes | None]:
    """The incremental assignment handing ``worker`` what the core gives it, from what it ran at its join,
    and the target metadata whose scheduled delay has now been handed out (a delay is given once)."""
    target = group.target.get(worker.member_id, NO_TARGET)
    try:
        stored = decode_assignment(target.metadata)
    except ValueError:
        stored = None  # a target installed by a worker on the connect protocol, in its own layout
    leader = group.last_computer or (stored.leader if stored is not None else "")
    leader_worker = group.workers.get(leader)
    leader_url = leader_worker.url if leader_worker is not None else (stored.leader_url if stored is not None else "")
    if stored is not None:
        offset = stored.config_offset
    else:
        offset = max((config_offset(w) for w in group.workers.values()), default=-1)
    delay = 0
    if stored is not None and stored.delay_ms > 0 and delay_given != target.metadata:
        delay = stored.delay_ms
        delay_given = target.metadata
    version = target.version if target.version >= 1 else max((a.version for a in worker.assignors), default=1)
    return ExtendedAssignment(
        version, group.assignment_error or target.error, leader, leader_url, offset,
        assigned=worker.assigned - owned_at_join, revoked=owned_at_join - worker.assigned, delay_ms=delay,
    ), delay_given


def config_offset(worker: ConnectWorker) -> int:
    for a in worker.assignors:
        try:
            return decode_metadata(a.metadata).config_offset
        except ValueError:
            continue
    return -1


def leader_view(p: PreparedWorker, version: int, leader: str, leader_url: str) -> JoinGroupResponseMember:
    """A worker as the computing classic worker reads it: its URL, config offset and what it runs now."""
    try:
        offset = decode_metadata(p.metadata).config_offset
    except ValueError:
        offset = -1
    runs = p.assigned.assignment()
    allocation = ExtendedAssignment(version, NO_ERROR, leader, leader_url, offset, runs) if runs else None
    return JoinGroupResponseMember(p.member_id, p.instance_id, encode_metadata(WorkerMetadata(version, p.url, offset, allocation)))
