"""What the classic client-side assignors have in common, computed on the server.

The classic strategies order members and partitions the same way: members sorted as Java's
``MemberInfo`` sorts them (static members first by instance id, then dynamic members by member id),
topics by name, partitions by number. Results keep the caller's mapping object for a member whose
assignment did not change (the ``ServerAssignor`` contract).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from coordinator.assignors.api import Assignment, GroupSpec, MemberSpec, TopicId

TP = tuple[TopicId, int]


def sorted_members(members: Mapping[str, MemberSpec], ids: Iterable[str] | None = None) -> list[str]:
    """Static members first, by instance id (then member id); then dynamic members by member id."""
    chosen = list(members) if ids is None else list(ids)
    static = sorted(
        (mid for mid in chosen if members[mid].instance_id is not None),
        key=lambda mid: (members[mid].instance_id or "", mid),
    )
    dynamic = sorted(mid for mid in chosen if members[mid].instance_id is None)
    return static + dynamic


def subscribed_topics(spec: GroupSpec) -> list[TopicId]:
    """Every topic some member subscribes to that exists, sorted by name (then id)."""
    wanted: set[TopicId] = set()
    for m in spec.members.values():
        wanted |= m.subscribed_topic_ids
    return sorted((t for t in wanted if t in spec.topics), key=lambda t: (spec.topics[t].name, t.bytes))


def as_result(spec: GroupSpec, lists: Mapping[str, Iterable[TP]]) -> dict[str, Assignment]:
    """Per member, its partitions as a topic -> frozenset mapping; the given object where unchanged."""
    out: dict[str, Assignment] = {}
    for mid, m in spec.members.items():
        built: dict[TopicId, set[int]] = {}
        for t, p in lists.get(mid, ()):
            built.setdefault(t, set()).add(p)
        new = {t: frozenset(ps) for t, ps in built.items()}
        current = {t: ps for t, ps in m.assigned.items() if ps}
        out[mid] = m.assigned if current == new else new
    return out
