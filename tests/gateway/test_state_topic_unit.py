"""The cluster state store's own logic, without a cluster: group commit, failure and fencing handling of a
shard log (driven by a stand-in for the transactional producer), its settings, and its defaults.

The store against a real 3-node cluster is compat_tests/test_state_topic.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import errors as kafka_errors
from pydantic import ValidationError

from gateway.config.coordinator import CoordinatorSettings
from gateway.state.log import Record, StateLogWriteFailed
from gateway.state.store import ShardFenced
from gateway.state.topic import (
    KafkaShardLog,
    KafkaStateStore,
    _is_fenced,
    default_min_insync_replicas,
    default_replication_factor,
)


class FakeTxnManager:
    """The part of aiokafka's transaction manager the store reaches: adding a partition ahead of its
    records, and whether (and how) the open transaction ended."""

    def __init__(self, producer: FakeProducer) -> None:
        self.producer = producer
        self.added: list[Any] = []  # partitions added ahead, one per transaction opened ahead
        self.ended: asyncio.Future[None] | None = None  # set: the open transaction failed with this

    def maybe_add_partition_to_txn(self, tp: Any) -> None:
        assert self.producer.current == [], "a partition is added ahead of its records"
        self.added.append(tp)

    def is_in_transaction(self) -> bool:
        return self.producer.current is not None and self.ended is None

    def wait_for_transaction_end(self) -> asyncio.Future[None]:
        assert self.ended is not None
        return self.ended


class FakeProducer:
    """The transactional producer calls a shard log makes, recorded; ``fail_commit`` makes commits fail."""

    def __init__(self, commit_delay_s: float = 0.01) -> None:
        self._txn_manager = FakeTxnManager(self)
        self.begun = 0
        self.aborted = 0
        self.commit_delay_s = commit_delay_s
        self.fail_commit: BaseException | None = None
        self.hang = False
        self.current: list[Record] | None = None
        self.committed: list[list[Record]] = []
        self.stopped = False
        self.loops: set[asyncio.AbstractEventLoop] = set()  # where its calls ran
        self.cancelled = 0
        self.hanging = False

    async def begin_transaction(self) -> None:
        assert self.current is None, "transactions overlap"
        self.loops.add(asyncio.get_running_loop())
        self.current = []
        self.begun += 1

    async def abort_transaction(self) -> None:
        assert self.current is not None, "abort outside a transaction"
        self.loops.add(asyncio.get_running_loop())
        self.current = None
        self.aborted += 1

    async def send(self, topic: str, value: bytes | None = None, key: bytes | None = None, partition: int = -1) -> Any:
        assert self.current is not None, "send outside a transaction"
        assert key is not None
        self.current.append(Record(key, value))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def commit_transaction(self) -> None:
        await asyncio.sleep(self.commit_delay_s)
        try:
            while self.hang:
                self.hanging = True
                await asyncio.sleep(1)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.fail_commit is not None:
            raise self.fail_commit
        assert self.current is not None
        self.committed.append(self.current)
        self.current = None

    async def stop(self) -> None:
        self.loops.add(asyncio.get_running_loop())
        self.stopped = True


def _log(**store_kw: Any) -> tuple[KafkaStateStore, KafkaShardLog, FakeProducer]:
    store = KafkaStateStore("127.0.0.1:1", shards=4, topic="t", **store_kw)
    producer = FakeProducer()
    shard = KafkaShardLog(store, 3, producer, [Record(b"old", b"1")])  # type: ignore[arg-type]
    store._logs[3] = shard
    return store, shard, producer


def _r(i: int) -> Record:
    return Record(f"k{i}".encode(), None if i % 5 == 0 else f"v{i}".encode())


async def test_concurrent_syncs_share_transactions_in_append_order() -> None:
    store, shard, producer = _log(append_linger_ms=2)
    assert list(shard.replay()) == [Record(b"old", b"1")]
    await shard.sync()  # nothing appended: no transaction
    assert producer.committed == []

    async def one(i: int) -> None:
        shard.append([_r(i)])
        await shard.sync()

    await asyncio.gather(*(one(i) for i in range(50)))
    flat = [r for txn in producer.committed for r in txn]
    assert flat == [_r(i) for i in range(50)]  # tombstones stay None
    assert 1 <= len(producer.committed) < 50
    assert shard.transactions == store.transactions == len(producer.committed)


async def test_what_is_appended_in_the_turn_of_a_sync_shares_its_transaction() -> None:
    """With no linger, a sync of a quiet shard begins its transaction at the next turn of the loop, so the
    writers of the same turn (the groups of one busy shard) share it instead of each waiting for the next."""
    store, shard, producer = _log(append_linger_ms=0)

    async def one(i: int) -> None:
        shard.append([_r(i)])
        await shard.sync()

    await asyncio.gather(*(one(i) for i in range(8)))  # their first steps all run in one turn
    assert producer.committed == [[_r(i) for i in range(8)]]
    assert shard.transactions == store.transactions == 1


async def test_appends_during_a_transaction_go_into_the_next_one() -> None:
    _, shard, producer = _log(append_linger_ms=0)
    producer.commit_delay_s = 0.05
    shard.append([_r(1)])
    first = asyncio.create_task(shard.sync())
    await asyncio.sleep(0.01)  # the first transaction is in flight
    shard.append([_r(2), _r(3)])
    await shard.sync()
    await first
    assert producer.committed == [[_r(1)], [_r(2), _r(3)]]


@pytest.mark.parametrize(
    "error",
    [kafka_errors.ProducerFenced(), kafka_errors.InvalidProducerEpoch()],
    ids=["ProducerFenced", "InvalidProducerEpoch"],
)
async def test_a_fenced_producer_fences_the_shard_for_good(error: BaseException) -> None:
    store, shard, producer = _log()
    producer.fail_commit = error
    shard.append([_r(1)])
    waiters = [asyncio.create_task(shard.sync()) for _ in range(3)]
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(r, ShardFenced) for r in results), results
    with pytest.raises(ShardFenced):
        shard.append([_r(2)])
    with pytest.raises(ShardFenced):
        await shard.sync()
    await store.close()
    assert producer.stopped and 3 not in store._logs


async def test_transactions_run_on_the_stores_own_loop_and_close_stops_it() -> None:
    """A transaction's steps do not wait for turns of the gateway's loop (busy with every connection when
    its core is full): the producer runs on the store's loop, on a thread of its own."""
    store, shard, producer = _log()
    shard.append([_r(1)])
    await shard.sync()
    client_loop = store.clients.loop()
    assert producer.loops == {client_loop} and client_loop is not asyncio.get_running_loop()
    thread = store.clients._thread
    assert thread is not None and thread.is_alive()
    await store.close()
    assert producer.stopped and producer.loops == {client_loop}
    assert not thread.is_alive() and client_loop.is_closed()


async def test_closing_a_shard_mid_transaction_cancels_it_on_the_stores_loop() -> None:
    store, shard, producer = _log()
    producer.hang = True
    shard.append([_r(1)])
    pending = asyncio.create_task(shard.sync())
    while not producer.hanging:  # the transaction is under way on the store's loop
        await asyncio.sleep(0.01)
    shard.close()
    with pytest.raises(StateLogWriteFailed, match="closed"):
        await pending
    for _ in range(500):  # the cancellation crosses to the store's loop, which is still running
        if producer.cancelled:
            break
        await asyncio.sleep(0.01)
    assert producer.cancelled == 1 and producer.committed == []
    await store.close()
    assert producer.stopped


def test_fencing_is_recognised_inside_the_clients_wrapping_errors() -> None:
    wrapped = kafka_errors.KafkaError("Unexpected error during batch delivery")
    wrapped.__cause__ = kafka_errors.InvalidProducerEpoch()
    assert _is_fenced(wrapped)
    assert not _is_fenced(kafka_errors.NotEnoughReplicasError())
    assert not _is_fenced(kafka_errors.KafkaTimeoutError())


async def test_a_write_that_does_not_finish_in_time_fails_the_shard_but_is_not_fencing() -> None:
    _, shard, producer = _log(write_timeout_ms=50)
    producer.hang = True
    shard.append([_r(1)])
    with pytest.raises(StateLogWriteFailed, match="outcome is unknown") as info:
        await shard.sync()
    assert not isinstance(info.value, ShardFenced)
    with pytest.raises(StateLogWriteFailed):
        shard.append([_r(2)])


async def test_a_non_retriable_error_fails_the_shard() -> None:
    _, shard, producer = _log()
    producer.fail_commit = kafka_errors.KafkaError("broken")
    shard.append([_r(1)])
    with pytest.raises(StateLogWriteFailed, match="write failed") as info:
        await shard.sync()
    assert not isinstance(info.value, ShardFenced)


async def test_close_fails_pending_syncs_and_refuses_appends() -> None:
    store, shard, producer = _log(append_linger_ms=1000)
    shard.append([_r(1)])
    pending = asyncio.create_task(shard.sync())
    await asyncio.sleep(0)
    shard.close()
    with pytest.raises(StateLogWriteFailed):
        await pending
    with pytest.raises(StateLogWriteFailed):
        shard.append([_r(2)])
    await store.close()
    assert producer.committed == [] and producer.stopped


def test_settings_defaults_kafka_names_and_the_store_built_from_them() -> None:
    s = CoordinatorSettings()
    assert s.state_store is None and s.state_topic == "__groupgate_groups"
    assert s.state_append_linger_ms == 0
    s = CoordinatorSettings.model_validate(
        {
            "state_store": "kafka",
            "state_topic": "groups.state",
            "group.coordinator.append.linger.ms": 3,
            "state_topic_replication_factor": 2,
            "state_transactional_id_prefix": "gw-a-",
        }
    )
    store = KafkaStateStore.from_settings(s, "127.0.0.1:9092", shards=7)
    assert (store.topic, store.shards, store.append_linger_ms) == ("groups.state", 7, 3)
    assert store.replication_factor == 2 and store.min_insync_replicas is None
    assert store.transactional_id(6) == "gw-a-6"
    for bad in ("bad topic", "", "..", "x" * 250):
        with pytest.raises(ValidationError):
            CoordinatorSettings(state_topic=bad)
    with pytest.raises(ValidationError):
        CoordinatorSettings.model_validate({"state_store": "zookeeper"})


def test_replication_defaults_follow_the_cluster_size() -> None:
    assert [default_replication_factor(n) for n in (1, 2, 3, 5)] == [1, 2, 3, 3]
    assert [default_min_insync_replicas(rf) for rf in (1, 2, 3)] == [1, 2, 2]


async def test_open_shard_refuses_a_shard_outside_the_store_or_before_open() -> None:
    store = KafkaStateStore("127.0.0.1:1", shards=2)
    with pytest.raises(ValueError, match="outside 0..1"):
        await store.open_shard(2)
    with pytest.raises(RuntimeError, match="before opening a shard"):
        await store.open_shard(1)


def test_back_to_back_transactions_retry_concurrent_transactions_after_a_millisecond() -> None:
    """The store shortens aiokafka's fixed 20 ms wait after CONCURRENT_TRANSACTIONS; the handler of the
    pinned aiokafka reads that module constant when it answers the retry, so the value must be in place."""
    from aiokafka.producer import sender

    from gateway.state import topic

    assert sender.BACKOFF_OVERRIDE == topic.CONCURRENT_TRANSACTIONS_BACKOFF_S == 0.001
    # The retry path still reads the constant by name (an aiokafka upgrade that inlines it fails here).
    import inspect

    assert "BACKOFF_OVERRIDE" in inspect.getsource(sender.AddPartitionsToTxnHandler.handle_response)


async def test_the_next_transaction_is_opened_ahead_with_the_shards_partition_added() -> None:
    """After a commit the producer begins the next transaction and adds the shard's partition at once, so
    the next write sends its records and commits: no AddPartitionsToTxn round trip of its own."""
    store, shard, producer = _log()
    shard.append([_r(1)])
    await shard.sync()
    assert producer.committed == [[_r(1)]]
    assert producer.begun == 2 and producer.current == []  # the next one is open, empty
    assert [(tp.topic, tp.partition) for tp in producer._txn_manager.added] == [("t", 3)]
    shard.append([_r(2), _r(3)])
    await shard.sync()
    assert producer.committed == [[_r(1)], [_r(2), _r(3)]]
    assert producer.begun == 3 and len(producer._txn_manager.added) == 2  # the write itself began none
    assert shard.transactions == 2
    await store.close()
    assert producer.aborted == 1 and producer.current is None  # closing aborted the empty open one
    assert producer.stopped


async def test_a_transaction_opened_ahead_that_stays_empty_is_committed_empty_after_the_idle_time() -> None:
    """The transaction coordinator aborts a transaction open longer than transaction.timeout.ms and fences its
    producer: one opened ahead and left empty is committed before that, and none is opened again until
    the next write."""
    store, shard, producer = _log(preopen_idle_s=0.05)
    shard.append([_r(1)])
    await shard.sync()
    assert producer.current == []
    for _ in range(200):
        if producer.current is None:
            break
        await asyncio.sleep(0.01)
    assert producer.committed == [[_r(1)], []]  # the empty commit, after the idle time
    assert shard.transactions == store.transactions == 1  # which counts as no transaction of the shard's
    await asyncio.sleep(0.15)
    assert producer.begun == 2 and producer.current is None  # nothing opened again while idle
    shard.append([_r(2)])
    await shard.sync()
    assert producer.committed == [[_r(1)], [], [_r(2)]] and producer.begun == 4
    await store.close()


def test_the_idle_time_of_a_transaction_opened_ahead_stays_within_the_transaction_timeout() -> None:
    assert KafkaStateStore("127.0.0.1:1").preopen_idle_s == 10.0
    assert KafkaStateStore("127.0.0.1:1", transaction_timeout_ms=6_000).preopen_idle_s == 2.0


@pytest.mark.parametrize(
    ("error", "kind"),
    [(kafka_errors.ProducerFenced(), ShardFenced), (kafka_errors.KafkaError("refused"), StateLogWriteFailed)],
    ids=["fenced", "other"],
)
async def test_a_transaction_opened_ahead_that_failed_meanwhile_fails_the_next_write(
    error: BaseException, kind: type[BaseException]
) -> None:
    """The AddPartitionsToTxn of a transaction opened ahead can fail while the shard is quiet (a newer owner
    fenced the producer): the next write reports that error as its own, fencing included."""
    store, shard, producer = _log()
    shard.append([_r(1)])
    await shard.sync()
    ended: asyncio.Future[None] = store.clients.loop().create_future()
    ended.set_exception(error)
    producer._txn_manager.ended = ended
    shard.append([_r(2)])
    with pytest.raises(kind) as info:
        await shard.sync()
    assert isinstance(info.value.__cause__, type(error))
    assert producer.committed == [[_r(1)]]
    await store.close()


async def test_without_transactions_opened_ahead_each_write_begins_its_own() -> None:
    store, shard, producer = _log(preopen_transactions=False)
    for i in range(3):
        shard.append([_r(i)])
        await shard.sync()
        assert producer.current is None
    assert producer.begun == 3 and producer._txn_manager.added == []
    await store.close()
    assert producer.aborted == 0


async def test_the_transaction_manager_calls_a_transaction_opened_ahead_relies_on_are_there() -> None:
    """aiokafka adds a partition to a transaction when its first record is sent; the store adds it ahead
    through the transaction manager (aiokafka is pinned; an upgrade that renames these fails here)."""
    from aiokafka.producer.transaction_manager import TransactionManager

    manager = TransactionManager("t-0", 60_000)
    for name in ("maybe_add_partition_to_txn", "is_in_transaction", "wait_for_transaction_end", "partitions_to_add"):
        assert callable(getattr(manager, name)), name


async def test_unsynced_says_whether_a_sync_has_anything_to_do() -> None:
    """A shard skips the sync before an answer when nothing appended waits for it (gateway/groups/shard.py);
    a failure the sync would raise counts as something to do."""
    _, shard, producer = _log()
    assert not shard.unsynced()
    shard.append([_r(1)])
    assert shard.unsynced()
    await shard.sync()
    assert not shard.unsynced() and producer.committed == [[_r(1)]]
    producer.fail_commit = kafka_errors.KafkaError("broken")
    shard.append([_r(2)])
    with pytest.raises(StateLogWriteFailed):
        await shard.sync()
    assert shard.unsynced()  # failed: a sync raises what it was
