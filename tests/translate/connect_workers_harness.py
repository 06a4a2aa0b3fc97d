"""Simulated Kafka Connect workers driving a GroupService with decoded requests, for the tests of classic
Connect groups converted to connect groups and back.

- ``ClassicWorker`` behaves as a distributed Connect worker on the incremental protocol: its JoinGroup
  metadata (``sessioned`` then ``compatible``) carries its whole current allocation; after SyncGroup it
  stops what is revoked and starts what is assigned; it rejoins at once after a revocation or when
  given a scheduled delay (the delay is taken as elapsed); as leader it runs ``connect_like_assign`` on
  the members' allocations; a lost membership (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION) keeps what it runs
  and rejoins, as Connect's WorkerCoordinator does.
- ``NewWorker`` speaks ConnectGroupHeartbeat, computes with the same assignor through Prepare/Install and
  runs what the answers give it; when it had to give something up it asks for the next computation through
  its assignor's reason (SCHEDULED_REBALANCE, then NONE), as a Connect worker rejoins after a revocation.
- ``World`` sends one request per worker at a time, delivers answers that may come later (parked classic
  joins), fires due timers when every worker waits, and checks after every answer that no connector or
  task runs on two workers.
"""

from __future__ import annotations

from typing import Any

from coordinator.connect.messages import (
    AssignorSpec,
    ConnectGroupHeartbeatRequest,
    ConnectGroupInstallAssignmentRequest,
    ConnectGroupPrepareAssignmentRequest,
    ConnectorsAndTasks,
    InstalledWorker,
)
from coordinator.connect.model import NOTHING, ConnectAssignment
from coordinator.errors import Errors
from coordinator.timers import CancelTimer, ScheduleTimer
from translate.classic_messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    LeaveGroupRequest,
    MemberIdentity,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from translate.classic_rebalance import ClassicGroupConfig
from translate.connect_protocol import (
    PROTOCOL_VERSIONS,
    ExtendedAssignment,
    WorkerMetadata,
    after,
    decode_assignment,
    decode_metadata,
    encode_assignment,
    encode_metadata,
    running,
)
from translate.group_config import GroupServiceConfig, encode_any_record
from translate.group_service import GroupService

G = "connect-cluster"
OFFSET = 7  # the config topic offset every worker has read
Unit = tuple[str, Any]


def units(a: ConnectAssignment) -> set[Unit]:
    return {("c", c) for c in a.connectors} | {("t", t) for t in a.tasks}


def assignment(us: set[Unit]) -> ConnectAssignment:
    return ConnectAssignment(frozenset(n for k, n in us if k == "c"), frozenset(n for k, n in us if k == "t"))


def configured(connectors: int, tasks: int) -> set[Unit]:
    out: set[Unit] = set()
    for i in range(connectors):
        out.add(("c", f"conn{i}"))
        out.update(("t", (f"conn{i}", n)) for n in range(tasks))
    return out


def connect_like_assign(current: dict[str, set[Unit]], wanted: set[Unit]) -> dict[str, tuple[set[Unit], set[Unit]]]:
    """An incremental cooperative assignor in the manner of Connect's: (newly assigned, revoked) per worker.
    Units run twice or no longer configured are revoked; units nobody runs go to the least loaded workers;
    when nothing is unassigned, workers above the fair share give the excess up (assigned next round)."""
    owner: dict[Unit, str] = {}
    revoked: dict[str, set[Unit]] = {m: set() for m in current}
    for m in sorted(current):
        for u in sorted(current[m], key=repr):
            if u not in wanted or u in owner:
                revoked[m].add(u)
            else:
                owner[u] = m
    load = {m: len(current[m] - revoked[m]) for m in current}
    running_anywhere = set().union(*current.values()) if current else set()
    free = sorted(wanted - running_anywhere, key=repr)
    assigned: dict[str, set[Unit]] = {m: set() for m in current}
    if not free and current and max(load.values()) - min(load.values()) > 1:
        total = sum(load.values())
        base, extra = divmod(total, len(current))
        ranked = sorted(current, key=lambda x: (-load[x], x))
        for i, m in enumerate(ranked):
            share = base + (1 if i < extra else 0)
            kept = sorted(current[m] - revoked[m], key=repr)
            for u in kept[: max(load[m] - share, 0)]:
                revoked[m].add(u)
                load[m] -= 1
    for u in free:
        m = min(sorted(current), key=lambda x: load[x])
        assigned[m].add(u)
        load[m] += 1
    return {m: (assigned[m], revoked[m]) for m in current}


class World:
    def __init__(self, wanted: set[Unit], svc: GroupService | None = None) -> None:
        self.svc = svc or GroupService(GroupServiceConfig(classic=ClassicGroupConfig(initial_rebalance_delay_ms=0)))
        self.wanted = wanted
        self.now = 0
        self.workers: dict[str, Any] = {}
        self.waiting: dict[Any, Any] = {}
        self.timers: dict[Any, int] = {}
        self.log: list[tuple[bytes, bytes | None]] = []
        self.records: list[Any] = []
        self.sent = 0
        self.calls: Any = self.svc  # what requests and timers go through (the service, or a wrapper of it)

    def send(self, worker: Any, request: Any) -> None:
        self.sent += 1
        key = (worker.name, self.sent)
        worker.outstanding = key
        self.waiting[key] = worker
        self.deliver(self.calls.handle(request, key, self.now))

    def call(self, request: Any) -> Any:
        """A request answered at once (Prepare / Install)."""
        out = self.calls.handle(request, "direct", self.now)
        self.deliver(out)
        return out.response_to("direct")

    def deliver(self, out: Any) -> None:
        self.records.extend(out.records)
        self.log.extend(encode_any_record(r) for r in out.records)
        for t in out.timers:
            if isinstance(t, ScheduleTimer):
                self.timers[t.key] = t.deadline_ms
            elif isinstance(t, CancelTimer):
                self.timers.pop(t.key, None)
        for reply in out.responses:
            worker = self.waiting.pop(reply.request_key, None)
            if worker is None:
                continue
            worker.outstanding = None
            worker.on_response(reply.body)
            self.check()

    def check(self) -> None:
        seen: dict[Unit, str] = {}
        for w in self.workers.values():
            for u in w.runs_units():
                assert u not in seen, f"{u} runs on {seen[u]} and {w.name}"
                seen[u] = w.name

    def settle(self, rounds: int = 200) -> None:
        """Steps every worker until a whole round changes nothing and every unit configured runs."""
        quiet = 0
        for _ in range(rounds):
            before = (self.sent, self.running())
            for w in list(self.workers.values()):
                if w.outstanding is None:
                    w.step()
            if all(w.outstanding is not None for w in self.workers.values()) and self.workers:
                self.fire_next_timer()
            if self.sent == before[0] + len(self.workers) and before[1] == self.running() and self.idle():
                quiet += 1
                if quiet >= 3:
                    return
            else:
                quiet = 0
        raise AssertionError(f"the group did not settle: {self.running()}")

    def idle(self) -> bool:
        return all(w.idle() for w in self.workers.values())

    def fire_next_timer(self) -> None:
        if not self.timers:
            return
        key = min(self.timers, key=lambda k: self.timers[k])
        self.now = max(self.now, self.timers.pop(key))
        self.deliver(self.calls.on_timer(key, self.now))

    def crash(self, worker: Any) -> None:
        """The worker dies (it runs nothing any more); its session runs out at the gateway, whichever type
        holds the group, while the others are taken to have kept heartbeating."""
        del self.workers[worker.name]
        worker.runs = NOTHING
        mid = worker.member_id
        for key in [k for k in self.timers if k[2] == mid and k[0] in ("connect-session", "classic-heartbeat")]:
            deadline = self.timers.pop(key)
            self.now = max(self.now, deadline)
            self.deliver(self.calls.on_timer(key, self.now))

    def running(self) -> dict[str, frozenset[Unit]]:
        return {n: frozenset(w.runs_units()) for n, w in self.workers.items()}

    def all_run(self) -> bool:
        return set().union(*self.running().values()) == self.wanted if self.workers else True


class ClassicWorker:
    def __init__(self, world: World, name: str, protocols: tuple[str, ...] = ("sessioned", "compatible")) -> None:
        self.protocols = protocols  # Connect's connect.protocol: sessioned offers both, compatible only its own
        self.world = world
        self.name = name
        self.member_id = ""
        self.generation = -1
        self.runs: ConnectAssignment = NOTHING
        self.need_join = True
        self.need_sync = False
        self.leader_members: list[Any] = []
        self.protocol: str | None = None
        self.outstanding: Any = None
        self.last_code = 0
        world.workers[name] = self

    def runs_units(self) -> set[Unit]:
        return units(self.runs)

    def idle(self) -> bool:
        return not self.need_join and not self.need_sync

    def metadata(self, version: int) -> bytes:
        alloc = ExtendedAssignment(version, 0, "", "", OFFSET, self.runs) if self.runs else None
        return encode_metadata(WorkerMetadata(version, f"http://{self.name}:8083", OFFSET, alloc))

    def join_request(self) -> JoinGroupRequest:
        return JoinGroupRequest(
            G, 10_000, member_id=self.member_id, protocol_type="connect", rebalance_timeout_ms=60_000,
            protocols=[JoinGroupRequestProtocol(p, self.metadata(PROTOCOL_VERSIONS[p])) for p in self.protocols],
            client_id=self.name,
        )  # fmt: skip

    def step(self) -> None:
        if self.need_join:
            self.world.send(self, self.join_request())
        elif self.need_sync:
            assignments = []
            if self.leader_members:
                assignments = self.compute(self.leader_members)
            self.world.send(self, SyncGroupRequest(G, self.generation, self.member_id, protocol_type="connect",
                                                   protocol_name=self.protocol, assignments=assignments))  # fmt: skip
        else:
            self.world.send(self, HeartbeatRequest(G, self.generation, self.member_id))

    def compute(self, members: list[Any]) -> list[SyncGroupRequestAssignment]:
        current = {m.member_id: units(running(decode_metadata(m.metadata).allocation)) for m in members}
        result = connect_like_assign(current, self.world.wanted)
        url = f"http://{self.name}:8083"
        return [
            SyncGroupRequestAssignment(mid, encode_assignment(ExtendedAssignment(
                PROTOCOL_VERSIONS[self.protocol or "sessioned"], 0, self.member_id, url, OFFSET, assignment(new), assignment(gone),
            )))  # fmt: skip
            for mid, (new, gone) in sorted(result.items())
        ]

    def lose_membership(self) -> None:
        # As Connect's WorkerCoordinator on the incremental protocol: it keeps running its snapshot and
        # rejoins reporting it (only an unreachable coordinator makes it stop everything).
        self.need_join = True
        self.need_sync = False

    def on_response(self, body: Any) -> None:
        kind = type(body).__name__
        code = body.error_code
        self.last_code = code
        if kind == "JoinGroupResponse":
            if code == Errors.MEMBER_ID_REQUIRED:
                self.member_id = body.member_id
                return
            if code == Errors.UNKNOWN_MEMBER_ID:
                self.member_id = ""
                self.lose_membership()
                return
            if code:
                return  # REBALANCE_IN_PROGRESS and the like: join again
            self.member_id = body.member_id
            self.generation = body.generation_id
            self.protocol = body.protocol_name
            if body.leader == self.member_id and not body.members:
                # Connect's leader reads every member's config offset: none at all fails its assignor
                # (IncrementalCooperativeAssignor takes the maximum of an empty list) and the worker exits.
                raise AssertionError(f"{self.member_id} was made the leader of a JoinGroup without members")
            self.leader_members = list(body.members) if body.leader == self.member_id else []
            self.need_join, self.need_sync = False, True
        elif kind == "SyncGroupResponse":
            self.need_sync = False
            if code in (Errors.UNKNOWN_MEMBER_ID, Errors.ILLEGAL_GENERATION):
                if code == Errors.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                self.lose_membership()
                return
            if code:
                self.need_join = True
                return
            given = decode_assignment(body.assignment)
            assert given is not None
            self.runs = after(self.runs, given)
            self.need_join = bool(given.revoked) or given.delay_ms > 0
        elif kind == "HeartbeatResponse":
            if code in (Errors.UNKNOWN_MEMBER_ID, Errors.ILLEGAL_GENERATION):
                if code == Errors.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                self.lose_membership()
            elif code == Errors.REBALANCE_IN_PROGRESS:
                self.need_join = True
        else:  # LeaveGroupResponse
            pass

    def leave(self) -> None:
        self.runs = NOTHING
        del self.world.workers[self.name]
        self.world.deliver(self.world.calls.handle(LeaveGroupRequest(G, [MemberIdentity(self.member_id)]), "leave", self.world.now))


class NewWorker:
    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = self.member_id = name
        self.epoch = 0
        self.runs: ConnectAssignment = NOTHING
        self.compute_asked = False
        self.outstanding: Any = None
        self.last_answer: Any = None
        self.reason = 0
        world.workers[name] = self

    def runs_units(self) -> set[Unit]:
        return units(self.runs)

    def idle(self) -> bool:
        return not self.compute_asked and not self.reason

    def step(self) -> None:
        if self.compute_asked:
            self.compute_asked = False
            self.compute()
            return
        url = f"http://{self.name}:8083"
        specs = [
            AssignorSpec(p, v, v, reason=self.reason, version=v, metadata=encode_metadata(WorkerMetadata(v, url, OFFSET)))
            for p, v in (("sessioned", 2), ("compatible", 1))
        ]
        self.world.send(self, ConnectGroupHeartbeatRequest(
            G, self.name, self.epoch, rebalance_timeout_ms=60_000, client_assignors=specs, worker_url=url,
            owned=ConnectorsAndTasks.of(self.runs) if self.epoch else ConnectorsAndTasks(),
        ))  # fmt: skip

    def compute(self) -> None:
        prep = self.world.call(ConnectGroupPrepareAssignmentRequest(G, self.name, self.epoch))
        if prep.error_code:
            return
        current = {p.member_id: units(p.assigned.assignment()) for p in prep.members}
        result = connect_like_assign(current, self.world.wanted)
        members = []
        for p in prep.members:
            new, gone = result[p.member_id]
            target = (current[p.member_id] - gone) | new
            v = PROTOCOL_VERSIONS[prep.assignor_name]
            meta = encode_assignment(ExtendedAssignment(v, 0, self.name, f"http://{self.name}:8083", OFFSET, assignment(new), assignment(gone)))
            members.append(InstalledWorker(p.member_id, ConnectorsAndTasks.of(assignment(target)), 0, v, meta))
        self.world.call(ConnectGroupInstallAssignmentRequest(G, self.name, self.epoch, prep.group_epoch, members=members))

    def on_response(self, body: Any) -> None:
        self.last_answer = body
        if body.error_code in (Errors.FENCED_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID):
            self.epoch, self.runs = 0, NOTHING
            return
        if body.error_code not in (0, Errors.COMPUTE_ASSIGNMENT):
            return
        self.epoch = body.member_epoch
        self.reason = 0
        if body.assignment is not None:
            given = body.assignment.assigned.assignment()
            if not self.runs.issubset(given):
                self.reason = 1  # gave something up: ask for the computation that hands it on
            self.runs = given
        self.compute_asked = body.error_code == Errors.COMPUTE_ASSIGNMENT

    def leave(self) -> None:
        self.runs = NOTHING
        del self.world.workers[self.name]
        self.world.deliver(self.world.calls.handle(ConnectGroupHeartbeatRequest(G, self.name, -1), "leave", self.world.now))
