"""Target assignment computation (KIP-848, "Assignment Epoch - Compute the group assignment").

Builds the assignor's input from the group (subscriptions resolved to topic ids, each member's current
target as the stickiness input), passes the pending ``AssignmentDelta`` so assignors may work
incrementally, and returns only the members whose target changed (found with ``is``, as the assignor
contract promises).
"""

from __future__ import annotations

import uuid
from collections import Counter

from coordinator.assignors.api import (
    AssignmentDelta,
    GroupSpec,
    MemberSpec,
    ServerAssignor,
    SubscriptionType,
    TopicMetadata,
)
from coordinator.config import CoordinatorConfig
from coordinator.model import EMPTY_ASSIGNMENT, Assignment, ConsumerGroup, subscribed_topic_names


def select_assignor(config: CoordinatorConfig, group: ConsumerGroup) -> tuple[str, ServerAssignor]:
    """KIP-848 "Assignor Selection": the server assignor most members ask for, else the default."""
    counts: Counter[str] = Counter()
    for m in group.members.values():
        if m.server_assignor is not None and m.server_assignor in config.assignors:
            counts[m.server_assignor] += 1
    if not counts:
        name = config.default_assignor
    else:
        order = list(config.assignors)
        name = max(counts, key=lambda n: (counts[n], -order.index(n)))
    return name, config.assignors[name]


def compute_target(config: CoordinatorConfig, group: ConsumerGroup) -> dict[str, Assignment]:
    """The new target of every member whose target changed (members absent from the result keep theirs)."""
    meta = group.subscription_metadata
    topics: dict[uuid.UUID, TopicMetadata] = {t.topic_id: t for t in meta.values()}
    specs: dict[str, MemberSpec] = {}
    distinct: set[frozenset[uuid.UUID]] = set()
    target = group.target_assignment
    # Members mostly share subscriptions: resolve each distinct one once, and share the frozenset
    # (its hash is cached) between members.
    resolved: dict[tuple[frozenset[str], str | None], frozenset[uuid.UUID]] = {}
    for mid, m in group.members.items():
        sub = (m.subscribed_topic_names, m.subscribed_topic_regex)
        ids = resolved.get(sub)
        if ids is None:
            ids = resolved[sub] = frozenset(meta[n].topic_id for n in subscribed_topic_names(group, m) if n in meta)
            distinct.add(ids)
        specs[mid] = MemberSpec(mid, m.instance_id, m.rack_id, ids, target.get(mid, EMPTY_ASSIGNMENT))
    sub_type = SubscriptionType.HOMOGENEOUS if len(distinct) <= 1 else SubscriptionType.HETEROGENEOUS
    d = group.delta
    delta = (
        AssignmentDelta(
            frozenset(d.added),
            frozenset(d.removed),
            frozenset(d.changed),
            d.topics_changed,
            removed_assigned=dict(d.removed_assigned),
        )
        # a member id that left and came back within one delta is simplest to handle in full
        if d.valid and d.added.isdisjoint(d.removed)
        else None
    )
    _, assignor = select_assignor(config, group)
    result = assignor.assign(GroupSpec(specs, topics, sub_type), delta)
    d.added.clear()
    d.removed.clear()
    d.removed_assigned.clear()
    d.changed.clear()
    d.topics_changed = False
    d.valid = True
    changed: dict[str, Assignment] = {}
    for mid, spec in specs.items():
        new = result.get(mid, EMPTY_ASSIGNMENT)
        if new is spec.assigned:
            continue
        old = target.get(mid)
        if old is not None and old == new:
            continue
        if old is None and not new:
            continue
        changed[mid] = new
    return changed
