"""The cluster state store: group state in a compacted topic of the upstream cluster (``__groupgate_groups``).

One partition per shard. Each shard is written by one transactional producer whose transactional id is
``<prefix><shard>``: initialising it (InitProducerId) bumps the id's producer epoch, which fences every
older producer of that shard (the zombie fencing Kafka Streams relies on) and makes the transaction
coordinator abort whatever an older owner left open. Only then is the partition read, from the beginning
up to its last stable offset with ``isolation.level=read_committed``, so the replay holds every record any
older owner ever committed and nothing it did not.

Writes are acknowledged by all in-sync replicas (``acks=all``, idempotent, ``min.insync.replicas`` on the
topic). ``append()`` queues records; ``sync()`` returns once they are committed. Appends of one shard are
batched as Kafka's coordinator batches its writes: one transaction carries everything appended so far, and
whatever is appended while it is in flight goes into the next one, so concurrent ``sync()`` calls share
transactions without anyone waiting on purpose (``append_linger_ms``, Kafka's
``group.coordinator.append.linger.ms``, adds a wait before each transaction; 0 by default).

Back-to-back transactions: the transaction coordinator answers the next transaction's AddPartitionsToTxn
with CONCURRENT_TRANSACTIONS until the markers of the previous one are written, a millisecond or two on a
healthy cluster. aiokafka retries that after a fixed 20 ms, which made every group change behind another
one wait 20 ms; the store shortens that one backoff (``CONCURRENT_TRANSACTIONS_BACKOFF_S``).

The next transaction is opened before it is needed: once a transaction commits, the shard's producer
begins the next one and adds the shard's partition to it (AddPartitionsToTxn) at once, so that a group
change arriving later costs two round trips (Produce, EndTxn) instead of three, and does not wait for the
markers of the transaction before it (the CONCURRENT_TRANSACTIONS retries above happen while nobody
waits). A transaction that stays open with nothing in it is committed empty after
``preopen_idle_s`` (at most a third of ``transaction_timeout_ms``, after which the transaction coordinator
would abort it and fence the producer), and none is opened again until the next write. An open
transaction with no record holds nothing back: a partition's last stable offset moves only for
transactions that wrote to it. Closing a shard aborts an open transaction it left, so that the next
owner's InitProducerId does not wait for the coordinator to abort it (``preopen_transactions=False``
restores one transaction begun per write).

Compaction: every record is produced with the state record's own key (the __consumer_offsets key
formats: one key per group metadata record, per member, per assignment, ...), and a tombstone (value
None) is produced with a null value. Replay applies records in order and the latest value of a key
replaces every earlier one (a tombstone removes it), so keeping only the latest record per key, and
eventually dropping tombstones, which is exactly what log compaction does, leaves replay's result
unchanged. Compaction never crosses the last stable offset, so an open transaction is never compacted.

The store's clients run on an event loop of their own, on a thread of its own (a ``LoopThread``,
gateway/loop_thread.py): a transaction is three round trips and many steps of the client's tasks, and on
the gateway's loop each step waited for a turn of that loop, behind every connection that had a request
ready. With ten thousand members keeping the loop busy, a transaction took seconds and, at last, longer
than ``write_timeout_ms``. On its own loop a step waits at most for the interpreter's thread switch (5 ms)
while the gateway's thread is busy. The shard log's bookkeeping (what is appended, what waits for which
transaction) stays on the gateway's loop; only the client calls cross, and a transaction's end comes
back as one callback (``KafkaShardLog._written``).

Client library: aiokafka (asyncio-native; transactional producer with fencing, read_committed consumer,
admin client). Its idempotent producer retries retriable errors (leader changes, NOT_ENOUGH_REPLICAS,
timeouts) without end; the store bounds a transaction by ``write_timeout_ms`` and then reports
``StateLogWriteFailed``: the outcome of that transaction is unknown, so the shard must be re-opened
(which fences this producer and re-reads what is durable).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ssl
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.producer import sender as _aiokafka_sender

from gateway.config.coordinator import DEFAULT_STATE_TOPIC, DEFAULT_STATE_TRANSACTIONAL_ID_PREFIX
from gateway.logging import get_logger
from gateway.loop_thread import LoopThread
from gateway.security import credentials
from gateway.security.oauth import AiokafkaTokenProvider, TokenSource
from gateway.security.rights import MissingRight, principal_of
from gateway.security.sasl import Credentials
from gateway.state.log import Record, StateLogWriteFailed
from gateway.state.store import DEFAULT_SHARDS, ShardFenced
from gateway.state.topic_admin import (  # noqa: F401  (re-exported: the store's errors and defaults)
    StateTopicAdmin,
    StateTopicError,
    StateTopicMismatch,
    TopicCheck,
    default_min_insync_replicas,
    default_replication_factor,
)

if TYPE_CHECKING:
    from gateway.config.coordinator import CoordinatorSettings
    from gateway.config.settings import GatewayConfig

log = get_logger("gateway.state.topic")

DEFAULT_TOPIC = DEFAULT_STATE_TOPIC
DEFAULT_TRANSACTIONAL_ID_PREFIX = DEFAULT_STATE_TRANSACTIONAL_ID_PREFIX
# Kafka's group.coordinator.append.linger.ms: a wait before each transaction. Concurrent requests of one
# shard share a transaction anyway (what they append while one is in flight goes into the next), so the
# default adds no wait: a group change on an idle shard is not held back for others that may never come.
DEFAULT_APPEND_LINGER_MS = 0
# aiokafka waits a fixed 20 ms (its BACKOFF_OVERRIDE) before retrying an AddPartitionsToTxn answered
# CONCURRENT_TRANSACTIONS, the answer to a transaction that begins before the markers of the one before it
# are written (about a millisecond on a healthy cluster). Every transaction right behind another paid it.
# The state store is the process's only transactional client, so the module-wide value is its own; the
# other retries of the client keep their backoff. aiokafka is pinned in pyproject.toml and a unit test
# checks that the constant is still there.
CONCURRENT_TRANSACTIONS_BACKOFF_S = 0.001
_aiokafka_sender.BACKOFF_OVERRIDE = CONCURRENT_TRANSACTIONS_BACKOFF_S
# How long one transaction (begin, produce, commit, with the client's retries) may take before the
# shard gives up on it.
DEFAULT_WRITE_TIMEOUT_MS = 30_000
# How long a transaction opened ahead of the next write may stay open with nothing in it before it is
# committed empty (bounded by a third of the transaction timeout).
DEFAULT_PREOPEN_IDLE_S = 10.0
# How long a shard's producer may take to deliver what is queued when the shard is closed or failed.
STOP_GRACE_S = 2.0
# How long opening a shard (fencing and reading the partition to its end) may take.
DEFAULT_LOAD_TIMEOUT_MS = 60_000


def _is_fenced(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what it wraps) says a newer producer of our transactional id took over."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, (kafka_errors.ProducerFenced, kafka_errors.InvalidProducerEpoch)):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


class KafkaShardLog:
    """One shard's log: a partition of the state topic written by the shard's transactional producer."""

    def __init__(self, store: KafkaStateStore, shard: int, producer: AIOKafkaProducer, records: list[Record]) -> None:
        self.shard = shard
        self._store = store
        self._producer = producer
        self._tp = TopicPartition(store.topic, shard)
        self._records = records
        self._pending: list[Record] = []
        self._appended = 0  # records appended since open
        self._committed = 0  # records of those committed
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        # The transaction under way on the store's loop, and the start of the next one when scheduled.
        self._inflight: concurrent.futures.Future[None] | None = None
        self._starting: asyncio.Handle | None = None
        self._idle: asyncio.TimerHandle | None = None  # ends a transaction opened ahead that stayed empty
        self._home: asyncio.AbstractEventLoop | None = None  # the loop sync() is called on
        # A transaction opened ahead of the next write (its partition added): read and set on the store's
        # loop only, by one ``_write`` at a time.
        self._open = False
        self._failed: StateLogWriteFailed | None = None
        self._closed = False
        # Transactions committed by this log (group commit: fewer than sync() calls under load).
        self.transactions = 0

    def replay(self) -> Iterator[Record]:
        return iter(self._records)

    def append(self, records: Iterable[Record]) -> None:
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise StateLogWriteFailed(f"shard {self.shard} of {self._store.topic} is closed")
        batch = list(records)
        self._pending.extend(batch)
        self._appended += len(batch)

    def unsynced(self) -> bool:
        return self._failed is not None or self._committed < self._appended

    async def sync(self) -> None:
        if self._failed is not None:
            raise self._failed
        target = self._appended
        if self._committed >= target:
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.append((target, fut))
        if self._inflight is None and self._starting is None:
            self._home = loop
            self._next(soon=True)
        await fut

    # A transaction's steps run on the store's loop. On this (the gateway's) loop a sync of a quiet shard
    # costs three turns: the next one begins the transaction (so that whatever else is appended in the
    # caller's turn shares it), one hears that it ended (and begins the next with what was appended
    # meanwhile), one resumes the waiters. No task here drives it, whose every resumption would wait for
    # a turn of a busy loop.

    def _next(self, soon: bool = False) -> None:
        """Begin the next transaction with everything appended so far: after the linger if one is set, else
        at the next turn (``soon``) or now."""
        if not self._pending or self._failed is not None or self._home is None:
            return
        if self._store.append_linger_ms > 0:
            self._starting = self._home.call_later(self._store.append_linger_ms / 1000, self._begin)
        elif soon:
            self._starting = self._home.call_soon(self._begin)
        else:
            self._begin()

    def _begin(self, idle: bool = False) -> None:
        """Start the next transaction with what is pending; ``idle``: with nothing pending, end the
        transaction opened ahead instead (an empty commit)."""
        self._starting = None
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if (not self._pending and not idle) or self._failed is not None or self._home is None:
            return
        batch, self._pending = self._pending, []
        end = self._committed + len(batch)
        home = self._home
        cf = self._store.clients.start(self._write(batch))
        self._inflight = cf

        def ended(f: concurrent.futures.Future[None]) -> None:  # on the store's thread, or here if cancelled
            with contextlib.suppress(RuntimeError):  # the gateway's loop is closed: nobody is waiting
                home.call_soon_threadsafe(self._written, f, end)

        cf.add_done_callback(ended)

    def _written(self, cf: concurrent.futures.Future[None], end: int) -> None:
        """A transaction ended (on the gateway's loop): wake whom it commits for, begin the next one."""
        if cf is not self._inflight:
            return  # the log was closed meanwhile: its waiters were told
        self._inflight = None
        if cf.cancelled():
            self._fail(StateLogWriteFailed(f"shard {self.shard} of {self._store.topic} was closed mid-write"))
            return
        exc = cf.exception()
        if exc is None:
            wrote = end > self._committed  # not the empty commit of a transaction opened ahead
            if wrote:
                self._committed = end
                self.transactions += 1
                self._store.transactions += 1
            self._wake()
            self._next()
            if wrote and self._inflight is None and self._starting is None and self._store.preopen_transactions:
                # The next transaction was opened ahead: end it if nothing comes to fill it.
                self._idle = self._home.call_later(self._store.preopen_idle_s, self._end_idle)  # type: ignore[union-attr]
        elif isinstance(exc, StateLogWriteFailed):
            self._fail(exc)
        else:  # any other failure ends the shard's writes the same way
            self._fail(StateLogWriteFailed(f"shard {self.shard}: unexpected failure: {exc!r}"))

    def _end_idle(self) -> None:
        """The transaction opened ahead stayed empty for ``preopen_idle_s``: commit it empty now, before
        the transaction coordinator's timeout aborts it (which would fence the producer)."""
        self._idle = None
        if self._inflight is None and self._starting is None and not self._pending and not self._closed:
            self._begin(idle=True)

    async def _write(self, batch: list[Record]) -> None:
        """One transaction: begin (unless one was opened ahead), produce every record to the shard's
        partition keyed by its key, commit; then open the next one ahead. An empty batch commits the
        transaction opened ahead and opens none. Runs on the store's client loop."""
        if not batch and not self._open:
            return
        timeout_s = self._store.write_timeout_ms / 1000
        started = time.monotonic()
        futures: list[asyncio.Future[Any]] = []
        try:
            async with asyncio.timeout(timeout_s):
                if self._open:
                    self._open = False
                    _raise_if_aborted(self._producer)
                else:
                    await self._producer.begin_transaction()
                for r in batch:
                    f = await self._producer.send(self._tp.topic, value=r.value, key=r.key, partition=self.shard)
                    # A failed transaction fails its records too; the transaction's error is the one reported.
                    f.add_done_callback(_retrieve)
                    futures.append(f)
                await self._producer.commit_transaction()
                # Commit waits for delivery; a record that failed would have failed the commit too.
                for f in futures:
                    f.result()
        except TimeoutError:
            raise StateLogWriteFailed(
                f"shard {self.shard} of {self._store.topic}: a transaction of {len(batch)} records was not "
                f"committed within {timeout_s:g}s; its outcome is unknown until the shard is re-opened"
            ) from None
        except Exception as exc:
            if _is_fenced(exc):
                raise ShardFenced(
                    f"shard {self.shard} of {self._store.topic}: producer {self._store.transactional_id(self.shard)!r} "
                    "was fenced by a newer owner"
                ) from exc
            raise StateLogWriteFailed(f"shard {self.shard} of {self._store.topic}: write failed: {exc!r}") from exc
        if not batch:
            return
        self._store.write_latency_ms.append((time.monotonic() - started) * 1000)
        if self._store.preopen_transactions:
            try:
                await self._producer.begin_transaction()
                _add_partition(self._producer, self._tp)
                self._open = True
            except Exception as exc:  # noqa: BLE001 - the next write begins its own and meets it
                log.info("opening the next transaction ahead failed", shard=self.shard, error=repr(exc))

    def _wake(self) -> None:
        keep = []
        for target, fut in self._waiters:
            if target <= self._committed:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((target, fut))
        self._waiters = keep

    def _fail(self, exc: StateLogWriteFailed) -> None:
        first = self._failed is None
        if first:
            self._failed = exc
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(self._failed)  # type: ignore[arg-type]
        self._waiters.clear()
        self._pending.clear()
        self._store._release(self)
        if first:
            log.warning("state topic shard stops taking writes", shard=self.shard, error=str(exc))

    def close(self) -> None:
        """Stop writing: records not yet synced are dropped (they were never acknowledged)."""
        if self._closed:
            return
        self._closed = True
        if self._starting is not None:
            self._starting.cancel()
            self._starting = None
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if self._inflight is not None:
            # Cancelled on the store's loop; its end is not waited for (closing drops what is unsynced).
            inflight, self._inflight = self._inflight, None
            inflight.cancel()
        if self._failed is None:
            self._failed = StateLogWriteFailed(f"shard {self.shard} of {self._store.topic} is closed")
        for _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(self._failed)
        self._waiters.clear()
        self._store._release(self)

    async def aclose(self) -> None:
        """close(), and wait for the producer to be stopped."""
        self.close()
        await self._store._drain_closing()


class KafkaStateStore:
    """The shards of group state as the partitions of one compacted topic (see the module docstring)."""

    def __init__(
        self,
        bootstrap: str,
        *,
        shards: int = DEFAULT_SHARDS,
        topic: str = DEFAULT_TOPIC,
        replication_factor: int | None = None,
        min_insync_replicas: int | None = None,
        transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX,
        append_linger_ms: float = DEFAULT_APPEND_LINGER_MS,
        write_timeout_ms: int = DEFAULT_WRITE_TIMEOUT_MS,
        load_timeout_ms: int = DEFAULT_LOAD_TIMEOUT_MS,
        request_timeout_ms: int = 30_000,
        transaction_timeout_ms: int = 60_000,
        preopen_transactions: bool = True,
        preopen_idle_s: float = DEFAULT_PREOPEN_IDLE_S,
        ssl_context: ssl.SSLContext | None = None,
        sasl: Credentials | None = None,
        client_id: str = "groupgate-state",
    ) -> None:
        if shards < 1:
            raise ValueError("shards must be at least 1")
        self.bootstrap = bootstrap
        self.shards = shards
        self.topic = topic
        self.replication_factor = replication_factor
        self.min_insync_replicas = min_insync_replicas
        self.transactional_id_prefix = transactional_id_prefix
        self.append_linger_ms = append_linger_ms
        self.write_timeout_ms = write_timeout_ms
        self.load_timeout_ms = load_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.transaction_timeout_ms = transaction_timeout_ms
        # Open each shard's next transaction ahead of its write (see the module docstring).
        self.preopen_transactions = preopen_transactions
        self.preopen_idle_s = min(preopen_idle_s, transaction_timeout_ms / 1000 / 3)
        self.ssl_context = ssl_context
        self.sasl = sasl  # (mechanism, username, password) of the gateway's own principal
        self.client_id = client_id
        # Transactions committed by all shards (group commit makes this lower than the sync() calls).
        self.transactions = 0
        # Duration of the latest committed transactions (begin to commit), for operators and benchmarks.
        self.write_latency_ms: deque[float] = deque(maxlen=1024)
        self.topic_check: TopicCheck | None = None
        self._logs: dict[int, KafkaShardLog] = {}
        self._closing: set[asyncio.Task[None]] = set()
        # The shards' producers and the loads' consumers run here (see the module docstring).
        self.clients = LoopThread(f"{client_id}-clients")

    @classmethod
    def from_settings(
        cls,
        settings: CoordinatorSettings,
        bootstrap: str,
        *,
        shards: int = DEFAULT_SHARDS,
        ssl_context: ssl.SSLContext | None = None,
        sasl: Credentials | None = None,
    ) -> KafkaStateStore:
        """The store the ``state_topic*`` settings describe, on the cluster at ``bootstrap``."""
        return cls(
            bootstrap,
            shards=shards,
            topic=settings.state_topic,
            replication_factor=settings.state_topic_replication_factor,
            min_insync_replicas=settings.state_topic_min_insync_replicas,
            transactional_id_prefix=settings.state_transactional_id_prefix,
            append_linger_ms=settings.state_append_linger_ms,
            write_timeout_ms=settings.state_write_timeout_ms,
            preopen_transactions=settings.state_preopen_transactions,
            ssl_context=ssl_context,
            sasl=sasl,
        )

    @classmethod
    def from_config(cls, config: GatewayConfig, *, shards: int = DEFAULT_SHARDS) -> KafkaStateStore:
        """The store of a gateway configuration: its upstream cluster (and upstream TLS), its settings."""
        from gateway.security.tls import upstream_context

        return cls.from_settings(
            config.coordinator, config.upstream, shards=shards, ssl_context=upstream_context(config),
            sasl=credentials.upstream_sasl(config),
        )

    def transactional_id(self, shard: int) -> str:
        return f"{self.transactional_id_prefix}{shard}"

    def _client_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"bootstrap_servers": self.bootstrap, "request_timeout_ms": self.request_timeout_ms}
        if self.ssl_context is not None:
            kw.update(security_protocol="SSL", ssl_context=self.ssl_context)
        if self.sasl is not None:
            # The same principal and mechanism as the gateway's other upstream connections.
            protocol = "SASL_SSL" if self.ssl_context is not None else "SASL_PLAINTEXT"
            if isinstance(self.sasl, TokenSource):
                # The gateway's own OAUTHBEARER tokens, shared with its other connections.
                kw.update(security_protocol=protocol, sasl_mechanism="OAUTHBEARER",
                          sasl_oauth_token_provider=AiokafkaTokenProvider(self.sasl))
            else:
                mechanism, username, password = self.sasl
                kw.update(
                    security_protocol=protocol,
                    sasl_mechanism=mechanism, sasl_plain_username=username, sasl_plain_password=password,
                )
        return kw

    # --- the topic ----------------------------------------------------------------------------------

    async def open(self) -> None:
        admin = AIOKafkaAdminClient(client_id=f"{self.client_id}-admin", **self._client_kwargs())
        await admin.start()
        try:
            self.topic_check = await self._topic_admin(admin).ensure(
                self.shards, self.replication_factor, self.min_insync_replicas
            )
        finally:
            await admin.close()
        for w in self.topic_check.warnings:
            log.warning("state topic", topic=self.topic, warning=w)

    def _topic_admin(self, admin: AIOKafkaAdminClient) -> StateTopicAdmin:
        return StateTopicAdmin(admin, self.topic, self.load_timeout_ms, principal_of(self.sasl))

    async def partitions(self) -> int | None:
        """The state topic's partition count as it is now (None: no such topic), creating nothing: for the
        read-only tools, which take the shard count from the topic."""
        admin = AIOKafkaAdminClient(client_id=f"{self.client_id}-admin", **self._client_kwargs())
        await admin.start()
        try:
            described = await self._topic_admin(admin).describe()
        finally:
            await admin.close()
        return None if described is None else len(described["partitions"])

    # --- shards -------------------------------------------------------------------------------------

    async def open_shard(self, shard: int) -> KafkaShardLog:
        if not 0 <= shard < self.shards:
            raise ValueError(f"shard {shard} is outside 0..{self.shards - 1}")
        if self.topic_check is None:
            # Producing to a missing topic could have the cluster auto-create it with the wrong layout.
            raise RuntimeError("open() the store (create or verify its topic) before opening a shard")
        old = self._logs.pop(shard, None)
        if old is not None:
            old.close()
        producer, records = await self.clients.run(self._open_producer(shard))
        shard_log = KafkaShardLog(self, shard, producer, records)
        self._logs[shard] = shard_log
        return shard_log

    async def _open_producer(self, shard: int) -> tuple[AIOKafkaProducer, list[Record]]:
        """On the client loop: the shard's producer, initialised (fencing older ones), and the records
        committed to its partition."""
        producer = AIOKafkaProducer(
            client_id=f"{self.client_id}-{shard}",
            transactional_id=self.transactional_id(shard),
            enable_idempotence=True,
            acks="all",
            transaction_timeout_ms=self.transaction_timeout_ms,
            **self._client_kwargs(),
        )
        try:
            async with asyncio.timeout(self.load_timeout_ms / 1000):
                # InitProducerId: bumps the epoch of the shard's transactional id (fencing every older
                # producer of it) and completes whatever transaction an older owner left open.
                try:
                    await producer.start()
                except kafka_errors.TransactionalIdAuthorizationFailed as e:
                    raise MissingRight(
                        principal_of(self.sasl), "WRITE", f"transactional id {self.transactional_id(shard)}",
                        f"write the group state (one id per shard: a PREFIXED ACL on {self.transactional_id_prefix})",
                    ) from e
                try:
                    records = await self._read(shard)
                except kafka_errors.TopicAuthorizationFailedError as e:
                    raise MissingRight(
                        principal_of(self.sasl), "READ", f"topic {self.topic}", "read the group state"
                    ) from e
        except BaseException as exc:
            await producer.stop()
            if isinstance(exc, TimeoutError):
                raise StateLogWriteFailed(
                    f"opening shard {shard} of {self.topic} took longer than {self.load_timeout_ms} ms"
                ) from None
            raise
        return producer, records

    async def _read(self, shard: int) -> list[Record]:
        """The committed records of ``shard``'s partition, from its start to its last stable offset."""
        return await read_partition(self, shard)

    def _release(self, shard_log: KafkaShardLog) -> None:
        if self._logs.get(shard_log.shard) is shard_log:
            del self._logs[shard_log.shard]
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            # Closed after the gateway's loop: stop the producer on its own loop, nobody waiting.
            self.clients.submit(_retire(shard_log))
            return
        task = loop.create_task(self.clients.run(_retire(shard_log)))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _drain_closing(self) -> None:
        while self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)

    async def close(self) -> None:
        for shard_log in list(self._logs.values()):
            shard_log.close()
        await self._drain_closing()
        await asyncio.to_thread(self.clients.stop)


def _add_partition(producer: AIOKafkaProducer, tp: TopicPartition) -> None:
    """Add ``tp`` to the producer's open transaction now, before any record is sent to it (aiokafka adds a
    partition when its first record is sent; its sender sends AddPartitionsToTxn for what is pending)."""
    producer._txn_manager.maybe_add_partition_to_txn(tp)


def _raise_if_aborted(producer: AIOKafkaProducer) -> None:
    """A transaction opened ahead may have failed while it waited (its AddPartitionsToTxn refused, the
    producer fenced): raise what ended it, so that it is reported as a write of this transaction would be."""
    manager = producer._txn_manager
    if manager.is_in_transaction():
        return
    ended = manager.wait_for_transaction_end()
    if ended.done() and not ended.cancelled() and ended.exception() is not None:
        raise ended.exception()  # type: ignore[misc]
    raise StateLogWriteFailed("the transaction opened ahead is no longer open")


async def _retire(shard_log: KafkaShardLog) -> None:
    """On the client loop: stop a closed shard's producer, first aborting the empty transaction it opened
    ahead, so that the next owner's InitProducerId finds none to abort (best effort: it aborts it
    otherwise). A transaction with records in it (a write cancelled by close) is left to the next owner."""
    producer = shard_log._producer
    if shard_log._open:
        shard_log._open = False
        with contextlib.suppress(Exception):
            async with asyncio.timeout(STOP_GRACE_S):
                await producer.abort_transaction()
    await _stop_quietly(producer)


def _retrieve(f: asyncio.Future[Any]) -> None:
    if not f.cancelled():
        f.exception()


async def _stop_quietly(producer: AIOKafkaProducer, grace_s: float = STOP_GRACE_S) -> None:
    """Stop a shard's producer. stop() first delivers what is queued, which an idempotent producer retries
    without end; after ``grace_s`` its sender is cancelled instead (aiokafka has no stop-without-flush), so
    a shard whose partition stays unreachable never holds up closing the store."""
    stopping = asyncio.ensure_future(producer.stop())
    done, _ = await asyncio.wait({stopping}, timeout=grace_s)
    if not done:
        sender_task = producer._sender.sender_task
        if sender_task is not None:
            sender_task.cancel()
        await asyncio.wait({stopping}, timeout=grace_s)
    if stopping.done() and not stopping.cancelled():
        with contextlib.suppress(Exception):
            stopping.result()


async def read_partition(store: KafkaStateStore, shard: int, *, timeout_ms: int | None = None) -> list[Record]:
    """Every committed record of one partition of ``store``'s topic, in order (tombstones as None values).

    Reads to the last stable offset as of the start: with read_committed, records of aborted transactions
    are skipped and nothing past an open transaction is returned.
    """
    records: list[Record] = []
    for offset, key, value in await read_partition_offsets(store, shard, timeout_ms=timeout_ms):
        if key is None:
            log.warning("state topic record without a key skipped", shard=shard, offset=offset)
            continue
        records.append(Record(key, value))
    return records


async def read_partition_offsets(
    store: KafkaStateStore, shard: int, *, timeout_ms: int | None = None
) -> list[tuple[int, bytes | None, bytes | None]]:
    """``read_partition`` with each record's offset, keyless records included (for the state tools)."""
    tp = TopicPartition(store.topic, shard)
    consumer = AIOKafkaConsumer(
        client_id=f"{store.client_id}-load-{shard}",
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        **store._client_kwargs(),
    )
    await consumer.start()
    out: list[tuple[int, bytes | None, bytes | None]] = []
    try:
        async with asyncio.timeout((timeout_ms or store.load_timeout_ms) / 1000):
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            end = (await consumer.end_offsets([tp]))[tp]
            while await consumer.position(tp) < end:
                batches = await consumer.getmany(tp, timeout_ms=500, max_records=10_000)
                for msg in batches.get(tp, []):
                    if msg.offset >= end:
                        break
                    key = None if msg.key is None else bytes(msg.key)
                    out.append((msg.offset, key, None if msg.value is None else bytes(msg.value)))
    finally:
        await consumer.stop()
    return out


__all__ = [
    "DEFAULT_APPEND_LINGER_MS",
    "DEFAULT_TOPIC",
    "DEFAULT_TRANSACTIONAL_ID_PREFIX",
    "KafkaShardLog",
    "KafkaStateStore",
    "StateTopicError",
    "StateTopicMismatch",
    "TopicCheck",
    "read_partition",
    "read_partition_offsets",
]
