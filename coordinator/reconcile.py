"""Per-member reconciliation toward the target assignment (KIP-848, "Member Epoch - Reconciliation").

A pure function of the member's current assignment, its target, the target epoch, the partitions the
member reports owning, and who owns what in the group:
1. partitions no longer in the target are revoked first; the member stays at its epoch
   (UNREVOKED_PARTITIONS) until it reports it no longer owns them;
2. then it moves to the target epoch;
3. partitions still owned by another member are withheld (UNRELEASED_PARTITIONS) and handed over
   once released.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from coordinator.model import EMPTY_ASSIGNMENT, Assignment, ConsumerGroupMember, MemberState

_NO_PARTITIONS: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned_partitions: Assignment
    partitions_pending_revocation: Assignment


def owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the member still owns any of ``partitions``; unknown (None) counts as owning."""
    if owned is None:
        return True
    for t, parts in partitions.items():
        o = owned.get(t)
        if o and not o.isdisjoint(parts):
            return True
    return False


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    owners: dict[uuid.UUID, dict[int, str]],
) -> CurrentAssignment | None:
    """The member's next current assignment, or None when it does not change."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return None
    elif state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.partitions_pending_revocation):
            return None
    nxt = _next(member, target_epoch, target, owned, owners)
    if (
        nxt.member_epoch == member.member_epoch
        and nxt.previous_member_epoch == member.previous_member_epoch
        and nxt.state is member.state
        and nxt.assigned_partitions == member.assigned_partitions
        and nxt.partitions_pending_revocation == member.partitions_pending_revocation
    ):
        return None
    return nxt


def _next(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    owned: Assignment | None,
    owners: dict[uuid.UUID, dict[int, str]],
) -> CurrentAssignment:
    mid = member.member_id
    current = member.assigned_partitions
    own_pending = member.partitions_pending_revocation
    kept_all: dict[uuid.UUID, frozenset[int]] = {}
    revoke_all: dict[uuid.UUID, frozenset[int]] = {}
    assign_all: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for t in target.keys() | current.keys():
        tgt = target.get(t, _NO_PARTITIONS)
        cur = current.get(t, _NO_PARTITIONS)
        kept = cur & tgt
        revoke = cur - kept
        to_assign = tgt - kept
        if to_assign:
            o = owners.get(t)
            if o:
                mine = own_pending.get(t, _NO_PARTITIONS)
                # A partition is free when nobody owns it, or when this very member owns it only as
                # "pending revocation" (a partition has a single owner at a time).
                free = frozenset(p for p in to_assign if (w := o.get(p)) is None or (w == mid and p in mine))
                if len(free) != len(to_assign):
                    unreleased = True
                    to_assign = free
        if kept:
            kept_all[t] = kept
        if revoke:
            revoke_all[t] = revoke
        if to_assign:
            assign_all[t] = to_assign
    if revoke_all and owns_any(owned, revoke_all):
        # Revoke first: the member keeps its epoch until it acknowledges the revocation.
        return CurrentAssignment(
            member.member_epoch, member.member_epoch, MemberState.UNREVOKED_PARTITIONS, kept_all, revoke_all
        )
    for t, parts in assign_all.items():
        have = kept_all.get(t)
        kept_all[t] = parts if have is None else have | parts
    new_state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    # Keep the very same mapping when nothing changed so that callers can compare with ``is``.
    assigned: Assignment = current if kept_all == current else (kept_all or EMPTY_ASSIGNMENT)
    return CurrentAssignment(target_epoch, member.member_epoch, new_state, assigned, EMPTY_ASSIGNMENT)
