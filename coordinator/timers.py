"""Keyed, cancellable timers, driven by the caller's clock.

The coordinator never reads a clock: each call returns the timer changes to make. ``ScheduleTimer``
(re)arms the timer ``key`` to fire at ``deadline_ms`` (replacing any timer with the same key);
``CancelTimer`` disarms it. When a timer fires the caller calls ``on_timer(key, now_ms)``.

Keys are tuples ``(kind, group_id, member_id)`` with kind ``session`` (KIP-848 "Heartbeat &
Session") or ``rebalance`` (the revocation deadline, KIP-848 "Member Epoch - Reconciliation").
translate/ may use its own kinds (e.g. ``join``/``sync``); the coordinator ignores kinds it does not know.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def session_key(group_id: str, member_id: str) -> TimerKey:
    return (SESSION, group_id, member_id)


def rebalance_key(group_id: str, member_id: str) -> TimerKey:
    return (REBALANCE, group_id, member_id)
