"""A shard's memory dropped and read back (gateway/groups/shard.py): unloaded after a failed write or a
fence, re-read with backoff, taken over from another instance of a fleet, handed over to one.

A failed append or sync (StateLogWriteFailed) unloads only that shard, as Kafka's coordinator unloads a
partition it cannot write: its memory holds changes whose records are not durable, so it is dropped
(timers cancelled, waiting requests answered with a retriable error) and re-read from the store in the
background with backoff. ``ShardFenced`` (a newer owner took the shard over) unloads it for good: it
is never re-opened by this process, whose memory of it is stale.

The shard's state moves only along its transition table (gateway/groups/shard_state.py). Its requests,
timers and writes are gateway/groups/shard.py, which calls in here.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from gateway.groups.shard_state import NOT_OWNED, ShardEvent, ShardLife, ShardState, ShardUnloaded
from gateway.logging import get_logger
from gateway.state.store import ShardFenced, ShardLog

if TYPE_CHECKING:
    from coordinator.outcome import Outcome
    from coordinator.timers import TimerKey
    from gateway.groups.shard_context import GroupCalls, ShardContext
    from gateway.groups.shard_schedule import ShardTimer
    from translate.group_service import GroupService

log = get_logger("gateway.groups.runtime")


def say(emit: Callable[..., Any], event: str, **fields: Any) -> None:
    """Log on the unload/reload path, where the log's own file may sit on the full disk."""
    with contextlib.suppress(OSError):
        emit(event, **fields)


class ShardMemory(Protocol):
    """A shard (gateway/groups/shard.py ``Shard``) as unloading and reloading see it: all it holds."""

    ctx: ShardContext
    index: int
    life: ShardLife
    service: GroupService
    calls: GroupCalls
    log: ShardLog | None
    timers: dict[TimerKey, ShardTimer]
    postponed: collections.OrderedDict[TimerKey, int]
    waiting: dict[int, asyncio.Future[Any]]
    locks: dict[str, collections.deque[asyncio.Future[None]]]  # groups whose turn it is (GroupTurn)
    reload_task: asyncio.Task[None] | None
    closed_totals: tuple[int, int, int]

    async def load(self) -> int: ...
    def apply(self, result: Outcome) -> None: ...
    async def sync(self, log_: ShardLog) -> None: ...
    def check_loaded(self) -> None: ...


# --- unload and reload -----------------------------------------------------------------------------


def unload(shard: ShardMemory, error: BaseException, failed_log: ShardLog | None = None) -> None:
    """Stop serving this shard from memory: it holds changes whose records are not durable.

    Like Kafka's coordinator after a failed write to its partition: timers are cancelled, waiting
    requests fail with a retriable error, and the shard is re-read from the store (``reload``) unless
    a newer owner fenced it (or it is being handed over: then it is not ours to re-read)."""
    if failed_log is not None and failed_log is not shard.log:
        return  # a sync of a log already replaced by a reload: that failure was handled
    if not shard.life.state.loaded:
        return  # not served from memory anyway
    _unload(shard, error)


def _unload(shard: ShardMemory, error: BaseException) -> None:
    """From ACTIVE, DRAINING (a drain cut short) or LOADING (a re-read whose open was fenced)."""
    fenced = isinstance(error, ShardFenced)
    draining = shard.life.state is ShardState.DRAINING
    reason = f"{type(error).__name__}: {error}"
    shard.life.on(ShardEvent.FENCED if fenced else ShardEvent.WRITE_FAILED, reason)
    counters = shard.ctx.counters
    counters["state_log_failures"] += 1
    counters["groups_unloaded"] += 1
    waiting = len(shard.waiting)
    drop_memory(shard)
    gone = ShardUnloaded(reason)
    for fut in shard.waiting.values():
        if not fut.done():
            fut.set_exception(gone)
            fut.exception()  # retrieved here: its caller may already be gone
    shard.waiting.clear()
    if fenced:
        counters["shards_fenced"] += 1
        say(
            log.error,
            "group state shard fenced by a newer owner: its groups are no longer served by this process "
            "(answered NOT_COORDINATOR) and the shard is not re-read",
            shard=shard.index, error=reason, waiting_requests=waiting,
        )
        return
    if draining:
        say(
            log.error, "group state log write failed while the shard was handed over: what it held is dropped",
            shard=shard.index, error=reason, waiting_requests=waiting, state_dir=shard.ctx.where,
        )
        return
    if shard.reload_task is None or shard.reload_task.done():  # else: failed while reloading
        shard.reload_task = shard.ctx.spawn(_reload_forever(shard))
    say(
        log.error,
        "group state log write failed: the shard's groups are unloaded (answered NOT_COORDINATOR) until "
        "its log is re-read",
        shard=shard.index, error=reason, waiting_requests=waiting, state_dir=shard.ctx.where,
    )


def drop_memory(shard: ShardMemory) -> None:
    """Cancel the timers and close the log (the service is replaced by the next load)."""
    for h in shard.timers.values():
        h.cancel()
    shard.timers.clear()
    shard.postponed.clear()  # a reload arms every timer afresh
    log_ = shard.log
    if log_ is not None:
        if hasattr(log_, "bytes_appended"):
            shard.closed_totals = (log_.bytes_appended, log_.fsyncs, log_.compactions)  # type: ignore[attr-defined]
        log_.close()
        shard.log = None


async def _reload_forever(shard: ShardMemory) -> None:
    """While FAILED: re-read the shard with backoff until it is served again (or fenced)."""
    delay, longest = shard.ctx.settings.reload_backoff_s
    attempt = 0
    while True:
        await asyncio.sleep(delay)
        if shard.life.state is not ShardState.FAILED:
            return  # fenced meanwhile: never re-opened by this process
        attempt += 1
        shard.life.on(ShardEvent.RELOAD)
        try:
            await reload(shard)
        except asyncio.CancelledError:
            raise
        except ShardFenced as e:
            if shard.life.state is ShardState.LOADING:
                _unload(shard, e)  # fenced while re-opening: stays unloaded for good
            return
        except Exception as e:  # noqa: BLE001 - stays unloaded and tries again
            # Reading works on a full disk; the probe write or the first append decides.
            drop_memory(shard)
            if shard.life.state is ShardState.LOADING:
                shard.life.on(ShardEvent.LOAD_FAILED)
            delay = min(delay * 2, longest)
            say(
                log.warning, "group state shard not reloaded yet",
                shard=shard.index, attempt=attempt, error=str(e), retry_in_s=delay,
            )
            continue
        say(
            log.info, "shard's groups reloaded from the state log",
            shard=shard.index, attempt=attempt, groups=shard.service.group_count(),
        )
        return


async def reload(shard: ShardMemory) -> None:
    """Replay the log into a fresh service, re-arm its timers, and serve it once a write succeeded
    (from LOADING: a takeover, or a re-read of a failed shard)."""
    shard.service = shard.ctx.new_service()
    shard.calls = shard.ctx.calls_for(shard.service, shard.index)
    await shard.load()
    probe = getattr(shard.log, "probe_write", None)
    if probe is not None:
        probe()
    # Served again from here: requests arriving meanwhile share the sync below, so none of their
    # answers is released unless that write works.
    shard.life.on(ShardEvent.LOADED)
    try:
        topics = shard.ctx.topics()
        if topics is not None:
            shard.apply(shard.calls.on_metadata(topics, shard.ctx.now()))
        shard.apply(shard.calls.on_loaded(shard.ctx.now()))
        if shard.log is not None:
            await shard.sync(shard.log)
    except ShardUnloaded:
        raise
    except Exception as e:
        unload(shard, e)
        raise
    shard.check_loaded()


# --- ownership in a fleet: taking a shard over and handing it over ---------------------------------


async def take_over(shard: ShardMemory) -> None:
    """Serve this shard: open it (which fences every older writer of it, the instance that held it
    before included), replay it, re-arm its timers. Until then its groups are answered NOT_COORDINATOR.
    A load that fails is retried in the background with backoff, as after a failed write."""
    if shard.reload_task is not None and not shard.reload_task.done():
        shard.reload_task.cancel()
    shard.life.on(ShardEvent.TAKE_OVER)
    try:
        await reload(shard)
    except ShardUnloaded:
        pass  # unload() has scheduled the retries (or the shard was fenced meanwhile)
    except Exception as e:  # noqa: BLE001 - stays unserved and tries again
        # ShardFenced too: an instance the cluster no longer counts as the owner opened it after us;
        # the assignment is the cluster's word, so open it again (a second fence ends the retries).
        drop_memory(shard)
        reason = f"{type(e).__name__}: {e}"
        if shard.life.state is not ShardState.FAILED:  # else: unloaded once served, and being re-read
            shard.life.on(ShardEvent.LOAD_FAILED, reason)
        say(log.warning, "shard not taken over yet; retrying", shard=shard.index, error=reason)
        if shard.reload_task is None or shard.reload_task.done():
            shard.reload_task = shard.ctx.spawn(_reload_forever(shard))


async def hand_over(shard: ShardMemory, timeout_s: float) -> None:
    """Hand the shard over: take no new request, let the ones in flight finish and flush what they
    appended, answer parked requests NOT_COORDINATOR (their members rejoin at the new owner), then drop
    the memory. Returns once nothing of the shard is served or written by this instance any more;
    what was not durable within ``timeout_s`` is dropped (never acknowledged, so never relied on)."""
    if shard.reload_task is not None and not shard.reload_task.done():
        shard.reload_task.cancel()
    if not shard.life.state.loaded:  # not served anyway (never loaded, failed, fenced)
        drop_memory(shard)
        shard.life.on(ShardEvent.HAND_OVER)
        return
    shard.life.on(ShardEvent.HAND_OVER)  # DRAINING: new requests are turned away at once
    for h in shard.timers.values():  # the new owner re-arms them from the records
        h.cancel()
    shard.timers.clear()
    shard.postponed.clear()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    # Requests holding or queued on a group's turn: the draining check turns new ones away at once;
    # one already in the service appends its records before it lets go of the turn.
    while shard.locks and loop.time() < deadline:
        await asyncio.sleep(0.005)
    log_ = shard.log
    if log_ is not None:
        try:
            async with asyncio.timeout(max(0.0, deadline - loop.time())):
                await log_.sync()
        except Exception as e:  # noqa: BLE001 - what was not committed was never acknowledged
            say(log.warning, "shard handed over with appends not flushed", shard=shard.index, error=repr(e))
    for _ in range(3):  # the responses that sync released reach their requests before the unload
        await asyncio.sleep(0)
    gone = ShardUnloaded(NOT_OWNED)
    for fut in shard.waiting.values():
        if not fut.done():
            fut.set_exception(gone)
            fut.exception()
    shard.waiting.clear()
    shard.life.on(ShardEvent.HANDED_OVER)
    drop_memory(shard)
    shard.service = shard.ctx.new_service()  # the old one's memory goes now, not at the next load
    shard.calls = shard.ctx.calls_for(shard.service, shard.index)


__all__ = ["ShardMemory", "drop_memory", "hand_over", "reload", "say", "take_over", "unload"]
