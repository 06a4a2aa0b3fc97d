"""How the instances of a fleet split the shards: a sticky, balanced, deterministic assignment that never
hands a shard to one instance while another still holds it.

The fleet's membership is a classic consumer group on the state topic (gateway/fleet/membership.py): each
instance is a member, the state topic's partitions are the shards, and the group leader runs ``assign``
below over every member's metadata. A member's metadata says where it is reachable (its advertised
address) and which shards it holds now, with the assignment epoch it got them in.

The classic protocol that works on every cluster is eager (a rebalance revokes everything before the
join), which would move every shard at every membership change. The instances therefore keep serving
their shards through a rebalance and do the incremental handover themselves, as Kafka's cooperative
sticky assignor does over the same protocol (KIP-429):

- a shard held by one member and meant for another is assigned to nobody in this round: its holder,
  seeing it missing from its assignment, stops serving it (drains its in-flight calls, flushes its
  appends) and rejoins; in that next round nobody claims it and it goes to its new owner, which fences
  the old owner's producer and loads it;
- a shard nobody claims (its owner left or was expired after ``session.timeout.ms``) is assigned at once;
- two members claiming one shard (one was expired while it could not tell, then rejoined) is resolved
  for the claim of the latest assignment epoch; the other is told to drop it (its writes are fenced
  already by the newer owner's load).

Pure functions, no I/O: tested alone (tests/gateway/test_fleet_assignor.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PROTOCOL_NAME = "groupgate-shards"
_VERSION = 1


@dataclass(frozen=True, slots=True)
class MemberClaim:
    """What one member says in its JoinGroup metadata: its address, the shards it holds and the epoch
    of the assignment it got them in (0: none yet), and the node slot it was given (-1: none yet)."""

    endpoint: str
    owned: tuple[int, ...] = ()
    epoch: int = 0
    slot: int = -1
    # How its broker listeners are numbered (gateway/net/routes.py ListenerRule.encode()); None: it
    # publishes none (an older version), and carries no broker's traffic for the others.
    listeners: Mapping[str, Any] | None = None

    def encode(self) -> bytes:
        d: dict[str, Any] = {"v": _VERSION, "endpoint": self.endpoint, "owned": list(self.owned), "epoch": self.epoch,
                             "slot": self.slot}
        if self.listeners is not None:
            d["listeners"] = dict(self.listeners)
        return json.dumps(d, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes | None) -> MemberClaim:
        """A member whose metadata does not read (another version, garbage) claims nothing."""
        try:
            d = json.loads(data or b"{}")
            listeners = d.get("listeners")
            return cls(
                str(d.get("endpoint", "")), tuple(int(x) for x in d.get("owned", ())), int(d.get("epoch", 0)),
                int(d.get("slot", -1)), listeners if isinstance(listeners, dict) else None,
            )
        except (ValueError, TypeError, AttributeError):
            return cls("")


@dataclass(frozen=True, slots=True)
class FleetAssignment:
    """One member's assignment: its shards, and the table every member gets (member id -> address, the
    owner of each shard or None while it is handed over, member id -> node slot)."""

    shards: tuple[int, ...]
    epoch: int
    endpoints: Mapping[str, str] = field(default_factory=dict)
    owners: tuple[str | None, ...] = ()
    # A member's slot numbers its coordinator node (gateway/fleet/membership.py): kept while the member stays, so
    # that a node id names the same address until membership changes; a new member takes the lowest free one.
    slots: Mapping[str, int] = field(default_factory=dict)
    # member id -> how its broker listeners are numbered (the members that published it): the table the
    # brokers' addresses are routed over (gateway/net/routes.py).
    listeners: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def encode(self) -> bytes:
        return json.dumps(
            {"v": _VERSION, "epoch": self.epoch, "endpoints": dict(self.endpoints), "owners": list(self.owners),
             "slots": dict(self.slots), "listeners": {m: dict(r) for m, r in self.listeners.items()}},
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, shards: tuple[int, ...], data: bytes | None) -> FleetAssignment:
        try:
            d = json.loads(data or b"{}")
            return cls(
                shards, int(d.get("epoch", 0)), {str(k): str(v) for k, v in d.get("endpoints", {}).items()},
                tuple(None if o is None else str(o) for o in d.get("owners", ())),
                {str(k): int(v) for k, v in d.get("slots", {}).items()},
                {str(k): v for k, v in (d.get("listeners") or {}).items() if isinstance(v, dict)},
            )
        except (ValueError, TypeError, AttributeError):
            return cls(shards, 0)


def _order(members: Mapping[str, MemberClaim]) -> list[str]:
    # Deterministic whatever order the coordinator listed the members in.
    return sorted(members, key=lambda m: (members[m].endpoint, m))


def assign(shards: int, members: Mapping[str, MemberClaim]) -> dict[str, FleetAssignment]:
    """The leader's assignment of ``shards`` shards over ``members`` (member id -> claim)."""
    if not members:
        return {}
    order = _order(members)
    rank = {m: i for i, m in enumerate(order)}
    epoch = max(c.epoch for c in members.values()) + 1

    # Who holds each shard now: one claimant; several -> the latest epoch (then the first in order).
    holder: dict[int, str] = {}
    for m in order:
        for s in sorted(set(members[m].owned)):
            if not 0 <= s < shards:
                continue
            other = holder.get(s)
            if other is None or members[m].epoch > members[other].epoch:
                holder[s] = m
    held: dict[str, list[int]] = {m: [] for m in order}
    for s, m in sorted(holder.items()):
        held[m].append(s)

    # Quotas: floor(P/N) each, the remainder to the members holding most now (stickiness), then in order.
    n = len(order)
    base, extra = divmod(shards, n)
    by_holding = sorted(order, key=lambda m: (-len(held[m]), rank[m]))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_holding)}

    keep: dict[str, list[int]] = {m: held[m][: quota[m]] for m in order}
    free = [s for s in range(shards) if s not in holder]
    # Free shards to the members below quota, emptiest first, so that a joining member gets its share.
    # A shard over a holder's quota is not free: it is released first and placed in the next round.
    gets: dict[str, list[int]] = {m: [] for m in order}
    for s in free:
        below = [m for m in order if len(keep[m]) + len(gets[m]) < quota[m]] or order
        target = min(below, key=lambda m: (len(keep[m]) + len(gets[m]), rank[m]))
        gets[target].append(s)

    owners: list[str | None] = [None] * shards
    result_shards: dict[str, tuple[int, ...]] = {}
    for m in order:
        mine = tuple(sorted(keep[m] + gets[m]))
        result_shards[m] = mine
        for s in mine:
            owners[s] = m
    endpoints = {m: members[m].endpoint for m in order}
    slots = _slots(members, order)
    listeners = {m: rule for m in order if (rule := members[m].listeners) is not None}
    return {m: FleetAssignment(result_shards[m], epoch, endpoints, tuple(owners), slots, listeners) for m in order}


def _slots(members: Mapping[str, MemberClaim], order: list[str]) -> dict[str, int]:
    """Each member keeps the slot it claims (a slot claimed twice: the latest epoch keeps it); the others
    take the lowest free slots, in order."""
    out: dict[str, int] = {}
    taken: dict[int, str] = {}
    for m in sorted(order, key=lambda m: (-members[m].epoch, order.index(m))):
        slot = members[m].slot
        if slot >= 0 and slot not in taken:
            taken[slot] = m
            out[m] = slot
    free = (n for n in range(len(order) + len(taken)) if n not in taken)
    for m in order:
        if m not in out:
            out[m] = next(free)
    return out


def moving(before: Mapping[str, tuple[int, ...]], after: Mapping[str, tuple[int, ...]]) -> set[int]:
    """The shards whose owner differs between two assignments (for tests and logs)."""
    owner_before = {s: m for m, ss in before.items() for s in ss}
    owner_after = {s: m for m, ss in after.items() for s in ss}
    return {s for s in set(owner_before) | set(owner_after) if owner_before.get(s) != owner_after.get(s)}


__all__ = ["PROTOCOL_NAME", "FleetAssignment", "MemberClaim", "assign", "moving"]
