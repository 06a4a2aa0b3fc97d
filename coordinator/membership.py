"""Group-level operations shared by the heartbeat handler and the classic-protocol front (translate/).

Each function takes the write transaction ``tx`` (records + timers) and the group, emits the records
of its change in Kafka's order, and keeps the derived data (regex resolutions, partition metadata,
assignment delta) consistent. They do not validate requests: callers do.

- ``upsert_member(tx, group, member, now_ms)``: add or update a member's subscription/identity; bumps
  the group epoch when the KIP says so (join, subscription or assignor change).
- ``remove_member(tx, group, member_id, now_ms)``: fence / leave: tombstones, timers cancelled, epoch bumped.
- ``remove_members(tx, group, member_ids, now_ms)``: the same for a batch, with one epoch bump.
- ``replace_static_member(tx, group, old, new_member_id)``: a static member's replacement inherits
  the assignment of the member it replaces (KIP-345 in KIP-848 "Static Membership").
- ``refresh_subscriptions(tx, group, now_ms, reresolve)``: regex resolutions + partition metadata.
- ``bump_group_epoch(tx, group, now_ms)``, ``maybe_update_target(tx, group)``.
- ``install_assignment(tx, job, result, now_ms)`` / ``abandon_assignment(state, job)``: the end of an
  offloaded target computation (KIP-1263).
- ``reconcile_member(tx, group, member_id, owned, now_ms)``: move the member toward its target.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from coordinator import records as rec
from coordinator import regex as rx
from coordinator.assignors.api import GroupSpec, TopicMetadata
from coordinator.config import CoordinatorConfig
from coordinator.model import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    subscription_topic_names,
)
from coordinator.reconcile import reconcile
from coordinator.state import CoordinatorState, Tx
from coordinator.target import (
    AssignmentJob,
    assignment_size,
    build_input,
    compute_target,
    reset_delta,
)
from coordinator.timers import rebalance_key, session_key


def bump_group_epoch(tx: Tx, group: ConsumerGroup, now_ms: int) -> None:
    tx.emit(rec.group_epoch(group.group_id, group.group_epoch + 1, empty_since(group, now_ms)))


def empty_since(group: ConsumerGroup, now_ms: int) -> int:
    """What record 3 says about emptiness: -1 with members; else when the group became empty (kept
    across later writes of an already empty group, now for one that empties in this transaction)."""
    if group.members:
        return -1
    return group.empty_since_ms if group.empty_since_ms >= 0 else now_ms


def _metadata_differs(a: ConsumerGroupMember, b: ConsumerGroupMember) -> bool:
    return (
        a.instance_id != b.instance_id
        or a.rack_id != b.rack_id
        or a.client_id != b.client_id
        or a.client_host != b.client_host
        or a.subscribed_topic_names != b.subscribed_topic_names
        or a.subscribed_topic_regex != b.subscribed_topic_regex
        or a.rebalance_timeout_ms != b.rebalance_timeout_ms
        or a.server_assignor != b.server_assignor
        or a.classic_metadata != b.classic_metadata
    )


def _subscription_differs(a: ConsumerGroupMember, b: ConsumerGroupMember) -> bool:
    # KIP-848 "Group Epoch - Trigger a rebalance": subscriptions and assignors.
    return (
        a.subscribed_topic_names != b.subscribed_topic_names
        or a.subscribed_topic_regex != b.subscribed_topic_regex
        or a.server_assignor != b.server_assignor
    )


def upsert_member(tx: Tx, group: ConsumerGroup, updated: ConsumerGroupMember, now_ms: int) -> bool:
    """Persist ``updated`` (a detached copy) if it differs from the stored member; returns whether the
    group epoch was bumped."""
    old = group.members.get(updated.member_id)
    if old is not None and not _metadata_differs(old, updated):
        return False
    # Decide before emitting: applying the record updates the stored member in place.
    if old is None:
        group.delta.added.add(updated.member_id)
        bump = True
    elif _subscription_differs(old, updated):
        if updated.member_id not in group.delta.added:
            group.delta.changed.add(updated.member_id)
        bump = True
    else:
        bump = False
    tx.emit(rec.member_metadata(group.group_id, updated))
    if bump:
        refresh_subscriptions(tx, group, now_ms, reresolve=False)
        bump_group_epoch(tx, group, now_ms)
    return bump


def refresh_subscriptions(tx: Tx, group: ConsumerGroup, now_ms: int, reresolve: bool) -> bool:
    """Resolve new (or, with ``reresolve``, all) regexes, drop unused ones, and update the partition
    metadata of the subscribed topics. Returns whether the partition metadata changed."""
    st = tx.state
    gid = group.group_id
    # The distinct subscriptions, not the members: a group of thousands mostly shares a handful.
    in_use = {regex for _, regex in group.subscriptions if regex}
    for regex in list(group.resolved_regexes):
        if regex not in in_use:
            tx.emit(rec.regular_expression_tombstone(gid, regex))
    for regex in sorted(in_use):
        known = group.resolved_regexes.get(regex)
        if known is not None and not reresolve:
            continue
        topics = rx.resolve(regex, st.topics)
        if known is None or known.topics != topics:
            tx.emit(rec.regular_expression(gid, regex, topics, st.metadata_version, now_ms))
    names: set[str] = set()
    for topic_names, pattern in group.subscriptions:
        names |= subscription_topic_names(group, topic_names, pattern)
    meta: dict[str, TopicMetadata] = {n: st.topics[n] for n in names if n in st.topics}
    if meta == group.subscription_metadata:
        return False
    tx.emit(rec.partition_metadata(gid, meta))
    return True


def remove_member(tx: Tx, group: ConsumerGroup, member_id: str, now_ms: int) -> None:
    """Fence or remove a member: tombstones (current, target, subscription), timers cancelled, and a
    group epoch bump (KIP-848 "Group Epoch": a member leaves or is fenced)."""
    remove_members(tx, group, (member_id,), now_ms)


def remove_members(tx: Tx, group: ConsumerGroup, member_ids: Iterable[str], now_ms: int) -> None:
    """Remove several members at once (a classic LeaveGroup batch): each member's tombstones and
    timers, then ONE group epoch bump for the whole batch, as Kafka does. Nothing when empty."""
    removed = False
    for member_id in member_ids:
        _remove_one(tx, group, member_id)
        removed = True
    if removed:
        refresh_subscriptions(tx, group, now_ms, reresolve=False)
        bump_group_epoch(tx, group, now_ms)  # records when the group became empty, if it did


def _remove_one(tx: Tx, group: ConsumerGroup, member_id: str) -> None:
    gid = group.group_id
    previous_target = group.target_assignment.get(member_id, EMPTY_ASSIGNMENT)
    tx.emit(rec.current_assignment_tombstone(gid, member_id))
    if member_id in group.target_assignment:
        tx.emit(rec.target_member_tombstone(gid, member_id))
    tx.emit(rec.member_metadata_tombstone(gid, member_id))
    tx.cancel(session_key(gid, member_id))
    tx.cancel(rebalance_key(gid, member_id))
    d = group.delta
    d.changed.discard(member_id)
    if member_id in d.added:
        d.added.discard(member_id)
    else:
        d.removed.add(member_id)
        d.removed_assigned[member_id] = previous_target


def replace_static_member(tx: Tx, group: ConsumerGroup, old: ConsumerGroupMember, new_member_id: str) -> ConsumerGroupMember:
    """The new member takes the old one's place: same subscription, target and assigned partitions,
    member epoch 0 (it will be moved to the target epoch by reconciliation). No epoch bump."""
    gid = group.group_id
    target = group.target_assignment.get(old.member_id)
    assigned = old.assigned_partitions
    new = dataclasses.replace(
        old,
        member_id=new_member_id,
        member_epoch=0,
        previous_member_epoch=0,
        state=MemberState.STABLE,
        assigned_partitions=assigned,
        partitions_pending_revocation=EMPTY_ASSIGNMENT,
    )
    tx.emit(rec.current_assignment_tombstone(gid, old.member_id))
    if target is not None:
        tx.emit(rec.target_member_tombstone(gid, old.member_id))
    tx.emit(rec.member_metadata_tombstone(gid, old.member_id))
    tx.cancel(session_key(gid, old.member_id))
    tx.cancel(rebalance_key(gid, old.member_id))
    tx.emit(rec.member_metadata(gid, new))
    if target is not None:
        tx.emit(rec.target_member(gid, new_member_id, target))
    tx.emit(rec.current_assignment(gid, new))
    # The assignor sees the replacement as the old member under a new id.
    d = group.delta
    d.removed.add(old.member_id)
    d.removed_assigned[old.member_id] = EMPTY_ASSIGNMENT  # the new id already holds the old target
    d.added.add(new_member_id)
    return group.members[new_member_id]


def assignment_due_ms(config: CoordinatorConfig, group: ConsumerGroup) -> int:
    """KIP-1263 (Kafka's ``canComputeNextTargetAssignment``): the earliest time the group may compute
    its next target: at once (0) when it never computed one (timestamp 0, e.g. a new group's first
    join) or its interval is 0, else the last computation's time plus the group's interval."""
    interval = config.assignment_interval_for(group.group_id)
    last = group.assignment_timestamp_ms
    if last <= 0 or interval <= 0:
        return 0
    return last + interval


def maybe_update_target(
    tx: Tx, group: ConsumerGroup, now_ms: int, *, force: bool = False, offload: bool = False
) -> bool:
    """Compute and install a new target assignment when the group epoch is ahead of it and the
    group's assignment interval has passed (``force`` ignores the interval). While held back, members
    keep reconciling toward the current target (a joining member gets the current assignment epoch
    and nothing assigned). As in Kafka 4.3.1 (measured: ConsumerGroupDescribe stays ``Assigning``
    past the interval until a member heartbeats), nothing fires when the interval ends: the next
    heartbeat after it computes the target. With ``offload`` (a consumer-protocol heartbeat) and the
    group above its offload threshold (KIP-1263 ``consumer.assignor.offload.enable``), the computation is
    handed to the driver as an ``AssignmentJob`` instead and the current target stays until
    ``install_assignment``. Returns whether a new target was installed."""
    if group.group_epoch <= group.assignment_epoch:
        return False
    st = tx.state
    gid = group.group_id
    if offload and gid in st.assigning:
        return False  # one computation in flight per group: its result, or the heartbeat after it
    if not force and now_ms < assignment_due_ms(st.config, group):
        return False
    if offload and _offloads(st.config, group):
        spec, delta, assignor = build_input(st.config, group)
        job = AssignmentJob(gid, group.group_epoch, spec, delta, assignor)
        st.assigning[gid] = job
        st.jobs.append(job)
        # The delta now describes changes since the snapshot, whose result is not installed yet: until
        # it is, no computation may treat the current target as reflecting it.
        reset_delta(group)
        group.delta.valid = False
        return False
    st.assigning.pop(gid, None)  # computed here: a result still in flight is stale
    for mid, a in compute_target(tx.state.config, group).items():
        tx.emit(rec.target_member(gid, mid, a))
    tx.emit(rec.target_epoch(gid, group.group_epoch, now_ms))
    return True


def reconcile_member(
    tx: Tx, group: ConsumerGroup, member: ConsumerGroupMember, owned: Assignment | None, now_ms: int
) -> bool:
    """Move ``member`` toward its target; returns whether its current assignment changed. Arms the
    rebalance timer while the member must revoke partitions, disarms it otherwise."""
    nxt = reconcile(
        member,
        group.assignment_epoch,
        group.target_assignment.get(member.member_id, EMPTY_ASSIGNMENT),
        owned,
        group.partition_owners,
    )
    if nxt is None:
        return False
    was_revoking = member.state is MemberState.UNREVOKED_PARTITIONS
    updated = dataclasses.replace(
        member,
        member_epoch=nxt.member_epoch,
        previous_member_epoch=nxt.previous_member_epoch,
        state=nxt.state,
        assigned_partitions=nxt.assigned_partitions,
        partitions_pending_revocation=nxt.partitions_pending_revocation,
    )
    tx.emit(rec.current_assignment(group.group_id, updated))
    key = rebalance_key(group.group_id, member.member_id)
    if nxt.state is MemberState.UNREVOKED_PARTITIONS:
        timeout = member.rebalance_timeout_ms
        if member.classic_metadata is not None and timeout <= 0:
            timeout = member.classic_metadata.session_timeout_ms
        tx.schedule(key, now_ms + max(timeout, 0))
    elif was_revoking:
        tx.cancel(key)
    return True


def _offloads(config: CoordinatorConfig, group: ConsumerGroup) -> bool:
    # Not the group's first target: until one exists a joining member would be at epoch 0, which
    # means "join" on the wire (Kafka starts offloading groups at epoch 1 for the same reason).
    limit = config.offload_min_size_for(group.group_id)
    return limit is not None and group.assignment_epoch > 0 and assignment_size(group) >= limit


def install_assignment(tx: Tx, job: AssignmentJob, result: dict[str, Assignment], now_ms: int) -> bool:
    """Install an offloaded computation's result as the target of the group epoch it was computed
    from (``job.group_epoch``), unless a target that recent is installed already, or the job is not the
    one in flight (superseded, abandoned, or from before a reload). Returns whether it was installed.

    The group may have moved on while it ran (members joined or left, subscriptions changed), as it
    does all the time while a large group forms. Discarding the result then would leave such a group
    without a target for as long as it keeps changing; like Kafka's coordinator, the result is
    installed as if those changes came after it: a member that left gets nothing, a static member's
    replacement gets what its predecessor was given, a member keeps only partitions of topics it still
    subscribes to, and members that joined meanwhile keep the target they have. The group, still behind
    its epoch, then computes again (in full) on a later heartbeat."""
    st = tx.state
    if st.assigning.get(job.group_id) is not job:
        return False
    del st.assigning[job.group_id]
    group = st.groups.get(job.group_id)
    if group is None:
        return False
    if group.dead or group.assignment_epoch >= job.group_epoch:
        group.delta.valid = False  # the snapshot consumed the delta: the next computation is in full
        return False
    gid = group.group_id
    spec = build_input(st.config, group)[0]
    kept = _still_members(job, spec, result)
    target = group.target_assignment
    for mid in spec.members:
        new = kept.get(mid)
        if new is None:
            if mid not in job.spec.members:
                continue  # joined while it ran: keeps the target it has
            new = EMPTY_ASSIGNMENT
        old = target.get(mid)
        if old is new or (old is None and not new) or old == new:
            continue
        tx.emit(rec.target_member(gid, mid, new))
    tx.emit(rec.target_epoch(gid, job.group_epoch, now_ms))
    d = group.delta
    # With the input unchanged since the snapshot the new target reflects everything, and the delta
    # starts afresh from it (unless something that does not reach the assignor's input was noted);
    # otherwise the next computation is in full.
    unchanged = group.group_epoch == job.group_epoch and spec == job.spec
    d.valid = unchanged and not (d.added or d.removed or d.changed or d.topics_changed)
    return True


def _still_members(job: AssignmentJob, now: GroupSpec, result: dict[str, Assignment]) -> dict[str, Assignment]:
    """``result`` (computed from ``job.spec``) for the members of ``now``: those that left dropped, a
    replaced static member's part given to its successor, topics no longer subscribed to removed."""
    successors = {m.instance_id: mid for mid, m in now.members.items() if m.instance_id is not None}
    kept: dict[str, Assignment] = {}
    for mid, assignment in result.items():
        member = now.members.get(mid)
        if member is None:
            was = job.spec.members.get(mid)
            successor = successors.get(was.instance_id) if was is not None and was.instance_id is not None else None
            if successor is None or successor in job.spec.members:
                continue
            member = now.members[successor]
        subscribed = member.subscribed_topic_ids
        if all(t in subscribed for t in assignment):
            kept[member.member_id] = assignment
        else:
            kept[member.member_id] = {t: p for t, p in assignment.items() if t in subscribed}
    return kept


def abandon_assignment(state: CoordinatorState, job: AssignmentJob) -> None:
    """The computation failed or was dropped: the group computes again on its next heartbeat."""
    if state.assigning.get(job.group_id) is job:
        del state.assigning[job.group_id]
        group = state.groups.get(job.group_id)
        if group is not None:
            group.delta.valid = False
