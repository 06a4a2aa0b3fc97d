"""The port-per-broker rule, said once: broker node N is served on ``base + (N - id_base)`` for ``count``
node ids from ``id_base``, unless a port is named for it explicitly. A gateway's own listeners
(config/settings.py ``GatewayConfig.broker_port``) and a fleet's routes to another instance's listeners
(net/routes.py ``ListenerRule``) both compute it here, so they cannot disagree."""

from __future__ import annotations

from collections.abc import Mapping


def broker_port(node_id: int, *, base: int, id_base: int, count: int, explicit: Mapping[int, int]) -> int | None:
    """The port of broker ``node_id``'s listener; None when the rule does not map that node id."""
    port = explicit.get(node_id)
    if port is not None:
        return port
    offset = node_id - id_base
    return base + offset if 0 <= offset < count else None
