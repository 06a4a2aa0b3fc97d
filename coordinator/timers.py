"""Keyed, cancellable timers, driven by the caller's clock.

The coordinator never reads a clock: each call returns the timer changes to make. ``ScheduleTimer``
(re)arms the timer ``key`` to fire at ``deadline_ms`` (replacing any timer with the same key);
``CancelTimer`` disarms it. When a timer fires the caller calls ``on_timer(key, now_ms)``.

Keys are tuples ``(kind, group_id, member_id)`` with kind ``session`` (KIP-848 "Heartbeat &
Session") or ``rebalance`` (the revocation deadline, KIP-848 "Member Epoch - Reconciliation").
translate/ may use its own kinds (e.g. ``join``/``sync``); the coordinator ignores kinds it does not know.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import TypeVar

TimerKey = tuple[str, str, str]

SESSION = "session"
REBALANCE = "rebalance"


@dataclass(frozen=True, slots=True)
class ScheduleTimer:
    key: TimerKey
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class CancelTimer:
    key: TimerKey


TimerChange = ScheduleTimer | CancelTimer

T = TypeVar("T")


def deadline(change: ScheduleTimer) -> int:
    """What a driver that keeps only deadlines arms (``apply_timer_changes(timers, changes, deadline)``)."""
    return change.deadline_ms


def apply_timer_changes(
    armed: MutableMapping[TimerKey, T],
    changes: Iterable[TimerChange],
    arm: Callable[[ScheduleTimer], T],
    disarm: Callable[[T], None] | None = None,
) -> None:
    """Apply a call's timer changes to the caller's timer table, the one way every driver does it: a
    schedule replaces the timer of its key (``disarm`` the old one, ``arm`` the new: a handle, a
    deadline, whatever the caller keeps), a cancel removes it."""
    for change in changes:
        old = armed.pop(change.key, None)
        if old is not None and disarm is not None:
            disarm(old)
        if isinstance(change, ScheduleTimer):
            armed[change.key] = arm(change)


def session_key(group_id: str, member_id: str) -> TimerKey:
    return (SESSION, group_id, member_id)


def rebalance_key(group_id: str, member_id: str) -> TimerKey:
    return (REBALANCE, group_id, member_id)
