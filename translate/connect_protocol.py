"""Kafka Connect's classic group protocol: the bytes inside JoinGroup and SyncGroup of protocol type ``connect``.

Distributed Connect workers form a classic group whose protocols are Connect's compatibility modes:
``default`` (eager, metadata version 0), ``compatible`` (incremental cooperative, version 1) and
``sessioned`` (version 2: the same bytes, plus signed requests between workers). Each protocol's metadata is
a version header (int16), the worker's REST URL and the offset of the config topic it has read, and from
version 1 its whole current assignment (``allocation``, nullable bytes holding an encoded assignment). The
assignment the leader hands each member in SyncGroup is a version header, an error, the leader's member id
and URL, the config offset, the connectors and tasks assigned, and from version 1 the ones revoked and the
scheduled rebalance delay. A connector travels as task -1 in its own task list.

From version 1 an assignment is incremental: a worker stops what is revoked, then keeps what it ran minus
that, plus what is assigned. Readers tolerate missing trailing fields from version 1 (their defaults apply),
as Connect's do. Unreadable bytes raise ``ValueError``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from coordinator.connect.model import NOTHING, ConnectAssignment, TaskId

PROTOCOL_VERSIONS: dict[str, int] = {"default": 0, "compatible": 1, "sessioned": 2}
CONNECTOR_TASK = -1
NO_ERROR = 0
CONFIG_MISMATCH = 1


@dataclass(frozen=True, slots=True)
class ExtendedAssignment:
    version: int
    error: int
    leader: str
    leader_url: str
    config_offset: int
    assigned: ConnectAssignment
    revoked: ConnectAssignment = NOTHING
    delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class WorkerMetadata:
    version: int
    url: str
    config_offset: int
    allocation: ExtendedAssignment | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def done(self) -> bool:
        return self.pos >= len(self.data)

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise ValueError(f"connect protocol bytes end at {len(self.data)}, {size} more expected at {self.pos}")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def string(self) -> str:
        n = self.take(">h")
        if n < 0:
            raise ValueError("a connect protocol string is null")
        raw = self.data[self.pos : self.pos + n]
        if len(raw) != n:
            raise ValueError("a connect protocol string runs past the end")
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"a connect protocol string is not UTF-8: {e}") from None

    def nullable_bytes(self) -> bytes | None:
        n = self.take(">i")
        if n < 0:
            return None
        raw = self.data[self.pos : self.pos + n]
        if len(raw) != n:
            raise ValueError("connect protocol bytes run past the end")
        self.pos += n
        return raw

    def units(self, nullable: bool) -> ConnectAssignment:
        count = self.take(">i")
        if count < 0:
            if nullable:
                return NOTHING
            raise ValueError("a connect assignment array is null")
        connectors: set[str] = set()
        tasks: set[TaskId] = set()
        for _ in range(count):
            name = self.string()
            n = self.take(">i")
            if n < 0:
                raise ValueError("a connector's task array is null")
            for _ in range(n):
                task = self.take(">i")
                if task == CONNECTOR_TASK:
                    connectors.add(name)
                else:
                    tasks.add((name, task))
        return ConnectAssignment(frozenset(connectors), frozenset(tasks))


def _string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def _units(a: ConnectAssignment) -> bytes:
    by_connector: dict[str, list[int]] = {}
    for name in sorted(a.connectors):
        by_connector.setdefault(name, []).append(CONNECTOR_TASK)
    for name, task in sorted(a.tasks):
        by_connector.setdefault(name, []).append(task)
    out = [struct.pack(">i", len(by_connector))]
    for name, tasks in by_connector.items():
        out.append(_string(name))
        out.append(struct.pack(">i", len(tasks)) + b"".join(struct.pack(">i", t) for t in tasks))
    return b"".join(out)


def _check_version(version: int) -> None:
    if version < 0:
        raise ValueError(f"unsupported connect protocol version {version}")


def decode_assignment(data: bytes | None) -> ExtendedAssignment | None:
    """The assignment in ``data``; None for no bytes (Connect writes none for an empty allocation)."""
    if not data:
        return None
    r = _Reader(data)
    version = r.take(">h")
    _check_version(version)
    error = r.take(">h")
    leader = r.string()
    leader_url = r.string()
    offset = r.take(">q")
    if version == 0:
        return ExtendedAssignment(0, error, leader, leader_url, offset, r.units(nullable=False))
    assigned = r.units(nullable=True) if not r.done() else NOTHING
    revoked = r.units(nullable=True) if not r.done() else NOTHING
    delay = r.take(">i") if not r.done() else 0
    return ExtendedAssignment(version, error, leader, leader_url, offset, assigned, revoked, delay)


def encode_assignment(a: ExtendedAssignment) -> bytes:
    head = struct.pack(">hh", a.version, a.error) + _string(a.leader) + _string(a.leader_url) + struct.pack(">q", a.config_offset)
    if a.version == 0:
        return head + _units(a.assigned)
    return head + _units(a.assigned) + _units(a.revoked) + struct.pack(">i", a.delay_ms)


def decode_metadata(data: bytes) -> WorkerMetadata:
    r = _Reader(data)
    version = r.take(">h")
    _check_version(version)
    url = r.string()
    offset = r.take(">q")
    if version == 0 or r.done():
        return WorkerMetadata(version, url, offset)
    return WorkerMetadata(version, url, offset, decode_assignment(r.nullable_bytes()))


def encode_metadata(m: WorkerMetadata) -> bytes:
    out = struct.pack(">h", m.version) + _string(m.url) + struct.pack(">q", m.config_offset)
    if m.version == 0:
        return out
    if m.allocation is None:
        return out + struct.pack(">i", -1)
    raw = encode_assignment(m.allocation)
    return out + struct.pack(">i", len(raw)) + raw


def running(allocation: ExtendedAssignment | None) -> ConnectAssignment:
    """What a worker whose metadata carries ``allocation`` runs (its snapshot's assigned units)."""
    return NOTHING if allocation is None else allocation.assigned


def after(snapshot: ConnectAssignment, given: ExtendedAssignment | None) -> ConnectAssignment:
    """A worker's snapshot after it applied ``given`` (incremental from version 1, whole before)."""
    if given is None:
        return snapshot
    if given.version == 0:
        return given.assigned
    return (snapshot - given.revoked) | given.assigned
