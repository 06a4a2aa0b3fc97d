"""The settings of ``groupgate serve`` a test chooses, in one value both backends turn into a gateway.

Coordinator settings travel as ``GROUPGATE_COORDINATOR_<FIELD>`` environment variables (docs/gateway.md,
"Configuration reference"): the same for a child process and for a container, and no file to mount.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

ClassicGroups = Literal["native", "translate"]
MigrationPolicy = Literal["bidirectional", "upgrade", "downgrade", "disabled"]
StateKind = Literal["file", "ephemeral", "kafka"]

ENV_PREFIX = "GROUPGATE_COORDINATOR_"


@dataclass(frozen=True)
class GatewaySettings:
    """What a test sets on the gateway. Defaults are ``serve``'s, except the two marked *test*.

    - ``classic_groups``: ``native`` (Kafka's classic groups) or ``translate`` (classic members run
      inside KIP-848 consumer groups, server-side assignment).
    - ``migration_policy``: Kafka's ``group.consumer.migration.policy``.
    - ``managed_groups``: RE2 pattern of the group ids the gateway coordinates; others pass through to
      the cluster's coordinator.
    - ``session_timeout_ms`` / ``heartbeat_interval_ms``: KIP-848 groups
      (``group.consumer.session.timeout.ms`` / ``group.consumer.heartbeat.interval.ms``);
      ``min_session_timeout_ms``: classic groups (``group.min.session.timeout.ms``). None: the gateway's.
    - ``initial_rebalance_delay_ms``: *test* default 0 (Kafka: 3000), so a first join is immediate.
    - ``state``: *test* default ``file`` (a state directory the gateway keeps across ``restart()``);
      ``ephemeral`` (memory only: a restart loses the groups), ``kafka`` (a state topic in the cluster,
      as ``serve`` does by default; what a fleet of instances shares).
    - ``rebalance_events``: write ``--rebalance-events`` JSON lines, read back with ``events()``.
    - ``coordinator``: any other ``[coordinator]`` setting, by field or Kafka name, scalar or list
      (``{"group.consumer.assignors": ["range"]}``).
    - ``args``: more ``serve`` flags, passed as they are.
    """

    classic_groups: ClassicGroups = "native"
    migration_policy: MigrationPolicy = "bidirectional"
    managed_groups: str = ".*"
    session_timeout_ms: int | None = None
    heartbeat_interval_ms: int | None = None
    min_session_timeout_ms: int | None = None
    initial_rebalance_delay_ms: int | None = 0
    state: StateKind = "file"
    rebalance_events: bool = True
    coordinator: Mapping[str, Any] = field(default_factory=dict)
    args: tuple[str, ...] = ()

    def replace(self, **changes: Any) -> GatewaySettings:
        """A copy with ``changes``; keys that are not fields are taken as ``coordinator`` settings."""
        known = {f.name for f in dataclasses.fields(self)}
        extra = {k: v for k, v in changes.items() if k not in known}
        fields_ = {k: v for k, v in changes.items() if k in known}
        if extra:
            fields_["coordinator"] = {**self.coordinator, **fields_.get("coordinator", {}), **extra}
        if "args" in fields_:
            fields_["args"] = tuple(fields_["args"])
        return dataclasses.replace(self, **fields_)

    def coordinator_values(self) -> dict[str, Any]:
        """Every coordinator setting this fixes, by its field name (Kafka names resolved)."""
        values: dict[str, Any] = {
            "classic_groups": self.classic_groups,
            "migration_policy": self.migration_policy,
            "managed_groups": self.managed_groups,
            "consumer_session_timeout_ms": self.session_timeout_ms,
            "consumer_heartbeat_interval_ms": self.heartbeat_interval_ms,
            "min_session_timeout_ms": self.min_session_timeout_ms,
            "initial_rebalance_delay_ms": self.initial_rebalance_delay_ms,
        }
        names = coordinator_field_names()
        for key, value in self.coordinator.items():
            name = names.get(key)
            if name is None:
                raise KeyError(f"{key!r} is not a [coordinator] setting (docs/gateway.md, '[coordinator] settings')")
            values[name] = value
        return {k: v for k, v in values.items() if v is not None}

    def env(self) -> dict[str, str]:
        """The ``GROUPGATE_COORDINATOR_*`` variables of these settings."""
        return {ENV_PREFIX + name.upper(): _env_value(v) for name, v in self.coordinator_values().items()}


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    if isinstance(value, Mapping):
        raise TypeError("table-valued coordinator settings (group_configs) need a --config file: pass it in args")
    return str(value)


def coordinator_field_names() -> dict[str, str]:
    """Field name and Kafka name -> field name, for every ``[coordinator]`` setting."""
    from pydantic import AliasChoices

    from gateway.config.coordinator import CoordinatorSettings

    out: dict[str, str] = {}
    for name, info in CoordinatorSettings.model_fields.items():
        out[name] = name
        alias = info.validation_alias
        if isinstance(alias, AliasChoices):
            for choice in alias.choices:
                if isinstance(choice, str):
                    out[choice] = name
        elif isinstance(alias, str):
            out[alias] = name
    return out
