"""The rebalance event stream of recorded traffic stays what it was.

``data/rebalance_events_expected.json.gz`` holds, for each traffic below, the dict streams written by
the deriver that compared group snapshots before and after each call (the derivation this module's
events replaced; both were run side by side over these and many more seeds and agreed on every event).
The deriver must write exactly those streams again. Traffic: seeded KIP-848 heartbeats (joins, acks,
late reconciliations, leaves, stale epochs, session timers), seeded mixed classic / new-protocol
traffic of one group through upgrades, downgrades and empty-group expiry (both classic modes), and
simulation seeds of every scenario (rehearsal/simulate.py, restarts with replay included).

A change that alters the stream on purpose re-records it:
``PYTHONPATH=. python tests/translate/test_rebalance_events_equivalence.py --record``."""

from __future__ import annotations

import gzip
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import test_group_service_random_traffic as random_traffic
import test_rebalance_events_cost as heartbeats
from migration_harness import Driver

from rehearsal.sim_endpoint import ServiceEndpoint
from rehearsal.simulate import run_seed
from translate.group_service import GroupService
from translate.rebalance_events import RebalanceEventDeriver

EXPECTED = Path(__file__).parent / "data" / "rebalance_events_expected.json.gz"
_CALLS = ("handle", "on_timer", "on_metadata", "on_loaded", "expire_empty_groups")
Streams = list[list[dict[str, Any]]]
Factory = Callable[..., Any]


class _Derivers:
    """Every deriver made for one traffic, and the stream each wrote."""

    def __init__(self, deriver_type: Factory) -> None:
        self.deriver_type = deriver_type
        self.streams: Streams = []

    def make(self, service: GroupService, sink: Any = None, run: str = "gateway", **kwargs: Any) -> Any:
        stream: list[dict[str, Any]] = []
        self.streams.append(stream)
        return self.deriver_type(service, stream.append, run, **kwargs)


class _Tapped:
    """The service with its group-changing calls going through a deriver."""

    def __init__(self, service: GroupService, deriver: Any) -> None:
        self._service = service
        for name in _CALLS:
            setattr(self, name, getattr(deriver, name))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._service, name)


def _heartbeats(derivers: _Derivers, seed: int) -> None:
    heartbeats._run(derivers.make, heartbeats._traffic(seed, 400))  # type: ignore[arg-type]


def _mixed(derivers: _Derivers, seed: int, mode: str) -> None:
    class Tapped(Driver):
        def __post_init__(self) -> None:
            super().__post_init__()
            self.service = _Tapped(self.service, derivers.make(self.service))  # type: ignore[assignment]

    rnd = random.Random(seed)
    d = Tapped(mode=mode)
    classics = [random_traffic.Classic(n) for n in ("a", "b", "c")]
    moderns = [random_traffic.Modern(n) for n in ("m1", "m2")]
    for i in range(300):
        random_traffic.step(d, rnd, classics, moderns)
        if i % 100 == 99:
            d.absorb(d.service.expire_empty_groups(d.now))


def _simulated(derivers: _Derivers, seed: int) -> None:
    class Endpoint(ServiceEndpoint):
        def __init__(self, config: Any, seed: int) -> None:
            super().__init__(config, seed)
            self.service = _Tapped(self.service, derivers.make(self.service, run=f"sim-{seed}"))  # type: ignore[assignment]

    run_seed(seed, endpoint_factory=Endpoint)


TRAFFIC: dict[str, Callable[[_Derivers], None]] = {
    **{f"heartbeats-{s}": (lambda d, s=s: _heartbeats(d, s)) for s in range(4)},
    **{f"mixed-{m}-{s}": (lambda d, s=s, m=m: _mixed(d, s, m)) for m in ("native", "translate") for s in range(6)},
    **{f"sim-{s}": (lambda d, s=s: _simulated(d, s)) for s in range(60)},  # 6 seeds of each scenario
}


def derive(name: str, deriver_type: Factory = RebalanceEventDeriver) -> Streams:
    derivers = _Derivers(deriver_type)
    TRAFFIC[name](derivers)
    return derivers.streams


def _expected() -> dict[str, Streams]:
    with gzip.open(EXPECTED, "rt", encoding="utf-8") as f:
        return json.load(f)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def expected() -> dict[str, Streams]:
    return _expected()


def test_every_traffic_is_recorded(expected: dict[str, Streams]) -> None:
    assert set(expected) == set(TRAFFIC)
    kinds = {e["event"] for streams in expected.values() for stream in streams for e in stream}
    assert kinds == {
        "member_joined", "member_left", "member_fenced", "assignment_sent", "partitions_assigned",
        "partitions_revoked", "group_converted", "rebalance_started", "timer_expired", "group_stable",
        "topic_metadata",
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(TRAFFIC))
def test_the_derived_stream_is_the_recorded_one(name: str, expected: dict[str, Streams]) -> None:
    got, want = derive(name), expected[name]
    assert len(got) == len(want)  # one stream per deriver (a simulated restart makes a new one)
    for stream, recorded in zip(got, want, strict=True):
        for i, (a, b) in enumerate(zip(stream, recorded, strict=False)):
            assert a == b, f"{name}: event {i} differs\n derived  {a}\n recorded {b}\n before: {recorded[max(0, i - 3):i]}"
        assert len(stream) == len(recorded), (name, stream[len(recorded):][:3], recorded[len(stream):][:3])
    assert any(got)


def record(deriver_type: Factory = RebalanceEventDeriver) -> None:
    streams = {name: derive(name, deriver_type) for name in sorted(TRAFFIC)}
    EXPECTED.parent.mkdir(exist_ok=True)
    with gzip.GzipFile(EXPECTED, "wb", mtime=0) as f:
        f.write(json.dumps(streams, separators=(",", ":"), sort_keys=True).encode())


if __name__ == "__main__" and "--record" in sys.argv:
    record()
