"""groupgate inside other projects' test suites (docs/testing.md).

- ``LocalGateway`` / ``LocalKafka``: ``groupgate serve`` as a child process in front of the embedded
  Apache Kafka broker (a JVM); no Docker needed.
- ``GroupgateContainer`` / ``GroupgateKafkaContainer`` (groupgate.testing.containers, testcontainers):
  the gateway image in front of an ``apache/kafka`` container. Imported on first use.
- ``GatewaySettings``: what a test sets on the gateway (classic groups mode, migration policy, managed
  groups, timeouts, state, rebalance events).
- ``GatewayFleet``: several instances sharing the groups.
- ``run_both`` / ``Target``: one scenario directly and through the gateway; ``convert_group``,
  ``group_type``: a live classic group made a consumer group, and what it is now.
- The pytest plugin (groupgate.testing.plugin, registered as ``groupgate``): fixtures over all of it.

Both gateway kinds follow the ``Gateway`` protocol: ``bootstrap``, ``upstream``, ``readyz_url``,
``start()``, ``stop()``, ``kill()``, ``restart(hard=True)``, ``reconfigure(**settings)``,
``events(group, event)``, ``logs()``.
"""

from __future__ import annotations

from typing import Any

from groupgate.testing._net import free_port, free_port_block, readyz, wait_ready
from groupgate.testing.base import Gateway, unique_name
from groupgate.testing.events import parse_events, select, wait_for_events
from groupgate.testing.fleet import GatewayFleet
from groupgate.testing.groups import ConsumerMember, convert_group, group_type, wait_group_type
from groupgate.testing.local import LocalGateway, LocalKafka
from groupgate.testing.process import GatewayProcess, GatewayStartError
from groupgate.testing.scenario import Both, Target, run_both, targets
from groupgate.testing.settings import GatewaySettings

_CONTAINERS = ("GroupgateContainer", "GroupgateKafkaContainer", "docker_unavailable_reason", "DEFAULT_IMAGE", "build_image")


def __getattr__(name: str) -> Any:
    # testcontainers (and docker) only load when a container is asked for.
    if name in _CONTAINERS:
        from groupgate.testing import containers

        return getattr(containers, name)
    raise AttributeError(name)


__all__ = [
    "Both",
    "ConsumerMember",
    "Gateway",
    "GatewayFleet",
    "GatewayProcess",
    "GatewaySettings",
    "GatewayStartError",
    "LocalGateway",
    "LocalKafka",
    "Target",
    "convert_group",
    "free_port",
    "free_port_block",
    "group_type",
    "parse_events",
    "readyz",
    "run_both",
    "select",
    "targets",
    "unique_name",
    "wait_for_events",
    "wait_group_type",
    "wait_ready",
    *_CONTAINERS,
]
