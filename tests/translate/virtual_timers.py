"""Timers on a virtual clock, as the test drivers of the sans-I/O services keep them."""

from __future__ import annotations

from collections.abc import Callable, Hashable


def fire_due(timers: dict[Hashable, int], now: int, target: int, fire: Callable[[Hashable, int], None]) -> None:
    """Fire every timer due by ``target`` in deadline order (equal deadlines by key), each at
    ``max(now, its deadline)``. ``fire(key, at)`` runs the service's timer; timers it arms or cancels
    (in ``timers``) count, so a timer armed to expire before ``target`` fires in the same call."""
    while True:
        due = [(deadline, key) for key, deadline in timers.items() if deadline <= target]
        if not due:
            return
        deadline, key = min(due, key=lambda item: (item[0], repr(item[1])))
        del timers[key]
        now = max(now, deadline)
        fire(key, now)
