"""The group service: the ONE sans-I/O entry point the gateway calls for every group API.

It owns both group types - classic groups (translate/classic_*.py) and consumer groups
(coordinator/) - routes each request to the right one, converts groups between them (KIP-848
"Supporting Online Consumer Group Upgrade", translate/conversion.py) and rebuilds both from their
records.

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
ConsumerGroupDescribeRequest, DescribeGroupsRequest, ListGroupsRequest, DeleteGroupsRequest,
OffsetCommitCheck, OffsetFetchCheck (translate.group_messages). It returns a ``Outcome``:
``responses`` (each ``Reply(request_key, body)``; a JoinGroup / SyncGroup may be parked and
answered by a later call, and one call may answer several requests), ``records`` to make durable
BEFORE releasing any response of the same result (``GroupMetadataRecord`` for classic groups,
``coordinator.records.Record`` for consumer groups; ``encode_record`` turns either into key/value
bytes), and ``timers`` (``ScheduleTimer`` replaces the timer with the same key, ``CancelTimer``
disarms it; keys are ``(kind, group id, member id)``).

Modes (``classic_groups``): ``native`` (default) keeps Kafka's semantics - a group joined with
JoinGroup is a classic group (client-side assignment, group-wide rebalances) until a
new-protocol member converts it. ``translate`` runs every group with protocol type ``consumer``
as a consumer group from its first member: legacy clients get server-side assignment (the
configured default assignor) and per-member incremental rebalances without any client change.
Groups of other protocol types (e.g. Connect) stay classic; consumer groups never downgrade.

DescribeGroups answers consumer groups as Kafka does (GROUP_ID_NOT_FOUND from v6, Dead before)
unless ``describe_consumer_groups_as_classic`` (default: on in ``translate`` mode) asks for a
classic view of them; ListGroups lists both types ("classic" / "consumer").

Not modelled: a failed write. The caller must not apply a result whose records could not be
written, and should fail over (replay) instead, as Kafka's coordinator does on a write failure.
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import Callable, Mapping

from coordinator import records as rec
from coordinator.config import CoordinatorConfig
from coordinator.errors import ApiError
from coordinator.heartbeat import error_response, validate
from coordinator.membership import refresh_subscriptions
from coordinator.messages import (
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from coordinator.model import Assignment, ConsumerGroup, MemberState, subscribed_topic_names
from coordinator.records.codec import decode as decode_consumer_record
from coordinator.service import ConsumerGroupCoordinator
from coordinator.target import AssignmentJob
from coordinator.timers import REBALANCE, SESSION, TimerKey
from translate.classic_coordinator import ClassicGroupCoordinator
from translate.classic_group import ClassicGroupState
from translate.classic_member import (
    CLASSIC_MEMBER_GATHER_TIMER,
    CLASSIC_MEMBER_JOIN_TIMER,
    CLASSIC_MEMBER_SYNC_TIMER,
    ClassicMemberTranslator,
)
from translate.classic_messages import (
    BATCH_LEAVE_VERSION,
    UNKNOWN_MEMBER_ID,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberResponse,
    SyncGroupRequest,
)
from translate.classic_strategies import strategy_assignor
from translate.conversion import GroupConverter, classic_target_is_complete, leaves_partitions_unassigned
from translate.embedded import CONSUMER_PROTOCOL_TYPE, MalformedEmbeddedProtocol, decode_subscription
from translate.errors import Errors
from translate.group_config import (
    AnyRecord,
    ClassicGroupsMode,
    GroupServiceConfig,
    Outcome,
    Reply,
    RequestKey,
    encode_any_record,
)
from translate.group_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCheckResponse,
    OffsetCommitCheck,
    OffsetFetchCheck,
)
from translate.group_records import GroupMetadataRecord, decode_record
from translate.group_views import describe_groups, list_groups
from translate.result import HEARTBEAT_TIMER, JOIN_TIMER, SYNC_TIMER

_CLASSIC_GROUP_TIMERS = frozenset({JOIN_TIMER, SYNC_TIMER, HEARTBEAT_TIMER})
_CLASSIC_MEMBER_TIMERS = frozenset({CLASSIC_MEMBER_JOIN_TIMER, CLASSIC_MEMBER_SYNC_TIMER, CLASSIC_MEMBER_GATHER_TIMER})
# The first int16 of a GroupMetadata key (classic groups); consumer group records use 3..16.
_GROUP_METADATA_KEY_VERSION = 2


def _counting_member_ids() -> Callable[[str], str]:
    counter = itertools.count(1)
    return lambda client_id: f"{client_id}-{next(counter)}"


class GroupService:
    def __init__(
        self,
        config: GroupServiceConfig | None = None,
        coordinator_config: CoordinatorConfig | None = None,
        new_member_id: Callable[[str], str] | None = None,
    ) -> None:
        self.config = config or GroupServiceConfig()
        ids = new_member_id or _counting_member_ids()
        if self.config.mode is ClassicGroupsMode.TRANSLATE:
            # A purely classic group keeps its members' strategy (translate/classic_strategies.py).
            coordinator_config = dataclasses.replace(
                coordinator_config or CoordinatorConfig(), group_assignor=strategy_assignor
            )
        self.coordinator = ConsumerGroupCoordinator(coordinator_config)
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
        if isinstance(request, JoinGroupRequest):
            return self.join_group(request, request_key, now_ms)
        if isinstance(request, SyncGroupRequest):
            return self.sync_group(request, request_key, now_ms)
        if isinstance(request, HeartbeatRequest):
            return self.heartbeat(request, request_key, now_ms)
        if isinstance(request, LeaveGroupRequest):
            return self._after_membership_change(request.group_id, self.leave_group(request, request_key, now_ms), now_ms)
        if isinstance(request, ConsumerGroupHeartbeatRequest):
            result = self.consumer_group_heartbeat(request, request_key, now_ms)
            return self._after_membership_change(request.group_id, result, now_ms)
        out = Outcome()
        if isinstance(request, ConsumerGroupDescribeRequest):
            described = self.coordinator.describe(request.group_ids)
            for d in described:
                classic = self.classic_groups.group(d.group_id)
                if d.error_code == Errors.GROUP_ID_NOT_FOUND and classic is not None and not classic.is_in(ClassicGroupState.DEAD):
                    d.error_message = f"Group {d.group_id} is not a consumer group."  # Kafka 4.3's text
            body: object = ConsumerGroupDescribeResponse(described)
        elif isinstance(request, DescribeGroupsRequest):
            body = DescribeGroupsResponse(describe_groups(self, request))
        elif isinstance(request, ListGroupsRequest):
            body = ListGroupsResponse(list_groups(self, request))
        elif isinstance(request, DeleteGroupsRequest):
            body = self._delete_groups(out, request, now_ms)
        elif isinstance(request, OffsetCommitCheck):
            error = self.validate_offset_commit(request, now_ms)
            if error == Errors.NONE and not request.is_transactional and request.member_id:
                out.take(self.classic_groups.offset_committed(request.group_id, request.member_id, now_ms))
            body = OffsetCheckResponse(error)
        elif isinstance(request, OffsetFetchCheck):
            body = OffsetCheckResponse(self.validate_offset_fetch(request))
        else:
            raise TypeError(f"not a group request: {type(request).__name__}")
        out.responses.append(Reply(request_key, body))
        return out

    def _after_membership_change(self, group_id: str, out: Outcome, now_ms: int) -> Outcome:
        """A classic member left, expired or was taken over: a join barrier waiting for it may end."""
        out.take(self.classic_members.check_barrier(group_id, now_ms))
        return out

    def _consumer_group(self, group_id: str) -> ConsumerGroup | None:
        if self.classic_groups.group(group_id) is not None:
            return None
        return self.coordinator.group(group_id)

    # ---- classic protocol --------------------------------------------------------------------
    def join_group(self, request: JoinGroupRequest, request_key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        gid = request.group_id
        if self.classic_groups.group(gid) is not None:
            out.take(self.classic_groups.join_group(request, request_key, now_ms))
            return out
        group = self.coordinator.group(gid)
        translate = self.config.mode is ClassicGroupsMode.TRANSLATE
        if group is not None and not group.members and not translate:
            # An empty consumer group makes way for a classic group (Kafka deletes it on JoinGroup).
            out.take(self.coordinator.delete_group(gid))
            group = None
        if group is None and translate and request.protocol_type == CONSUMER_PROTOCOL_TYPE:
            self.coordinator.get_or_create_group(gid)
            out.take(self.classic_members.join_group(request, request_key, now_ms))
            self._forget_if_unwritten(gid)
            return out
        if group is None:
            out.take(self.classic_groups.join_group(request, request_key, now_ms))
            return out
        replaced = self._replaced_by_static_join(group, request)
        epoch = group.group_epoch
        out.take(self.classic_members.join_group(request, request_key, now_ms))
        response = out.response_to(request_key)
        if replaced is not None and getattr(response, "error_code", None) == Errors.NONE:
            # The last consumer-protocol member was replaced by a classic one (KIP-848 downgrade).
            # The group stays Stable unless the joiner changed what the assignment depends on
            # (KAFKA-19546): then its members rebalance under the classic protocol.
            result = Outcome()
            self.converter.downgrade(group, [], now_ms, result, rebalance=group.group_epoch != epoch)
            out.take(result)
        return out

    def _replaced_by_static_join(self, group: ConsumerGroup, request: JoinGroupRequest) -> str | None:
        if request.member_id != UNKNOWN_MEMBER_ID or request.group_instance_id is None:
            return None
        owner = group.static_members.get(request.group_instance_id)
        if owner is None or not self.converter.should_downgrade_on_takeover(group, owner):
            return None
        return owner

    def _forget_if_unwritten(self, group_id: str) -> None:
        """A consumer group created for a join that was refused (or answered MEMBER_ID_REQUIRED)
        has no record behind it: drop it so that state stays equal to the replay of records."""
        group = self.coordinator.group(group_id)
        if group is not None and not group.members and group.group_epoch == 0 and group.assignment_epoch == 0:
            del self.coordinator.state.groups[group_id]

    def sync_group(self, request: SyncGroupRequest, request_key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        if self._consumer_group(request.group_id) is not None:
            out.take(self.classic_members.sync_group(request, request_key, now_ms))
        else:
            out.take(self.classic_groups.sync_group(request, request_key, now_ms))
        return out

    def heartbeat(self, request: HeartbeatRequest, request_key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        if self._consumer_group(request.group_id) is not None:
            out.take(self.classic_members.heartbeat(request, request_key, now_ms))
        else:
            out.take(self.classic_groups.heartbeat(request, request_key, now_ms))
        return out

    def leave_group(self, request: LeaveGroupRequest, request_key: RequestKey, now_ms: int) -> Outcome:
        out = Outcome()
        group = self._consumer_group(request.group_id)
        if group is None:
            out.take(self.classic_groups.leave_group(request, request_key, now_ms))
            return out
        result = Outcome()
        leaving: list[str] = []
        members: list[MemberResponse] = []
        for identity in request.members:
            error = Errors.NONE
            member_id: str | None = None
            if identity.group_instance_id is None:
                member = group.members.get(identity.member_id)
                if member is None or not member.uses_classic_protocol:
                    error = Errors.UNKNOWN_MEMBER_ID
                else:
                    member_id = member.member_id
            else:
                # Static members (either protocol) may be removed by instance id, e.g. by an admin.
                owner = group.static_members.get(identity.group_instance_id)
                if owner is None:
                    error = Errors.UNKNOWN_MEMBER_ID
                elif identity.member_id != UNKNOWN_MEMBER_ID and identity.member_id != owner:
                    error = Errors.FENCED_INSTANCE_ID
                else:
                    member_id = owner
            if member_id is not None and member_id not in leaving:
                leaving.append(member_id)
            members.append(MemberResponse(identity.member_id, identity.group_instance_id, error))
        if leaving:
            if self.converter.should_downgrade(group, leaving):
                self.converter.downgrade(group, leaving, now_ms, result)
            else:
                # One epoch bump for the whole batch, as Kafka does.
                tx = self.coordinator.begin()
                self.coordinator.remove_members(tx, group.group_id, leaving, now_ms)
                result.records.extend(tx.records)
                result.timers.extend(tx.timers)
                for member_id in leaving:
                    self.classic_members.cancel_member_timers(result, group.group_id, member_id)
        response = LeaveGroupResponse(members=members)
        if request.api_version < BATCH_LEAVE_VERSION and members:
            response.error_code = members[0].error_code
        result.respond(request_key, response)
        out.take(result)
        return out

    # ---- new protocol ------------------------------------------------------------------------
    def consumer_group_heartbeat(
        self, request: ConsumerGroupHeartbeatRequest, request_key: RequestKey, now_ms: int
    ) -> Outcome:
        out = Outcome()
        try:
            validate(self.coordinator.state, request)
            if request.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
                request = self._before_join(out, request, now_ms)
            elif request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH and self._leave_downgrades(
                out, request, request_key, now_ms
            ):
                return out
        except ApiError as exc:
            out.responses.append(Reply(request_key, error_response(exc)))
            return out
        res = self.coordinator.consumer_group_heartbeat(request, now_ms)
        out.take(res)
        out.responses.append(Reply(request_key, res.response))
        return out

    def _before_join(
        self, out: Outcome, request: ConsumerGroupHeartbeatRequest, now_ms: int
    ) -> ConsumerGroupHeartbeatRequest:
        """Epoch 0: convert a classic group, or take over a classic static member's place."""
        gid = request.group_id
        classic = self.classic_groups.group(gid)
        result = Outcome()
        converted = False
        if classic is not None:
            if not classic.members:
                self.converter.delete_empty_classic_group(classic, now_ms, result)
            else:
                replaces = request.instance_id is not None and classic.static_member_id(request.instance_id) is not None
                refusal = self.converter.upgrade_refusal(classic, replaces)
                if refusal is not None:
                    raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {gid}: {refusal}.")
                limit = self.coordinator.state.config.max_group_size
                if not replaces and limit is not None and len(classic.members) >= limit:
                    raise ApiError(
                        Errors.GROUP_MAX_SIZE_REACHED,
                        f"The consumer group has reached its maximum capacity of {limit} members.",
                    )
                self.converter.upgrade(classic, now_ms, result, replaces)
                converted = True
        group = self.coordinator.group(gid)
        if group is not None and request.instance_id is not None:
            owner = group.static_members.get(request.instance_id)
            old = group.members.get(owner) if owner is not None else None
            if old is not None and old.uses_classic_protocol:
                # A consumer-protocol member takes a classic static member's place: it inherits its
                # target assignment at epoch 0 (no UNRELEASED_INSTANCE_ID across protocols).
                member_id = request.member_id or self.coordinator.state.config.member_id_generator()
                tx = self.coordinator.begin()
                new = self.coordinator.replace_static_member(tx, gid, old.member_id, member_id)
                tx.emit(rec.member_metadata(gid, dataclasses.replace(new, classic_metadata=None)))
                if (
                    converted
                    and refresh_subscriptions(tx, group, now_ms, reresolve=False)
                    and not classic_target_is_complete(group)
                ):
                    # The converted group has no partition metadata yet and a takeover changes no
                    # subscription, so nothing else would recompute its target (the classic
                    # assignment, maybe short of partitions added since or withheld by a
                    # cooperative assignor, or reset by a rebalance). Kafka refreshes the metadata
                    # on the first heartbeat after the conversion and bumps the epoch because it
                    # differs. We bump only when the classic assignment is not already a complete
                    # target with nothing to move (which keeps KIP-848's "Online Migration" tables).
                    self.coordinator.bump_group_epoch(tx, gid, now_ms)
                result.records.extend(tx.records)
                result.timers.extend(tx.timers)
                self.classic_members.cancel_member_timers(result, gid, old.member_id)
                request = dataclasses.replace(request, member_id=member_id)
        out.take(result)
        return request

    def _leave_downgrades(
        self, out: Outcome, request: ConsumerGroupHeartbeatRequest, request_key: RequestKey, now_ms: int
    ) -> bool:
        group = self._consumer_group(request.group_id)
        if group is None:
            return False
        member = group.members.get(request.member_id)
        if member is None or (request.instance_id is not None and group.static_members.get(request.instance_id) != member.member_id):
            return False  # the coordinator answers the identity errors
        if not self.converter.should_downgrade(group, [member.member_id]):
            return False
        result = Outcome()
        self.converter.downgrade(group, [member.member_id], now_ms, result)
        out.take(result)
        out.responses.append(
            Reply(request_key, ConsumerGroupHeartbeatResponse(member_id=member.member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH))
        )
        return True

    # ---- timers ------------------------------------------------------------------------------
    def on_timer(self, key: TimerKey, now_ms: int) -> Outcome:
        out = Outcome()
        kind, gid, member_id = key
        if kind in _CLASSIC_GROUP_TIMERS:
            out.take(self.classic_groups.on_timer(key, now_ms))
            return out
        if kind in _CLASSIC_MEMBER_TIMERS:
            out.take(self.classic_members.on_timer(key, now_ms))
            if kind == CLASSIC_MEMBER_GATHER_TIMER:
                self._forget_if_unwritten(gid)
            else:
                self._after_membership_change(gid, out, now_ms)
            return out
        group = self._consumer_group(gid)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return out
        expired = kind == SESSION or (kind == REBALANCE and member.state is MemberState.UNREVOKED_PARTITIONS)
        if expired and self.converter.should_downgrade(group, [member_id]):
            result = Outcome()
            self.converter.downgrade(group, [member_id], now_ms, result)
            out.take(result)
            return out
        fired = self.coordinator.on_timer(key, now_ms)
        out.take(fired)
        if fired.records:
            # A fenced classic member must not leave its join/sync timers armed.
            result = Outcome()
            self.classic_members.cancel_member_timers(result, gid, member_id)
            out.take(result)
            self._after_membership_change(gid, out, now_ms)
        return out

    # ---- offsets and admin -------------------------------------------------------------------
    def validate_offset_commit(self, check: OffsetCommitCheck, now_ms: int) -> Errors:
        group = self._consumer_group(check.group_id)
        if group is not None:
            partitions: dict[uuid.UUID, set[int]] | None = None
            if check.partitions is not None:
                topics = self.coordinator.state.topics
                partitions = {}
                for name, parts in check.partitions:
                    meta = topics.get(name)
                    if meta is None:
                        partitions = None  # an unknown topic: only the exact epoch is valid
                        break
                    partitions.setdefault(meta.topic_id, set()).update(parts)
            return self.coordinator.validate_offset_commit(
                check.group_id, check.member_id, check.generation_id, check.api_version, check.is_transactional,
                partitions, check.group_instance_id,
            )
        return self.classic_groups.validate_offset_commit(
            check.group_id, check.member_id, check.generation_id, check.group_instance_id,
            check.api_version, now_ms, check.is_transactional,
        )

    def validate_offset_fetch(self, check: OffsetFetchCheck) -> Errors:
        if self.classic_groups.group(check.group_id) is not None:
            return self.classic_groups.validate_offset_fetch(check.group_id)
        return self.coordinator.validate_offset_fetch(check.group_id, check.member_id, check.member_epoch)

    def _delete_groups(self, out: Outcome, request: DeleteGroupsRequest, now_ms: int) -> DeleteGroupsResponse:
        results = []
        for gid in request.group_ids:
            if self.classic_groups.group(gid) is not None:
                error, classic = self.classic_groups.delete_group(gid, now_ms)
                out.take(classic)
            else:
                res = self.coordinator.delete_group(gid)
                error = res.response
                out.take(res)
            results.append(DeletableGroupResult(gid, int(error)))
        return DeleteGroupsResponse(results)

    # ---- expiry ------------------------------------------------------------------------------
    def expire_empty_groups(self, now_ms: int) -> Outcome:
        """Kafka's periodic group cleanup, for the caller to run every
        ``offsets.retention.check.interval.ms``: classic and consumer groups (converted ones too) that
        have been Empty for ``offsets.retention.minutes`` are deleted with tombstones of all their
        records. A group that got a member back in time is not Empty and stays. Committed offsets are
        the cluster's: it expires them by its own retention (docs/operations.md)."""
        out = Outcome()
        retention = self.config.offsets_retention_ms
        _, classic = self.classic_groups.expire_empty_groups(now_ms, retention)
        out.take(classic)
        out.take(self.coordinator.expire_empty_groups(now_ms, retention))
        return out

    # ---- reads (what the gateway may know of a group without reaching into the state) ----------
    def group_kind(self, group_id: str) -> str | None:
        """"classic" or "consumer" (a consumer group, converted ones too) while the group exists, else None."""
        if self.classic_groups.group(group_id) is not None:
            return "classic"
        if group_id in self.coordinator.state.groups:
            return "consumer"
        return None

    def group_ids(self) -> list[str]:
        """Every group held (classic and consumer)."""
        return [*self.classic_groups.groups, *self.coordinator.state.groups]

    def group_count(self) -> int:
        return len(self.classic_groups.groups) + len(self.coordinator.state.groups)

    def member_count(self, group_id: str) -> tuple[int, str]:
        """(members, "classic" | "consumer") of a group; (0, "consumer") when there is none."""
        classic = self.classic_groups.groups.get(group_id)
        if classic is not None:
            return len(classic.members), "classic"
        consumer = self.coordinator.state.groups.get(group_id)
        if consumer is not None:
            return len(consumer.members), "consumer"
        return 0, "consumer"

    def subscribed_topics(self, group_id: str) -> frozenset[str]:
        """Topics the group's members subscribe to: KIP-496 refuses deleting their offsets."""
        classic = self.classic_groups.group(group_id)
        if classic is not None:
            if classic.protocol_type != CONSUMER_PROTOCOL_TYPE or not classic.protocol_name:
                return frozenset()
            topics: set[str] = set()
            for m in classic.members.values():
                try:
                    topics.update(decode_subscription(m.metadata(classic.protocol_name)).topics)
                except (MalformedEmbeddedProtocol, ValueError):
                    continue  # a member whose subscription cannot be read protects nothing
            return frozenset(topics)
        group = self.coordinator.group(group_id)
        if group is None:
            return frozenset()
        return frozenset().union(*(subscribed_topic_names(group, m) for m in group.members.values()))

    # ---- metadata, replay, load ----------------------------------------------------------------
    def on_metadata(self, topics: Mapping[str, tuple[uuid.UUID, int]], now_ms: int) -> Outcome:
        """The full topic image: name -> (topic id, partition count)."""
        out = Outcome()
        out.take(self.coordinator.on_metadata(topics, now_ms))
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
        if isinstance(record, GroupMetadataRecord):
            self.classic_groups.replay(record)
        else:
            self.coordinator.replay(record)

    def replay_bytes(self, key: bytes, value: bytes | None) -> bool:
        """Replay one stored record; False for records that are not group records (offsets)."""
        if len(key) < 2:
            return False
        version = int.from_bytes(key[:2], "big", signed=True)
        if version == _GROUP_METADATA_KEY_VERSION:
            self.classic_groups.replay(decode_record(key, value))
            return True
        if version in {int(t) for t in rec.RecordType}:
            self.coordinator.replay(decode_consumer_record(key, value))
            return True
        return False

    def on_loaded(self, now_ms: int) -> Outcome:
        out = Outcome()
        out.take(self.classic_groups.on_loaded(now_ms))
        result = Outcome()
        topics = self.coordinator.state.topics
        for group in self.classic_groups.groups.values():
            if group.is_in(ClassicGroupState.STABLE) and leaves_partitions_unassigned(group, topics):
                # A rebalance the records do not remember (the one after a downgrade) was under way:
                # start it again rather than leave partitions unassigned. Kafka does not (the same
                # gap); a group whose assignor leaves partitions out on purpose rebalances once more.
                self.classic_groups.rebalancer.prepare_rebalance(result, group, now_ms)
        out.take(result)
        out.take(self.coordinator.on_loaded(now_ms))
        return out


__all__ = [
    "AnyRecord", "ClassicGroupsMode", "Outcome", "GroupService", "GroupServiceConfig", "Reply", "RequestKey",
    "encode_any_record",
]
