"""A driver for GroupService in tests: a virtual clock, the timers the service armed (fired in
deadline order), every record it asked to persist, and the answer to each request."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field
from typing import Any

from virtual_timers import fire_due

from coordinator.config import CoordinatorConfig
from coordinator.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from coordinator.outcome import Outcome
from coordinator.timers import TimerKey, apply_timer_changes, deadline
from translate.classic_messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from translate.classic_rebalance import ClassicGroupConfig
from translate.embedded import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from translate.embedded import TopicPartitions as NamedPartitions
from translate.group_config import GroupServiceConfig
from translate.group_service import GroupService

TOPIC = "foo"
TOPIC_ID = uuid.UUID(int=0xF00)
SESSION = 10_000
REBALANCE = 30_000


def metadata(owned: dict[str, list[int]] | None = None, version: int = 1, topics: tuple[str, ...] = (TOPIC,)) -> bytes:
    owned_tps = [NamedPartitions(t, tuple(p)) for t, p in sorted((owned or {}).items()) if p]
    return encode_subscription(ConsumerProtocolSubscription(list(topics), None, owned_tps), version)


def assignment_bytes(parts: dict[str, list[int]], user_data: bytes | None = None, version: int = 1) -> bytes:
    tps = [NamedPartitions(t, tuple(p)) for t, p in sorted(parts.items())]
    return encode_assignment(ConsumerProtocolAssignment(tps, user_data, version))


def partitions_of(blob: bytes) -> dict[str, list[int]]:
    return {tp.topic: sorted(tp.partitions) for tp in decode_assignment(blob).assigned_partitions if tp.partitions}


@dataclass
class Driver:
    policy: str = "bidirectional"
    mode: str = "native"
    partitions: int = 6
    max_group_size: int | None = None
    classic_max_size: int = 2**31 - 1
    offsets_retention_ms: int = 10080 * 60_000
    initial_delay_ms: int = 0  # group.initial.rebalance.delay.ms
    now: int = 1_000
    # KIP-1263 batching off: these scenarios step through one assignment per epoch bump, as
    # initial_rebalance_delay_ms=0 does for the classic side.
    assignment_interval_ms: int = 0
    records: list[Any] = field(default_factory=list)
    timers: dict[TimerKey, int] = field(default_factory=dict)
    responses: dict[Any, Any] = field(default_factory=dict)
    changes: list[Any] = field(default_factory=list)  # Outcome.changes, in order

    def __post_init__(self) -> None:
        ids = itertools.count(1)
        cids = itertools.count(1)
        self.service = GroupService(
            GroupServiceConfig(
                migration_policy=self.policy,
                classic_groups=self.mode,
                classic=ClassicGroupConfig(initial_rebalance_delay_ms=self.initial_delay_ms, max_size=self.classic_max_size),
                offsets_retention_ms=self.offsets_retention_ms,
            ),
            CoordinatorConfig(
                member_id_generator=lambda: f"cg-{next(cids)}",
                max_group_size=self.max_group_size,
                assignment_interval_ms=self.assignment_interval_ms,
            ),
            lambda client_id: f"{client_id}-{next(ids)}",
        )
        self.keys = itertools.count(1)
        self.absorb(self.service.on_metadata({TOPIC: (TOPIC_ID, self.partitions)}, self.now))

    def absorb(self, result: Outcome) -> Outcome:
        for reply in result.responses:
            assert reply.request_key not in self.responses, "a request was answered twice"
            self.responses[reply.request_key] = reply.body
        self.records.extend(result.records)
        self.changes.extend(result.changes)
        apply_timer_changes(self.timers, result.timers, deadline)
        return result

    def send(self, request: object) -> tuple[int, Outcome]:
        key = next(self.keys)
        return key, self.absorb(self.service.handle(request, key, self.now))

    def advance(self, ms: int) -> None:
        target = self.now + ms

        def fire(key: Any, at: int) -> None:
            self.now = at
            self.absorb(self.service.on_timer(key, at))

        fire_due(self.timers, self.now, target, fire)  # type: ignore[arg-type]
        self.now = target

    # ---- classic requests --------------------------------------------------------------------
    def join(
        self, member_id: str = "", client: str = "c", owned: dict[str, list[int]] | None = None,
        protocols: tuple[str, ...] = ("range",), instance_id: str | None = None, sub_version: int = 1,
        protocol_type: str = "consumer", group: str = "g", session: int = SESSION,
    ) -> int:
        meta = metadata(owned, sub_version)
        key, _ = self.send(
            JoinGroupRequest(
                group_id=group, session_timeout_ms=session, member_id=member_id, protocol_type=protocol_type,
                protocols=[JoinGroupRequestProtocol(p, meta) for p in protocols], rebalance_timeout_ms=REBALANCE,
                group_instance_id=instance_id, client_id=client, client_host="/10.0.0.1",
            )
        )
        return key

    def join_response(self, key: int) -> JoinGroupResponse:
        body = self.responses[key]
        assert isinstance(body, JoinGroupResponse), body
        return body

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             instance_id: str | None = None, group: str = "g") -> int:
        key, _ = self.send(
            SyncGroupRequest(
                group, generation, member_id, instance_id, None, None,
                [SyncGroupRequestAssignment(m, a) for m, a in (assignments or {}).items()],
            )
        )
        return key

    def sync_response(self, key: int) -> SyncGroupResponse:
        body = self.responses[key]
        assert isinstance(body, SyncGroupResponse), body
        return body

    def heartbeat(self, member_id: str, generation: int, instance_id: str | None = None, group: str = "g") -> int:
        key, _ = self.send(HeartbeatRequest(group, generation, member_id, instance_id))
        body = self.responses[key]
        assert isinstance(body, HeartbeatResponse)
        return body.error_code

    def leave(self, *members: MemberIdentity, group: str = "g") -> LeaveGroupResponse:
        key, _ = self.send(LeaveGroupRequest(group, list(members)))
        body = self.responses[key]
        assert isinstance(body, LeaveGroupResponse)
        return body

    def classic_fleet(self, assignment: dict[str, dict[str, list[int]]] | None = None,
                      clients: tuple[str, ...] = ("a", "b", "c"), **join_kwargs: Any) -> tuple[list[str], int]:
        """A Stable classic group of one member per client; the leader hands out ``assignment``
        (client -> partitions) or, by default, partitions round-robin."""
        keys = [self.join(client=c, **join_kwargs) for c in clients]
        ids = [self.join_response(k).member_id for k in keys]  # MEMBER_ID_REQUIRED
        keys = [self.join(member_id=m, client=c, **join_kwargs) for m, c in zip(ids, clients, strict=True)]
        self.advance(1)
        responses = [self.join_response(k) for k in keys]
        assert all(r.error_code == 0 for r in responses), responses
        generation = responses[0].generation_id
        leader = next(r for r in responses if r.members)
        if assignment is None:
            assignment = {c: [p for p in range(self.partitions) if p % len(clients) == i] for i, c in enumerate(clients)}
            assignment = {c: {TOPIC: parts} for c, parts in assignment.items()}  # type: ignore[misc]
        by_member = {m: assignment_bytes(assignment[c]) for m, c in zip(ids, clients, strict=True)}  # type: ignore[arg-type]
        skeys = [self.sync(m, generation, by_member if m == leader.member_id else None) for m in ids]
        assert all(self.sync_response(k).error_code == 0 for k in skeys)
        return ids, generation

    # ---- new protocol ------------------------------------------------------------------------
    def consumer(self, member_id: str, epoch: int = 0, owned: list[int] | None = None, instance_id: str | None = None,
                 full: bool | None = None, group: str = "g", assignor: str | None = "uniform",
                 ) -> ConsumerGroupHeartbeatResponse:
        full = epoch == 0 if full is None else full
        key, _ = self.send(
            ConsumerGroupHeartbeatRequest(
                group_id=group, member_id=member_id, member_epoch=epoch, instance_id=instance_id,
                rebalance_timeout_ms=REBALANCE if full else -1,
                subscribed_topic_names=[TOPIC] if full else None,
                server_assignor=assignor if full else None,
                topic_partitions=(
                    [] if epoch == 0 else [TopicPartitions(TOPIC_ID, sorted(owned))] if owned is not None else None
                ),
            )
        )
        body = self.responses[key]
        assert isinstance(body, ConsumerGroupHeartbeatResponse)
        return body

    # ---- views -------------------------------------------------------------------------------
    def cgroup(self, group: str = "g"):  # type: ignore[no-untyped-def]
        g = self.service.coordinator.group(group)
        assert g is not None and self.service.classic_groups.group(group) is None
        return g

    def classic(self, group: str = "g"):  # type: ignore[no-untyped-def]
        g = self.service.classic_groups.group(group)
        assert g is not None
        return g

    def assigned(self, member_id: str, group: str = "g") -> list[int]:
        m = self.cgroup(group).members[member_id]
        return sorted(m.assigned_partitions.get(TOPIC_ID, frozenset()))

    def target(self, member_id: str, group: str = "g") -> list[int]:
        return sorted(self.cgroup(group).target_assignment.get(member_id, {}).get(TOPIC_ID, frozenset()))


def identity(member_id: str, instance_id: str | None = None) -> MemberIdentity:
    return MemberIdentity(member_id, instance_id)
