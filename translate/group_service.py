"""The group service: the ONE sans-I/O entry point the gateway calls for every group API.

It owns the group types - classic groups (translate/classic_*.py), consumer groups (coordinator/)
and connect groups (coordinator/connect/, translate/connect_routing.py) - routes each request to the
right one, converts groups between them (KIP-848
"Supporting Online Consumer Group Upgrade", translate/conversion.py) and rebuilds them from their
records. A group id names a group of one type: translate/connect_routing.py says how the others are
refused, and how classic Connect groups convert to connect groups and back (translate/connect_conversion.py)
while their classic workers are translated one by one (translate/connect_classic_worker.py).

API (stable; every request is a decoded dataclass, ``request_key`` is an opaque hashable the
caller uses to match responses to requests, ``now_ms`` is the caller's clock)::

    svc = GroupService(GroupServiceConfig(migration_policy="bidirectional", classic_groups="native"),
                       coordinator_config=CoordinatorConfig(...), new_member_id=lambda client_id: ...)
    for key, value in stored_records: svc.replay_bytes(key, value)   # GroupMetadata and consumer group records
    svc.on_metadata({topic: (topic_id, partitions)}, now_ms)          # whenever metadata changes
    svc.on_loaded(now_ms)                                             # after replay: arm timers
    result = svc.handle(request, request_key, now_ms)                 # any request type below
    result = svc.on_timer(key, now_ms)                                # a timer the service armed fired
    result = svc.expire_empty_groups(now_ms)                          # every offsets.retention.check.interval.ms

``handle`` takes JoinGroupRequest, SyncGroupRequest, HeartbeatRequest, LeaveGroupRequest
(translate.classic_messages), ConsumerGroupHeartbeatRequest (coordinator.messages),
ConnectGroupHeartbeatRequest, ConnectGroupPrepareAssignmentRequest, ConnectGroupInstallAssignmentRequest
(coordinator.connect.messages),
ConsumerGroupDescribeRequest, DescribeGroupsRequest, ListGroupsRequest, DeleteGroupsRequest,
OffsetCommitCheck, OffsetFetchCheck (translate.group_messages). It returns a ``Outcome``:
``responses`` (each ``Reply(request_key, body)``; a JoinGroup / SyncGroup may be parked and
answered by a later call, and one call may answer several requests), ``records`` to make durable
BEFORE releasing any response of the same result (``GroupMetadataRecord`` for classic groups,
``coordinator.records.Record`` for consumer groups, ``coordinator.connect.records.ConnectRecord`` for
connect groups; ``translate.group_config.encode_any_record`` turns each into key/value bytes), and ``timers`` (``ScheduleTimer`` replaces the timer with the same key, ``CancelTimer``
disarms it; keys are ``(kind, group id, member id)``).

Modes (``classic_groups``): ``native`` (default) keeps Kafka's semantics - a group joined with
JoinGroup is a classic group (client-side assignment, group-wide rebalances) until a
new-protocol member converts it. ``translate`` runs every group with protocol type ``consumer``
as a consumer group from its first member: legacy clients get server-side assignment (the
configured default assignor) and per-member incremental rebalances without any client change.
Groups of other protocol types (e.g. Connect) stay classic; consumer groups never downgrade.

DescribeGroups answers consumer groups as Kafka does (GROUP_ID_NOT_FOUND from v6, Dead before)
unless ``describe_consumer_groups_as_classic`` (default: on in ``translate`` mode) asks for a
classic view of them; connect groups get Kafka's answer for a group of another type. ListGroups lists
every type ("classic" / "consumer" / "connect").

Where each part lives: the classic protocol's requests in translate/classic_routing.py,
ConsumerGroupHeartbeat and the conversions it triggers in translate/consumer_heartbeat.py, timers in
translate/group_timers.py, the offset checks in translate/offset_checks.py, DeleteGroups and expiry in
translate/group_deletion.py, the describe/list views and the reads in translate/group_views.py, replay
and load in translate/group_replay.py; each takes the service's parts (translate/group_parts.py).

Not modelled: a failed write. The caller must not apply a result whose records could not be
written, and should fail over (replay) instead, as Kafka's coordinator does on a write failure.
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import Callable, Mapping

from coordinator.config import CoordinatorConfig
from coordinator.connect.describe import DescribedConnectGroup
from coordinator.connect.service import ConnectConfig, ConnectGroupCoordinator
from coordinator.messages import ConsumerGroupHeartbeatRequest
from coordinator.model import Assignment, MemberState
from coordinator.outcome import Outcome, Reply, RequestKey
from coordinator.service import ConsumerGroupCoordinator
from coordinator.target import AssignmentJob
from coordinator.timers import TimerKey
from translate import (
    classic_routing,
    connect_routing,
    group_deletion,
    group_replay,
    group_timers,
    group_views,
    offset_checks,
)
from translate.classic_coordinator import ClassicGroupCoordinator
from translate.classic_member import ClassicMemberTranslator
from translate.classic_messages import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest
from translate.classic_strategies import strategy_assignor
from translate.connect_classic_worker import ConnectClassicWorkers
from translate.connect_conversion import ConnectConverter
from translate.consumer_heartbeat import consumer_group_heartbeat
from translate.conversion import GroupConverter
from translate.group_config import AnyRecord, ClassicGroupsMode, GroupServiceConfig
from translate.group_messages import (
    ConsumerGroupDescribeRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCheckResponse,
    OffsetCommitCheck,
    OffsetFetchCheck,
)
from translate.group_parts import after_membership_change


def _counting_member_ids() -> Callable[[str], str]:
    counter = itertools.count(1)
    return lambda client_id: f"{client_id}-{next(counter)}"


class GroupService:
    def __init__(
        self,
        config: GroupServiceConfig | None = None,
        coordinator_config: CoordinatorConfig | None = None,
        new_member_id: Callable[[str], str] | None = None,
        connect_config: ConnectConfig | None = None,
    ) -> None:
        self.config = config or GroupServiceConfig()
        ids = new_member_id or _counting_member_ids()
        if self.config.mode is ClassicGroupsMode.TRANSLATE:
            # A purely classic group keeps its members' strategy (translate/classic_strategies.py).
            coordinator_config = dataclasses.replace(
                coordinator_config or CoordinatorConfig(), group_assignor=strategy_assignor
            )
        self.coordinator = ConsumerGroupCoordinator(coordinator_config)
        self.connect = ConnectGroupCoordinator(connect_config)
        self.classic_groups = ClassicGroupCoordinator(ids, self.config.classic)
        self.classic_members = ClassicMemberTranslator(
            self.coordinator, ids, self.config.classic, translate=self.config.mode is ClassicGroupsMode.TRANSLATE
        )
        self.converter = GroupConverter(
            self.coordinator,
            self.classic_groups,
            self.classic_members,
            self.config.policy,
            downgrade_allowed=self.config.mode is ClassicGroupsMode.NATIVE,
            convert_builtin_sticky_userdata=self.config.convert_builtin_sticky_userdata,
        )
        # Classic Connect workers inside connect groups, and the conversions between the two.
        self.connect_workers = ConnectClassicWorkers(self.connect, ids, self.config.classic)
        self.connect_converter = ConnectConverter(self.connect, self.classic_groups, self.connect_workers, self.config.policy)

    def join_follows_metadata_change(self, request: object) -> bool:
        """Whether a JoinGroup is a translated classic member rejoining on its own: at the group's
        epoch, nothing to give up or wait for. A classic client does that when its metadata shows that a
        subscribed topic's partition count changed, which Kafka's coordinator knows at once; the caller
        refreshes the topic image before the join (in the group's turn), so that the change is assigned
        in this round rather than in one more once the periodic refresh sees it. A read of the state."""
        if not isinstance(request, JoinGroupRequest) or self.config.mode is not ClassicGroupsMode.TRANSLATE:
            return False
        if not request.member_id:
            return False
        group = self.coordinator.group(request.group_id)
        member = group.members.get(request.member_id) if group is not None else None
        if group is None or member is None or not member.uses_classic_protocol:
            return False
        return member.member_epoch == group.group_epoch and member.state is MemberState.STABLE

    # ---- dispatch ----------------------------------------------------------------------------
    def handle(self, request: object, request_key: RequestKey, now_ms: int) -> Outcome:
        if isinstance(request, connect_routing.CONNECT_REQUESTS):
            return connect_routing.handle(self, self.connect, request, request_key, now_ms)
        if (
            isinstance(request, connect_routing.CLASSIC_REQUESTS)
            and connect_routing.holds(self.connect, request.group_id)
            and self.classic_groups.group(request.group_id) is None
        ):
            return connect_routing.classic_request(self, request, request_key, now_ms)
        refused = connect_routing.refusal_of_other_type(self.connect, request, request_key)
        if refused is not None:
            return refused
        if isinstance(request, JoinGroupRequest):
            return classic_routing.join_group(self, request, request_key, now_ms)
        if isinstance(request, SyncGroupRequest):
            return classic_routing.sync_group(self, request, request_key, now_ms)
        if isinstance(request, HeartbeatRequest):
            return classic_routing.heartbeat(self, request, request_key, now_ms)
        if isinstance(request, LeaveGroupRequest):
            result = classic_routing.leave_group(self, request, request_key, now_ms)
            return after_membership_change(self, request.group_id, result, now_ms)
        if isinstance(request, ConsumerGroupHeartbeatRequest):
            result = consumer_group_heartbeat(self, request, request_key, now_ms)
            return after_membership_change(self, request.group_id, result, now_ms)
        out = Outcome()
        body: object
        if isinstance(request, ConsumerGroupDescribeRequest):
            body = group_views.describe_consumer_groups(self, request)
        elif isinstance(request, DescribeGroupsRequest):
            body = DescribeGroupsResponse(group_views.describe_groups(self, request))
        elif isinstance(request, ListGroupsRequest):
            body = ListGroupsResponse(group_views.list_groups(self, request))
        elif isinstance(request, DeleteGroupsRequest):
            body = group_deletion.delete_groups(self, out, request, now_ms)
        elif isinstance(request, OffsetCommitCheck):
            body = offset_checks.offset_commit_check(self, out, request, now_ms)
        elif isinstance(request, OffsetFetchCheck):
            body = OffsetCheckResponse(offset_checks.validate_offset_fetch(self, request))
        else:
            raise TypeError(f"not a group request: {type(request).__name__}")
        out.responses.append(Reply(request_key, body))
        return out

    def on_timer(self, key: TimerKey, now_ms: int) -> Outcome:
        return group_timers.on_timer(self, key, now_ms)

    def expire_empty_groups(self, now_ms: int) -> Outcome:
        """Every ``offsets.retention.check.interval.ms`` (translate/group_deletion.py)."""
        return group_deletion.expire_empty_groups(self, now_ms)

    # ---- reads (what the gateway may know of a group without reaching into the state) ----------
    def describe_connect_groups(self, group_ids: list[str]) -> list[DescribedConnectGroup]:
        """The connect groups' own view (epochs, assignor, workers); GROUP_ID_NOT_FOUND for other ids."""
        return self.connect.describe(group_ids)

    def group_kind(self, group_id: str) -> str | None:
        return group_views.group_kind(self, group_id)

    def group_ids(self) -> list[str]:
        return group_views.group_ids(self)

    def group_count(self) -> int:
        return group_views.group_count(self)

    def member_count(self, group_id: str) -> tuple[int, str]:
        return group_views.member_count(self, group_id)

    def subscribed_topics(self, group_id: str) -> frozenset[str]:
        return group_views.subscribed_topics(self, group_id)

    # ---- metadata, replay, load ----------------------------------------------------------------
    def on_metadata(self, topics: Mapping[str, tuple[uuid.UUID, int]], now_ms: int) -> Outcome:
        """The full topic image: name -> (topic id, partition count)."""
        out = Outcome()
        res = self.coordinator.on_metadata(topics, now_ms)
        out.take(res)
        bumped = res.response
        if self.config.mode is not ClassicGroupsMode.TRANSLATE:
            return out
        groups = self.coordinator.state.groups
        for gid, before in bumped.items():
            group = groups.get(gid)
            if group is not None and group.members and all(m.uses_classic_protocol for m in group.members.values()):
                # Its classic clients are left to notice the change themselves for a while.
                self.classic_members.image_changed(gid, before, group.group_epoch, now_ms)
        return out

    def take_assignment_jobs(self) -> list[AssignmentJob]:
        """Consumer groups' target computations handed to the driver (KIP-1263 offload)."""
        return self.coordinator.take_assignment_jobs()

    def install_assignment(
        self, job: AssignmentJob, assignment: dict[str, Assignment], now_ms: int
    ) -> tuple[bool, Outcome]:
        """An offloaded computation's result, in the group's turn: whether it was installed, and the
        records to persist (none when the group changed meanwhile and the result was discarded)."""
        out = Outcome()
        res = self.coordinator.install_assignment(job, assignment, now_ms)
        out.take(res)
        return res.response, out

    def abandon_assignment(self, job: AssignmentJob) -> None:
        self.coordinator.abandon_assignment(job)

    def replay(self, record: AnyRecord) -> None:
        group_replay.replay(self, record)

    def replay_bytes(self, key: bytes, value: bytes | None) -> bool:
        """Replay one stored record; False for records that are not group records (offsets)."""
        return group_replay.replay_bytes(self, key, value)

    def on_loaded(self, now_ms: int) -> Outcome:
        return group_replay.on_loaded(self, now_ms)
