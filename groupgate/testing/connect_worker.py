"""A Kafka Connect worker on the new protocol, as a model: it speaks ConnectGroupHeartbeat,
ConnectGroupPrepareAssignment and ConnectGroupInstallAssignment to a gateway (docs/connect.md) and
follows Connect's rules, but runs no connector code.

Kafka Connect has no worker that speaks the connect group type, so tests (the project's and users' own)
use this one beside real distributed Connect workers: its join converts a running classic Connect group
into a connect group and its leave converts it back. It

- finds the group's coordinator (FindCoordinator) and joins with its URL and Connect's assignors
  (``sessioned`` [2-2], then ``compatible`` [1-1]), each with Connect's worker metadata (URL and config
  offset, translate/connect_protocol.py), which a classic leader reads like any member's;
- heartbeats at the interval it is given and reconciles as a Connect worker does: what its assignment
  no longer names is stopped first (and reported as no longer owned), then what it adds is started;
- computes the group's target when asked (COMPUTE_ASSIGNMENT) with the Connect-like incremental
  cooperative assignor (coordinator/connect/worker_assignor.py) over ``units``, the connectors and tasks
  the cluster runs (a real leader reads them from its config topic; the model is told them);
- on fencing (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID) stops everything and joins again at epoch 0;
- ``leave()`` stops everything and sends epoch -1; ``close()`` drops it as a crash would;
  ``suspend()`` / ``resume()`` stall its heartbeats while it keeps running its units (to be fenced).

"Running" a unit is recording it: ``running`` and ``history`` ((monotonic time, "start" | "stop", unit
name)), with optional ``on_start`` / ``on_stop`` callbacks; unit names are Connect's (a connector's name,
``<connector>-<task>`` for a task). Every request goes over one connection, one at a time; a failed one is
retried with a backoff after the connection is opened again. ``errors`` keeps the error codes answers
carried, ``failures`` the answers it could not read; ``wait_stable()`` waits until it runs exactly what it
was last given at an epoch above 0 with nothing left to report.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

from coordinator.connect.messages import (
    ConnectGroupPrepareAssignmentResponse,
    ConnectorsAndTasks,
    PreparedWorker,
)
from coordinator.connect.model import (
    NOTHING,
    REASON_NONE,
    REASON_SCHEDULED_REBALANCE,
    ConnectAssignment,
)
from coordinator.connect.worker_assignor import ConnectAssignor
from coordinator.errors import Errors
from gateway.wire.protocol import connect_messages as wire
from translate.connect_protocol import PROTOCOL_VERSIONS, WorkerMetadata, encode_metadata

# The requests' classes are versioned by index (kafka-python's ApiMessage), which type checkers cannot see.
_HEARTBEAT: Any = wire.ConnectGroupHeartbeatRequest
_PREPARE: Any = wire.ConnectGroupPrepareAssignmentRequest
_INSTALL: Any = wire.ConnectGroupInstallAssignmentRequest

log = logging.getLogger("groupgate.testing.connect_worker")

RETRIABLE = {
    int(Errors.COORDINATOR_LOAD_IN_PROGRESS), int(Errors.COORDINATOR_NOT_AVAILABLE), int(Errors.NOT_COORDINATOR),
    int(Errors.REBALANCE_IN_PROGRESS),
}  # fmt: skip
FENCED = {int(Errors.FENCED_MEMBER_EPOCH), int(Errors.UNKNOWN_MEMBER_ID)}


def unit_name(kind: str, unit: Any) -> str:
    """Connect's name of a connector (its name) or a task (``<connector>-<task>``)."""
    return unit if kind == "connector" else f"{unit[0]}-{unit[1]}"


def _names(a: ConnectAssignment) -> set[str]:
    return {unit_name("connector", c) for c in a.connectors} | {unit_name("task", t) for t in a.tasks}


class _Connection:
    """One connection, one request at a time (kafka-python's message classes and the gateway's)."""

    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self._rw: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._correlation = 0

    async def call(self, request: Any, response_class: Any, version: int, timeout_s: float = 15.0) -> Any:
        if self._rw is None:
            self._rw = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), timeout_s)
        reader, writer = self._rw
        self._correlation += 1
        cid = self._correlation
        request.with_header(correlation_id=cid, client_id=self.client_id)
        try:
            writer.write(bytes(request.encode(version=version, header=True, framed=True)))
            await writer.drain()
            size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), timeout_s), "big", signed=True)
            payload = await asyncio.wait_for(reader.readexactly(size), timeout_s)
        except BaseException:
            self.close()
            raise
        response = response_class[version].decode(payload, version=version, header=True)
        if response.header.correlation_id != cid:
            self.close()
            raise ConnectionError(f"correlation id {response.header.correlation_id} != {cid}")
        return response

    def close(self) -> None:
        if self._rw is not None:
            self._rw[1].close()
            self._rw = None


def _units(a: Any) -> ConnectAssignment:
    if a is None:
        return NOTHING
    return ConnectAssignment(frozenset(a.connectors or ()), frozenset((t.connector, t.task) for t in a.tasks or ()))


def _wire_units(cls: Any, a: ConnectAssignment) -> Any:
    return cls(
        connectors=sorted(a.connectors),
        tasks=[cls.ConnectorTaskId(connector=c, task=t) for c, t in sorted(a.tasks)],
    )


class ConnectWorkerModel:
    """One new-protocol Connect worker (see the module's doc). ``start()`` joins and keeps it going in the
    background; ``leave()`` ends it cleanly; ``close()`` drops it without leaving (a crash)."""

    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        url: str,
        units: ConnectAssignment = NOTHING,
        rebalance_timeout_ms: int = 60_000,
        scheduled_delay_ms: int = 300_000,
        config_offset: int = -1,
        member_id: str | None = None,
        on_start: Callable[[str], None] | None = None,
        on_stop: Callable[[str], None] | None = None,
    ) -> None:
        host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
        self.bootstrap = (host, int(port))
        self.group_id = group_id
        self.url = url
        self.units = units
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.config_offset = config_offset
        self.member_id = member_id or f"connect-worker-model-{uuid.uuid4()}"
        self.on_start, self.on_stop = on_start, on_stop
        self.assignor = ConnectAssignor(scheduled_delay_ms)
        self.member_epoch = 0
        self.assigned: ConnectAssignment = NOTHING  # what the coordinator last told it to run
        self.running: ConnectAssignment = NOTHING
        self.history: list[tuple[float, str, str]] = []
        self.errors: list[tuple[int, str | None]] = []  # error codes in answers, with their messages
        self.failures: list[str] = []  # answers it could not read (the exception's repr)
        self.computations = 0
        self.reason = REASON_NONE
        self._send_assignors = True
        self._conn: _Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stable = asyncio.Event()
        self._stopping = False

    # -- what tests ask ------------------------------------------------------------------------------

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"connect-worker {self.member_id}")

    async def wait_stable(self, timeout_s: float) -> None:
        """Until the worker runs exactly what it was last told, at an epoch above 0, with nothing pending."""
        await asyncio.wait_for(self._stable.wait(), timeout_s)

    async def leave(self) -> None:
        """Stop everything, then leave the group (epoch -1)."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._stop_units(self.running)
        if self.member_epoch > 0 or self.assigned:
            req = _HEARTBEAT[0](
                group_id=self.group_id, member_id=self.member_id, member_epoch=-1, instance_id=None,
                rebalance_timeout_ms=-1, server_assignor=None, client_assignors=None, connectors_and_tasks=None,
                worker_url=None,
            )  # fmt: skip
            try:
                res = await self._call(req, wire.ConnectGroupHeartbeatResponse)
                if res.error_code:
                    self.errors.append((res.error_code, res.error_message))
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
                log.warning("leave of %s not answered: %s", self.member_id, e)
        self.member_epoch = 0
        self.close_connection()

    async def suspend(self) -> None:
        """Stop heartbeating but keep "running" what it runs, as a stalled worker does (a long pause, a cut
        network): past the session timeout the coordinator fences it, which it learns on ``resume()``."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._stable.clear()

    async def resume(self) -> None:
        """Heartbeat again after ``suspend()``."""
        if self._task is None and not self._stopping:
            await self.start()

    async def close(self) -> None:
        """Stop without leaving: the coordinator fences the worker when its session runs out."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.close_connection()

    def close_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- the loop ------------------------------------------------------------------------------------

    async def _coordinator(self) -> _Connection:
        if self._conn is not None:
            return self._conn
        boot = _Connection(*self.bootstrap, client_id=self.member_id)
        try:
            res = await boot.call(
                FindCoordinatorRequest[4](key_type=0, coordinator_keys=[self.group_id]), FindCoordinatorResponse, 4
            )
        finally:
            boot.close()
        (c,) = res.coordinators
        if c.error_code:
            raise ConnectionError(f"FindCoordinator: error {c.error_code} ({c.error_message})")
        self._conn = _Connection(c.host, c.port, client_id=self.member_id)
        return self._conn

    async def _call(self, request: Any, response_class: Any) -> Any:
        conn = await self._coordinator()
        return await conn.call(request, response_class, 0)

    async def _run(self) -> None:
        backoff = 0.1
        while not self._stopping:
            try:
                interval_ms = await self._heartbeat()
                backoff = 0.1
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
                log.info("connect worker %s: %s; retrying", self.member_id, e)
                self.close_connection()
                interval_ms = int(backoff * 1000)
                backoff = min(backoff * 2, 2.0)
            except Exception as e:  # an answer it cannot read: log it, drop the connection, back off
                log.warning("connect worker %s: unexpected answer (%r); retrying", self.member_id, e)
                self.failures.append(repr(e))
                self.close_connection()
                interval_ms = int(backoff * 1000)
                backoff = min(backoff * 2, 2.0)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(interval_ms, 10) / 1000)

    def _assignors(self) -> list[Any]:
        a = wire.ConnectGroupHeartbeatRequest.Assignor
        out = []
        for name in ("sessioned", "compatible"):
            v = PROTOCOL_VERSIONS[name]
            meta = encode_metadata(WorkerMetadata(v, self.url, self.config_offset))
            out.append(a(name=name, minimum_version=v, maximum_version=v, reason=self.reason, metadata_version=v,
                         metadata=meta))  # fmt: skip
        return out

    async def _heartbeat(self) -> int:
        joining = self.member_epoch == 0
        cat = wire.ConnectGroupHeartbeatRequest.ConnectorsAndTasks
        req = _HEARTBEAT[0](
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.member_epoch, instance_id=None,
            rebalance_timeout_ms=self.rebalance_timeout_ms if joining else -1, server_assignor=None,
            client_assignors=self._assignors() if joining or self._send_assignors else None,
            connectors_and_tasks=_wire_units(cat, NOTHING if joining else self.running),
            worker_url=self.url if joining else None,
        )  # fmt: skip
        self._send_assignors = False
        res = await self._call(req, wire.ConnectGroupHeartbeatResponse)
        code = res.error_code
        if code in FENCED:
            self.errors.append((code, res.error_message))
            self._stop_units(self.running)
            self.assigned, self.member_epoch = NOTHING, 0
            self._stable.clear()
            return 0
        if code in RETRIABLE or (code and code != Errors.COMPUTE_ASSIGNMENT):
            self.errors.append((code, res.error_message))
            if code not in RETRIABLE:
                log.warning("connect worker %s: heartbeat error %s (%s)", self.member_id, code, res.error_message)
            self._send_assignors = True
            return 500
        self.member_epoch = res.member_epoch
        if res.assignment is not None:
            self.assigned = _units(res.assignment.connectors_and_tasks)
        again = self._reconcile()
        if code == Errors.COMPUTE_ASSIGNMENT:
            if not await self._compute():
                self._stable.clear()
                return 500  # the coordinator asks again on the next heartbeat; not at once
            again = True
        if self.member_epoch > 0 and self.running == self.assigned and not again:
            self._stable.set()
        else:
            self._stable.clear()
        return 0 if again else int(res.heartbeat_interval_ms)

    def _reconcile(self) -> bool:
        """Stop what is no longer assigned, else start what is new; whether to report at once."""
        stop = self.running - self.assigned
        if stop:
            self._stop_units(stop)
            return True
        start = self.assigned - self.running
        if start:
            self.running = self.running | start
            now = time.monotonic()
            for name in sorted(_names(start)):
                self.history.append((now, "start", name))
                if self.on_start is not None:
                    self.on_start(name)
            return True
        return False

    def _stop_units(self, units: ConnectAssignment) -> None:
        if not units:
            return
        self.running = self.running - units
        now = time.monotonic()
        for name in sorted(_names(units)):
            self.history.append((now, "stop", name))
            if self.on_stop is not None:
                self.on_stop(name)

    async def _compute(self) -> bool:
        """PrepareAssignment, the assignor, InstallAssignment; whether the target was installed."""
        self.computations += 1
        prep = await self._call(
            _PREPARE[0](
                group_id=self.group_id, member_id=self.member_id, member_epoch=self.member_epoch
            ),
            wire.ConnectGroupPrepareAssignmentResponse,
        )
        if prep.error_code:
            self.errors.append((prep.error_code, prep.error_message))
            return False
        prepared = prepared_from_wire(prep)
        now_ms = int(time.monotonic() * 1000)
        targets = self.assignor.assign(prepared, self.units, now_ms)
        m = wire.ConnectGroupInstallAssignmentRequest.Member
        version = PROTOCOL_VERSIONS.get(prep.assignor_name, 0)
        inst = await self._call(
            _INSTALL[0](
                group_id=self.group_id, member_id=self.member_id, member_epoch=self.member_epoch,
                group_epoch=prep.group_epoch, error=0,
                members=[
                    m(member_id=w, assigned=_wire_units(m.ConnectorsAndTasks, a), error=0, metadata_version=version,
                      metadata=b"")
                    for w, a in sorted(targets.items())
                ],
            ),
            wire.ConnectGroupInstallAssignmentResponse,
        )  # fmt: skip
        if inst.error_code:
            self.errors.append((inst.error_code, inst.error_message))
            return False
        # The scheduled rebalance delay: ask for a new target through the assignor's reason when it runs out.
        if self.reason != REASON_NONE:
            self.reason, self._send_assignors = REASON_NONE, True
        if self.assignor.deadline_ms is not None:
            delay_s = max(0, self.assignor.deadline_ms - now_ms) / 1000
            asyncio.get_running_loop().call_later(delay_s, self._delay_ran_out)
        return True

    def _delay_ran_out(self) -> None:
        if self.assignor.held and not self._stopping:
            self.reason, self._send_assignors = REASON_SCHEDULED_REBALANCE, True
            self._wake.set()


def prepared_from_wire(prep: Any) -> ConnectGroupPrepareAssignmentResponse:
    """The wire's PrepareAssignment answer as the assignor reads it."""
    return ConnectGroupPrepareAssignmentResponse(
        group_epoch=prep.group_epoch,
        assignor_name=prep.assignor_name,
        members=[
            PreparedWorker(
                member_id=m.member_id, member_epoch=m.member_epoch, instance_id=m.instance_id, url=m.worker_url,
                version=m.assignor.metadata_version, reason=m.assignor.reason, metadata=bytes(m.assignor.metadata),
                assigned=ConnectorsAndTasks.of(_units(m.owned)), target=ConnectorsAndTasks.of(_units(m.target)),
            )
            for m in prep.members
        ],
    )  # fmt: skip
