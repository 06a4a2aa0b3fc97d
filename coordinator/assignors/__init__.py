"""Server-side partition assignors (KIP-848 "Assignor"): ``uniform`` (the default) and ``range``; and
the layouts of the classic client-side strategies (``range``, ``roundrobin``, ``sticky``,
``cooperative-sticky``) for classic groups whose assignment the server computes."""

from __future__ import annotations

from coordinator.assignors.api import ServerAssignor
from coordinator.assignors.range import RangeAssignor
from coordinator.assignors.roundrobin import RoundRobinAssignor
from coordinator.assignors.sticky import StickyAssignor
from coordinator.assignors.sticky_rdkafka import RdkafkaStickyAssignor
from coordinator.assignors.uniform import UniformAssignor

__all__ = [
    "RangeAssignor",
    "RdkafkaStickyAssignor",
    "RoundRobinAssignor",
    "ServerAssignor",
    "StickyAssignor",
    "UniformAssignor",
    "classic_strategy_assignors",
    "default_assignors",
]


def default_assignors() -> dict[str, ServerAssignor]:
    """The assignors a group may pick by name; the first one is the default (``group.consumer.assignors``)."""
    return {"uniform": UniformAssignor(), "range": RangeAssignor()}


def classic_strategy_assignors() -> dict[str, ServerAssignor]:
    """The built-in classic strategies by protocol name, each computing the layout the client-side
    assignor of that name computes (Java's and librdkafka's). The server ``range`` assignor already
    splits each topic as Java's ``RangeAssignor`` does (per topic, members in the same order,
    contiguous ranges, the first ones one partition more). librdkafka's sticky assignors compute
    another layout (``RdkafkaStickyAssignor``), which the caller picks where it knows the client."""
    return {
        "range": RangeAssignor(),
        "roundrobin": RoundRobinAssignor(),
        "sticky": StickyAssignor("sticky"),
        "cooperative-sticky": StickyAssignor("cooperative-sticky"),
    }
