"""The event_loop setting: which loop `groupgate serve` installs before it starts; and the interpreter's
thread switch interval and garbage collector it sets with it."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from gateway.config.settings import GatewayConfig
from gateway.metrics import GcPauses
from gateway.ops.cli import _use_event_loop


@pytest.fixture(autouse=True)
def _restore_policy() -> Iterator[None]:
    before, interval, thresholds = asyncio.get_event_loop_policy(), sys.getswitchinterval(), gc.get_threshold()
    yield
    asyncio.set_event_loop_policy(before)
    sys.setswitchinterval(interval)
    gc.set_threshold(*thresholds)
    gc.unfreeze()


def _loop_module() -> str:
    loop = asyncio.get_event_loop_policy().new_event_loop()
    try:
        return type(loop).__module__
    finally:
        loop.close()


def test_asyncio_is_the_default_and_auto_is_uvloop_since_it_is_a_dependency() -> None:
    """asyncio's loop by default: on a full core uvloop runs the loop's ready callbacks only between long
    bursts of I/O, and new clients waited longer than on asyncio's loop (bench/accept_under_load.py)."""
    assert GatewayConfig().event_loop == "asyncio"
    assert _use_event_loop(GatewayConfig()) == "asyncio"
    assert _loop_module().startswith("asyncio")
    pytest.importorskip("uvloop", reason="uvloop is not built for this platform")
    assert _use_event_loop(GatewayConfig(event_loop="auto")) == "uvloop"
    assert _loop_module().startswith("uvloop")


def test_asyncio_keeps_asyncio_loop_even_with_uvloop_installed() -> None:
    assert _use_event_loop(GatewayConfig(event_loop="asyncio")) == "asyncio"
    assert _loop_module().startswith("asyncio")


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    asyncio.set_event_loop_policy(None)
    assert _use_event_loop(GatewayConfig(event_loop="auto")) == "asyncio"
    assert _loop_module().startswith("asyncio")
    with pytest.raises(RuntimeError, match="uvloop is not installed"):
        _use_event_loop(GatewayConfig(event_loop="uvloop"))


def test_the_switch_interval_is_set_with_the_loop_one_millisecond_by_default() -> None:
    """The store's client thread waits at most this long for the interpreter while the gateway's loop runs
    Python; Python's own 5 ms made every step of a state transaction wait that long on a busy gateway."""
    sys.setswitchinterval(0.005)
    assert GatewayConfig().switch_interval_ms == 1.0
    _use_event_loop(GatewayConfig(event_loop="asyncio"))
    assert sys.getswitchinterval() == pytest.approx(0.001)
    _use_event_loop(GatewayConfig(event_loop="asyncio", switch_interval_ms=5))
    assert sys.getswitchinterval() == pytest.approx(0.005)
    for bad in (0, -1, 5000):
        with pytest.raises(ValidationError):
            GatewayConfig(switch_interval_ms=bad)


def test_the_collector_is_set_with_the_loop_and_what_lives_at_start_is_frozen() -> None:
    """Python's first threshold (700) made a busy gateway spend a tenth of its CPU collecting, mostly in full
    collections that walked every object it ever made; the gateway raises it and freezes what lives at start."""
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    assert GatewayConfig().gc_threshold == 50_000 and GatewayConfig().gc_freeze
    _use_event_loop(GatewayConfig(event_loop="asyncio"))
    assert gc.get_threshold() == (50_000, 10, 10)
    assert gc.get_freeze_count() > 1000  # at least the modules' objects
    gc.unfreeze()
    _use_event_loop(GatewayConfig(event_loop="asyncio", gc_threshold=700, gc_freeze=False))
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0
    for bad in (0, 99, 10**8):
        with pytest.raises(ValidationError):
            GatewayConfig(gc_threshold=bad)


def test_the_collectors_pauses_are_recorded_by_generation_once_installed() -> None:
    pauses = GcPauses()
    gc.collect()
    assert [h.count for h in pauses.by_generation] == [0, 0, 0]  # not installed: nothing seen
    pauses.install()
    pauses.install()  # once
    try:
        gc.collect()
        gc.collect(0)
    finally:
        pauses.uninstall()
    gc.collect()
    assert pauses.by_generation[2].count == 1 and pauses.by_generation[0].count >= 1
    assert 0 < pauses.by_generation[2].sum < 10
