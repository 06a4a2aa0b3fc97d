"""Client-side assignors of the classic protocol, run by the simulated group leader.

A classic group's leader gets every member's subscription in its JoinGroup response and computes
the assignment itself (classic consumer design, "leader-side assignment"). These are small models of
the Java client's assignors, with the properties the simulation relies on:

- ``range``: per topic, members sorted by id take consecutive ranges; the first ``n % k`` one more.
- ``roundrobin``: all partitions of all topics, sorted, dealt to the sorted members in turn.
- ``cooperative-sticky`` (KIP-429): keep what each member owns while staying balanced, then withhold
  every partition that moves between two members: it is revoked in this generation and assigned in
  the follow-up rebalance, so no partition is ever given while its previous owner still holds it.

Inputs: ``members`` maps member id to (subscribed topics, owned (topic, partition) pairs, generation
of the ownership claim); ``partitions`` maps topic name to its partition count.
"""

from __future__ import annotations

from collections.abc import Mapping

TopicPartition = tuple[str, int]
MemberInput = tuple[frozenset[str], frozenset[TopicPartition], int]

EAGER_ASSIGNORS = ("range", "roundrobin")
COOPERATIVE_ASSIGNOR = "cooperative-sticky"


def _all_partitions(members: Mapping[str, MemberInput], partitions: Mapping[str, int]) -> list[TopicPartition]:
    topics = sorted({t for subs, _, _ in members.values() for t in subs if t in partitions})
    return [(t, p) for t in topics for p in range(partitions[t])]


def range_assign(members: Mapping[str, MemberInput], partitions: Mapping[str, int]) -> dict[str, set[TopicPartition]]:
    out: dict[str, set[TopicPartition]] = {m: set() for m in members}
    topics = sorted({t for subs, _, _ in members.values() for t in subs if t in partitions})
    for topic in topics:
        consumers = sorted(m for m, (subs, _, _) in members.items() if topic in subs)
        n, k = partitions[topic], len(consumers)
        per, extra = divmod(n, k)
        start = 0
        for i, m in enumerate(consumers):
            count = per + (1 if i < extra else 0)
            out[m].update((topic, p) for p in range(start, start + count))
            start += count
    return out


def roundrobin_assign(
    members: Mapping[str, MemberInput], partitions: Mapping[str, int]
) -> dict[str, set[TopicPartition]]:
    out: dict[str, set[TopicPartition]] = {m: set() for m in members}
    ordered = sorted(members)
    i = 0
    for tp in _all_partitions(members, partitions):
        # Skip members not subscribed to the topic, as the Java assignor does.
        for _ in range(len(ordered)):
            m = ordered[i % len(ordered)]
            i += 1
            if tp[0] in members[m][0]:
                out[m].add(tp)
                break
    return out


def cooperative_sticky_assign(
    members: Mapping[str, MemberInput], partitions: Mapping[str, int]
) -> dict[str, set[TopicPartition]]:
    universe = _all_partitions(members, partitions)
    valid = set(universe)
    # A partition claimed by two members goes to the claim with the highest generation (KIP-792);
    # claims of equal generation are both dropped.
    claims: dict[TopicPartition, tuple[int, str | None]] = {}
    for m in sorted(members):
        subs, owned, generation = members[m]
        for tp in owned:
            if tp not in valid or tp[0] not in subs:
                continue
            prev = claims.get(tp)
            if prev is None or prev[0] < generation:
                claims[tp] = (generation, m)
            elif prev[0] == generation:
                claims[tp] = (generation, None)
    previous_owner = {tp: m for tp, (_, m) in claims.items() if m is not None}
    kept: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for tp, m in previous_owner.items():
        kept[m].append(tp)
    n_members = len(members)
    floor, extra = divmod(len(universe), n_members)
    # Trim: at most ``extra`` members may keep floor + 1; everybody else keeps at most floor.
    at_ceiling = 0
    for m in sorted(members, key=lambda m: (-len(kept[m]), m)):
        allowed = floor + 1 if at_ceiling < extra else floor
        if len(kept[m]) >= floor + 1 and allowed == floor + 1:
            at_ceiling += 1
        kept[m] = sorted(kept[m])[:allowed]
    assigned = {tp for tps in kept.values() for tp in tps}
    for tp in universe:
        if tp in assigned:
            continue
        eligible = [m for m in members if tp[0] in members[m][0]]
        if not eligible:
            continue
        m = min(eligible, key=lambda x: (len(kept[x]), x))
        kept[m].append(tp)
    # KIP-429: a partition that changes owner is only revoked now; it is assigned next round.
    out: dict[str, set[TopicPartition]] = {}
    for m, tps in kept.items():
        out[m] = {tp for tp in tps if previous_owner.get(tp, m) == m}
    return out


def assign(
    name: str, members: Mapping[str, MemberInput], partitions: Mapping[str, int]
) -> dict[str, set[TopicPartition]]:
    if name == "range":
        return range_assign(members, partitions)
    if name == "roundrobin":
        return roundrobin_assign(members, partitions)
    if name == COOPERATIVE_ASSIGNOR:
        return cooperative_sticky_assign(members, partitions)
    raise ValueError(f"unknown client assignor {name!r}")
