"""The sans-I/O group entry point as the simulator sees it: one object answering every group API.

The simulator talks to a ``GroupEndpoint``: classic JoinGroup / SyncGroup / Heartbeat / LeaveGroup
and ConsumerGroupHeartbeat requests, timers and topic metadata, each call returning a ``SimResult``
(responses tagged with the request key they answer, records to persist, timer changes). It also
exposes what the invariant checker needs: a fresh replica to replay the records into, and a canonical
snapshot of the persisted state.

``ServiceEndpoint`` is translate.group_service.GroupService - the one entry point the gateway calls -
with the simulation's timeouts: classic groups in ``native`` or ``translate`` mode, conversion
between classic and consumer groups under the configured migration policy (KIP-848 "Supporting
Online Consumer Group Upgrade").
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from coordinator.config import CoordinatorConfig, default_assignors
from coordinator.model import GroupState
from coordinator.outcome import Outcome
from coordinator.records import Record as ConsumerGroupRecord
from coordinator.service import ConsumerGroupCoordinator
from coordinator.timers import TimerChange, TimerKey
from translate.classic_group import ClassicGroup, ClassicGroupState
from translate.classic_rebalance import ClassicGroupConfig
from translate.group_config import GroupServiceConfig
from translate.group_records import GroupMetadataRecord
from translate.group_service import GroupService

RequestKey = Hashable
AnyRecord = GroupMetadataRecord | ConsumerGroupRecord


@dataclass(slots=True)
class SimResult:
    responses: list[tuple[RequestKey, Any]] = field(default_factory=list)
    records: list[AnyRecord] = field(default_factory=list)
    timers: list[TimerChange] = field(default_factory=list)


def _from_service(result: Outcome) -> SimResult:
    return SimResult([(r.request_key, r.body) for r in result.responses], list(result.records), list(result.timers))


@dataclass(slots=True)
class EndpointConfig:
    session_timeout_ms: int = 10_000  # consumer protocol (group.consumer.session.timeout.ms)
    heartbeat_interval_ms: int = 1_000  # group.consumer.heartbeat.interval.ms
    initial_rebalance_delay_ms: int = 300  # classic groups (group.initial.rebalance.delay.ms)
    # "native": a classic fleet's group is a classic group until a new-protocol member converts it;
    # "translate": groups of classic consumers are consumer groups from their first member.
    classic_mode: str = "native"
    migration_policy: str = "bidirectional"  # group.consumer.migration.policy
    # The rest of a gateway's coordinator settings (rehearsal/fleet_settings.py GatewaySpec); the defaults are
    # the sans-I/O layers' own.
    assignment_interval_ms: int = 1_000  # group.consumer.assignment.interval.ms
    min_assignment_interval_ms: int = 0
    max_assignment_interval_ms: int = 15_000
    assignors: tuple[str, ...] | None = None  # group.consumer.assignors; None: Kafka's default list
    consumer_max_size: int | None = None  # group.consumer.max.size
    classic_min_session_timeout_ms: int = 6_000  # group.min.session.timeout.ms
    classic_max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    classic_max_size: int = 2**31 - 1  # group.max.size
    convert_builtin_sticky_userdata: bool = True
    topic_change_grace_ms: int = 3_000  # translate_topic_change_grace_ms (translate mode only)
    # Bumped by each simulated gateway restart so member ids stay unique across incarnations.
    incarnation: int = 0


class ServiceEndpoint:
    """translate.group_service.GroupService driven by the simulation."""

    supports_conversion = True

    def __init__(self, config: EndpointConfig, seed: int) -> None:
        self.config = config
        classic_ids = iter(range(1, 1 << 62))
        consumer_ids = iter(range(1, 1 << 62))
        known = default_assignors()
        assignors = {name: known[name] for name in config.assignors} if config.assignors else known
        self.service = GroupService(
            GroupServiceConfig(
                migration_policy=config.migration_policy,
                classic_groups=config.classic_mode,
                classic=ClassicGroupConfig(
                    initial_rebalance_delay_ms=config.initial_rebalance_delay_ms,
                    min_session_timeout_ms=config.classic_min_session_timeout_ms,
                    max_session_timeout_ms=config.classic_max_session_timeout_ms,
                    max_size=config.classic_max_size,
                    topic_change_grace_ms=config.topic_change_grace_ms,
                ),
                convert_builtin_sticky_userdata=config.convert_builtin_sticky_userdata,
            ),
            coordinator_config=CoordinatorConfig(
                assignors=assignors,
                session_timeout_ms=config.session_timeout_ms,
                heartbeat_interval_ms=config.heartbeat_interval_ms,
                max_group_size=config.consumer_max_size,
                assignment_interval_ms=config.assignment_interval_ms,
                min_assignment_interval_ms=config.min_assignment_interval_ms,
                max_assignment_interval_ms=config.max_assignment_interval_ms,
                member_id_generator=lambda: f"cg-{seed}-{config.incarnation}-{next(consumer_ids)}",
            ),
            new_member_id=lambda client_id: (
                f"{client_id}-{next(classic_ids)}" if config.incarnation == 0
                else f"{client_id}-{config.incarnation}.{next(classic_ids)}"
            ),
        )
        self.coordinator = self.service.coordinator

    def handle(self, request: object, key: RequestKey, now_ms: int) -> SimResult:
        return _from_service(self.service.handle(request, key, now_ms))

    def on_timer(self, key: TimerKey, now_ms: int) -> SimResult:
        return _from_service(self.service.on_timer(key, now_ms))

    def on_metadata(self, topics: Mapping[str, tuple[uuid.UUID, int]], now_ms: int) -> SimResult:
        return _from_service(self.service.on_metadata(topics, now_ms))

    def load(self, records: Iterable[AnyRecord], topics: Mapping[str, tuple[uuid.UUID, int]], now_ms: int) -> SimResult:
        """What a restarted gateway does: replay the log, feed the metadata, arm the timers."""
        for record in records:
            self.service.replay(record)
        out = _from_service(self.service.on_metadata(topics, now_ms))
        loaded = _from_service(self.service.on_loaded(now_ms))
        out.records += loaded.records
        out.timers += loaded.timers
        return out

    # ---- what the checker reads --------------------------------------------------------------
    def group_type(self, group_id: str) -> str | None:
        """"classic", "consumer" or None: which kind of group answers for ``group_id`` now."""
        classic = self.service.classic_groups.group(group_id)
        if classic is not None and classic.state is not ClassicGroupState.DEAD:
            return "classic"
        return "consumer" if self.coordinator.group(group_id) is not None else None

    def consumer_group_stable(self, group_id: str) -> bool:
        group = self.coordinator.group(group_id)
        return group is not None and group.state() is GroupState.STABLE

    def classic_group(self, group_id: str) -> ClassicGroup | None:
        return self.service.classic_groups.group(group_id)

    def replica(self) -> Replica:
        return Replica()

    def snapshot(self) -> tuple[object, object]:
        return canonical_snapshot(self.coordinator, self.service.classic_groups.groups)


class Replica:
    """Fresh state rebuilt only from records: what a restarted gateway would load."""

    def __init__(self) -> None:
        self.service = GroupService()

    def apply(self, records: Iterable[AnyRecord]) -> None:
        for record in records:
            self.service.replay(record)

    def snapshot(self) -> tuple[object, object]:
        return canonical_snapshot(self.service.coordinator, self.service.classic_groups.groups)


def _classic_view(group: ClassicGroup) -> tuple[object, ...]:
    """What a classic group persists (GroupMetadataValue); meaningful when Stable or Empty."""
    members = tuple(
        sorted(
            (m.member_id, m.group_instance_id, m.client_id, m.rebalance_timeout_ms, m.session_timeout_ms, m.assignment)
            for m in group.members.values()
        )
    )
    return (group.group_id, group.generation_id, group.protocol_name, group.leader_id if members else None, members)


def canonical_snapshot(
    coordinator: ConsumerGroupCoordinator, classic_groups: Mapping[str, ClassicGroup]
) -> tuple[object, object]:
    # A consumer group created in memory and never written (epoch 0, no member) has no records.
    consumer = {gid: snap for gid, snap in coordinator.snapshot().items() if snap[1] != 0 or snap[2]}
    classic = {gid: _classic_view(g) for gid, g in classic_groups.items() if g.state is not ClassicGroupState.DEAD}
    return consumer, classic


def classic_group_settled(group: ClassicGroup | None) -> bool:
    """A classic group's live state equals its persisted state only between rebalances."""
    return group is None or group.state in (ClassicGroupState.STABLE, ClassicGroupState.EMPTY)


EndpointFactory = Callable[[EndpointConfig, int], ServiceEndpoint]
