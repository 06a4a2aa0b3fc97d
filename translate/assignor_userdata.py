"""Recognising the userData of the built-in sticky assignors in a classic group's assignments.

Kafka refuses to convert a classic group whose member assignments carry userData (KAFKA-18134: a
custom client assignor's data would be lost). The built-in assignors that write userData at all
write it in the SUBSCRIPTION, and what they write only repeats what the conversion reads anyway:

- Java ``StickyAssignor`` (protocol ``sticky``): the member's previous assignment
  ``[topic [partition]]``, plus (since Kafka 2.3, "v1") the generation it was assigned in;
- Java ``CooperativeStickyAssignor`` (``cooperative-sticky``): the generation alone (an int32; the
  owned partitions travel in the subscription's own OwnedPartitions field);
- librdkafka ``sticky`` and ``cooperative-sticky``: the v1 layout above (no userData on a first join).

Java's built-in assignors put nothing in assignments. librdkafka's group leader, though, copies each
member's subscription userData into that member's assignment, whatever the assignor: a librdkafka
sticky or cooperative-sticky fleet's assignments carry userData once one of its members has been
assigned something before (after its first rebalance), and Kafka refuses to upgrade such a group.

``builtin_userdata_refusal`` accepts an assignment's userData only when it is such a copy: byte for
byte the member's own subscription userData, under a sticky protocol name, in one of the exact
layouts above with nothing left over, naming a generation the group has reached and (sticky layouts)
a previous assignment that contains every partition the subscription says the member owns. Anything
else - a custom assignor's data, a layout that does not parse exactly, a copy that contradicts the
subscription - is refused as Kafka refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass

from translate.bytecodec import MalformedBytes, Reader
from translate.embedded import ConsumerProtocolSubscription

# Protocol (assignor) names of the built-in sticky assignors, the same in Java and librdkafka.
STICKY = "sticky"
COOPERATIVE_STICKY = "cooperative-sticky"
STICKY_PROTOCOLS = frozenset({STICKY, COOPERATIVE_STICKY})

NO_GENERATION = -1


@dataclass(frozen=True, slots=True)
class StickyUserData:
    """What a built-in sticky assignor's userData says: the member's previous assignment (None for
    the cooperative generation-only layout) and the generation it dates from (-1: none)."""

    layout: str  # "sticky-v0", "sticky-v1" or "cooperative-generation"
    previous: dict[str, frozenset[int]] | None
    generation: int


def _previous_assignment(reader: Reader) -> dict[str, frozenset[int]]:
    count = reader.int32()
    if count < 0:
        raise MalformedBytes(f"negative topic count {count}")
    previous: dict[str, frozenset[int]] = {}
    for _ in range(count):
        topic = reader.string()
        n = reader.int32()
        if n < 0:
            raise MalformedBytes(f"negative partition count {n}")
        partitions = [reader.int32() for _ in range(n)]
        if topic in previous or any(p < 0 for p in partitions) or len(set(partitions)) != n:
            raise MalformedBytes("repeated topic, repeated or negative partition")
        previous[topic] = frozenset(partitions)
    return previous


def decode_sticky_userdata(protocol: str, data: bytes) -> StickyUserData | None:
    """The userData read in the layouts the built-in assignor(s) named ``protocol`` write, exactly
    (every byte used); None when no layout fits."""
    if protocol not in STICKY_PROTOCOLS:
        return None
    if protocol == COOPERATIVE_STICKY and len(data) == 4:
        # Java's CooperativeStickyAssignor: the generation alone.
        return StickyUserData("cooperative-generation", None, int.from_bytes(data, "big", signed=True))
    reader = Reader(data)
    try:
        previous = _previous_assignment(reader)
        if reader.at_end() and protocol == STICKY:
            # Java StickyAssignor before Kafka 2.3 (v0): no generation.
            return StickyUserData("sticky-v0", previous, NO_GENERATION)
        generation = reader.int32()
    except MalformedBytes:
        return None
    if not reader.at_end():
        return None
    return StickyUserData("sticky-v1", previous, generation)


def builtin_userdata_refusal(
    protocol: str,
    assignment_user_data: bytes,
    subscription: ConsumerProtocolSubscription,
    group_generation: int,
) -> str | None:
    """Why an assignment's (non-empty) userData is not a built-in sticky assignor's copy of the
    member's subscription userData, or None when it is (the conversion may drop it)."""
    if protocol not in STICKY_PROTOCOLS:
        return f"the group's assignor {protocol!r} is not a built-in sticky one"
    if subscription.user_data is None or bytes(assignment_user_data) != bytes(subscription.user_data):
        return "it is not a copy of the member's subscription userData"
    decoded = decode_sticky_userdata(protocol, assignment_user_data)
    if decoded is None:
        return f"it is not in a layout the built-in {protocol!r} assignors write"
    if not NO_GENERATION <= decoded.generation <= group_generation:
        return f"its generation {decoded.generation} is not one the group (generation {group_generation}) had"
    if decoded.previous is not None:
        for tp in subscription.owned_partitions:
            if not set(tp.partitions) <= decoded.previous.get(tp.topic, frozenset()):
                return "its previous assignment lacks partitions the member's subscription says it owns"
    return None
