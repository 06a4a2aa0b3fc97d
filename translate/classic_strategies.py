"""Translate mode keeps a classic group's declared strategy.

A purely classic group run as a consumer group (``classic_groups = translate``) is assigned by the
server, but with the layout its members' strategy asks for: the group's common protocol is chosen as
Kafka's classic group chooses it (the protocols every member supports; each member votes for the first
of its own that is among them; the most votes wins), and a built-in strategy of that name
(``range``, ``roundrobin``, ``sticky``, ``cooperative-sticky``: coordinator/assignors/) computes the
target. Reconciliation stays per member and incremental: partitions that move are revoked before they
are given to their next owner.

Which client's ``cooperative-sticky``: Java's and librdkafka's compute different layouts (a newcomer
takes other partitions), and on Kafka the group leader's runs. The leader stands for the oldest member
here; its subscription tells the two apart: Java's CooperativeStickyAssignor always sends the
generation alone as userData (4 bytes), librdkafka none on a first join and its sticky layout after.
``sticky`` (eager) cannot be told apart that way and gets Java's layout.

A custom strategy name (a client-side assignor the server cannot run) falls back to the assignor
KIP-848's selection picks (the configured default unless members' preferred strategies map to
another); the translator warns once per group and name (``FALLBACK_REASON``).

Groups with consumer-protocol members are not covered: their assignor is chosen as KIP-848 does.
"""

from __future__ import annotations

from collections import Counter

from coordinator.assignors import classic_strategy_assignors
from coordinator.assignors.api import ServerAssignor
from coordinator.assignors.sticky_rdkafka import RdkafkaStickyAssignor
from coordinator.model import ConsumerGroup
from translate.embedded import MalformedEmbeddedProtocol, decode_subscription

STRATEGIES: dict[str, ServerAssignor] = classic_strategy_assignors()
COOPERATIVE_STICKY = "cooperative-sticky"
RDKAFKA_COOPERATIVE_STICKY: ServerAssignor = RdkafkaStickyAssignor(COOPERATIVE_STICKY)
# Java's CooperativeStickyAssignor: the subscription's userData is the int32 generation alone.
_JAVA_COOPERATIVE_USERDATA_LEN = 4

FALLBACK_REASON = (
    "the group's common protocol {protocol!r} is not a strategy the gateway can compute "
    "(range, roundrobin, sticky, cooperative-sticky): its members are assigned by the server "
    "assignor {assignor!r} instead"
)


def java_string_hash(s: str) -> int:
    """``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _hash_map_order(names: list[str]) -> list[str]:
    """The iteration order of a ``java.util.HashMap`` holding ``names`` inserted in this order: by
    bucket of the spread hash at the map's capacity, then insertion order within a bucket."""
    capacity = 16
    while len(names) > capacity * 3 // 4:
        capacity *= 2

    def bucket(name: str) -> int:
        h = java_string_hash(name) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(names, key=lambda n: bucket(n))  # sorted() is stable: insertion order in a bucket


def common_protocol(group: ConsumerGroup) -> str | None:
    """The protocol Kafka's classic group would select for these members, or None when a member is
    not classic (or they share none). Ties go to the first of the tied names in the iteration order of
    the votes' hash map, as ``ClassicGroup.selectProtocol`` resolves them."""
    preferences: list[list[str]] = []
    for member in group.members.values():
        metadata = member.classic_metadata
        if metadata is None:
            return None
        preferences.append([name for name, _ in metadata.supported_protocols])
    if not preferences:
        return None
    candidates = set(preferences[0])
    for names in preferences[1:]:
        candidates.intersection_update(names)
    if not candidates:
        return None
    votes: Counter[str] = Counter()
    for names in preferences:
        votes[next(name for name in names if name in candidates)] += 1
    best = max(votes.values())
    return next(name for name in _hash_map_order(list(votes)) if votes[name] == best)


def strategy_assignor(group: ConsumerGroup) -> tuple[str, ServerAssignor] | None:
    """The server-side stand-in for a purely classic group's common protocol (``CoordinatorConfig.
    group_assignor``); None leaves the choice to KIP-848's selection."""
    name = common_protocol(group)
    if name is None:
        return None
    assignor = STRATEGIES.get(name)
    if assignor is None:
        return None
    if name == COOPERATIVE_STICKY and not _java_cooperative_sticky(group):
        assignor = RDKAFKA_COOPERATIVE_STICKY
    return name, assignor


def _java_cooperative_sticky(group: ConsumerGroup) -> bool:
    """Whether the oldest member (standing for the classic group's leader) runs Java's assignor."""
    leader = next(iter(group.members.values()))
    metadata = leader.classic_metadata
    blob = dict(metadata.supported_protocols).get(COOPERATIVE_STICKY) if metadata is not None else None
    if blob is None:
        return True
    try:
        user_data = decode_subscription(blob).user_data
    except MalformedEmbeddedProtocol:
        return True
    return user_data is not None and len(user_data) == _JAVA_COOPERATIVE_USERDATA_LEN
