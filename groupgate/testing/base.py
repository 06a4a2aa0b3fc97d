"""What every gateway handle of groupgate.testing offers, whatever runs it (a child process or a
container): the addresses, the lifecycle a compatibility suite needs, and the rebalance events."""

from __future__ import annotations

import itertools
import os
import re
from typing import Any, Protocol, runtime_checkable

from groupgate.testing.events import Event
from groupgate.testing.settings import GatewaySettings

_counter = itertools.count(1)


def unique_name(prefix: str) -> str:
    """``prefix`` made safe for Kafka names, plus the pid and a per-process counter."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "-", prefix)[:120]
    return f"{safe}-{os.getpid()}-{next(_counter)}"


@runtime_checkable
class Gateway(Protocol):
    """A gateway in front of a cluster, started by a test.

    ``bootstrap`` is what clients on the test's host use; ``upstream`` is the cluster itself as those
    clients reach it (to run the same scenario directly); ``readyz_url`` the gateway's readiness endpoint.
    """

    settings: GatewaySettings

    @property
    def bootstrap(self) -> str: ...

    @property
    def upstream(self) -> str: ...

    @property
    def readyz_url(self) -> str: ...

    def start(self) -> Any: ...

    def stop(self) -> None: ...

    def kill(self) -> None: ...

    def restart(self, *, hard: bool = True) -> Any: ...

    def reconfigure(self, **changes: Any) -> Any: ...

    def events(self, group: str | None = None, event: str | None = None) -> list[Event]: ...

    def logs(self) -> str: ...


def state_settings(settings: GatewaySettings) -> GatewaySettings:
    """With ``state="kafka"``: a state topic and transactional ids of this gateway's own (the default
    names would be shared by every gateway a session starts on one broker), unless the test chose them."""
    if settings.state != "kafka":
        return settings
    chosen = settings.coordinator_values()
    extra: dict[str, Any] = {}
    if "state_topic" not in chosen:
        name = unique_name("groupgate-state")
        extra["state_topic"] = name
        if "state_transactional_id_prefix" not in chosen:
            extra["state_transactional_id_prefix"] = name + "-"
    return settings.replace(**extra) if extra else settings
