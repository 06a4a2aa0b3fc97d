"""The gateway as the group coordinator: group APIs answered by GroupService, in front of any cluster.

For the groups it manages (``coordinator.managed_groups``, an RE2 pattern over the whole group id)
the gateway answers FindCoordinator (key type GROUP) with one of its own broker listeners and then
every group API on every listener itself. Unmanaged groups, transactional coordinators and anything
it cannot decode as a group request of a managed group pass through to the upstream untouched.

Each group request is decoded, handed to ``GroupService.handle`` in arrival order per group (a
FIFO lock per group id, held only while metadata for named topics is fetched and the synchronous
service runs), its records are appended to the state log, and its responses are released only
after ``sync()`` made every record appended so far durable (write-ahead, as Kafka's coordinator
waits for the write before answering). JoinGroup / SyncGroup may be parked: their futures are
completed by a later result (another member's request or a timer). Timers are ``loop.call_later``
handles keyed by the service's timer keys. The service is synchronous and fast; only persistence
awaits, and one fsync covers every group that appended before it (group commit), so a slow group
does not stall others.

A failed write or fsync of the state log (a full disk, EIO) unloads the managed groups, as Kafka's
coordinator unloads a partition it cannot write: the in-memory state holds changes whose records
are not durable, so it is dropped (timers cancelled, every waiting request answered NOT_COORDINATOR,
FindCoordinator answering COORDINATOR_NOT_AVAILABLE, both retriable). A background task re-reads the
log into a fresh service with backoff; the first write after it decides whether the disk works again.
There is one log, so every managed group is affected; a shard (a log with its service and timers)
is the unit that ``_unload``/``_reload`` act on.

Offsets stay in the real cluster (gateway/offsets.py); merges with the upstream (ListGroups,
DescribeGroups of unmanaged groups in a mixed batch) go through gateway/upstream_client.py.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import re2

from coordinator.errors import Errors
from coordinator.timers import ScheduleTimer, TimerKey
from translate.classic_messages import JoinGroupRequest
from translate.embedded import subscribed_topics
from translate.group_config import GroupResult, encode_any_record
from translate.group_messages import (
    ConsumerGroupDescribeResponse,
    DeletableGroupResult,
    DeleteGroupsResponse,
    DescribedClassicGroup,
    DescribeGroupsResponse,
    ListGroupsResponse,
)
from translate.group_service import GroupService
from translate.rebalance_events import RebalanceEventDeriver

from . import codec, frames
from . import group_codec as gc
from .adoption import UpstreamLeaver
from .coordinator_settings import CoordinatorSettings
from .logging import get_logger
from .metadata_watch import MetadataWatch, TopicImage
from .metrics import GroupStats
from .offsets import OffsetBridge
from .rebalance_log import RebalanceEventLog
from .state_log import FileStateLog, Record, StateLog, StateLogWriteFailed
from .upstream import UpstreamError
from .upstream_client import CoordinatorMoved, UpstreamClient

if TYPE_CHECKING:
    from .connection import ClientConnection
    from .server import Gateway

log = get_logger("gateway.groups")

UNKNOWN_SERVER_ERROR = -1
COORDINATOR_NOT_AVAILABLE = 15
GROUP_ID_NOT_FOUND = 69
NOT_COORDINATOR = int(Errors.NOT_COORDINATOR)
INCONSISTENT_GROUP_PROTOCOL = Errors.INCONSISTENT_GROUP_PROTOCOL

# Share groups (KIP-932) and streams groups (KIP-1071) are coordinated by the cluster. FindCoordinator
# does not say which group type a client wants, so a managed id's client reaches the gateway's home node
# with these requests too: each is sent on the gateway's own link to the group's upstream coordinator.
# Requests naming one group are forwarded as the client's bytes (client id and all), the answer returned
# as the upstream's bytes under the client's correlation id.
ROUTED_ONE: dict[int, str | None] = {
    codec.SHARE_GROUP_HEARTBEAT: "share",
    codec.STREAMS_GROUP_HEARTBEAT: "streams",
    codec.ALTER_SHARE_GROUP_OFFSETS: "share",
    codec.DELETE_SHARE_GROUP_OFFSETS: "share",
}
# Requests naming several groups are split per group (each may have another coordinator) and merged.
ROUTED_MANY = frozenset({codec.SHARE_GROUP_DESCRIBE, codec.STREAMS_GROUP_DESCRIBE, codec.DESCRIBE_SHARE_GROUP_OFFSETS})
# Offset APIs of a share or streams group go to the cluster's coordinator as well (Streams commits with
# its member epoch, which only the cluster's coordinator can check).
_OFFSET_APIS = frozenset({gc.OFFSET_COMMIT, gc.OFFSET_FETCH, gc.TXN_OFFSET_COMMIT, gc.OFFSET_DELETE})
# The group types the cluster coordinates on its own (ListGroups v5 TypesFilter values).
FOREIGN_TYPES = ("share", "streams")
# How long "the cluster has no share/streams group of that id" is believed before asking again.
_NOT_FOREIGN_TTL_S = 10.0


class GroupsUnloaded(Exception):
    """The managed groups are not served from memory (a state log write failed; being re-read)."""


Handler = Callable[["ClientConnection", frames.RequestHeader, Any, int], Awaitable[Any]]


class GroupLayer:
    """``layer = GroupLayer(gateway, settings); layer.install(); await gateway.start(); await layer.start()``."""

    def __init__(self, gw: Gateway, settings: CoordinatorSettings) -> None:
        self.gw = gw
        self.settings = settings
        self.service = self._new_service()
        # Calls that change groups go through the event deriver when rebalance events are written.
        self.events: RebalanceEventLog | None = None
        self._calls: GroupService | RebalanceEventDeriver = self.service
        if settings.rebalance_events:
            self.events = RebalanceEventLog(settings.rebalance_events, settings.rebalance_run, self.service)
            self._calls = self.events.deriver
        self._match_all = settings.managed_groups == ".*"
        self._managed = re2.compile(settings.managed_groups)
        self.client = UpstreamClient(gw.directory, lambda: gw.config.upstream_request_timeout_s)
        # What clients decide goes upstream on links of its own (share and streams requests forwarded as
        # their bytes, the cluster's describe and list answers merged into the gateway's): the broker
        # answers one request per connection at a time and closes a connection on a request it cannot
        # read, so nothing a client sends may wait in front of, or break, the gateway's own commits and
        # metadata on ``client``.
        self.forward = UpstreamClient(gw.directory, lambda: gw.config.upstream_request_timeout_s)
        self.watch = MetadataWatch(self.client, self._on_topics, settings.metadata_refresh_s)
        self.offsets = OffsetBridge(self)
        self.adoption = UpstreamLeaver(self)
        self.state_log: StateLog | None = None
        self.counters: collections.Counter[str] = collections.Counter()
        self.stats = GroupStats()  # rebalances and timer expirations, for /metrics
        self._ready = asyncio.Event()
        self._keys = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._timers: dict[TimerKey, asyncio.TimerHandle] = {}
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        # Set while the managed groups are unloaded after a failed state log write (the error).
        self.unloaded: str | None = None
        self._reload_task: asyncio.Task[None] | None = None
        self.reload_backoff_s = (0.2, 5.0)  # first and longest wait between attempts to re-read the log
        self._log_totals = (0, 0, 0)  # bytes appended, fsyncs, compactions of the logs closed by an unload
        # group id -> "share" / "streams": groups the cluster coordinates, seen in answers it gave.
        self.foreign: dict[str, str] = {}
        self._not_foreign: dict[str, float] = {}  # group id -> monotonic time the cluster said so
        self._handlers: dict[int, Handler] = {
            gc.FIND_COORDINATOR: self._find_coordinator,
            gc.JOIN_GROUP: self._classic,
            gc.SYNC_GROUP: self._classic,
            gc.HEARTBEAT: self._classic,
            gc.LEAVE_GROUP: self._classic,
            gc.CONSUMER_GROUP_HEARTBEAT: self._consumer_group_heartbeat,
            gc.CONSUMER_GROUP_DESCRIBE: self._consumer_group_describe,
            gc.DESCRIBE_GROUPS: self._describe_groups,
            gc.LIST_GROUPS: self._list_groups,
            gc.DELETE_GROUPS: self._delete_groups,
            gc.OFFSET_COMMIT: self.offsets.offset_commit,
            gc.TXN_OFFSET_COMMIT: self.offsets.txn_offset_commit,
            gc.OFFSET_FETCH: self.offsets.offset_fetch,
            gc.OFFSET_DELETE: self.offsets.offset_delete,
        }
        for api_key in (*ROUTED_ONE, *ROUTED_MANY):
            self._handlers[api_key] = self._route_many

    # --- wiring ----------------------------------------------------------------------------------------

    def install(self) -> None:
        """Register the local handlers and versions on the gateway (before it starts)."""
        for api_key in self._handlers:
            self.gw.local_handlers[api_key] = _LocalHandler(self, api_key)
        self.gw.directory.set_local_api(gc.LOCAL_API)

    @property
    def ready(self) -> bool:
        """Group state replayed and the layer answering (``start`` done)."""
        return self._ready.is_set()

    def armed_timers(self) -> int:
        return len(self._timers)

    def managed(self, group_id: str) -> bool:
        return self._match_all or self._managed.fullmatch(group_id) is not None

    def _new_service(self) -> GroupService:
        service_config, coordinator_config = self.settings.service_configs()
        return GroupService(
            service_config, coordinator_config, new_member_id=lambda client_id: f"{client_id}-{uuid.uuid4()}"
        )

    def _open_state_log(self) -> int:
        """Open (re-read) the state log into ``self.service``; the number of group records replayed.

        Raises StateLogCorrupt for damage a crash cannot explain (the gateway then refuses to start)."""
        assert self.settings.state_dir is not None
        path = Path(self.settings.state_dir)
        self.state_log = FileStateLog(path, fsync=self.settings.fsync, fsync_interval_ms=self.settings.fsync_interval_ms)
        # /metrics counters run on across re-reads of the log (they are "since the process started").
        self.state_log.bytes_appended, self.state_log.fsyncs, self.state_log.compactions = self._log_totals
        replayed = 0
        for rec in self.state_log.replay():
            if self.service.replay_bytes(rec.key, rec.value):
                replayed += 1
        log.info("group state replayed", state_dir=str(path), records=replayed)
        return replayed

    def open_state(self) -> None:
        """Read the state log (no network): a damaged log stops the start-up before anything else.

        Raises StateLogCorrupt naming the file and offset. ``start`` does it when not done before."""
        if self.settings.state_dir is not None and self.state_log is None:
            self._open_state_log()

    async def start(self) -> None:
        """Replay the state log, load topic metadata, re-arm timers, then serve."""
        if self.settings.state_dir is not None:
            self.open_state()
        else:
            # `serve` refuses to start like this unless asked to (ephemeral_state); `dev` runs so by default.
            note = log.info if self.settings.ephemeral_state else log.warning
            note("no coordinator state_dir: group state lives in memory and is lost on restart")
        try:
            await self.watch.refresh()
        except UpstreamError as e:
            log.warning("initial topic metadata fetch failed; retrying in the background", error=str(e))
        with contextlib.suppress(GroupsUnloaded):  # a full disk at start: served once the log is re-read
            self._apply(self._calls.on_loaded(self._now()))
        self._spawn(self.watch.run_forever())
        if self.settings.upstream_check_s > 0:
            self._spawn(self._check_upstream_forever())
        self._spawn(self._expire_groups_forever())
        self._ready.set()
        log.info(
            "group coordinator ready",
            managed_groups=self.settings.managed_groups,
            classic_groups=self.settings.classic_groups,
            **{"group.initial.rebalance.delay.ms": self.settings.initial_rebalance_delay_ms},
            groups=len(self.service.classic_groups.groups) + len(self.service.coordinator.state.groups),
        )

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for h in self._timers.values():
            h.cancel()
        self._timers.clear()
        self.client.close()
        self.forward.close()
        if self.state_log is not None:
            try:
                await self.state_log.sync()
            except StateLogWriteFailed as e:
                log.error("group state log not synced at shutdown", error=str(e))
            self.state_log.close()
            self.state_log = None
        if self.events is not None:
            self.events.close()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _now() -> int:
        return int(time.time() * 1000)

    # --- running the service ---------------------------------------------------------------------------

    async def call(self, group_id: str, request: object, topics: Iterable[str] = (), regex: bool = False) -> Any:
        """Hand one request to the service in its group's arrival order; the response once released.

        ``topics`` (and ``regex``: a pattern subscription) name what the request subscribes to: the
        topic image is refreshed for them first, so a topic created a moment ago is assigned."""
        key = next(self._keys)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[key] = fut
        lock, users = self._locks.get(group_id) or (asyncio.Lock(), 0)
        self._locks[group_id] = (lock, users + 1)
        try:
            async with lock:
                await self._ready.wait()
                if topics or regex:
                    await self.watch.ensure(topics, regex)
                if self.unloaded is not None:
                    raise GroupsUnloaded(self.unloaded)
                result = self._calls.handle(request, key, self._now())
                self._apply(result)
        except BaseException:
            self._waiting.pop(key, None)
            raise
        finally:
            lock, users = self._locks[group_id]
            if users <= 1:
                del self._locks[group_id]
            else:
                self._locks[group_id] = (lock, users - 1)
        try:
            await self._release(result)
            return await fut
        finally:
            self._waiting.pop(key, None)
            if fut.done() and not fut.cancelled():
                fut.exception()  # retrieved: it is re-raised above or was never ours to raise

    def _apply(self, result: GroupResult) -> None:
        """Append the records (made durable by ``_release``) and apply the timer changes.

        A failed append unloads the groups (the service already holds the change) and raises GroupsUnloaded."""
        if result.records:
            self.stats.records(result.records)
            if self.state_log is not None:
                try:
                    self.state_log.append(Record(*encode_any_record(r)) for r in result.records)
                except StateLogWriteFailed as e:
                    self._unload(e)
                    raise GroupsUnloaded(str(e)) from e
        if not result.timers:
            return
        loop = asyncio.get_running_loop()
        now = self._now()
        for change in result.timers:
            old = self._timers.pop(change.key, None)
            if old is not None:
                old.cancel()
            if isinstance(change, ScheduleTimer):
                delay = max(0.0, (change.deadline_ms - now) / 1000.0)
                self._timers[change.key] = loop.call_later(delay, self._fire, change.key)

    async def _release(self, result: GroupResult) -> None:
        # Every record appended so far, not only this result's: a response must not reveal state
        # that a crash could still take back.
        log_ = self.state_log
        if log_ is not None:
            try:
                await log_.sync()
            except Exception as e:
                # The records may be lost: none of this result's responses may be released (the
                # waiting requests are answered with a retriable error instead of hanging), and the
                # memory that holds them is dropped.
                self._unload(e, log_)
                gone = GroupsUnloaded(str(e))
                for reply in result.responses:
                    fut = self._waiting.pop(reply.request_key, None)  # type: ignore[call-overload]
                    if fut is not None and not fut.done():
                        fut.set_exception(gone)
                raise gone from e
        if self.unloaded is not None:
            # Unloaded while this result waited for its fsync: a later write failed and cut the log
            # back to what was acknowledged before, which may not include this result's records.
            raise GroupsUnloaded(self.unloaded)
        for reply in result.responses:
            fut = self._waiting.pop(reply.request_key, None)  # type: ignore[call-overload]
            if fut is not None and not fut.done():
                fut.set_result(reply.body)

    async def _durable(self) -> None:
        """Before a read-only answer: what it shows must not be taken back by a crash."""
        log_ = self.state_log
        if self.unloaded is not None:
            raise GroupsUnloaded(self.unloaded)
        if log_ is not None:
            try:
                await log_.sync()
            except Exception as e:
                self._unload(e, log_)
                raise GroupsUnloaded(str(e)) from e
        if self.unloaded is not None:
            raise GroupsUnloaded(self.unloaded)

    def _fire(self, key: TimerKey) -> None:
        self._timers.pop(key, None)
        if self.unloaded is not None:
            return
        try:
            result = self.stats.fire(self._calls, self.service, key, self._now())
        except Exception:
            log.exception("group timer failed", timer=list(key))
            return
        self._apply_in_background(result)

    async def _expire_groups_forever(self) -> None:
        # Kafka's periodic cleanup: every offsets.retention.check.interval.ms, groups Empty for
        # offsets.retention.minutes are deleted (tombstones, persisted like any result).
        while True:
            await asyncio.sleep(self.settings.offsets_retention_check_interval_ms / 1000)
            try:
                self.expire_empty_groups()
            except Exception:
                log.exception("expiring empty groups failed; trying again at the next check")

    def expire_empty_groups(self) -> None:
        if self.unloaded is not None:
            return  # the reloaded groups are checked at the next interval
        before = self._group_count()
        result = self._calls.expire_empty_groups(self._now())
        if result.records:
            expired = before - self._group_count()
            self.counters["groups_expired"] += expired
            log.info("expired empty groups", groups=expired, records=len(result.records))
        self._apply_in_background(result)

    def _on_topics(self, image: TopicImage) -> None:
        if self.unloaded is not None:
            return  # the reload hands the fresh service the watch's current image
        self._apply_in_background(self._calls.on_metadata(image, self._now()))

    def _apply_in_background(self, result: GroupResult) -> None:
        try:
            self._apply(result)
        except GroupsUnloaded:
            return
        if result.responses or result.records:
            self._spawn(self._release_quietly(result))

    async def _release_quietly(self, result: GroupResult) -> None:
        with contextlib.suppress(GroupsUnloaded):
            await self._release(result)

    # --- unloading and re-reading the groups after a failed state log write ----------------------------

    def _unload(self, error: BaseException, failed_log: StateLog | None = None) -> None:
        """Stop serving the managed groups from memory: it holds changes whose records are not durable.

        Like Kafka's coordinator after a failed write to its partition: timers are cancelled, waiting
        requests fail with a retriable error, and the state is re-read from the log (``_reload``)."""
        if failed_log is not None and failed_log is not self.state_log:
            return  # a sync of a log already replaced by a reload: that failure was handled
        if self.unloaded is not None:
            return
        self.unloaded = f"{type(error).__name__}: {error}"
        self.counters["state_log_failures"] += 1
        self.counters["groups_unloaded"] += 1
        waiting = len(self._waiting)
        for h in self._timers.values():
            h.cancel()
        self._timers.clear()
        gone = GroupsUnloaded(self.unloaded)
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(gone)
                fut.exception()  # retrieved here: its caller may already be gone
        self._waiting.clear()
        self._close_state_log()
        if self._reload_task is None or self._reload_task.done():  # else: failed while reloading
            self._reload_task = asyncio.get_running_loop().create_task(self._reload_forever())
            self._tasks.add(self._reload_task)
            self._reload_task.add_done_callback(self._tasks.discard)
        _say(
            log.error,
            "group state log write failed: managed groups unloaded (answered NOT_COORDINATOR) until the log "
            "is re-read",
            error=self.unloaded, waiting_requests=waiting, state_dir=self.settings.state_dir,
        )

    async def _reload_forever(self) -> None:
        delay, longest = self.reload_backoff_s
        attempt = 0
        while True:
            await asyncio.sleep(delay)
            attempt += 1
            try:
                await self._reload()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - stays unloaded and tries again
                # Reading works on a full disk; the probe write or the first append decides.
                self._discard_loaded()
                delay = min(delay * 2, longest)
                _say(log.warning, "group state not reloaded yet", attempt=attempt, error=str(e), retry_in_s=delay)
                continue
            _say(log.info, "managed groups reloaded from the state log", attempt=attempt, groups=self._group_count())
            return

    def _close_state_log(self) -> None:
        log_ = self.state_log
        if isinstance(log_, FileStateLog):
            self._log_totals = (log_.bytes_appended, log_.fsyncs, log_.compactions)
        if log_ is not None:
            log_.close()
            self.state_log = None

    def _discard_loaded(self) -> None:
        for h in self._timers.values():
            h.cancel()
        self._timers.clear()
        self._close_state_log()

    async def _reload(self) -> None:
        """Replay the log into a fresh service, re-arm its timers, and serve it once a write succeeded."""
        self.service = self._new_service()
        self._calls = self.service
        if self.events is not None:
            self.events.rebind(self.service)
            self._calls = self.events.deriver
        self._open_state_log()
        assert isinstance(self.state_log, FileStateLog)
        self.state_log.probe_write()
        # Served again from here: requests arriving meanwhile share the sync below, so none of their
        # answers is released unless that write works.
        self.unloaded = None
        try:
            if self.watch.loaded:
                self._apply(self._calls.on_metadata(self.watch.topics, self._now()))
            self._apply(self._calls.on_loaded(self._now()))
            await self.state_log.sync()
        except GroupsUnloaded:
            raise
        except Exception as e:
            self._unload(e)
            raise
        if self.unloaded is not None:
            raise GroupsUnloaded(self.unloaded)

    def _group_count(self) -> int:
        return len(self.service.classic_groups.groups) + len(self.service.coordinator.state.groups)

    # --- request entry ---------------------------------------------------------------------------------

    def claims(self, frame: bytes, api_key: int, version: int) -> bool:
        """Whether this request is the group layer's (else it passes through to the upstream)."""
        if api_key in (gc.LIST_GROUPS,):
            return True
        if self._match_all and api_key != gc.FIND_COORDINATOR:
            return True
        upstream = self.gw.directory.upstream_api.get(api_key)
        if upstream is not None and version > upstream[1] and api_key in _TRANSLATED_FOR_ANY_GROUP:
            # The gateway advertises its own (Kafka 4.3.1's) versions of the group APIs; an older
            # upstream would refuse a newer one for a group it coordinates: the handler speaks the
            # upstream's version for it.
            return True
        try:
            header, msg = codec.decode_request(api_key, version, frame[4:])
        except Exception:  # noqa: BLE001 - the handler answers it with an error code
            return True
        if codec.null_field(msg, version) is not None:
            return True  # answered INVALID_REQUEST by the handler (the broker would drop the connection)
        return any(self.managed(g) for g in _group_ids(api_key, version, msg))

    async def handle(self, conn: ClientConnection, header: frames.RequestHeader, payload: bytes) -> bytes:
        api_key, version = header.api_key, header.api_version
        try:
            _, msg = codec.decode_request(api_key, version, payload)
        except Exception as e:  # noqa: BLE001 - answered with INVALID_REQUEST, the connection stays
            self.counters["invalid_requests"] += 1
            self.refused(conn, header, f"undecodable:{api_key}", f"v{version} body does not decode: {e}")
            return _error_payload(api_key, version, header.correlation_id, codec.INVALID_REQUEST)
        null = codec.null_field(msg, version)
        if null is not None:
            # A null where the schema allows none (e.g. JoinGroup protocols, an OffsetFetch group id):
            # Kafka cannot parse it either. Answered here, never acted on or sent upstream.
            self.refused(conn, header, f"null-field:{api_key}", f"v{version} {null} is null")
            self.counters["invalid_requests"] += 1
            return refusal_payload(api_key, version, header.correlation_id, msg, codec.INVALID_REQUEST, f"{null} is null")
        try:
            if api_key in ROUTED_ONE:
                # The cluster's groups: nothing of the gateway's state is involved (also while unloaded).
                return await self._route_one(header, payload, msg.group_id, ROUTED_ONE[api_key])
            if self.unloaded is not None and api_key != gc.FIND_COORDINATOR and api_key not in ROUTED_MANY:
                raise GroupsUnloaded(self.unloaded)
            if api_key in _OFFSET_APIS:
                ids = _group_ids(api_key, version, msg)
                if (
                    len(ids) == 1
                    and not self.has_state(ids[0])
                    and (
                        ids[0] in self.foreign
                        or (_names_member(api_key, version, msg) and await self._is_foreign(ids[0]))
                    )
                ):
                    return await self._route_one(header, payload, ids[0], None)
            body = await self._handlers[api_key](conn, header, msg, version)
            return codec.encode_response(api_key, version, header.correlation_id, body)
        except asyncio.CancelledError:
            raise
        except GroupsUnloaded:
            self.counters["unloaded_requests"] += 1
            return _unloaded_payload(api_key, version, header.correlation_id, msg)
        except Exception:
            log.exception("group request failed", api_key=api_key, api_version=version)
            self.counters["failed_requests"] += 1
            return _error_payload(api_key, version, header.correlation_id, UNKNOWN_SERVER_ERROR)

    def _check_loaded(self) -> None:
        if self.unloaded is not None:
            raise GroupsUnloaded(self.unloaded)

    def refused(self, conn: ClientConnection, header: frames.RequestHeader | None, kind: str, reason: str) -> None:
        """A request this layer refuses: logged once per client and kind (gateway/refusals.py)."""
        refusals = getattr(self.gw, "refusals", None)
        if refusals is not None:
            refusals.note(conn.peer, header.client_id if header is not None else None, kind, reason)

    @staticmethod
    def client_host(conn: ClientConnection) -> str:
        peer = conn.peer
        return f"/{peer[0]}" if isinstance(peer, tuple) and peer else ""

    # --- FindCoordinator -------------------------------------------------------------------------------

    def home_node(self) -> int | None:
        """The broker listener named as every managed group's coordinator (the lowest served node id)."""
        served = self.gw.broker_ports
        return min(served) if served else None

    async def _find_coordinator(
        self, conn: ClientConnection, header: frames.RequestHeader, msg: Any, version: int
    ) -> Any:
        key_type, keys = gc.find_coordinator_keys(msg, version)
        answers: list[tuple[str, int, str, int, int, str | None]] = []
        unmanaged = [k for k in keys if key_type != gc.KEY_TYPE_GROUP or not self.managed(k)]
        upstream: dict[str, Any] = {}
        if unmanaged:
            upstream = await self._find_upstream(key_type, unmanaged)
        node = self.home_node()
        addr = self.gw.addr_of(node) if node is not None else None
        for k in keys:
            if k in upstream:
                answers.append(upstream[k])
            elif addr is None or node is None:
                answers.append((k, -1, "", -1, COORDINATOR_NOT_AVAILABLE, "no broker listener is open yet"))
            elif self.unloaded is not None:
                answers.append((k, -1, "", -1, COORDINATOR_NOT_AVAILABLE, "group state is being re-read"))
            else:
                answers.append((k, node, addr[0], addr[1], 0, None))
        return gc.find_coordinator_response(version, answers)

    async def _find_upstream(self, key_type: int, keys: list[str]) -> dict[str, Any]:
        """Upstream coordinators of keys the gateway does not coordinate, rewritten to gateway addresses."""
        out: dict[str, Any] = {}
        version = self.client.version(codec.FIND_COORDINATOR, 3)
        for k in keys:
            try:
                req = codec.REQUESTS[codec.FIND_COORDINATOR][version](key=k, key_type=key_type)
                r = await self.client.send_any(codec.FIND_COORDINATOR, version, req)
                err, node = r.error_code, r.node_id
            except UpstreamError as e:
                log.warning("upstream FindCoordinator failed", key=k, error=str(e))
                err, node = COORDINATOR_NOT_AVAILABLE, -1
            addr = self.gw.addr_of(node) if err == 0 and node >= 0 else None
            if addr is None:
                out[k] = (k, -1, "", -1, err or COORDINATOR_NOT_AVAILABLE, None)
            else:
                out[k] = (k, node, addr[0], addr[1], 0, None)
        return out

    # --- share and streams groups: the cluster's coordinator -------------------------------------------

    def has_state(self, group_id: str) -> bool:
        """Whether the gateway coordinates this group now (it holds its state)."""
        return group_id in self.service.classic_groups.groups or group_id in self.service.coordinator.state.groups

    async def _route_one(
        self, header: frames.RequestHeader, payload: bytes, group_id: str, kind: str | None
    ) -> bytes:
        """One group's request, forwarded as it is to the group's upstream coordinator."""
        api_key, version, corr = header.api_key, header.api_version, header.correlation_id

        def error_of(answer: bytes) -> int:
            return _response_error(api_key, version, answer)

        try:
            # At most once: a heartbeat or commit lost in flight may have been applied; the client retries.
            answer = await self.forward.to_coordinator(
                group_id, api_key, version, bytes(payload), error_of, idempotent=False
            )
        except CoordinatorMoved as e:
            return _error_payload(api_key, version, corr, e.error_code)
        except UpstreamError as e:
            log.warning("upstream coordinator unreachable", group_id=group_id, api_key=api_key, error=str(e))
            return _error_payload(api_key, version, corr, COORDINATOR_NOT_AVAILABLE)
        if kind is not None and error_of(answer) == 0:
            self._note_foreign(group_id, kind)
        self.counters["routed_requests"] += 1
        return corr.to_bytes(4, "big", signed=True) + answer[4:]

    async def _route_many(
        self, conn: ClientConnection, header: frames.RequestHeader, msg: Any, version: int
    ) -> Any:
        """ShareGroupDescribe / StreamsGroupDescribe / DescribeShareGroupOffsets: one request per group to
        its upstream coordinator, the answers merged in the order asked."""
        api_key = header.api_key
        req_cls = codec.REQUESTS[api_key][version]
        resp_cls = codec.RESPONSES[api_key][version]
        if api_key == codec.DESCRIBE_SHARE_GROUP_OFFSETS:
            asked = [(g.group_id, g) for g in msg.groups]
        else:
            asked = [(g, g) for g in msg.group_ids]
        kind = "streams" if api_key == codec.STREAMS_GROUP_DESCRIBE else "share"
        out = []
        for gid, item in asked:
            if api_key == codec.DESCRIBE_SHARE_GROUP_OFFSETS:
                one = req_cls(groups=[item])
            else:
                one = req_cls(group_ids=[gid], include_authorized_operations=msg.include_authorized_operations)
            try:
                r = await self.forward.to_coordinator(gid, api_key, version, one, lambda r: r.groups[0].error_code)
                g = r.groups[0]
            except UpstreamError as e:
                error = e.error_code if isinstance(e, CoordinatorMoved) else COORDINATOR_NOT_AVAILABLE
                g = resp_cls.Groups(group_id=gid, error_code=error, error_message=str(e))
            if g.error_code == 0 and api_key != codec.DESCRIBE_SHARE_GROUP_OFFSETS:
                self._note_foreign(gid, kind)
            out.append(g)
        self.counters["routed_requests"] += 1
        return resp_cls(groups=out)

    def _note_foreign(self, group_id: str, kind: str) -> None:
        self.foreign[group_id] = kind
        self._not_foreign.pop(group_id, None)

    async def _is_foreign(self, group_id: str) -> bool:
        """Whether the cluster holds a share or streams group of this id (which the gateway does not)."""
        if self.has_state(group_id):
            return False
        if group_id in self.foreign:
            return True
        since = self._not_foreign.get(group_id)
        if since is not None and time.monotonic() - since < _NOT_FOREIGN_TTL_S:
            return False
        return await self._cluster_group(group_id) is not None

    async def _join_refused(self, group_id: str) -> bool:
        """Whether Kafka would refuse a consumer or classic member joining ``group_id``: Kafka 4.3.1 keeps a
        share group's id for it, and a streams group's while the streams group has members (an Empty one
        gives way to the joining group)."""
        if self.has_state(group_id):
            return False
        kind = self.foreign.get(group_id)
        if kind == "share":
            return True
        since = self._not_foreign.get(group_id)
        if kind is None and since is not None and time.monotonic() - since < _NOT_FOREIGN_TTL_S:
            return False
        found = await self._cluster_group(group_id)  # a streams group's state now, not as last seen
        if found is None:
            return False
        kind, state = found
        if kind == "streams" and state == "Empty":
            self.foreign.pop(group_id, None)  # the joining group takes the id over, here as in Kafka
            return False
        return True

    async def _cluster_group(self, group_id: str) -> tuple[str, str] | None:
        """(type, state) of the cluster's share or streams group of this id, asked of its coordinator
        (ListGroups v5 filtered on those types); None when it has none."""
        try:
            v = self.forward.version(gc.LIST_GROUPS, 5)
            if v < 5:
                return None  # a cluster without ListGroups v5 has no share or streams groups either
            req = codec.REQUESTS[gc.LIST_GROUPS][v](types_filter=list(FOREIGN_TYPES))
            r = await self.forward.to_coordinator(group_id, gc.LIST_GROUPS, v, req, lambda r: r.error_code)
        except UpstreamError as e:
            log.info("upstream group type lookup failed", group_id=group_id, error=str(e))
            return None
        found = None
        for g in r.groups:
            if g.group_type in FOREIGN_TYPES:
                self.foreign[g.group_id] = g.group_type
                if g.group_id == group_id:
                    found = (str(g.group_type), str(g.group_state))
        if found is None:
            self.foreign.pop(group_id, None)
            if len(self._not_foreign) > 10_000:
                self._not_foreign.clear()
            self._not_foreign[group_id] = time.monotonic()
        return found

    # --- group protocols -------------------------------------------------------------------------------

    async def _classic(self, conn: ClientConnection, header: frames.RequestHeader, msg: Any, version: int) -> Any:
        api_key = header.api_key
        decode, encode = _CLASSIC[api_key]
        if api_key == gc.JOIN_GROUP and await self._join_refused(msg.group_id):
            # Kafka 4.3.1 answers a classic join of a share or streams group's id so.
            return gc.response(
                api_key, version, error_code=INCONSISTENT_GROUP_PROTOCOL, member_id=msg.member_id, generation_id=-1
            )
        request = decode(msg, version, header.client_id or "", self.client_host(conn))
        topics: list[str] = []
        if isinstance(request, JoinGroupRequest):
            # A consumer subscribing by pattern resolves it itself: its subscription names topics.
            topics = subscribed_topics(request.protocol_type, [p.metadata for p in request.protocols])
        body = await self.call(request.group_id, request, topics)
        self.adoption.after_classic(request, body)
        return encode(body, version)

    async def _consumer_group_heartbeat(
        self, conn: ClientConnection, header: frames.RequestHeader, msg: Any, version: int
    ) -> Any:
        if msg.member_epoch == 0 and await self._join_refused(msg.group_id):
            # Kafka: "Group ... is not a consumer group." when the id is a share or streams group's.
            return gc.response(
                gc.CONSUMER_GROUP_HEARTBEAT,
                version,
                error_code=GROUP_ID_NOT_FOUND,
                error_message=f"Group {msg.group_id} is not a consumer group.",
                member_epoch=-1,
            )
        request = gc.consumer_group_heartbeat_request(msg, version, header.client_id or "", self.client_host(conn))
        topics = request.subscribed_topic_names or ()
        regex = bool(request.subscribed_topic_regex)
        body = self.adoption.after_consumer(request, await self.call(request.group_id, request, topics, regex))
        return gc.consumer_group_heartbeat_response(body, version)

    async def _consumer_group_describe(
        self, conn: ClientConnection, header: frames.RequestHeader, msg: Any, version: int
    ) -> Any:
        ids = list(msg.group_ids)
        await self._ready.wait()
        # Managed ids the gateway holds no state for are asked of the cluster too (offsets-only groups);
        # the gateway's own answer stands when the cluster cannot be asked.
        local = [g for g in ids if self.managed(g)]
        found: dict[str, Any] = {}
        if local:
            await self._ready.wait()
            self._check_loaded()
            body = self.service.handle(gc.consumer_group_describe_request(msg, version), 0, self._now())
            await self._durable()
            reply: ConsumerGroupDescribeResponse = body.responses[0].body
            for g in reply.groups:
                found[g.group_id] = gc.described_group(g)
        for g in ids:
            if g not in found or (self.managed(g) and not self.has_state(g)):
                up = await self._forward_describe(gc.CONSUMER_GROUP_DESCRIBE, g, version)
                if g not in found or up.error_code == 0:
                    found[g] = up
                if self.managed(g):
                    _consumer_as_offsets_only(found[g])
        return gc.response(gc.CONSUMER_GROUP_DESCRIBE, version, groups=[found[g] for g in ids])

    async def _describe_groups(
        self, conn: ClientConnection, header: frames.RequestHeader, msg: Any, version: int
    ) -> Any:
        ids = list(msg.groups)
        found: dict[str, Any] = {}
        await self._ready.wait()
        # A managed id the gateway holds no state for may still be a group of the cluster (offsets-only,
        # share, streams): the cluster describes it, as it would without the gateway; the gateway's own
        # answer (Dead) stands when the cluster cannot be asked.
        local = [g for g in ids if self.managed(g)]
        if local:
            await self._ready.wait()
            request = gc.describe_groups_request(msg, version)
            request.group_ids = local
            self._check_loaded()
            result = self.service.handle(request, 0, self._now())
            await self._durable()
            reply: DescribeGroupsResponse = result.responses[0].body
            for g in reply.groups:
                found[g.group_id] = gc.described_classic_group(g)
        for g in ids:
            if g not in found or (self.managed(g) and not self.has_state(g)):
                up = await self._forward_describe(gc.DESCRIBE_GROUPS, g, version)
                # The cluster's own answer, errors included (v6: "Group ... is not a classic group." for a
                # share or streams group); the gateway's when the cluster could not be asked.
                if g not in found or up.error_code != COORDINATOR_NOT_AVAILABLE:
                    found[g] = up
                if self.managed(g):
                    _classic_as_offsets_only(found[g])
        return gc.response(gc.DESCRIBE_GROUPS, version, groups=[found[g] for g in ids])

    async def _forward_describe(self, api_key: int, group_id: str, version: int) -> Any:
        """One unmanaged group of a mixed describe batch, asked of its upstream coordinator."""
        try:
            if not self.forward.supports(api_key):
                raise UpstreamError("the upstream does not speak this api")
            v = self.forward.version(api_key, version)
            cls = codec.REQUESTS[api_key][v]
            req = cls(group_ids=[group_id]) if api_key == gc.CONSUMER_GROUP_DESCRIBE else cls(groups=[group_id])
            r = await self.forward.to_coordinator(group_id, api_key, v, req, lambda r: r.groups[0].error_code)
            return r.groups[0]
        except UpstreamError as e:
            if api_key == gc.CONSUMER_GROUP_DESCRIBE:
                g = DescribedGroupStub(group_id, GROUP_ID_NOT_FOUND, str(e))
                return gc.response_cls(api_key).DescribedGroup(
                    group_id=g.group_id, error_code=g.error_code, error_message=g.message
                )
            return gc.described_classic_group(DescribedClassicGroup(group_id, COORDINATOR_NOT_AVAILABLE, str(e)))

    async def _list_groups(self, conn: ClientConnection, header: frames.RequestHeader, msg: Any, version: int) -> Any:
        """The gateway's own groups merged with the cluster's: every group the cluster holds and the gateway
        does not (offsets-only groups, share and streams groups, unmanaged groups) is listed as the cluster
        lists it, so nothing that has offsets or members disappears from tools and lag exporters."""
        request = gc.list_groups_request(msg, version)
        listed: list[Any] = []
        await self._ready.wait()
        # Admin clients ask every broker and concatenate: list the gateway's groups on one listener only.
        if conn.node_id is None or conn.node_id == self.home_node():
            self._check_loaded()
            result = self.service.handle(request, 0, self._now())
            await self._durable()
            reply: ListGroupsResponse = result.responses[0].body
            listed.extend(gc.listed_group(g) for g in reply.groups if self.managed(g.group_id))
        error = 0
        try:
            v = self.forward.version(gc.LIST_GROUPS, version)
            up = await self.forward.send_any(gc.LIST_GROUPS, v, msg, node_id=conn.node_id)
            error = up.error_code
            for g in up.groups:
                if self.managed(g.group_id) and self.has_state(g.group_id):
                    continue  # the gateway's view of it is listed above; the cluster only holds its offsets
                if version >= 5 and g.group_type in FOREIGN_TYPES:
                    self._note_foreign(g.group_id, g.group_type)
                if self.managed(g.group_id):
                    _listed_as_offsets_only(g, version)
                listed.append(g)
        except UpstreamError as e:
            log.warning("upstream ListGroups failed; listing the gateway's groups only", error=str(e))
        return gc.response(gc.LIST_GROUPS, version, error_code=error, groups=listed)

    async def _delete_groups(
        self, conn: ClientConnection, header: frames.RequestHeader, msg: Any, version: int
    ) -> Any:
        request = gc.delete_groups_request(msg, version)
        results: dict[str, int] = {}
        for gid in request.group_ids:
            if not self.managed(gid):
                results[gid] = await self.offsets.delete_upstream_group(gid)
                continue
            request_one = gc.delete_groups_request(msg, version)
            request_one.group_ids = [gid]
            reply: DeleteGroupsResponse = await self.call(gid, request_one)
            local = int(reply.results[0].error_code)
            if local in (0, GROUP_ID_NOT_FOUND):
                # The group's offsets live upstream: deleting the group deletes them there too.
                upstream = await self.offsets.delete_upstream_group(gid)
                results[gid] = upstream if local == GROUP_ID_NOT_FOUND or upstream != GROUP_ID_NOT_FOUND else 0
            else:
                results[gid] = local
        return gc.delete_groups_response(
            DeleteGroupsResponse([DeletableGroupResult(g, results[g]) for g in request.group_ids]), version
        )

    # --- clients bypassing the gateway -----------------------------------------------------------------

    def managed_group_ids(self) -> list[str]:
        ids = set(self.service.classic_groups.groups) | set(self.service.coordinator.state.groups)
        return sorted(g for g in ids if self.managed(g))

    def bypass_suspected(self, group_id: str, reason: str) -> None:
        """An upstream answer implies the group has members on the upstream coordinator: check now."""
        self.counters["bypass_suspected"] += 1
        self._spawn(self.check_upstream_members(group_id, reason))

    async def check_upstream_members(self, group_id: str, reason: str = "periodic check") -> bool:
        """Warn (loudly) when the upstream coordinator has live members in a group the gateway manages."""
        members = 0
        try:
            v = self.client.version(gc.DESCRIBE_GROUPS, 5)
            req = codec.REQUESTS[gc.DESCRIBE_GROUPS][v](groups=[group_id])
            r = await self.client.to_coordinator(group_id, gc.DESCRIBE_GROUPS, v, req, lambda r: r.groups[0].error_code)
            if r.groups[0].error_code == 0:
                members += len(r.groups[0].members)
            if self.client.supports(gc.CONSUMER_GROUP_DESCRIBE):
                v = self.client.version(gc.CONSUMER_GROUP_DESCRIBE, 1)
                req = codec.REQUESTS[gc.CONSUMER_GROUP_DESCRIBE][v](group_ids=[group_id])
                r = await self.client.to_coordinator(
                    group_id, gc.CONSUMER_GROUP_DESCRIBE, v, req, lambda r: r.groups[0].error_code
                )
                if r.groups[0].error_code == 0:
                    members += len(r.groups[0].members)
        except UpstreamError as e:
            log.info("upstream group check failed", group_id=group_id, error=str(e))
            return False
        if members:
            self.counters["bypass_detected"] += 1
            log.warning(
                "managed group has live members on the upstream coordinator: clients bypass the gateway",
                group_id=group_id,
                upstream_members=members,
                reason=reason,
                counters=dict(self.counters),
            )
            return True
        return False

    async def _check_upstream_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.upstream_check_s)
            for gid in self.managed_group_ids():
                await self.check_upstream_members(gid)
            if self.counters:
                log.info("group coordinator counters", **dict(self.counters))


# A managed id the gateway holds no state for, as the cluster holds it: its offsets, and perhaps members
# that clients left on the cluster's coordinator before the gateway took the id over (adoption removes
# them; they are not the group's members any more). Kafka shows a group whose consumers have all left as
# Empty with protocol type "consumer": so does the gateway, also where only its own simple commits made
# the group upstream (no protocol type). Share and streams groups are shown as the cluster shows them.


def _classic_as_offsets_only(g: Any) -> None:
    """A DescribeGroups entry (a non-classic or unknown group is Dead at v0-5, an error at v6)."""
    if g.error_code != 0 or g.group_state == "Dead":
        return
    g.group_state = "Empty"
    g.protocol_type = g.protocol_type or "consumer"
    g.protocol_data = ""
    g.members = []


def _consumer_as_offsets_only(g: Any) -> None:
    """A ConsumerGroupDescribe entry."""
    if g.error_code == 0 and g.members:
        g.group_state = "Empty"
        g.members = []


def _listed_as_offsets_only(g: Any, version: int) -> None:
    """A ListGroups entry (state from v4, type from v5)."""
    if version >= 5 and g.group_type not in ("classic", "consumer"):
        return
    if version >= 4 and g.group_state != "Dead":
        g.group_state = "Empty"
    g.protocol_type = g.protocol_type or "consumer"


class DescribedGroupStub:
    __slots__ = ("error_code", "group_id", "message")

    def __init__(self, group_id: str, error_code: int, message: str) -> None:
        self.group_id, self.error_code, self.message = group_id, error_code, message


class _LocalHandler:
    """The connection's LocalHandler for one api key, with ``claims`` deciding local vs passthrough."""

    __slots__ = ("api_key", "layer")

    def __init__(self, layer: GroupLayer, api_key: int) -> None:
        self.layer = layer
        self.api_key = api_key

    def claims(self, frame: bytes, api_key: int, version: int) -> bool:
        return self.layer.claims(frame, api_key, version)

    def __call__(self, conn: ClientConnection, header: frames.RequestHeader, payload: bytes) -> Awaitable[bytes]:
        return self.layer.handle(conn, header, payload)


_CLASSIC: dict[int, tuple[Callable[..., Any], Callable[[Any, int], Any]]] = {
    gc.JOIN_GROUP: (gc.join_group_request, gc.join_group_response),
    gc.SYNC_GROUP: (gc.sync_group_request, gc.sync_group_response),
    gc.HEARTBEAT: (gc.heartbeat_request, gc.heartbeat_response),
    gc.LEAVE_GROUP: (gc.leave_group_request, gc.leave_group_response),
}


# Handlers that serve groups the gateway does not manage too, by forwarding them at a version the
# upstream speaks (topic ids turned into names where the upstream's version has only names).
_TRANSLATED_FOR_ANY_GROUP = frozenset(
    {
        gc.FIND_COORDINATOR, gc.DESCRIBE_GROUPS, gc.DELETE_GROUPS, gc.CONSUMER_GROUP_DESCRIBE, gc.OFFSET_FETCH,
        gc.OFFSET_COMMIT, gc.TXN_OFFSET_COMMIT,
    }
)  # fmt: skip


def _group_ids(api_key: int, version: int, msg: Any) -> list[str]:
    """The group ids a request names (FindCoordinator: its GROUP keys only)."""
    if api_key == gc.FIND_COORDINATOR:
        key_type, keys = gc.find_coordinator_keys(msg, version)
        return keys if key_type == gc.KEY_TYPE_GROUP else []
    if api_key == gc.DESCRIBE_GROUPS:
        return list(msg.groups)
    if api_key == gc.DELETE_GROUPS:
        return list(msg.groups_names)
    if api_key in (gc.CONSUMER_GROUP_DESCRIBE, codec.SHARE_GROUP_DESCRIBE, codec.STREAMS_GROUP_DESCRIBE):
        return list(msg.group_ids)
    if api_key == codec.DESCRIBE_SHARE_GROUP_OFFSETS:
        return [g.group_id for g in msg.groups]
    if api_key == gc.OFFSET_FETCH and version >= 8:
        return [g.group_id for g in msg.groups]
    return [msg.group_id]


def _names_member(api_key: int, version: int, msg: Any) -> bool:
    """Whether an offset request comes from a group member (not a simple commit or an admin read): only
    then may the group be a streams group the gateway has not seen yet."""
    if api_key == gc.OFFSET_FETCH:
        return version >= 9 and bool(msg.groups) and bool(msg.groups[0].member_id)
    if api_key in (gc.OFFSET_COMMIT, gc.TXN_OFFSET_COMMIT):
        return bool(getattr(msg, "member_id", ""))
    return False


def _response_error(api_key: int, version: int, payload: bytes) -> int:
    """The error code that tells whether a forwarded request reached the group's coordinator."""
    try:
        _, r = codec.decode_response(api_key, version, payload)
    except Exception:  # noqa: BLE001 - an answer the gateway cannot read is the client's to judge
        return 0
    if getattr(r, "error_code", 0):
        return int(r.error_code)
    if api_key == gc.OFFSET_FETCH and version >= 8 and r.groups:
        return int(r.groups[0].error_code)
    if api_key in (gc.OFFSET_COMMIT, gc.TXN_OFFSET_COMMIT):
        for t in r.topics:
            for p in t.partitions:
                return int(p.error_code)
    return 0


def refusal_payload(api_key: int, version: int, correlation_id: int, msg: Any, error: int, message: str) -> bytes:
    """``error`` for the whole request: top-level, or on every group / partition it names."""
    payload = codec.error_response(api_key, version, correlation_id, error)
    if payload is not None:
        return payload
    body = gc.refusal(api_key, version, msg, error, message)
    if body is None:
        return _error_payload(api_key, version, correlation_id, error)
    return codec.encode_response(api_key, version, correlation_id, body)


def _say(emit: Callable[..., Any], event: str, **fields: Any) -> None:
    """Log on the unload/reload path, where the log's own file may sit on the full disk."""
    with contextlib.suppress(OSError):
        emit(event, **fields)


def _unloaded_payload(api_key: int, version: int, correlation_id: int, msg: Any) -> bytes:
    """NOT_COORDINATOR where the response carries it: top level, per group or per partition.

    ListGroups, which every broker answers for its own groups, says COORDINATOR_NOT_AVAILABLE, which
    admin clients retry (NOT_COORDINATOR there would fail the listing)."""
    error = COORDINATOR_NOT_AVAILABLE if api_key == gc.LIST_GROUPS else NOT_COORDINATOR
    return refusal_payload(api_key, version, correlation_id, msg, error, "group state is being re-read")


def _error_payload(api_key: int, version: int, correlation_id: int, error: int) -> bytes:
    """A response saying ``error``: top-level when the API has the field, else an empty response."""
    payload = codec.error_response(api_key, version, correlation_id, error)
    if payload is not None:
        return payload
    return codec.encode_response(api_key, version, correlation_id, codec.RESPONSES[api_key][version]())
