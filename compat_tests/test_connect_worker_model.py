"""The new-protocol Connect worker model (groupgate.testing.connect_worker) against a gateway in front of a
real broker: a connect group formed by models alone, its target computed and installed over the wire.

Two models share six units (two connectors, two tasks each): the first computes alone and runs them all; the
second joins, the first computes again and gives half away, revoking before the second starts anything; the
second leaves and, after the scheduled rebalance delay (held back for a worker that may come back, asked for
through the assignor's reason), the first runs everything again. No unit ever runs on both at once.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest

from coordinator.connect.model import ConnectAssignment
from coordinator.errors import Errors
from groupgate.testing.connect_worker import ConnectWorkerModel

pytestmark = pytest.mark.kafka

UNITS = ConnectAssignment(frozenset({"a", "b"}), frozenset({("a", 0), ("a", 1), ("b", 0), ("b", 1)}))


def _overlaps(histories: dict[str, list[tuple[float, str, str]]]) -> list[str]:
    """Units some worker started while another still ran them."""
    events = sorted((t, kind == "start", w, unit) for w, h in histories.items() for t, kind, unit in h)
    running: dict[str, str] = {}
    bad = []
    for _, start, w, unit in events:
        if start:
            if unit in running and running[unit] != w:
                bad.append(f"{unit} started on {w} while {running[unit]} ran it")
            running[unit] = w
        elif running.get(unit) == w:
            del running[unit]
    return bad


async def _until(what: str, check: Any, timeout_s: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"no {what} within {timeout_s}s")
        await asyncio.sleep(0.1)


def test_models_form_a_connect_group_balance_it_and_take_over_after_a_leave(
    module_gateway: Any, names: Any
) -> None:
    if getattr(module_gateway, "direct", False):
        pytest.skip("--compat-direct: Kafka has no connect group type")
    group = names("connect-models")

    async def scenario() -> dict[str, Any]:
        one = ConnectWorkerModel(module_gateway.bootstrap, group, "http://one:8083", UNITS, scheduled_delay_ms=1500)
        two = ConnectWorkerModel(module_gateway.bootstrap, group, "http://two:8083", UNITS, scheduled_delay_ms=1500)
        try:
            await one.start()
            await _until("the first worker running everything", lambda: one.running == UNITS, 30)
            alone = one.computations
            await two.start()
            await _until("the two workers sharing the units", lambda: (
                one.running and two.running and one.running | two.running == UNITS
                and one.running == one.assigned and two.running == two.assigned
            ), 30)  # fmt: skip
            shared = (one.running, two.running)
            await two.leave()
            await _until("the first worker running everything again", lambda: one.running == UNITS, 30)
            return {
                "alone": alone, "shared": shared, "one": one, "two": two,
                "histories": {"one": list(one.history), "two": list(two.history)},
            }  # fmt: skip
        finally:
            await one.leave()
            await two.close()

    r = asyncio.run(scenario())
    one, two = r["one"], r["two"]
    assert r["alone"] >= 1, "the only worker was never asked to compute"
    first, second = r["shared"]
    assert first.isdisjoint(second) and first | second == UNITS, r["shared"]
    # Balanced the way the assignor spreads each kind: one connector and two tasks each.
    assert (len(first.connectors), len(first.tasks), len(second.connectors), len(second.tasks)) == (1, 2, 1, 2)
    assert _overlaps(r["histories"]) == [], r["histories"]
    # The first worker computed every target (it was there first and stays the computing worker).
    assert one.computations >= 3 and two.computations == 0, (one.computations, two.computations)
    assert all(code in (27,) for code, _ in one.errors + two.errors), (one.errors, two.errors)  # 27: REBALANCE_IN_PROGRESS


def _names_of(a: ConnectAssignment) -> set[str]:
    return set(a.connectors) | {f"{c}-{t}" for c, t in a.tasks}


def test_a_fenced_model_stops_everything_and_joins_again(module_gateway: Any, names: Any) -> None:
    """A worker that stops heartbeating past the session timeout (10 s, ConnectConfig's default) is fenced:
    the other takes its units after the scheduled delay; when it heartbeats again it is told it is fenced,
    stops everything it still ran, joins again at epoch 0 and gets its share back once the other revoked it.

    While it was stalled it still "ran" its units as a stalled Connect worker would (it cannot know it was
    fenced), so the check for a unit on two workers at once covers the time before the stall and after the
    fenced worker heard it was fenced."""
    if getattr(module_gateway, "direct", False):
        pytest.skip("--compat-direct: Kafka has no connect group type")
    group = names("connect-models-fenced")
    FENCED = {int(Errors.UNKNOWN_MEMBER_ID), int(Errors.FENCED_MEMBER_EPOCH)}  # noqa: N806

    def sharing(one: ConnectWorkerModel, two: ConnectWorkerModel) -> bool:
        return bool(
            one.running and two.running and one.running | two.running == UNITS
            and one.running == one.assigned and two.running == two.assigned
        )  # fmt: skip

    async def scenario() -> dict[str, Any]:
        one = ConnectWorkerModel(module_gateway.bootstrap, group, "http://one:8083", UNITS, scheduled_delay_ms=1000)
        two = ConnectWorkerModel(module_gateway.bootstrap, group, "http://two:8083", UNITS, scheduled_delay_ms=1000)
        try:
            await one.start()
            await one.wait_stable(30)
            await two.start()
            await _until("the two workers sharing the units", lambda: sharing(one, two), 30)
            stalled_at = time.monotonic()
            held = two.running
            await two.suspend()
            await _until("the first worker taking the stalled worker's units", lambda: one.running == UNITS, 40)
            resumed_at = time.monotonic()
            await two.resume()
            await _until("the stalled worker hearing it was fenced", lambda: any(c in FENCED for c, _ in two.errors), 30)
            await _until("the fenced worker running its share again", lambda: sharing(one, two), 30)
            await asyncio.gather(one.wait_stable(30), two.wait_stable(30))
            return {
                "one": one, "two": two, "held": held, "stalled_at": stalled_at, "resumed_at": resumed_at,
                "final": (one.running, two.running),
                "histories": {"one": list(one.history), "two": list(two.history)},
            }  # fmt: skip
        finally:
            await one.leave()
            await two.leave()

    r = asyncio.run(scenario())
    two, held, hist = r["two"], r["held"], r["histories"]
    assert any(code in FENCED for code, _ in two.errors), two.errors
    # On hearing it was fenced it stopped all it still ran, before starting anything again.
    after = [(kind, unit) for t, kind, unit in hist["two"] if t >= r["resumed_at"]]
    leading_stops = list(itertools.takewhile(lambda e: e[0] == "stop", after))
    assert held and {u for _, u in leading_stops} == _names_of(held), (after, held)
    assert any(k == "start" for k, _ in after[len(leading_stops) :]), after
    first, second = r["final"]
    assert first.isdisjoint(second) and first | second == UNITS, r["final"]
    before = {w: [e for e in h if e[0] < r["stalled_at"]] for w, h in hist.items()}
    assert _overlaps(before) == [], before
    since = {"one": hist["one"], "two": [e for e in hist["two"] if e[0] >= r["resumed_at"]]}
    assert _overlaps(since) == [], since
