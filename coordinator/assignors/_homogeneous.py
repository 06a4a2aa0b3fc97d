"""The balanced, sticky core of the ``uniform`` assignor for members sharing one subscription.

KIP-848 ("Assignor", uniform): partitions are spread evenly and each member keeps as much of its
current target as balance allows. With ``total`` partitions and ``n`` members every member gets
``quota = total // n`` and ``total % n`` of them get one more. Members already holding more than the
minimum are the first to be granted the extra slot (that avoids a revocation); the rest go to the first
members in member-id order. Every member keeps what it holds up to its quota; the excess, together with
partitions nobody holds, is handed to under-filled members in (topic, partition) order.

The same quota rule serves the incremental path: when only members joined or left and the previous
target (in ``MemberSpec.assigned``) is complete, the freed partitions are the departed members' ones plus
what over-quota members give up, so nothing but a count of each member's partitions is needed. On a
complete previous target both paths return the same mapping.

Everything works on whole frozensets and ranges: no object per partition on the common path.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import accumulate, chain, compress, cycle, repeat
from operator import attrgetter, ne

from coordinator.assignors.api import Assignment, MemberSpec, TopicId

# The order in which topics are filled and trimmed. UUID.int is a plain attribute, so sorting by it
# stays in C (the UUID rich comparisons are Python methods).
topic_order = attrgetter("int")

# (topic, partitions in order, how many of them): ``partitions`` may be longer than the count.
Pool = list[tuple[TopicId, Sequence[int], int]]

# Partition numbers as shared int objects: frozensets built from slices of this list reuse them
# instead of allocating an int per partition (ints above 256 are not cached by the interpreter).
_numbers: list[int] = []


def first_numbers(n: int) -> list[int]:
    """A list whose first ``n`` items are 0 .. n-1 (it may be longer)."""
    if len(_numbers) < n:
        _numbers.extend(range(len(_numbers), n))
    return _numbers


# Chunks cut by zip() get one argument per partition: above this size, slices are cut one by one (the
# per-chunk overhead is then small next to the partitions anyway).
_BATCH_MAX = 256


def chunked(numbers: Sequence[int], size: int) -> Iterator[frozenset[int]]:
    """``numbers`` cut into consecutive frozensets of ``size`` (its length is a multiple of ``size``)."""
    if size <= _BATCH_MAX:
        # zip() over ``size`` references to one iterator yields consecutive tuples, all in C.
        return map(frozenset, zip(*([iter(numbers)] * size), strict=False))
    return (frozenset(numbers[k : k + size]) for k in range(0, len(numbers), size))


def assign_full(
    member_ids: Sequence[str],
    members: Mapping[str, MemberSpec],
    topic_ids: Sequence[TopicId],
    sizes: Sequence[int],
    out: dict[str, Assignment],
    shared: SharedSets | None = None,
) -> None:
    """Assign ``topic_ids`` (sorted by ``topic_order``, of ``sizes`` partitions) to ``member_ids`` (sorted).

    The current targets are validated: partitions of other topics, out of range, or already held by an
    earlier member are dropped. ``shared`` lets the groups of one assignment share partition sets.
    """
    if not member_ids:
        return
    owned: list[Assignment] = [members[mid].assigned for mid in member_ids]
    if not any(owned):
        # Nobody holds anything: nothing to validate or trim, and the quotas follow from the order.
        _fill_fresh(topic_ids, sizes, owned, shared if shared is not None else SharedSets())
        out.update(zip(member_ids, owned, strict=True))
        return
    counts = [0] * len(member_ids)
    taken: dict[TopicId, set[int]] = {}
    # A UUID-keyed dict costs a Python-level __hash__ call per key: built only when needed.
    parts = dict(zip(topic_ids, sizes, strict=True))
    if not _keep_valid(owned, counts, parts, taken, careful=False):
        # Two members claim the same partition: redo with per-topic overlap checks.
        owned = [members[mid].assigned for mid in member_ids]
        taken.clear()
        _keep_valid(owned, counts, parts, taken, careful=True)

    total = sum(sizes)
    quotas = _quotas(member_ids, counts, total, True)

    loose: dict[TopicId, set[int]] = {}  # given up by members above their quota
    for i, count in enumerate(counts):
        if count > quotas[i]:
            owned[i], dropped = _trim(owned[i], count - quotas[i])
            counts[i] = quotas[i]
            for tid, fs in dropped:
                loose.setdefault(tid, set()).update(fs)

    pool: Pool = []
    for tid, n in zip(topic_ids, sizes, strict=True):
        seen = taken.get(tid) if taken else None
        if seen is None:
            if n:
                pool.append((tid, first_numbers(n), n))
            continue
        free = loose.get(tid) if loose else None
        if len(seen) < n:  # partitions nobody holds (C-level set difference, only for such topics)
            unheld = set(first_numbers(n)[:n])
            unheld.difference_update(seen)
            free = unheld if free is None else unheld | free
        if free:
            ordered = sorted(free)
            pool.append((tid, ordered, len(ordered)))
    _fill(pool, [(i, quotas[i] - c) for i, c in enumerate(counts) if c < quotas[i]], owned)
    out.update(zip(member_ids, owned, strict=True))


def _keep_valid(
    owned: list[Assignment],
    counts: list[int],
    parts: Mapping[TopicId, int],
    taken: dict[TopicId, set[int]],
    careful: bool,
) -> bool:
    """Drop what a member may not keep (other topics, out of range, already kept by an earlier member).

    Updates ``owned``, ``counts`` and ``taken`` (topic -> kept partitions). Without ``careful``, an
    overlap between members is only detected (by set sizes, one pass per partition) and False is
    returned; ``careful`` resolves overlaps in favour of the earlier member.
    """
    for i, current in enumerate(owned):
        if not current:
            continue
        changed = False
        items: list[tuple[TopicId, frozenset[int]]] = []
        count = 0
        for tid, held in current.items():
            if not held:
                continue
            n = parts.get(tid)
            if n is None:
                changed = True
                continue
            keep = held
            if max(held) >= n or min(held) < 0:
                keep = frozenset(p for p in held if 0 <= p < n)
            seen = taken.get(tid)
            if seen is None:
                taken[tid] = set(keep)
            elif careful:
                if not seen.isdisjoint(keep):
                    keep = keep.difference(seen)
                seen.update(keep)
            else:
                before = len(seen)
                seen.update(keep)
                if len(seen) - before != len(keep):
                    return False
            if keep is not held:
                changed = True
            if keep:
                items.append((tid, keep))
                count += len(keep)
        if changed:
            owned[i] = dict(items)
        counts[i] = count
    return True


def assign_incremental(
    member_ids: Sequence[str],
    members: Mapping[str, MemberSpec],
    total: int,
    freed: Iterable[tuple[TopicId, frozenset[int]]],
    freed_count: int,
    out: dict[str, Assignment],
) -> bool:
    """Rebalance after joins/leaves, given the partitions the departed members held.

    ``member_ids`` may be in any order. Returns False (and writes nothing) when the current targets do
    not add up to a complete assignment, in which case the caller recomputes in full.
    """
    n = len(member_ids)
    if n == 0:
        return True
    owned: list[Assignment] = [members[m].assigned for m in member_ids]
    counts = [sum(map(len, a.values())) if a else 0 for a in owned]
    if sum(counts) + freed_count != total:
        return False
    quotas = _quotas(member_ids, counts, total, False)

    loose: dict[TopicId, set[int]] = {}
    for tid, fs in freed:
        loose.setdefault(tid, set()).update(fs)
    for i, (count, quota) in enumerate(zip(counts, quotas, strict=True)):
        if count > quota:
            owned[i], dropped = _trim(owned[i], count - quota)
            counts[i] = quotas[i]
            for tid, fs in dropped:
                loose.setdefault(tid, set()).update(fs)
    pool: Pool = []
    for tid in sorted(loose, key=topic_order):
        free = sorted(loose[tid])
        pool.append((tid, free, len(free)))
    under = sorted((i for i, (c, qt) in enumerate(zip(counts, quotas, strict=True)) if c < qt), key=member_ids.__getitem__)
    _fill(pool, [(i, quotas[i] - counts[i]) for i in under], owned)
    out.update(zip(member_ids, owned, strict=True))
    return True


def _quotas(member_ids: Sequence[str], counts: list[int], total: int, ids_sorted: bool) -> list[int]:
    """Each member's quota: the minimum, plus one for ``total % n`` of them.

    Members above the minimum win the extra slots first, the smallest member ids first; leftover slots
    go to the smallest ids. ``ids_sorted`` says the indices already follow member-id order.
    """
    n = len(counts)
    q, extra = divmod(total, n)
    quotas = [q] * n
    over = [i for i, c in enumerate(counts) if c > q]
    if len(over) > extra:
        # Losers are the largest ids: same outcome as walking the members in id order.
        if ids_sorted:
            winners = over[:extra]
        else:
            ids = sorted([member_ids[i] for i in over])  # C-level sort: cheaper than a Python heap
            losing = set(ids[extra:])
            winners = [i for i in over if member_ids[i] not in losing]
        for i in winners:
            quotas[i] = q + 1
        return quotas
    for i in over:
        quotas[i] = q + 1
    extra -= len(over)
    if extra:
        candidates = [i for i, c in enumerate(counts) if c <= q]
        if ids_sorted:
            chosen = candidates[:extra]
        else:
            picked = set(sorted([member_ids[i] for i in candidates])[:extra])
            chosen = [i for i in candidates if member_ids[i] in picked]
        for i in chosen:
            quotas[i] = q + 1
    return quotas


def _trim(held: Assignment, k: int) -> tuple[dict[TopicId, frozenset[int]], list[tuple[TopicId, frozenset[int]]]]:
    """Give up ``k`` partitions of ``held``: the highest ones of the last topics in topic order."""
    kept = dict(held)
    dropped: list[tuple[TopicId, frozenset[int]]] = []
    for tid in sorted(held, key=topic_order, reverse=True):
        fs = held[tid]
        if len(fs) <= k:
            del kept[tid]
            if fs:
                dropped.append((tid, fs))
            k -= len(fs)
        else:
            if k == 1:
                top = max(fs)
                gone = frozenset((top,))
            else:
                gone = frozenset(sorted(fs)[len(fs) - k :])
            kept[tid] = fs - gone
            dropped.append((tid, gone))
            k = 0
        if k == 0:
            break
    return kept, dropped


def _fill(pool: Pool, needs: Iterable[tuple[int, int]], owned: list[Assignment]) -> None:
    """Hand the pool out in order: each (member index, count) takes the next ``count`` partitions."""
    if not pool:
        return  # nobody can be under quota when nothing is free
    ti = 0
    pos = 0
    tid, seq, length = pool[0]
    for i, need in needs:
        base = owned[i]
        end = pos + need
        if end < length and not base:
            # The common case: a member with nothing takes a slice of the current topic.
            owned[i] = {tid: frozenset(seq[pos:end])}
            pos = end
            continue
        add: dict[TopicId, frozenset[int]] = {}
        while need:
            end = min(pos + need, length)
            add[tid] = frozenset(seq[pos:end])
            need -= end - pos
            if end == length:
                ti += 1
                pos = 0
                if ti < len(pool):
                    tid, seq, length = pool[ti]
            else:
                pos = end
        if base:
            merged = dict(base)
            for t, fs in add.items():
                old = merged.get(t)
                merged[t] = fs if old is None else old | fs
            owned[i] = merged
        else:
            owned[i] = add


class _FullSets(dict[int, frozenset[int]]):
    """Partition count -> the frozenset of all its partition numbers, built on first use."""

    def __missing__(self, n: int) -> frozenset[int]:
        fs = self[n] = frozenset(first_numbers(n)[:n])
        return fs


class SharedSets:
    """Partition-number frozensets for one assignment, shared by every topic and member they fit.

    Frozensets are immutable, so two members holding the same partition numbers (of different
    topics) can hold the same object: built once instead of once per member.
    """

    __slots__ = ("cuts", "fulls")

    def __init__(self) -> None:
        self.fulls = _FullSets()  # partition count -> all its partitions
        self.cuts: dict[tuple[int, int], list[frozenset[int]]] = {}  # (count, size) -> cut in order


def _fill_fresh(
    topic_ids: Sequence[TopicId], sizes: Sequence[int], owned: list[Assignment], shared: SharedSets
) -> None:
    """Fill ``owned`` (all empty) for a group where nobody holds anything.

    With ``q, extra = divmod(total, n)`` members 0..extra-1 take q + 1 partitions and the rest q, each the
    next ones in (topic, partition) order: the result of ``_fill`` with those quotas.
    The mappings are built in C-level loops, with no interpreter step per partition:

    - members aligned on topic boundaries over a run of topics of one size: either ``k`` whole topics
      per member (dict.fromkeys of ``k``-tuples of topic ids and the shared frozenset of all of that
      size's partitions), or ``m`` members per topic (each topic cut the same way, so the cut
      frozensets are built once and shared by every such topic, across groups too; each mapping comes from
      dict.fromkeys on a one-topic template, which reuses the stored key hash instead of calling
      UUID.__hash__ per member);
    - otherwise, runs of members served from one topic: its partitions cut into ``need``-sized tuples
      by zip(), each mapping from the one-topic template;
    - a member across topics otherwise (one interpreter step per such member): one slice of topic
      ids, found by bisecting the topics' offsets.

    Members whose quota is zero keep their (empty) mapping object.
    """
    if not sizes:
        return
    run_ends: list[int] | None = None  # where each run of topics of one size ends
    if sizes.count(sizes[0]) == len(sizes):  # one size (the common case): an identity scan in C
        if not sizes[0]:
            return
        run_ends = [len(sizes)]
        total = sizes[0] * len(sizes)
        largest = sizes[0]
    else:
        if 0 in sizes:
            topic_ids = list(compress(topic_ids, sizes))
            sizes = [n for n in sizes if n]
        total = sum(sizes)
        largest = max(sizes)
    q, extra = divmod(total, len(owned))
    seq = first_numbers(largest)  # every topic's partitions are a prefix of it
    fulls = shared.fulls
    cut_cache = shared.cuts
    nt = len(topic_ids)
    offsets: list[int] | None = None  # where each topic starts in (topic, partition) order
    ti = 0
    pos = 0
    tid = topic_ids[0]
    length = sizes[0]
    template: dict[TopicId, None] | None = None
    i = 0
    for count, need in ((extra, q + 1), (len(owned) - extra, q)):
        last = i + count
        if need == 0:
            i = last
            continue
        while i < last:
            if pos == 0 and (need % length == 0 or length % need == 0):
                # Members aligned on topic boundaries: as many as the run of equal-sized topics allows.
                if run_ends is None:
                    run_ends = list(compress(range(1, nt), map(ne, sizes[1:], sizes)))
                    run_ends.append(nt)
                run = run_ends[bisect_right(run_ends, ti)] - ti
                if need >= length:  # k whole topics per member
                    k = need // length
                    fit = min(last - i, run // k)
                    used = fit * k
                    if fit:
                        keys = topic_ids[ti : ti + used]
                        tuples = zip(keys) if k == 1 else zip(*([iter(keys)] * k), strict=False)
                        owned[i : i + fit] = list(map(dict.fromkeys, tuples, repeat(fulls[length])))
                else:  # m members per topic, cutting every topic the same way
                    m = length // need
                    used = min((last - i) // m, run)
                    fit = used * m
                    if used:
                        cuts = cut_cache.get((length, need))
                        if cuts is None:
                            cuts = cut_cache[(length, need)] = list(chunked(seq[:length], need))
                        templates = map(dict.fromkeys, zip(topic_ids[ti : ti + used]))
                        per_member = chain.from_iterable(map(repeat, templates, repeat(m)))
                        owned[i : i + fit] = list(map(dict.fromkeys, per_member, cycle(cuts)))
                if fit:
                    i += fit
                    ti += used
                    if ti < nt:
                        tid = topic_ids[ti]
                        length = sizes[ti]
                        template = None
                    else:  # everything is handed out
                        ti = nt - 1
                        pos = length
                    continue
            fit = min(last - i, (length - pos) // need)
            if fit > 1:
                if template is None:
                    template = {tid: None}
                chunks = chunked(seq[pos : pos + fit * need], need)
                owned[i : i + fit] = list(map(dict.fromkeys, repeat(template, fit), chunks))
                i += fit
                pos += fit * need
            elif fit:
                owned[i] = {tid: frozenset(seq[pos : pos + need])}
                i += 1
                pos += need
            else:  # one member across topics: ti, whole topics up to tb, then part of tb
                if offsets is None:
                    offsets = list(accumulate(sizes, initial=0))
                end = offsets[ti] + pos + need
                tb = bisect_left(offsets, end, ti + 1) - 1
                values = [frozenset(seq[pos:length]) if pos else fulls[length]]
                values += map(fulls.__getitem__, sizes[ti + 1 : tb])
                rest = end - offsets[tb]
                values.append(fulls[rest] if rest == sizes[tb] else frozenset(seq[:rest]))
                owned[i] = dict(zip(topic_ids[ti : tb + 1], values, strict=True))
                i += 1
                ti = tb
                tid = topic_ids[tb]
                length = sizes[tb]
                pos = rest
                template = None
            if pos == length and ti + 1 < nt:
                ti += 1
                pos = 0
                tid = topic_ids[ti]
                length = sizes[ti]
                template = None
