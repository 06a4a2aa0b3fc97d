"""The event_loop setting: which loop `groupgate serve` installs before it starts."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator

import pytest

from gateway.config.settings import GatewayConfig
from gateway.ops.cli import _use_event_loop


@pytest.fixture(autouse=True)
def _restore_policy() -> Iterator[None]:
    before = asyncio.get_event_loop_policy()
    yield
    asyncio.set_event_loop_policy(before)


def _loop_module() -> str:
    loop = asyncio.get_event_loop_policy().new_event_loop()
    try:
        return type(loop).__module__
    finally:
        loop.close()


def test_auto_is_the_default_and_is_uvloop_since_it_is_a_dependency() -> None:
    pytest.importorskip("uvloop", reason="uvloop is not built for this platform")
    assert GatewayConfig().event_loop == "auto"
    assert _use_event_loop(GatewayConfig()) == "uvloop"
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
