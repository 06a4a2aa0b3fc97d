"""Changing the managed groups live (SIGHUP): GroupLayer.set_managed_groups and gateway/ops/reload.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.config.settings import load_config
from gateway.ops import reload as reload_mod
from gateway.ops.reload import Reloader, changed
from gateway.wire.api_keys import ApiKey

from ._groups_support import call, request_payload
from .test_adoption_consumer import RecordingUpstream, heartbeat, settle, with_upstream

UNKNOWN_MEMBER_ID = 25


def _frame(msg: Any, version: int) -> bytes:
    payload = request_payload(msg, version)
    return len(payload).to_bytes(4, "big") + payload


async def test_a_handed_back_kip848_member_is_told_once_then_its_group_passes_through() -> None:
    upstream = RecordingUpstream()
    layer = await with_upstream(upstream, managed_groups="app-.*")
    try:
        out = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat(1, "app-1", "m-1", 0))
        assert out.error_code == 0 and out.member_epoch > 0
        epoch = out.member_epoch
        assert layer.set_managed_groups("other-.*") == ([], ["app-1"])
        assert not layer.managed("app-1") and layer.managed("other-1")
        assert layer.settings.managed_groups == "other-.*"
        hb = heartbeat(1, "app-1", "m-1", epoch)
        assert layer.claims(_frame(hb, 1), ApiKey.CONSUMER_GROUP_HEARTBEAT, 1)
        out = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, hb)
        assert out.error_code == UNKNOWN_MEMBER_ID
        # Once: its next heartbeats (epoch 0, then the cluster's epochs) go to the cluster's coordinator.
        assert not layer.claims(_frame(heartbeat(1, "app-1", "m-1", epoch), 1), ApiKey.CONSUMER_GROUP_HEARTBEAT, 1)
        assert not layer.claims(_frame(heartbeat(1, "app-1", "m-1", 0), 1), ApiKey.CONSUMER_GROUP_HEARTBEAT, 1)
        assert layer.counters["handed_back_members"] == 1
        # The gateway keeps its state of the group (its members expire by their timers).
        assert layer.has_state("app-1")
        # Managed again: adopted as at start; a member it removed upstream before is removed again.
        layer.adoption.abandoned("app-1", "m-1", consumer=True)
        await settle(layer)
        sent = len(upstream.sent)
        assert layer.set_managed_groups("app-.*|other-.*") == (["app-1"], [])
        layer.adoption.abandoned("app-1", "m-1", consumer=True)
        await settle(layer)
        assert len(upstream.sent) == sent + 1
    finally:
        await layer.stop()


async def test_a_bad_pattern_changes_nothing() -> None:
    layer = await with_upstream(RecordingUpstream(), managed_groups="app-.*")
    try:
        with pytest.raises(ValueError, match="RE2"):
            layer.set_managed_groups("app-(")
        assert layer.managed("app-1") and layer.settings.managed_groups == "app-.*"
        assert layer.set_managed_groups(".*") == ([], [])
        assert layer.managed("anything")
    finally:
        await layer.stop()


def test_changed_names_the_settings_that_differ() -> None:
    a = load_config(None, {"upstream": "k:9092", "coordinator": {"managed_groups": "a"}})
    b = load_config(None, {"upstream": "k:9092", "max_brokers": 7, "coordinator": {"managed_groups": "b"}})
    assert changed(a, b) == ["coordinator.managed_groups", "max_brokers"]
    assert changed(a, a) == []


class _Log:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def __getattr__(self, level: str) -> Any:
        return lambda msg, **kw: self.lines.append((level, msg, kw))


class _Layer:
    class settings:  # noqa: N801 - stands in for CoordinatorSettings
        managed_groups = "a-.*"

    events = None

    def __init__(self) -> None:
        self.calls: list[str] = []

    def set_managed_groups(self, pattern: str) -> tuple[list[str], list[str]]:
        self.calls.append(pattern)
        return ["a-held"], []


def test_sighup_applies_managed_groups_and_names_what_needs_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = _Log()
    monkeypatch.setattr(reload_mod, "log", log)
    toml = tmp_path / "gw.toml"
    toml.write_text('upstream = "k:9092"\n[coordinator]\nmanaged_groups = "a-.*"\n')
    load = lambda: load_config(toml, {})  # noqa: E731
    layer: Any = _Layer()
    reloader = Reloader(load, load(), layer)
    toml.write_text('upstream = "k:9092"\nmax_brokers = 9\n[coordinator]\nmanaged_groups = "a-.*|b"\nfsync = "never"\n')
    reloader()
    assert layer.calls == ["a-.*|b"]
    restart = [kw for level, msg, kw in log.lines if "restart" in msg]
    assert restart == [{"settings": ["coordinator.fsync", "max_brokers"]}]
    # A bad pattern in the file: refused, nothing applied, one error line naming the setting.
    log.lines.clear()
    toml.write_text('upstream = "k:9092"\n[coordinator]\nmanaged_groups = "b-("\n')
    reloader()
    assert layer.calls == ["a-.*|b"]
    (line,) = log.lines
    assert line[0] == "error" and "managed_groups" in line[2]["error"], line
