"""Test support: a small deterministic sticky assignor and a driver for the coordinator."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from coordinator.assignors.api import Assignment, AssignmentDelta, GroupSpec
from coordinator.config import CoordinatorConfig
from coordinator.messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from coordinator.model import ConsumerGroup
from coordinator.outcome import Outcome
from coordinator.records import Record
from coordinator.service import ConsumerGroupCoordinator


class StickyTestAssignor:
    """Balanced and sticky for identical subscriptions (floor/remainder quotas, lowest partitions kept
    first, free partitions to the least-loaded member in member-id order); for mixed subscriptions
    every partition still goes to exactly one subscriber."""

    name = "sticky-test"

    def assign(self, spec: GroupSpec, delta: AssignmentDelta | None = None) -> dict[str, Assignment]:
        members = sorted(spec.members)
        if not members:
            return {}
        all_parts = sorted(
            ((t, p) for t, md in spec.topics.items() for p in range(md.num_partitions)),
            key=lambda tp: (spec.topics[tp[0]].name, tp[1]),
        )
        floor, extra = divmod(len(all_parts), len(members))
        taken: set[tuple[uuid.UUID, int]] = set()
        new: dict[str, list[tuple[uuid.UUID, int]]] = {m: [] for m in members}
        for m in members:
            s = spec.members[m]
            mine = sorted(
                ((t, p) for t, ps in s.assigned.items() for p in ps
                 if t in spec.topics and t in s.subscribed_topic_ids and p < spec.topics[t].num_partitions),
                key=lambda tp: (spec.topics[tp[0]].name, tp[1]),
            )
            keep = mine[:floor]
            if len(mine) > floor and extra > 0:
                keep = mine[: floor + 1]
                extra -= 1
            new[m] = keep
            taken.update(keep)
        for tp in all_parts:
            if tp in taken:
                continue
            cands = [m for m in members if tp[0] in spec.members[m].subscribed_topic_ids]
            if not cands:
                continue
            best = min(cands, key=lambda m: (len(new[m]), m))
            new[best].append(tp)
        out: dict[str, Assignment] = {}
        for m in members:
            a: dict[uuid.UUID, set[int]] = {}
            for t, p in new[m]:
                a.setdefault(t, set()).add(p)
            fa = {t: frozenset(ps) for t, ps in a.items()}
            old = spec.members[m].assigned
            out[m] = old if {t: p for t, p in old.items() if p} == fa else fa
        return out


def config(**kw: object) -> CoordinatorConfig:
    kw.setdefault("assignors", {"sticky-test": StickyTestAssignor()})
    return CoordinatorConfig(**kw)  # type: ignore[arg-type]


class Driver:
    """Drives one coordinator, keeps every emitted record, and offers terse request helpers."""

    def __init__(self, cfg: CoordinatorConfig | None = None) -> None:
        self.coord = ConsumerGroupCoordinator(cfg or config())
        self.records: list[Record] = []
        self.now = 0
        self.topic_ids: dict[str, uuid.UUID] = {}

    def keep(self, res: Outcome) -> Outcome:
        self.records.extend(res.records)
        return res

    def topics(self, topics: Mapping[str, int], ids: Mapping[str, uuid.UUID] | None = None) -> Outcome:
        for n in topics:
            if ids and n in ids:
                self.topic_ids[n] = ids[n]
            else:
                self.topic_ids.setdefault(n, uuid.uuid5(uuid.NAMESPACE_DNS, n))
        return self.keep(self.coord.on_metadata({n: (self.topic_ids[n], c) for n, c in topics.items()}, self.now))

    def tid(self, name: str) -> uuid.UUID:
        return self.topic_ids[name]

    def hb(self, group: str, member: str, epoch: int, owned: dict[str, list[int]] | None = None, **kw: object) -> ConsumerGroupHeartbeatResponse:
        return self.hb_result(group, member, epoch, owned, **kw).response

    def hb_result(self, group: str, member: str, epoch: int, owned: dict[str, list[int]] | None = None, **kw: object) -> Outcome:
        if epoch == 0:
            kw.setdefault("rebalance_timeout_ms", 30000)
            kw.setdefault("subscribed_topic_names", ["foo"])
            owned = owned or {}
        tps = None if owned is None else [TopicPartitions(self.tid(t), ps) for t, ps in owned.items()]
        req = ConsumerGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch, topic_partitions=tps, **kw)  # type: ignore[arg-type]
        return self.keep(self.coord.consumer_group_heartbeat(req, self.now))

    def group(self, gid: str) -> ConsumerGroup:
        g = self.coord.group(gid)
        assert g is not None
        return g

    def parts(self, a: Mapping[uuid.UUID, frozenset[int]] | None) -> dict[str, list[int]]:
        names = {v: k for k, v in self.topic_ids.items()}
        return {names[t]: sorted(p) for t, p in (a or {}).items() if p}

    def resp_parts(self, resp: ConsumerGroupHeartbeatResponse) -> dict[str, list[int]] | None:
        if resp.assignment is None:
            return None
        names = {v: k for k, v in self.topic_ids.items()}
        return {names[tp.topic_id]: sorted(tp.partitions) for tp in resp.assignment}

    def member_view(self, gid: str, mid: str) -> tuple[int, dict[str, list[int]], dict[str, list[int]]]:
        """(epoch, partitions, pending) as the KIP's case studies print a member: partitions = what the
        member owns (assigned plus still pending revocation), pending = target partitions it does
        not have yet."""
        g = self.group(gid)
        m = g.members[mid]
        target = g.target_assignment.get(mid, {})
        pending = {t: p - m.assigned_partitions.get(t, frozenset()) for t, p in target.items()}
        owned = {
            t: m.assigned_partitions.get(t, frozenset()) | m.partitions_pending_revocation.get(t, frozenset())
            for t in m.assigned_partitions.keys() | m.partitions_pending_revocation.keys()
        }
        return m.member_epoch, self.parts(owned), self.parts(pending)

    def target_view(self, gid: str) -> dict[str, dict[str, list[int]]]:
        g = self.group(gid)
        return {m: self.parts(a) for m, a in g.target_assignment.items()}
