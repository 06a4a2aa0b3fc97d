"""The new-protocol group coordinator: the one sans-I/O entry point of coordinator/.

Every call takes the current time in ms and returns an ``Outcome`` (response, records, timers; coordinator/outcome.py):
persist ``records`` (write-ahead, in order) before releasing ``response``; apply ``timers``
(``ScheduleTimer`` replaces any timer with the same key; ``CancelTimer`` disarms it) and call
``on_timer(key, now_ms)`` when one fires.

Gateway usage::

    coord = ConsumerGroupCoordinator(CoordinatorConfig(member_id_generator=lambda: str(uuid.uuid4())))
    for key, value in stored_records: coord.replay_bytes(key, value)
    coord.on_metadata({name: (topic_id, num_partitions), ...}, now_ms)   # whenever metadata changes
    coord.on_loaded(now_ms)                                              # after replay: arm timers
    res = coord.consumer_group_heartbeat(ConsumerGroupHeartbeatRequest(...), now_ms)
    res = coord.on_timer(key, now_ms)
    coord.describe(["g1"]); coord.list_groups(states=[], types=[])
    coord.validate_offset_commit(group_id, member_id, member_epoch, api_version)
    res = coord.expire_empty_groups(now_ms, retention_ms)                # offsets.retention.check.interval.ms
    for job in coord.take_assignment_jobs():                             # config.offload_enable (KIP-1263)
        result = job.run()                                               # on any thread
        res = coord.install_assignment(job, result, now_ms)              # back in the group's turn
    records -> bytes: coordinator.records.codec.encode(record)

Lower-level API for translate/ (classic members inside consumer groups), all within one ``Tx``::

    tx = coord.begin()
    group = coord.get_or_create_group(group_id)            # created in memory; persisted by records
    coord.upsert_member(tx, group_id, ConsumerGroupMember(..., classic_metadata=ClassicMemberMetadata(...)), now_ms)
    coord.update_target(tx, group_id, now_ms)              # when group epoch > assignment epoch and
                                                           # the assignment interval passed (KIP-1263)
    coord.assignment_due_ms(group_id)                      # when that interval ends (0: now)
    member = coord.reconcile_member(tx, group_id, member_id, owned_partitions, now_ms)  # target: at once
    member = coord.reconcile_member(..., defer_target=True)  # target: as update_target (interval)
    coord.remove_member(tx, group_id, member_id, now_ms)   # leave / fence: tombstones + epoch bump
    coord.remove_members(tx, group_id, member_ids, now_ms) # a batch: tombstones + ONE epoch bump
    coord.replace_static_member(tx, group_id, old_member_id, new_member_id)  # KIP-345 takeover
    coord.bump_group_epoch(tx, group_id, now_ms)
    tx.schedule(key, deadline) / tx.cancel(key); result = tx.result(response)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from coordinator import records as rec
from coordinator.assignors.api import TopicMetadata
from coordinator.config import CoordinatorConfig
from coordinator.describe import DescribedGroup, ListedGroup, describe_group, list_groups
from coordinator.errors import Errors
from coordinator.heartbeat import heartbeat, session_timeout_of
from coordinator.membership import (
    abandon_assignment,
    assignment_due_ms,
    bump_group_epoch,
    install_assignment,
    maybe_update_target,
    reconcile_member,
    refresh_subscriptions,
    remove_member,
    remove_members,
    replace_static_member,
    upsert_member,
)
from coordinator.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from coordinator.model import Assignment, ConsumerGroup, ConsumerGroupMember, MemberState
from coordinator.offsets import validate_offset_commit, validate_offset_fetch
from coordinator.outcome import Outcome
from coordinator.records import Record
from coordinator.records.codec import decode
from coordinator.replay import apply
from coordinator.state import CoordinatorState, Tx
from coordinator.target import AssignmentJob
from coordinator.timers import REBALANCE, SESSION, TimerKey, rebalance_key, session_key


class ConsumerGroupCoordinator:
    def __init__(self, config: CoordinatorConfig | None = None) -> None:
        self.state = CoordinatorState(config or CoordinatorConfig())

    # -- requests -------------------------------------------------------------------------------

    def consumer_group_heartbeat(
        self, req: ConsumerGroupHeartbeatRequest, now_ms: int
    ) -> Outcome[ConsumerGroupHeartbeatResponse]:
        return heartbeat(self.state, req, now_ms)

    def describe(self, group_ids: Iterable[str]) -> list[DescribedGroup]:
        return [describe_group(self.state, g) for g in group_ids]

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()) -> list[ListedGroup]:
        return list_groups(self.state, states, types)

    def validate_offset_commit(
        self, group_id: str, member_id: str, member_epoch: int, api_version: int, is_transactional: bool = False,
        partitions: Mapping[uuid.UUID, Iterable[int]] | None = None, group_instance_id: str | None = None,
    ) -> Errors:
        return validate_offset_commit(
            self.state.groups.get(group_id), member_id, member_epoch, api_version, is_transactional, partitions,
            group_instance_id,
        )

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> Errors:
        return validate_offset_fetch(self.state.groups.get(group_id), member_id, member_epoch)

    def delete_group(self, group_id: str) -> Outcome[Errors]:
        """Delete an empty group (it becomes DEAD): GROUP_ID_NOT_FOUND / NON_EMPTY_GROUP otherwise."""
        group = self.state.groups.get(group_id)
        if group is None:
            return Outcome(Errors.GROUP_ID_NOT_FOUND)
        if group.members:
            return Outcome(Errors.NON_EMPTY_GROUP)
        tx = Tx(self.state)
        _delete_empty_group(tx, group)
        return tx.result(Errors.NONE)

    def expire_empty_groups(self, now_ms: int, retention_ms: int) -> Outcome[list[str]]:
        """The periodic cleanup (Kafka's ``offsets.retention.check.interval.ms``): delete the groups
        that have been empty for ``retention_ms`` (``offsets.retention.minutes``); the response lists them.

        Kafka deletes an empty consumer group once none of its offsets is left, an offset expiring
        retention after its commit. groupgate's offsets live in the cluster (which expires them by the
        same rule), so the time the group became empty (record 3) stands in for its last commit: the
        final commit of a closing consumer comes just before it leaves. An empty group whose records
        do not say since when (written before the time was recorded) is stamped now, so that its
        deadline survives restarts too."""
        tx = Tx(self.state)
        expired: list[str] = []
        for group in list(self.state.groups.values()):
            if group.members:
                continue
            if group.empty_since_ms < 0:
                tx.emit(rec.group_epoch(group.group_id, group.group_epoch, now_ms))
            elif now_ms - group.empty_since_ms >= retention_ms:
                _delete_empty_group(tx, group)
                expired.append(group.group_id)
        return tx.result(expired)

    # -- time and metadata ----------------------------------------------------------------------

    def on_timer(self, key: TimerKey, now_ms: int) -> Outcome[None]:
        """A timer fired: an expired session or revocation deadline fences the member (KIP-848)."""
        kind, group_id, member_id = key
        tx = Tx(self.state)
        group = self.state.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return tx.result(None)
        if kind == SESSION or (kind == REBALANCE and member.state is MemberState.UNREVOKED_PARTITIONS):
            remove_member(tx, group, member_id, now_ms)
        return tx.result(None)

    def on_metadata(self, topics: Mapping[str, tuple[uuid.UUID, int]], now_ms: int) -> Outcome[dict[str, int]]:
        """The full topic image (name -> (topic id, partition count)). Groups whose subscribed topics
        changed (partitions added, topic created / deleted / recreated, regex matches) get their
        epoch bumped; the new target is computed on their next heartbeat. The response names the
        groups bumped, each with its epoch before the bump."""
        image = {n: TopicMetadata(tid, n, num) for n, (tid, num) in topics.items()}
        st = self.state
        tx = Tx(st)
        bumped: dict[str, int] = {}
        if image == st.topics:
            return tx.result(bumped)
        st.topics = image
        st.metadata_version += 1
        for group in list(st.groups.values()):
            if refresh_subscriptions(tx, group, now_ms, reresolve=True):
                group.delta.topics_changed = True
                bumped[group.group_id] = group.group_epoch
                bump_group_epoch(tx, group, now_ms)
        return tx.result(bumped)

    def on_loaded(self, now_ms: int) -> Outcome[None]:
        """After replay (KIP-848 "Fail Over"): arm every member's session timer and the revocation
        timers of members that were revoking."""
        tx = Tx(self.state)
        for group in self.state.groups.values():
            for m in group.members.values():
                tx.schedule(session_key(group.group_id, m.member_id), now_ms + session_timeout_of(self.state, m, group.group_id))
                if m.state is MemberState.UNREVOKED_PARTITIONS:
                    tx.schedule(rebalance_key(group.group_id, m.member_id), now_ms + max(m.rebalance_timeout_ms, 0))
        return tx.result(None)

    # -- offloaded target computations (KIP-1263 group.consumer.assignor.offload.enable) ----------

    def take_assignment_jobs(self) -> list[AssignmentJob]:
        """The computations heartbeats handed over since the last call (``config.offload_min_size``).
        The driver runs each ``job.run()`` wherever it likes, then calls ``install_assignment`` (or
        ``abandon_assignment``) in the group's turn, like any other change of the group."""
        jobs, self.state.jobs = self.state.jobs, []
        return jobs

    def install_assignment(self, job: AssignmentJob, result: dict[str, Assignment], now_ms: int) -> Outcome[bool]:
        """The records of the computed target, installed for the epoch of its snapshot with the group's
        changes since applied over it (the response: whether it was installed; not when a newer target
        is in place or the job was superseded or abandoned)."""
        tx = Tx(self.state)
        return tx.result(install_assignment(tx, job, result, now_ms))

    def abandon_assignment(self, job: AssignmentJob) -> None:
        abandon_assignment(self.state, job)

    # -- persistence ------------------------------------------------------------------------------

    def replay(self, record: Record) -> None:
        apply(self.state.groups, record)

    def replay_bytes(self, key: bytes, value: bytes | None) -> None:
        apply(self.state.groups, decode(key, value))

    def snapshot(self) -> dict[str, tuple[object, ...]]:
        return {gid: g.snapshot() for gid, g in self.state.groups.items()}

    # -- lower-level API (translate/) -------------------------------------------------------------

    def begin(self) -> Tx:
        return Tx(self.state)

    def group(self, group_id: str) -> ConsumerGroup | None:
        return self.state.groups.get(group_id)

    def get_or_create_group(self, group_id: str) -> ConsumerGroup:
        return self.state.groups.setdefault(group_id, ConsumerGroup(group_id))

    def upsert_member(self, tx: Tx, group_id: str, member: ConsumerGroupMember, now_ms: int) -> bool:
        return upsert_member(tx, self.get_or_create_group(group_id), member, now_ms)

    def remove_member(self, tx: Tx, group_id: str, member_id: str, now_ms: int) -> None:
        remove_member(tx, self.state.groups[group_id], member_id, now_ms)

    def remove_members(self, tx: Tx, group_id: str, member_ids: Iterable[str], now_ms: int) -> None:
        """A batch removal (classic LeaveGroup): one epoch bump for the whole batch."""
        remove_members(tx, self.state.groups[group_id], member_ids, now_ms)

    def replace_static_member(self, tx: Tx, group_id: str, old_member_id: str, new_member_id: str) -> ConsumerGroupMember:
        """KIP-345 in KIP-848: ``new_member_id`` takes the static member's place and assignment."""
        group = self.state.groups[group_id]
        return replace_static_member(tx, group, group.members[old_member_id], new_member_id)

    def bump_group_epoch(self, tx: Tx, group_id: str, now_ms: int) -> None:
        bump_group_epoch(tx, self.state.groups[group_id], now_ms)

    def update_target(self, tx: Tx, group_id: str, now_ms: int, *, force: bool = False) -> bool:
        """Compute the group's next target when its epoch is ahead and, unless ``force``, its
        assignment interval passed (KIP-1263). Returns whether a new target was installed."""
        return maybe_update_target(tx, self.state.groups[group_id], now_ms, force=force)

    def assignment_interval_ms(self, group_id: str) -> int:
        """The group's effective ``consumer.assignment.interval.ms`` (KIP-1263)."""
        return self.state.config.assignment_interval_for(group_id)

    def assignment_due_ms(self, group_id: str) -> int:
        """The earliest time the group may compute its next target (0: at once), KIP-1263."""
        group = self.state.groups.get(group_id)
        return 0 if group is None else assignment_due_ms(self.state.config, group)

    def reconcile_member(
        self, tx: Tx, group_id: str, member_id: str, owned: Assignment | None, now_ms: int,
        *, defer_target: bool = False,
    ) -> ConsumerGroupMember:
        """Bring the target up to date (at once, or with ``defer_target`` only once the assignment
        interval passed, as for consumer-protocol members) and move the member toward it."""
        group = self.state.groups[group_id]
        maybe_update_target(tx, group, now_ms, force=not defer_target)
        reconcile_member(tx, group, group.members[member_id], owned, now_ms)
        return group.members[member_id]


def _delete_empty_group(tx: Tx, group: ConsumerGroup) -> None:
    """Tombstones of every group-level record left (the members' are gone already)."""
    for regex in list(group.resolved_regexes):
        tx.emit(rec.regular_expression_tombstone(group.group_id, regex))
    for member_id in list(group.target_assignment):
        tx.emit(rec.target_member_tombstone(group.group_id, member_id))
    for r in rec.group_tombstones(group.group_id):
        tx.emit(r)
