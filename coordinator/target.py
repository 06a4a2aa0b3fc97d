"""Target assignment computation (KIP-848, "Assignment Epoch - Compute the group assignment").

Builds the assignor's input from the group (subscriptions resolved to topic ids, each member's current
target as the stickiness input), passes the pending ``AssignmentDelta`` so assignors may work
incrementally, and returns only the members whose target changed (found with ``is``, as the assignor
contract promises).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

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
    """KIP-848 "Assignor Selection": the server assignor most members ask for, else the default; or
    the one the configured ``group_assignor`` hook chooses for the group."""
    if config.group_assignor is not None:
        chosen = config.group_assignor(group)
        if chosen is not None:
            return chosen
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


def build_input(
    config: CoordinatorConfig, group: ConsumerGroup
) -> tuple[GroupSpec, AssignmentDelta | None, ServerAssignor]:
    """What the assignor needs, read from the group without changing it: the spec (subscriptions
    resolved to topic ids, each member's current target), the pending delta as an immutable hint
    (None when it cannot be trusted) and the selected assignor. Every part is immutable or never
    mutated in place (assignments are replaced, not edited), so it may be handed to another thread."""
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
    return GroupSpec(specs, topics, sub_type), delta, assignor


def reset_delta(group: ConsumerGroup) -> None:
    """The delta is consumed by a computation: what follows is relative to its result."""
    d = group.delta
    d.added.clear()
    d.removed.clear()
    d.removed_assigned.clear()
    d.changed.clear()
    d.topics_changed = False
    d.valid = True


def changed_targets(spec: GroupSpec, result: Mapping[str, Assignment], target: Mapping[str, Assignment]) -> dict[str, Assignment]:
    """The members of ``spec`` whose new target differs from ``target`` (their current one)."""
    changed: dict[str, Assignment] = {}
    for mid, member in spec.members.items():
        new = result.get(mid, EMPTY_ASSIGNMENT)
        if new is member.assigned:
            continue
        old = target.get(mid)
        if old is not None and old == new:
            continue
        if old is None and not new:
            continue
        changed[mid] = new
    return changed


def compute_target(config: CoordinatorConfig, group: ConsumerGroup) -> dict[str, Assignment]:
    """The new target of every member whose target changed (members absent from the result keep theirs)."""
    spec, delta, assignor = build_input(config, group)
    result = assignor.assign(spec, delta)
    reset_delta(group)
    return changed_targets(spec, result, group.target_assignment)


@dataclass(frozen=True, slots=True)
class AssignmentJob:
    """A target computation handed to the driver to run off its event loop (KIP-1263,
    ``group.consumer.assignor.offload.enable``): an immutable snapshot of the assignor's input, taken at
    ``group_epoch``. ``run`` touches nothing but the snapshot, so any thread may call it; the result is
    installed by ``membership.install_assignment`` for that epoch, the group's later changes applied over it."""

    group_id: str
    group_epoch: int
    spec: GroupSpec
    delta: AssignmentDelta | None
    assignor: ServerAssignor = field(compare=False)

    def run(self) -> dict[str, Assignment]:
        return self.assignor.assign(self.spec, self.delta)


def assignment_size(group: ConsumerGroup) -> int:
    """members x partitions of the subscribed topics: what an offload threshold is compared with."""
    return len(group.members) * sum(t.num_partitions for t in group.subscription_metadata.values())
