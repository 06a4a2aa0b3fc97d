"""Equivalence of two rebalance event derivations, side by side on the same service calls.

``legacy_rebalance_events`` is the snapshot-diffing deriver; ``translate.rebalance_events`` derives the
same events from what each call returns. The new deriver wraps a shim whose calls go through the legacy
one, so both see exactly the same service, calls and state; their dict streams must be identical.
Traffic: the scenarios of test_rebalance_events.py, the fast-path test's seeded KIP-848 traffic, the
seeded mixed classic / new-protocol traffic of test_group_service_random_traffic.py, and simulation
seeds (rehearsal/simulate.py, restarts included)."""

from __future__ import annotations

import inspect
import random
from typing import Any

import legacy_rebalance_events as legacy
import pytest
import test_group_service_random_traffic as random_traffic
import test_rebalance_events as scenarios
import test_rebalance_events_cost as fast_path
from migration_harness import Driver

from rehearsal.sim_endpoint import ServiceEndpoint
from rehearsal.simulate import run_seed
from translate.group_service import GroupService
from translate.rebalance_events import RebalanceEventDeriver

_CALLS = ("handle", "on_timer", "on_metadata", "on_loaded", "expire_empty_groups")


class _Shim:
    """The service as the new deriver sees it: its calls go through the legacy deriver."""

    def __init__(self, old: legacy.RebalanceEventDeriver) -> None:
        self._old = old
        for name in _CALLS:
            setattr(self, name, getattr(old, name))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._old.service, name)


class Pairs:
    def __init__(self) -> None:
        self.streams: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []

    def make(self, service: GroupService, sink: Any = None, run: str = "gateway", **kwargs: Any) -> RebalanceEventDeriver:
        old_events: list[dict[str, Any]] = []
        new_events: list[dict[str, Any]] = []

        def old_sink(event: dict[str, Any]) -> None:
            old_events.append(dict(event))
            if sink is not None:
                sink(event)

        old = legacy.RebalanceEventDeriver(service, old_sink, run, **kwargs)
        self.streams.append((old_events, new_events))
        return RebalanceEventDeriver(_Shim(old), new_events.append, run, **kwargs)  # type: ignore[arg-type]

    def check(self) -> int:
        assert self.streams
        total = 0
        for old, new in self.streams:
            for i, (a, b) in enumerate(zip(old, new, strict=False)):
                assert a == b, f"event {i} differs:\n legacy {a}\n new    {b}\n before: {old[max(0, i - 5):i]}"
            assert len(old) == len(new), (len(old), len(new), old[len(new):][:3], new[len(old):][:3])
            total += len(old)
        return total


class _Tapped:
    def __init__(self, service: GroupService, deriver: RebalanceEventDeriver) -> None:
        self._service = service
        for name in _CALLS:
            setattr(self, name, getattr(deriver, name))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._service, name)


_SCENARIOS = [
    name for name, fn in inspect.getmembers(scenarios, inspect.isfunction)
    if name.startswith("test_") and name not in ("test_a_failing_sink_never_costs_the_service_result", "test_mix_of_protocol_names")
]  # fmt: skip


@pytest.mark.parametrize("name", _SCENARIOS)
def test_unit_scenarios_derive_the_same_stream(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pairs = Pairs()
    monkeypatch.setattr(scenarios, "RebalanceEventDeriver", pairs.make)
    fn = getattr(scenarios, name)
    params = inspect.signature(fn).parameters
    if "cooperative" in params:
        for cooperative in (False, True):
            fn(cooperative, monkeypatch)
    else:
        fn()
    pairs.check()


@pytest.mark.parametrize("seed", range(8))
def test_fast_path_traffic_derives_the_same_stream(seed: int) -> None:
    pairs = Pairs()
    fast_path._run(pairs.make, fast_path._traffic(seed, 400))  # type: ignore[arg-type]
    assert pairs.check() > 50


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("mode", ["native", "translate"])
def test_mixed_traffic_derives_the_same_stream(seed: int, mode: str) -> None:
    pairs = Pairs()

    class Tapped(Driver):
        def __post_init__(self) -> None:
            super().__post_init__()
            self.service = _Tapped(self.service, pairs.make(self.service))  # type: ignore[assignment]

    rnd = random.Random(seed)
    d = Tapped(mode=mode)
    classics = [random_traffic.Classic(n) for n in ("a", "b", "c")]
    moderns = [random_traffic.Modern(n) for n in ("m1", "m2")]
    for i in range(300):
        random_traffic.step(d, rnd, classics, moderns)
        if i % 100 == 99:
            d.absorb(d.service.expire_empty_groups(d.now))
    assert pairs.check() > 0


@pytest.mark.parametrize("seed", range(150))
def test_simulated_runs_derive_the_same_stream(seed: int) -> None:
    pairs = Pairs()

    class Endpoint(ServiceEndpoint):
        def __init__(self, config: Any, seed: int) -> None:
            super().__init__(config, seed)
            self.service = _Tapped(self.service, pairs.make(self.service, run=f"sim-{seed}"))  # type: ignore[assignment]

    run_seed(seed, endpoint_factory=Endpoint)
    assert pairs.check() > 0
