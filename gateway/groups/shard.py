"""One shard of the coordinator runtime (gateway/groups/runtime.py): the groups hashed onto one partition of
the state topic (or one directory of file logs), with their own service, log, ordering and timers.

Each shard is a small world of its own:

- its own GroupService (the sans-I/O state machine of its groups only), so that loading, failing and
  re-reading one shard never touches another's memory;
- its own ShardLog from the StateStore (a directory of file logs, or a partition of the compacted state
  topic): records are appended in the order the service emitted them, and a response is released only
  after ``sync()`` made every record appended to that shard so far durable (write-ahead; an answer
  when nothing appended is still on its way, as after a steady heartbeat, does not call it);
- its own ordering: requests of one group run in arrival order (a FIFO turn per group id, GroupTurn, held
  while metadata for the topics a request names is fetched and while the synchronous service runs; the
  service calls of a shard never interleave, as they are synchronous on the one event loop), while
  different shards' persistence and timers proceed independently;
- its own timers (``loop.call_later`` handles keyed by the service's timer keys) and waiting requests
  (JoinGroup / SyncGroup parked until another member's request or a timer completes them).

A timer that comes due while one of the shard's writes has been outstanding for longer than
``stall_grace_ms`` (the state partition changing leader, the transaction coordinator moving) does not
fire: the members it would expire may be waiting for the very responses that write holds back, and a
client sends its next heartbeat only once the last one was answered. It is postponed until that write
completes, then by as long as the write was outstanding, so a member gets at least a full session after
the stall. Kafka's coordinator reaches the same outcome differently: the partition's new leader loads the
groups and starts every session afresh.

A failed append or sync unloads only that shard, and a fenced one for good; dropping its memory and
reading it back, or taking it over and handing it over in a fleet, is gateway/groups/shard_reload.py.

A shard's life (served, draining, owned by another instance, loading, failed, fenced, closed) is one
transition table (gateway/groups/shard_state.py). All a shard uses of the runtime comes in the
ShardContext it is built with (gateway/groups/shard_context.py): it never reaches back into the runtime.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from coordinator.outcome import Outcome
from coordinator.target import AssignmentJob
from coordinator.timers import ScheduleTimer, TimerKey
from gateway.groups import shard_reload
from gateway.groups.shard_context import GroupCalls, ShardContext
from gateway.groups.shard_reload import say
from gateway.groups.shard_schedule import GroupTurn, OutstandingWrites, ShardTimer
from gateway.groups.shard_state import (
    ShardEvent,
    ShardLife,
    ShardStalled,
    ShardState,
    ShardUnloaded,
)
from gateway.logging import get_logger
from gateway.net import eager
from gateway.state.log import Record, StateLogWriteFailed
from gateway.state.store import ShardLog
from translate.group_config import encode_any_record
from translate.group_service import GroupService

log = get_logger("gateway.groups.runtime")

_ACTIVE = ShardState.ACTIVE  # read on every request: a module constant is cheaper than the enum's class attribute


class Shard:
    """One shard: its service, log, timers, waiting requests and per-group ordering."""

    def __init__(self, ctx: ShardContext, index: int) -> None:
        self.ctx = ctx
        self.index = index
        self.service: GroupService = ctx.new_service()
        self.calls: GroupCalls = ctx.calls_for(self.service, index)
        self.log: ShardLog | None = None
        self.timers: dict[TimerKey, ShardTimer] = {}
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.locks: dict[str, collections.deque[asyncio.Future[None]]] = {}  # groups whose turn it is (GroupTurn)
        self.life = ShardLife(index)  # the shard's state and why, moved only along the table's rows
        self.reload_task: asyncio.Task[None] | None = None  # re-reading it while FAILED
        self.syncs = OutstandingWrites()  # writes being waited for, and when the oldest wait began
        # Timers due during a stall -> when that stall began (ms). Entered in the order they came due, so
        # their stalls' beginnings never decrease along it: those whose stall is over are at its front.
        self.postponed: collections.OrderedDict[TimerKey, int] = collections.OrderedDict()
        # Bytes appended, fsyncs, compactions of this shard's logs closed by an unload (/metrics runs on).
        self.closed_totals = (0, 0, 0)

    @property
    def state(self) -> ShardState:
        return self.life.state

    @property
    def reason(self) -> str | None:
        """Why the shard is not served now (None while ACTIVE)."""
        return self.life.reason

    def disown(self) -> None:
        """Before the first load: another instance of the fleet owns this shard until it is taken over."""
        self.life.on(ShardEvent.DISOWN)

    def close(self) -> None:
        """The runtime stopped (the shard's timers and log are closed by then)."""
        self.life.on(ShardEvent.CLOSE)

    # --- load ------------------------------------------------------------------------------------------

    async def load(self) -> int:
        """Open the shard's log and replay it into ``self.service``; the number of group records replayed.

        Raises StateLogCorrupt for damage a crash cannot explain."""
        open_log = self.ctx.open_log
        if open_log is None:
            return 0
        log_ = await open_log(self.index)
        if hasattr(log_, "bytes_appended"):
            log_.bytes_appended, log_.fsyncs, log_.compactions = self.closed_totals  # type: ignore[attr-defined]
        self.log = log_
        replayed = 0
        for rec in log_.replay():
            if self.service.replay_bytes(rec.key, rec.value):
                replayed += 1
        return replayed

    def check_loaded(self) -> None:
        """ShardUnloaded, with the reason, unless the shard takes requests now."""
        if self.life.state is not _ACTIVE:
            raise ShardUnloaded(self.life.reason)

    # --- one request -----------------------------------------------------------------------------------

    async def call(self, group_id: str, request: object, prepare: Callable[[], Awaitable[None]] | None) -> Any:
        """Hand one request to the service in its group's arrival order; the response once released."""
        key = self.ctx.next_key()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[key] = fut
        try:
            async with self.turn(group_id):
                ctx = self.ctx
                if not ctx.ready():
                    await ctx.until_ready()
                if ctx.may_be_stalled():
                    await ctx.confirm_if_stalled()
                if prepare is not None:
                    await prepare()
                self.check_loaded()
                self.refuse_while_stalled()
                began = time.perf_counter()
                result = self.calls.handle(request, key, self.ctx.now())
                self.apply(result)
                self.ctx.stats.event_time.observe(time.perf_counter() - began)
        except BaseException:
            self.waiting.pop(key, None)
            raise
        try:
            await self.release(result)
            return await fut
        finally:
            self.waiting.pop(key, None)
            if fut.done() and not fut.cancelled():
                fut.exception()  # retrieved: it is re-raised above or was never ours to raise

    def turn(self, group_id: str) -> GroupTurn:
        """The group's turn: its requests (and an offloaded assignment's install) one at a time, in
        arrival order."""
        return GroupTurn(self.locks, group_id)

    def apply(self, result: Outcome) -> None:
        """Append the records (made durable by ``release``) and apply the timer changes; start the
        target computations the call handed over (KIP-1263 offload).

        A failed append unloads the shard (the service already holds the change): ShardUnloaded."""
        jobs = self.service.take_assignment_jobs()
        if jobs:
            service = self.service
            for job in jobs:
                self.ctx.spawn(self._offload(service, job))
        if result.changes:
            self.ctx.stats.changes(result.changes)
        if result.records:
            self.ctx.stats.records(result.records)
            if self.log is not None:
                try:
                    self.log.append(Record(*encode_any_record(r)) for r in result.records)
                except StateLogWriteFailed as e:
                    self.unload(e)
                    raise ShardUnloaded(str(e)) from e
        if not result.timers:
            return
        loop = asyncio.get_running_loop()
        now = self.ctx.now()
        at = loop.time()
        timers = self.timers
        postponed = self.postponed
        # A schedule replaces its key's timer, a cancel removes it (coordinator/timers.py). A deadline that
        # moved later (every heartbeat pushes its member's session deadline) keeps the armed timer.
        for change in result.timers:
            key = change.key
            if postponed:
                postponed.pop(key, None)  # the service decided anew (a heartbeat, a leave)
            old = timers.pop(key, None)
            if isinstance(change, ScheduleTimer):
                due = at + max(0.0, (change.deadline_ms - now) / 1000.0)
                if old is not None and old.armed <= due:
                    old.due = due
                    timers[key] = old
                    continue
                timers[key] = ShardTimer(loop, due, self.fire, key)
            if old is not None:
                old.cancel()

    async def release(self, result: Outcome) -> None:
        # Every record appended to the shard so far, not only this result's: a response must not reveal
        # state that a crash could still take back.
        log_ = self.log
        if log_ is not None and log_.unsynced():  # most answers append nothing and find nothing to wait for
            try:
                await self.sync_for_answer(log_)
            except ShardStalled as stalled:
                for reply in result.responses:
                    fut = self.waiting.pop(reply.request_key, None)  # type: ignore[call-overload]
                    if fut is not None and not fut.done():
                        fut.set_exception(stalled)
                raise
            except Exception as e:
                # The records may be lost: none of this result's responses may be released (the waiting
                # requests are answered with a retriable error instead of hanging), and the memory that
                # holds them is dropped.
                self.unload(e, log_)
                gone = ShardUnloaded(str(e))
                for reply in result.responses:
                    fut = self.waiting.pop(reply.request_key, None)  # type: ignore[call-overload]
                    if fut is not None and not fut.done():
                        fut.set_exception(gone)
                raise gone from e
        if not self.life.state.loaded:
            # Unloaded while this result waited for its sync: a later write failed and cut the log back to
            # what was acknowledged before, which may not include this result's records.
            raise ShardUnloaded(self.life.reason)
        for reply in result.responses:
            fut = self.waiting.pop(reply.request_key, None)  # type: ignore[call-overload]
            if fut is not None and not fut.done():
                fut.set_result(reply.body)

    async def durable(self) -> None:
        """Before a read-only answer: what it shows must not be taken back by a crash."""
        await self.ctx.confirm_if_stalled()
        self.check_loaded()
        log_ = self.log
        if log_ is not None and log_.unsynced():
            try:
                await self.sync(log_)
            except Exception as e:
                self.unload(e, log_)
                raise ShardUnloaded(str(e)) from e
        self.check_loaded()

    async def sync(self, log_: ShardLog) -> None:
        """``log_.sync()``, timed: while it is outstanding longer than the stall grace, timers coming due
        are postponed (``fire``); once it completes, those it held are re-armed."""
        token = self.ctx.next_key()
        syncs = self.syncs
        syncs.begin(token, self.ctx.now())
        began = time.perf_counter()
        try:
            await log_.sync()
            self.ctx.stats.flush_time.observe(time.perf_counter() - began)
        finally:
            oldest = syncs.oldest()
            syncs.end(token)
            if self.postponed and syncs.oldest() != oldest:  # the stall that held them may be over
                self.rearm_postponed()

    async def sync_for_answer(self, log_: ShardLog) -> None:
        """``sync()`` before releasing answers, for at most ``answer_stall_s``: past that the answers are
        not held any longer (ShardStalled) while the write itself goes on; should it fail later, the
        shard unloads then."""
        limit = self.ctx.settings.answer_stall_s
        if limit is None:
            await self.sync(log_)
            return
        # Stepped at once (gateway/net/eager.py): when nothing appended waits for its write (a steady
        # heartbeat appends nothing), the sync is done there, without a task or a timer.
        finished, task = eager.start(self.sync(log_))
        if finished:
            return
        done, _ = await asyncio.wait({task}, timeout=limit)
        if task in done:
            task.result()
            return
        task.add_done_callback(lambda t: self._stalled_sync_done(t, log_))
        self.ctx.counters["stalled_answers"] += 1
        raise ShardStalled(f"shard {self.index}: its state write has been outstanding for more than {limit:g}s")

    def refuse_while_stalled(self) -> None:
        """A request that arrives while one of the shard's writes has been outstanding ``answer_stall_s``
        is answered NOT_COORDINATOR without being applied, as Kafka's coordinator takes no request while
        its partition has no leader. Applied, its answer would be held and then replaced by
        NOT_COORDINATOR as well, and a KIP-848 member whose epoch was bumped by two such calls in a row
        would come back two epochs behind, which only a fence answers (one lost answer is tolerated: the
        previous epoch is accepted)."""
        limit = self.ctx.settings.answer_stall_s
        if limit is None:
            return
        oldest = self.syncs.oldest()
        if oldest is None:
            return
        if self.ctx.now() - oldest >= limit * 1000:
            self.ctx.counters["stalled_answers"] += 1
            raise ShardStalled(f"shard {self.index}: its state write has been outstanding for more than {limit:g}s")

    def _stalled_sync_done(self, task: asyncio.Task[None], log_: ShardLog) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self.unload(error, log_)

    def stalled_since(self) -> int | None:
        """When the oldest outstanding write began, if it has been outstanding longer than the grace."""
        oldest = self.syncs.oldest()
        if oldest is None:
            return None
        return oldest if self.ctx.now() - oldest >= self.ctx.settings.stall_grace_ms else None

    def rearm_postponed(self) -> None:
        """Re-arm the postponed timers whose stall is over, each delayed by as long as its stall lasted
        (a member whose heartbeat answer that stall held back gets at least a full session after it)."""
        oldest = self.syncs.oldest()
        now = self.ctx.now()
        loop = asyncio.get_running_loop()
        postponed = self.postponed
        while postponed:
            key, since = next(iter(postponed.items()))
            if oldest is not None and oldest <= since:
                break  # the write that stalled is still outstanding (and so for every later entry)
            del postponed[key]
            if self.life.state is ShardState.ACTIVE and key not in self.timers:
                self.timers[key] = ShardTimer(loop, loop.time() + max(0, now - since) / 1000.0, self.fire, key)

    # --- offloaded target assignments (KIP-1263 group.consumer.assignor.offload.enable) ----------------

    async def _offload(self, service: GroupService, job: AssignmentJob) -> None:
        """Compute ``job`` on a worker thread while the loop serves everyone else, then install it in
        the group's turn like any other change: its records are appended to the shard's log, and what
        a member is told of the new target comes in a later answer, released after that log's sync.
        The install applies the group's changes since the snapshot over the result (coordinator/membership.py)."""
        counters = self.ctx.counters
        counters["assignments_offloaded"] += 1
        loop = asyncio.get_running_loop()
        try:
            assignment = await loop.run_in_executor(self.ctx.offload_executor, job.run)
        except asyncio.CancelledError:
            service.abandon_assignment(job)
            raise
        except Exception:
            counters["assignments_failed"] += 1
            log.exception("offloaded target assignment failed; the group computes again on its next heartbeat",
                          group=job.group_id, shard=self.index)
            service.abandon_assignment(job)
            return
        try:
            async with self.turn(job.group_id):
                await self.ctx.confirm_if_stalled()
                if not self.life.state.loaded or self.service is not service:
                    return  # the memory it was computed from is gone; the reloaded groups compute anew
                installed, result = service.install_assignment(job, assignment, self.ctx.now())
                counters["assignments_installed" if installed else "assignments_discarded"] += 1
                self.apply(result)
            await self.release(result)
        except ShardUnloaded:
            return

    # --- results nobody waits for: timers, metadata, expiry -------------------------------------------

    def fire(self, key: TimerKey) -> None:
        self.timers.pop(key, None)
        if not self.life.state.loaded:
            return
        since = self.stalled_since()
        if since is not None:
            # A session or rebalance deadline passed while the shard could not answer: not the members'
            # doing (see the module docstring).
            if not self.postponed:
                say(
                    log.warning, "group state write stalled: timers coming due are postponed until it completes",
                    shard=self.index, outstanding_ms=self.ctx.now() - since,
                )
            self.postponed[key] = since
            self.postponed.move_to_end(key)
            self.ctx.counters["timers_postponed"] += 1
            return
        stats = self.ctx.stats
        stats.timers_fired[key[0]] += 1
        before, group_type = self.service.member_count(key[1])
        try:
            result = self.calls.on_timer(key, self.ctx.now())
        except Exception:
            log.exception("group timer failed", timer=list(key), shard=self.index)
            return
        if before:
            after, _ = self.service.member_count(key[1])
            if after < before:
                stats.expired[group_type] += before - after  # members a session or rebalance timer removed
        self.apply_in_background(result)

    def apply_in_background(self, result: Outcome) -> None:
        try:
            self.apply(result)
        except ShardUnloaded:
            return
        if result.responses or result.records:
            self.ctx.spawn(self._release_quietly(result))

    async def _release_quietly(self, result: Outcome) -> None:
        with contextlib.suppress(ShardUnloaded):
            await self.release(result)

    # --- unload, reload, take-over and hand-over (gateway/groups/shard_reload.py) ----------------------

    def unload(self, error: BaseException, failed_log: ShardLog | None = None) -> None:
        """Stop serving this shard from memory: it holds changes whose records are not durable."""
        shard_reload.unload(self, error, failed_log)

    def drop_memory(self) -> None:
        """Cancel the timers and close the log (the service is replaced by the next load)."""
        shard_reload.drop_memory(self)

    async def take_over(self) -> None:
        """Serve this shard (in a fleet): open it, which fences its older writers, and replay it."""
        await shard_reload.take_over(self)

    async def hand_over(self, timeout_s: float) -> None:
        """Stop serving this shard (in a fleet) once what is in flight is durable or ``timeout_s`` passed."""
        await shard_reload.hand_over(self, timeout_s)
