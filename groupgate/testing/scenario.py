"""The same scenario against the cluster directly and through a gateway."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from groupgate.testing.base import Gateway

T = TypeVar("T")


@dataclass
class Target:
    """Where a scenario's clients bootstrap: ``direct`` (the cluster) or ``gateway``."""

    name: str
    bootstrap: str
    gateway: Gateway | None = None

    @property
    def direct(self) -> bool:
        return self.gateway is None


@dataclass
class Both(Generic[T]):
    direct: T
    gateway: T

    def same(self) -> bool:
        return bool(self.direct == self.gateway)


def targets(gateway: Gateway) -> list[Target]:
    return [Target("direct", gateway.upstream), Target("gateway", gateway.bootstrap, gateway)]


def run_both(scenario: Callable[[Target], T], gateway: Gateway) -> Both[T]:
    """Run ``scenario`` against the cluster, then through ``gateway``; both results, to compare.
    The scenario gets a Target; it should use names of its own on each (topics, groups)."""
    direct, through = targets(gateway)
    return Both(direct=scenario(direct), gateway=scenario(through))
