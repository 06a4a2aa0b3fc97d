"""The contract between the coordinator's target-assignment builder and its server-side assignors.

An assignor is a pure function of the group's subscriptions, the topic metadata and each member's
current *target* assignment (the stickiness input). It never sees member epochs or what members
currently own: reconciliation toward the target is the coordinator's job (KIP-848, "Assignment").

Incremental use: the builder may pass an ``AssignmentDelta`` describing what changed since the
previous call whose result is already reflected in ``MemberSpec.assigned``. An assignor may use it to
work in proportion to the change instead of the group size; the result must satisfy the same balance
and stickiness properties as a call without the hint.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

TopicId = uuid.UUID
# topic id -> partition numbers
Assignment = Mapping[TopicId, frozenset[int]]
EMPTY_ASSIGNMENT: Mapping[TopicId, frozenset[int]] = {}


class SubscriptionType(enum.Enum):
    HOMOGENEOUS = "homogeneous"
    HETEROGENEOUS = "heterogeneous"


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: TopicId
    name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class MemberSpec:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    # Only topics that exist in GroupSpec.topics (the builder resolves names and regexes to ids).
    subscribed_topic_ids: frozenset[TopicId]
    # The member's current target assignment; empty for a new member.
    assigned: Assignment = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GroupSpec:
    members: Mapping[str, MemberSpec]
    topics: Mapping[TopicId, TopicMetadata]
    subscription_type: SubscriptionType


@dataclass(frozen=True, slots=True)
class AssignmentDelta:
    """What changed since the previous assignment (whose result is in MemberSpec.assigned)."""

    added: frozenset[str] = frozenset()
    removed: frozenset[str] = frozenset()  # no longer in GroupSpec.members
    changed: frozenset[str] = frozenset()  # subscription (or rack) changed
    topics_changed: bool = False  # any topic added, removed or resized: assignors may fall back to full
    # The previous target of each member in ``removed`` (optional). With it, an assignor can hand the
    # freed partitions out without scanning the whole group; without it, it recomputes in full.
    removed_assigned: Mapping[str, Assignment] = field(default_factory=dict)


class PartitionAssignorError(Exception):
    """The assignor cannot compute an assignment for this input."""


class ServerAssignor(Protocol):
    name: str

    def assign(self, spec: GroupSpec, delta: AssignmentDelta | None = None) -> dict[str, Assignment]:
        """Return the new target assignment of every member in ``spec.members``.

        Members whose assignment did not change keep the very same mapping object they were given
        (``result[m] is spec.members[m].assigned``) so that the caller can find changes with ``is``.
        """
        ...
