"""What a shard (gateway/groups/shard.py) is given by the coordinator runtime that builds it: a clock, a
spawner, its log's opener, the service factory, counters and settings, as Kafka's CoordinatorRuntime hands
each partition a context (timer, executor). A shard sees this and nothing else of the runtime."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, MutableMapping, Sequence
from typing import Any, Protocol

from coordinator.outcome import Outcome
from coordinator.timers import TimerKey
from gateway.state.store import ShardLog
from translate.group_service import GroupService

TopicImage = Mapping[str, Any]

# A write outstanding longer than this is a stall: timers coming due meanwhile are postponed (see
# gateway/groups/shard.py). Far below any session timeout (group.min.session.timeout.ms, Kafka: 6 s), far
# above a healthy write.
DEFAULT_STALL_GRACE_MS = 1_000


def now_ms() -> int:
    return int(time.time() * 1000)


class GroupCalls(Protocol):
    """What a shard calls on its groups: the GroupService, or the rebalance event deriver that wraps it
    (gateway/groups/rebalance_log.py)."""

    def handle(self, request: object, request_key: Any, now_ms: int) -> Outcome: ...

    def on_timer(self, key: TimerKey, now_ms: int) -> Outcome: ...

    def on_metadata(self, topics: Any, now_ms: int) -> Outcome: ...

    def on_loaded(self, now_ms: int) -> Outcome: ...

    def expire_empty_groups(self, now_ms: int) -> Outcome: ...


class ShardStats(Protocol):
    """The rebalance statistics a shard adds to (gateway/metrics.py ``GroupStats``)."""

    @property
    def timers_fired(self) -> MutableMapping[str, int]: ...  # timer kind -> fired

    @property
    def expired(self) -> MutableMapping[str, int]: ...  # members removed by a timer, by group type

    def records(self, records: Sequence[Any]) -> None: ...

    def changes(self, changes: Sequence[Any]) -> None: ...  # conversions and refused conversions

    @property
    def event_time(self) -> Observer: ...  # a request handled by the shard's groups (seconds)

    @property
    def flush_time(self) -> Observer: ...  # a write of appended records made durable (seconds)


class Observer(Protocol):
    def observe(self, value: float) -> None: ...


@dataclasses.dataclass(slots=True)
class ShardSettings:
    """Tunables shared by every shard of a runtime; the runtime may change them while it runs (the group
    layer sets ``answer_stall_s`` once it knows the store waits for a cluster)."""

    # First and longest wait between attempts to re-read a failed shard.
    reload_backoff_s: tuple[float, float] = (0.2, 5.0)
    stall_grace_ms: int = DEFAULT_STALL_GRACE_MS
    # How long an answer may wait for its shard's write before the client is told to retry (ShardStalled);
    # None: as long as the write takes (a local log's fsync).
    answer_stall_s: float | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ShardContext:
    now: Callable[[], int]  # the clock, in ms
    next_key: Callable[[], int]  # request keys and sync tokens, unique within the runtime
    until_ready: Callable[[], Awaitable[Any]]  # returns once the runtime serves (its first load replayed)
    ready: Callable[[], bool]  # the runtime serves: ``until_ready`` would return at once
    confirm_if_stalled: Callable[[], Awaitable[None]]  # ownership proven after an event-loop stall
    may_be_stalled: Callable[[], bool]  # False: ``confirm_if_stalled`` would return at once
    spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]]  # background work, cancelled at stop
    open_log: Callable[[int], Awaitable[ShardLog]] | None  # the store's opener (None: memory only)
    new_service: Callable[[], GroupService]
    calls_for: Callable[[GroupService, int], GroupCalls]
    topics: Callable[[], TopicImage | None]  # the current topic image, for a shard re-read
    stats: ShardStats
    counters: collections.Counter[str]
    settings: ShardSettings
    # Where offloaded target computations run (None: the loop's default executor).
    offload_executor: concurrent.futures.Executor | None = None
    where: str | None = None  # for log lines: the state dir or topic


__all__ = [
    "DEFAULT_STALL_GRACE_MS", "GroupCalls", "Observer", "ShardContext", "ShardSettings", "ShardStats", "TopicImage", "now_ms",
]
