"""The sans-I/O group entry point as the simulator sees it: one object answering every group API.

The simulator talks to a ``GroupEndpoint``: classic JoinGroup / SyncGroup / Heartbeat / LeaveGroup
and ConsumerGroupHeartbeat requests, timers and topic metadata, each call returning a ``SimResult``
(responses tagged with the request key they answer, records to persist, timer changes). It also
exposes what the invariant checker needs: a fresh replica to replay the records into, and a canonical
snapshot of the persisted state.

``FrontEndpoint`` builds it from translate/ and coordinator/: classic requests go through the classic
front, ConsumerGroupHeartbeat goes to the coordinator. A consumer heartbeat for a group that is a
classic group is refused (GROUP_ID_NOT_FOUND, "not a consumer group") as Kafka does when the
migration policy does not allow converting it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field

from coordinator.config import CoordinatorConfig
from coordinator.errors import Errors
from coordinator.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from coordinator.model import GroupState
from coordinator.records import Record as ConsumerGroupRecord
from coordinator.service import ConsumerGroupCoordinator
from coordinator.timers import TimerChange, TimerKey
from translate.classic_group import ClassicGroup, ClassicGroupState
from translate.classic_messages import (
    ClassicResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
)
from translate.classic_rebalance import ClassicGroupConfig
from translate.group_records import GroupMetadataRecord
from translate.result import Result
from translate.service import ClassicFront

RequestKey = Hashable
AnyResponse = ClassicResponse | ConsumerGroupHeartbeatResponse
AnyRecord = GroupMetadataRecord | ConsumerGroupRecord


@dataclass(slots=True)
class SimResult:
    responses: list[tuple[RequestKey, AnyResponse]] = field(default_factory=list)
    records: list[AnyRecord] = field(default_factory=list)
    timers: list[TimerChange] = field(default_factory=list)


def _from_front(result: Result) -> SimResult:
    return SimResult([(r.request_key, r.body) for r in result.responses], list(result.records), list(result.timers))


@dataclass(slots=True)
class EndpointConfig:
    session_timeout_ms: int = 10_000  # consumer protocol (group.consumer.session.timeout.ms)
    heartbeat_interval_ms: int = 1_000  # group.consumer.heartbeat.interval.ms
    initial_rebalance_delay_ms: int = 300  # classic groups (group.initial.rebalance.delay.ms)
    assignor: str = "uniform"
    # "native": a classic fleet's group is a classic group; "translate": the group is run as a
    # consumer group with classic members inside (KIP-848 online upgrade path).
    classic_mode: str = "native"


class FrontEndpoint:
    """translate.service.ClassicFront + coordinator.service.ConsumerGroupCoordinator."""

    def __init__(self, config: EndpointConfig, seed: int) -> None:
        self.config = config
        counter = iter(range(1, 1 << 62))
        coordinator_ids = iter(range(1, 1 << 62))
        self.coordinator = ConsumerGroupCoordinator(
            CoordinatorConfig(
                session_timeout_ms=config.session_timeout_ms,
                heartbeat_interval_ms=config.heartbeat_interval_ms,
                member_id_generator=lambda: f"cg-{seed}-{next(coordinator_ids)}",
            )
        )
        self.front = ClassicFront(
            self.coordinator,
            lambda client_id: f"{client_id}-{next(counter)}",
            ClassicGroupConfig(initial_rebalance_delay_ms=config.initial_rebalance_delay_ms),
        )

    @property
    def supports_conversion(self) -> bool:
        return False

    def prepare_group(self, group_id: str) -> None:
        """In translate mode the classic fleet's group is a consumer group from the start."""
        if self.config.classic_mode == "translate":
            self.coordinator.get_or_create_group(group_id)

    # ---- requests ----------------------------------------------------------------------------
    def join_group(self, request: JoinGroupRequest, key: RequestKey, now_ms: int) -> SimResult:
        return _from_front(self.front.join_group(request, key, now_ms))

    def sync_group(self, request: SyncGroupRequest, key: RequestKey, now_ms: int) -> SimResult:
        return _from_front(self.front.sync_group(request, key, now_ms))

    def heartbeat(self, request: HeartbeatRequest, key: RequestKey, now_ms: int) -> SimResult:
        return _from_front(self.front.heartbeat(request, key, now_ms))

    def leave_group(self, request: LeaveGroupRequest, key: RequestKey, now_ms: int) -> SimResult:
        return _from_front(self.front.leave_group(request, key, now_ms))

    def consumer_group_heartbeat(self, request: ConsumerGroupHeartbeatRequest, key: RequestKey, now_ms: int) -> SimResult:
        classic = self.front.classic_groups.group(request.group_id)
        if classic is not None and classic.state is not ClassicGroupState.DEAD:
            response = ConsumerGroupHeartbeatResponse(
                error_code=int(Errors.GROUP_ID_NOT_FOUND), error_message=f"Group {request.group_id} is not a consumer group."
            )
            return SimResult([(key, response)])
        result = self.coordinator.consumer_group_heartbeat(request, now_ms)
        return SimResult([(key, result.response)], list(result.records), list(result.timers))

    def on_timer(self, key: TimerKey, now_ms: int) -> SimResult:
        return _from_front(self.front.on_timer(key, now_ms))

    def on_metadata(self, topics: Mapping[str, tuple[uuid.UUID, int]], now_ms: int) -> SimResult:
        result = self.coordinator.on_metadata(topics, now_ms)
        return SimResult([], list(result.records), list(result.timers))

    # ---- what the checker reads --------------------------------------------------------------
    def group_type(self, group_id: str) -> str | None:
        """"classic", "consumer" or None: which kind of group answers for ``group_id`` now."""
        classic = self.front.classic_groups.group(group_id)
        if classic is not None and classic.state is not ClassicGroupState.DEAD:
            return "classic"
        return "consumer" if self.coordinator.group(group_id) is not None else None

    def consumer_group_epoch(self, group_id: str) -> int | None:
        group = self.coordinator.group(group_id)
        return None if group is None else group.group_epoch

    def consumer_group_stable(self, group_id: str) -> bool:
        group = self.coordinator.group(group_id)
        return group is not None and group.state() is GroupState.STABLE

    def classic_group(self, group_id: str) -> ClassicGroup | None:
        return self.front.classic_groups.group(group_id)

    def replica(self) -> Replica:
        return Replica()

    def snapshot(self) -> tuple[object, object]:
        return canonical_snapshot(self.coordinator, self.front.classic_groups.groups)


class Replica:
    """Fresh state rebuilt only from records: what a restarted gateway would load."""

    def __init__(self) -> None:
        self.coordinator = ConsumerGroupCoordinator(CoordinatorConfig())
        from translate.classic_coordinator import ClassicGroupCoordinator

        self.classic = ClassicGroupCoordinator(lambda client_id: client_id)

    def apply(self, records: Iterable[AnyRecord]) -> None:
        for record in records:
            if isinstance(record, GroupMetadataRecord):
                self.classic.replay(record)
            else:
                self.coordinator.replay(record)

    def snapshot(self) -> tuple[object, object]:
        return canonical_snapshot(self.coordinator, self.classic.groups)


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


EndpointFactory = Callable[[EndpointConfig, int], FrontEndpoint]
