"""The fleet's shard assignor (gateway/fleet/assignor.py): balanced, sticky, deterministic, and never a
shard given to one instance while another still holds it."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.fleet.assignor import FleetAssignment, MemberClaim, assign


def _converge(shards: int, held: dict[str, set[int]], epochs: dict[str, int], rounds: int = 6) -> list[dict[str, set[int]]]:
    """Rebalance rounds as the instances run them: each member claims what it holds; a member drops what
    its assignment lacks (the handover) and takes what is new. Returns the holdings after each round and
    checks on the way that no shard is ever held by two members."""
    history = []
    for _ in range(rounds):
        claims = {m: MemberClaim(f"h-{m}:9092", tuple(sorted(held[m])), epochs[m]) for m in held}
        out = assign(shards, claims)
        for m, a in out.items():
            held[m] = set(a.shards)
            epochs[m] = a.epoch
        owners = [s for ss in held.values() for s in ss]
        assert len(owners) == len(set(owners)), f"a shard held twice: {held}"
        history.append({m: set(ss) for m, ss in held.items()})
        if len(history) >= 2 and history[-1] == history[-2]:
            break
    return history


def _balanced(shards: int, held: dict[str, set[int]]) -> bool:
    sizes = [len(s) for s in held.values()]
    return sum(sizes) == shards and max(sizes) - min(sizes) <= 1


def test_the_first_member_gets_every_shard() -> None:
    out = assign(6, {"a": MemberClaim("h1:1")})
    assert out["a"].shards == (0, 1, 2, 3, 4, 5)
    assert out["a"].owners == ("a",) * 6 and out["a"].endpoints == {"a": "h1:1"}


def test_a_joining_member_gets_its_share_only_after_the_holder_released_it() -> None:
    held = {"a": set(range(6)), "b": set()}
    epochs = {"a": 1, "b": 0}
    first = assign(6, {m: MemberClaim(f"{m}:1", tuple(sorted(held[m])), epochs[m]) for m in held})
    # Round 1: a keeps its quota and releases the rest; b gets nothing yet (a still holds those).
    assert first["a"].shards == (0, 1, 2) and first["b"].shards == ()
    assert first["a"].owners == ("a", "a", "a", None, None, None)
    history = _converge(6, held, epochs)
    assert history[-1] == {"a": {0, 1, 2}, "b": {3, 4, 5}}


def test_a_stable_fleet_moves_nothing() -> None:
    held = {"a": {0, 2, 4}, "b": {1, 3, 5}}
    out = assign(6, {m: MemberClaim(f"{m}:1", tuple(sorted(ss)), 3) for m, ss in held.items()})
    assert {m: set(a.shards) for m, a in out.items()} == held


def test_a_member_gone_leaves_its_shards_to_the_others_and_only_those_move() -> None:
    held = {"a": {0, 1}, "b": {2, 3}, "c": {4, 5}}
    out = assign(6, {m: MemberClaim(f"{m}:1", tuple(sorted(held[m])), 4) for m in ("a", "b")})
    assert set(out["a"].shards) >= {0, 1} and set(out["b"].shards) >= {2, 3}
    assert set(out["a"].shards) | set(out["b"].shards) == set(range(6))
    assert len(out["a"].shards) == len(out["b"].shards) == 3


def test_two_claims_of_one_shard_go_to_the_latest_epoch() -> None:
    # "a" was expired while it could not tell and rejoined still claiming shard 0, which "b" got later.
    out = assign(2, {"a": MemberClaim("a:1", (0,), 1), "b": MemberClaim("b:1", (0, 1), 2)})
    assert 0 not in out["a"].shards
    assert out["a"].epoch == out["b"].epoch == 3


def test_the_result_does_not_depend_on_the_order_members_are_listed_in() -> None:
    claims = {f"m{i}": MemberClaim(f"host{i}:9092", tuple(range(i, 12, 4)), 2) for i in range(3)}
    claims["m9"] = MemberClaim("host9:9092")
    items = list(claims.items())
    results = []
    for seed in range(5):
        random.Random(seed).shuffle(items)
        results.append(assign(12, dict(items)))
    assert all(r == results[0] for r in results)


def test_node_slots_stay_with_their_members_and_new_members_take_the_lowest_free() -> None:
    first = assign(4, {"a": MemberClaim("h2:1"), "b": MemberClaim("h1:1")})
    assert first["a"].slots == {"b": 0, "a": 1}  # by address order on the first round
    # "c" joins with an address sorting first: the others keep their slots; later "b" leaves.
    second = assign(4, {"a": MemberClaim("h2:1", (), 1, 1), "b": MemberClaim("h1:1", (), 1, 0), "c": MemberClaim("h0:1")})
    assert second["a"].slots == {"c": 2, "b": 0, "a": 1}
    third = assign(4, {"a": MemberClaim("h2:1", (), 2, 1), "c": MemberClaim("h0:1", (), 2, 2), "d": MemberClaim("h3:1")})
    assert third["a"].slots == {"c": 2, "a": 1, "d": 0}
    # Two claims of one slot (a member expired, then rejoined): the latest epoch keeps it.
    clash = assign(4, {"old": MemberClaim("h5:1", (), 1, 0), "new": MemberClaim("h6:1", (), 3, 0)})
    assert clash["new"].slots == {"new": 0, "old": 1}


def test_unreadable_metadata_claims_nothing() -> None:
    assert MemberClaim.decode(b"\x00garbage") == MemberClaim("")
    assert FleetAssignment.decode((1,), b"not json").epoch == 0
    claim = MemberClaim("h:1", (3, 1), 7, 2)
    assert MemberClaim.decode(claim.encode()) == claim


@settings(max_examples=60, deadline=None)
@given(
    shards=st.integers(1, 30),
    start=st.integers(1, 5),
    changes=st.lists(st.tuples(st.booleans(), st.integers(0, 9)), max_size=6),
)
def test_any_sequence_of_joins_and_leaves_converges_balanced_and_sticky(
    shards: int, start: int, changes: list[tuple[bool, int]]
) -> None:
    held: dict[str, set[int]] = {f"m{i}": set() for i in range(start)}
    epochs = {m: 0 for m in held}
    _converge(shards, held, epochs)
    assert _balanced(shards, held)
    for join, who in changes:
        before = {m: set(ss) for m, ss in held.items()}
        name = f"n{who}"
        if join and name not in held:
            held[name], epochs[name] = set(), 0
        elif not join and len(held) > 1:
            gone = sorted(held)[who % len(held)]
            del held[gone], epochs[gone]
        else:
            continue
        _converge(shards, held, epochs, rounds=8)
        assert _balanced(shards, held), held
        # Sticky: a member that stayed keeps every shard it had unless it is above its new fair share.
        fair = -(-shards // len(held))
        for m, had in before.items():
            if m in held:
                kept = len(had & held[m])
                assert kept >= min(len(had), fair - 1), (m, had, held[m])
