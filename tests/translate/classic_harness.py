"""A small driver for the classic coordinator in tests: a virtual clock, counting member ids, and
the timers the coordinator asked for, fired in deadline order."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from virtual_timers import fire_due

from coordinator.outcome import Outcome
from coordinator.timers import TimerKey, apply_timer_changes, deadline
from translate.classic_coordinator import ClassicGroupCoordinator
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
from translate.embedded import ConsumerProtocolSubscription, encode_subscription
from translate.group_records import GroupMetadataRecord

SESSION = 10_000
REBALANCE = 30_000


def subscription(*topics: str, version: int = 0) -> bytes:
    return encode_subscription(ConsumerProtocolSubscription(topics=list(topics)), version)


def protocols(*names: str, topics: tuple[str, ...] = ("t",)) -> list[JoinGroupRequestProtocol]:
    return [JoinGroupRequestProtocol(name, subscription(*topics)) for name in names]


@dataclass
class Harness:
    config: ClassicGroupConfig = field(default_factory=ClassicGroupConfig)
    now: int = 1_000
    responses: dict[Any, Any] = field(default_factory=dict)
    answered_at: dict[Any, int] = field(default_factory=dict)
    records: list[GroupMetadataRecord] = field(default_factory=list)
    timers: dict[TimerKey, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        counter = itertools.count(1)
        self.coordinator = ClassicGroupCoordinator(lambda client_id: f"{client_id}-m{next(counter)}", self.config)
        self._keys = itertools.count(1)

    # Each call returns the request key; the answer (if any yet) is in self.responses.
    def absorb(self, result: Outcome) -> Outcome:
        for response in result.responses:
            assert response.request_key not in self.responses, "a request was answered twice"
            self.responses[response.request_key] = response.body
            self.answered_at[response.request_key] = self.now
        self.records.extend(result.records)
        apply_timer_changes(self.timers, result.timers, deadline)
        return result

    def key(self) -> int:
        return next(self._keys)

    def join(
        self,
        group: str = "g",
        member_id: str = "",
        client_id: str = "c",
        protos: list[JoinGroupRequestProtocol] | None = None,
        instance_id: str | None = None,
        version: int = 9,
        session: int = SESSION,
        rebalance: int = REBALANCE,
        protocol_type: str = "consumer",
    ) -> int:
        key = self.key()
        request = JoinGroupRequest(
            group_id=group,
            session_timeout_ms=session,
            member_id=member_id,
            protocol_type=protocol_type,
            protocols=protos if protos is not None else protocols("range"),
            rebalance_timeout_ms=rebalance,
            group_instance_id=instance_id,
            api_version=version,
            client_id=client_id,
            client_host="/127.0.0.1",
        )
        self.absorb(self.coordinator.join_group(request, key, self.now))
        return key

    def join_with_id(self, client_id: str, **kwargs: Any) -> int:
        """A v4+ dynamic join: MEMBER_ID_REQUIRED, then the rejoin with the id (parked or answered)."""
        first = self.join(client_id=client_id, **kwargs)
        response = self.join_response(first)
        assert response.error_code == 79, response
        return self.join(member_id=response.member_id, client_id=client_id, **kwargs)

    def sync(
        self,
        member_id: str,
        generation: int,
        group: str = "g",
        assignments: dict[str, bytes] | None = None,
        instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> int:
        key = self.key()
        request = SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments=[SyncGroupRequestAssignment(m, a) for m, a in (assignments or {}).items()],
        )
        self.absorb(self.coordinator.sync_group(request, key, self.now))
        return key

    def heartbeat(self, member_id: str, generation: int, group: str = "g", instance_id: str | None = None) -> int:
        request = HeartbeatRequest(group, generation, member_id, instance_id)
        key = self.key()
        self.absorb(self.coordinator.heartbeat(request, key, self.now))
        return self.heartbeat_response(key).error_code

    def leave(self, *members: MemberIdentity, group: str = "g", version: int = 5) -> LeaveGroupResponse:
        key = self.key()
        self.absorb(self.coordinator.leave_group(LeaveGroupRequest(group, list(members), version), key, self.now))
        response = self.responses[key]
        assert isinstance(response, LeaveGroupResponse)
        return response

    # ---- time --------------------------------------------------------------------------------
    def advance(self, ms: int) -> None:
        """Move the clock, firing due timers in deadline order."""
        target = self.now + ms

        def fire(key: Any, at: int) -> None:
            self.now = at
            self.absorb(self.coordinator.on_timer(key, at))

        fire_due(self.timers, self.now, target, fire)  # type: ignore[arg-type]
        self.now = target

    def advance_heartbeating(self, ms: int, members: list[str], generation: int) -> None:
        """Move the clock while the given members keep their sessions alive (a consumer's
        background heartbeat thread does this even while the application is slow)."""
        step = SESSION // 3
        end = self.now + ms
        while self.now < end:
            self.advance(min(step, end - self.now))
            for member_id in members:
                if member_id in self.group().members:
                    self.heartbeat(member_id, generation)

    # ---- answers -----------------------------------------------------------------------------
    def answered(self, key: int) -> bool:
        return key in self.responses

    def join_response(self, key: int) -> JoinGroupResponse:
        response = self.responses[key]
        assert isinstance(response, JoinGroupResponse)
        return response

    def sync_response(self, key: int) -> SyncGroupResponse:
        response = self.responses[key]
        assert isinstance(response, SyncGroupResponse)
        return response

    def heartbeat_response(self, key: int) -> HeartbeatResponse:
        response = self.responses[key]
        assert isinstance(response, HeartbeatResponse)
        return response

    def group(self, group_id: str = "g"):  # type: ignore[no-untyped-def]
        group = self.coordinator.group(group_id)
        assert group is not None
        return group


def identity(member_id: str, instance_id: str | None = None) -> MemberIdentity:
    return MemberIdentity(member_id, instance_id)
