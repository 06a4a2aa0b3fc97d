"""SIGHUP: the configuration file is read again and what can change live is applied.

One handler does all that SIGHUP means to the gateway: the rebalance event file is reopened (log
rotation), then the configuration is loaded again exactly as at start (``--config`` file, environment,
command-line flags; flags still win). What can change without a restart (``LIVE``: today the managed
groups, docs/operations.md "Changing the managed groups without a restart") is applied; every other
setting that differs from the running process's is named in one log line as needing a restart and left
as it is. A configuration that does not load (a bad RE2 pattern, a TOML error, a missing file) is refused
with one log line and the running configuration is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from gateway.logging import get_logger

if TYPE_CHECKING:
    from gateway.config.settings import GatewayConfig
    from gateway.groups.layer import GroupLayer

log = get_logger("gateway.ops.reload")

# The settings applied live, as dotted names (coordinator settings under "coordinator.").
LIVE = frozenset({"coordinator.managed_groups"})


def _flat(config: GatewayConfig) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in config.model_dump().items():
        if name == "coordinator" and isinstance(value, dict):
            out.update({f"coordinator.{k}": v for k, v in value.items()})
        else:
            out[name] = value
    return out


def changed(old: GatewayConfig, new: GatewayConfig) -> list[str]:
    """The settings (dotted names) whose values differ, sorted."""
    a, b = _flat(old), _flat(new)
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def _reason(e: Exception) -> str:
    if isinstance(e, ValidationError):
        return "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors())
    return str(e)


class Reloader:
    """``loop.add_signal_handler(SIGHUP, Reloader(load, started, layer))``.

    ``load`` builds the configuration as the command did at start, ``started`` is what it built then
    (before anything the command derived from it: the settings a restart would use are compared)."""

    def __init__(
        self, load: Callable[[], GatewayConfig] | None, started: GatewayConfig | None, layer: GroupLayer | None
    ) -> None:
        self.load = load
        self.started = started
        self.layer = layer

    def __call__(self) -> None:
        layer = self.layer
        if layer is not None and layer.events is not None:
            layer.events.reopen()  # log rotation: the event log continues in a new file
        if self.load is None or self.started is None:
            return
        try:
            new = self.load()
        except (ValidationError, ValueError, OSError) as e:  # tomllib.TOMLDecodeError is a ValueError
            log.error("configuration reload refused; the running configuration is kept", error=_reason(e))
            return
        restart = [k for k in changed(self.started, new) if k not in LIVE]
        if restart:
            log.warning("configuration changes need a restart and were not applied", settings=restart)
        if layer is None:
            return
        pattern, previous = new.coordinator.managed_groups, layer.settings.managed_groups
        if pattern == previous:
            log.info("configuration reloaded; managed groups unchanged", managed_groups=pattern)
            return
        try:
            adopted, handed_back = layer.set_managed_groups(pattern)
        except ValueError as e:
            log.error("managed_groups reload refused; the previous pattern is kept", error=str(e),
                      managed_groups=previous)
            return
        log.info(
            "managed groups changed", managed_groups=pattern, previous=previous,
            adopted_held_groups=adopted, handed_back_groups=handed_back,
        )
