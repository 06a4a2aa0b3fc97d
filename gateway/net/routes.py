"""Which instance of a fleet carries the data traffic of each upstream broker, as every instance names it.

Clients key brokers by node id (librdkafka, aiokafka and the Java client replace a node's address when a
Metadata answer names another one), so node id -> host:port must be the same whichever instance answers.
With ``instances_group`` set, upstream broker B keeps node id B and its address is B's listener on the
instance a rendezvous (highest random weight) hash of (B, instance address) picks over the instance
table of the latest assignment (gateway/fleet/assignor.py), which every instance holds:

- deterministic: a hash of bytes (never Python's per-process ``hash``), ties broken by address;
- it changes only when membership changes, and then only for the brokers of the instances that left
  or joined: a broker's scores on the instances that stay do not move.

Each instance publishes how its broker listeners are numbered (``ListenerRule``, the port mapping of
gateway/config/settings.py), so the others can name its listener for any broker without asking it.

Pure functions, no I/O: tested alone (tests/gateway/test_fleet_routes.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.config.ports import broker_port


@dataclass(frozen=True, slots=True)
class ListenerRule:
    """An instance's broker listeners: node N on ``host:base + (N - id_base)`` for ``count`` ids from
    ``id_base``, unless ``explicit`` names its port (config.broker_ports); none for the nodes in
    ``unserved``, whose listener it could not open (the port held by another process): named there, a
    broker would be unreachable for every client of the fleet, or reach whatever holds the port."""

    host: str
    base: int
    id_base: int = 0
    count: int = 64
    explicit: Mapping[int, int] = field(default_factory=dict)
    unserved: frozenset[int] = frozenset()

    def address(self, node_id: int) -> tuple[str, int] | None:
        if node_id in self.unserved:
            return None
        port = broker_port(node_id, base=self.base, id_base=self.id_base, count=self.count, explicit=self.explicit)
        return None if port is None else (self.host, port)

    def encode(self) -> dict[str, Any]:
        return {"host": self.host, "base": self.base, "id_base": self.id_base, "count": self.count,
                "explicit": {str(k): v for k, v in self.explicit.items()}, "unserved": sorted(self.unserved)}

    @classmethod
    def decode(cls, d: Any) -> ListenerRule | None:
        """None for what does not read (an older member publishes none: it carries no brokers' traffic
        for the others)."""
        if not isinstance(d, dict):
            return None
        try:
            return cls(str(d["host"]), int(d["base"]), int(d.get("id_base", 0)), int(d.get("count", 64)),
                       {int(k): int(v) for k, v in (d.get("explicit") or {}).items()},
                       frozenset(int(n) for n in d.get("unserved") or ()))
        except (KeyError, ValueError, TypeError, AttributeError):
            return None


def _score(node_id: int, instance: str) -> int:
    digest = hashlib.blake2b(f"{node_id}\x00{instance}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def serving(node_id: int, rules: Mapping[str, ListenerRule]) -> dict[str, ListenerRule]:
    """The instances (by address) whose listener rule names a listener for broker ``node_id``: the ones
    a route may pick (the same for every instance, which all read the same rules)."""
    return {inst: rule for inst, rule in rules.items() if rule.address(node_id) is not None}


def pick(node_id: int, instances: Iterable[str]) -> str | None:
    """The instance (by address) that carries broker ``node_id``'s traffic; None without instances."""
    best: tuple[int, str] | None = None
    for inst in instances:
        key = (_score(node_id, inst), inst)
        if best is None or key > best:
            best = key
    return None if best is None else best[1]


def routes(node_ids: Iterable[int], instances: Iterable[str]) -> dict[int, str]:
    """node id -> the instance carrying it (for tests and logs)."""
    members = sorted(set(instances))
    out = {}
    for n in node_ids:
        chosen = pick(n, members)
        if chosen is not None:
            out[n] = chosen
    return out


__all__ = ["ListenerRule", "pick", "routes", "serving"]
