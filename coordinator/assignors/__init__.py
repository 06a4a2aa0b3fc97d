"""Server-side partition assignors (KIP-848 "Assignor"): ``uniform`` (the default) and ``range``."""

from __future__ import annotations

from coordinator.assignors.api import ServerAssignor
from coordinator.assignors.range import RangeAssignor
from coordinator.assignors.uniform import UniformAssignor

__all__ = ["RangeAssignor", "ServerAssignor", "UniformAssignor", "default_assignors"]


def default_assignors() -> dict[str, ServerAssignor]:
    """The assignors a group may pick by name; the first one is the default (``group.consumer.assignors``)."""
    return {"uniform": UniformAssignor(), "range": RangeAssignor()}
