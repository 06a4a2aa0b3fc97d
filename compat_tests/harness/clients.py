"""Thin wrappers over the Python Kafka clients the suites run: confluent-kafka (librdkafka), kafka-python
and aiokafka. Each consumer records what it owns and what it consumes into a shared EventLog.

Consumers commit synchronously after every batch (auto-commit off): in a clean run a partition that moves
to another member then resumes exactly after the last record handed to the application, which is what
lets invariants.assert_none_twice hold.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka
import kafka
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener

from .events import EventLog, ProducedRecord

POLL_S = 0.2


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


# --- producers ----------------------------------------------------------------------------------------


def produce_confluent(bootstrap: str, topic: str, payloads: Sequence[bytes], timeout_s: float = 30.0,
                      **config: Any) -> list[ProducedRecord]:
    """Produce with keys spread over partitions; returns where each record landed (acks=all)."""
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, **config}
    producer = confluent_kafka.Producer(conf)
    out: list[ProducedRecord] = []
    errors: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            out.append(ProducedRecord(msg.topic(), msg.partition(), msg.offset(), msg.value()))

    for i, v in enumerate(payloads):
        producer.produce(topic, key=str(i).encode(), value=v, on_delivery=delivered)
        producer.poll(0)
    left = producer.flush(timeout_s)
    assert left == 0 and not errors, f"confluent producer: {left} undelivered, errors {errors[:5]}"
    return out


def produce_kafka_python(bootstrap: str, topic: str, payloads: Sequence[bytes],
                         timeout_s: float = 30.0) -> list[ProducedRecord]:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    try:
        futures = [producer.send(topic, key=str(i).encode(), value=v) for i, v in enumerate(payloads)]
        producer.flush(timeout_s)
        out = []
        for fut, v in zip(futures, payloads, strict=True):
            md = fut.get(timeout=timeout_s)
            out.append(ProducedRecord(md.topic, md.partition, md.offset, v))
        return out
    finally:
        producer.close(timeout=10)


async def produce_aiokafka(bootstrap: str, topic: str, payloads: Sequence[bytes]) -> list[ProducedRecord]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(topic, key=str(i).encode(), value=v) for i, v in enumerate(payloads)]
        out = []
        for fut, v in zip(futures, payloads, strict=True):
            md = await fut
            out.append(ProducedRecord(md.topic, md.partition, md.offset, v))
        return out
    finally:
        await producer.stop()


# --- thread-driven consumers --------------------------------------------------------------------------


@dataclass
class _ThreadedConsumer:
    """A poll loop on its own thread; start(), then stop() (stops polling, records 'stopped', closes)."""

    name: str
    log: EventLog
    error: BaseException | None = field(default=None, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def start(self) -> _ThreadedConsumer:
        self._thread = threading.Thread(target=self._run_safely, name=f"consumer-{self.name}", daemon=True)
        self._thread.start()
        return self

    def _run_safely(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # surfaced by stop() so the test fails with the client's error
            self.error = exc

    def _run(self) -> None:
        raise NotImplementedError

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            assert not self._thread.is_alive(), f"consumer {self.name} did not stop within {timeout_s}s"
        if self.error is not None:
            raise AssertionError(f"consumer {self.name} failed: {self.error!r}") from self.error

    def __enter__(self) -> _ThreadedConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class ConfluentConsumer(_ThreadedConsumer):
    bootstrap: str = ""
    group_id: str = ""
    topics: Sequence[str] = ()
    group_protocol: str = "classic"
    config: dict[str, Any] = field(default_factory=dict)
    # True: a failed commit is recorded in ``commit_errors`` and polling goes on, as an application that
    # handles CommitFailed does (the next poll rejoins), and the commit is tried again on the next loop even
    # if no record came (what auto-commit does: the positions it failed to commit are still to commit);
    # False: it ends the consumer with the error.
    tolerate_commit_errors: bool = False
    commit_errors: list[str] = field(default_factory=list)

    def _conf(self) -> dict[str, Any]:
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group_id,
            "client.id": self.name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "group.protocol": self.group_protocol,
        }
        if self.group_protocol == "classic":
            conf.update({"session.timeout.ms": 10000, "heartbeat.interval.ms": 1000})
        conf.update(self.config)
        return conf

    def _run(self) -> None:
        consumer = confluent_kafka.Consumer(self._conf())

        def tps(parts: Iterable[Any]) -> list[tuple[str, int]]:
            return [(p.topic, p.partition) for p in parts]

        def on_assign(c: Any, parts: list[Any]) -> None:
            self.log.owned(self.name, "assigned", tps(parts))

        def on_revoke(c: Any, parts: list[Any]) -> None:
            self.log.owned(self.name, "revoked", tps(parts))

        def on_lost(c: Any, parts: list[Any]) -> None:
            self.log.owned(self.name, "lost", tps(parts))

        consumer.subscribe(list(self.topics), on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        retry_commit = False
        try:
            while not self._stop.is_set():
                batch = consumer.consume(num_messages=500, timeout=POLL_S)
                good = retry_commit
                for msg in batch:
                    err = msg.error()
                    if err is not None:
                        if err.fatal():
                            raise confluent_kafka.KafkaException(err)
                        continue
                    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
                    assert topic is not None and partition is not None and offset is not None
                    self.log.consumed(self.name, topic, partition, offset, msg.value())
                    good = True
                if good:
                    retry_commit = False
                    try:
                        consumer.commit(asynchronous=False)
                    except confluent_kafka.KafkaException as exc:
                        code = exc.args[0].code() if exc.args else None
                        if code == confluent_kafka.KafkaError._NO_OFFSET:  # nothing new since the last commit
                            continue
                        if not self.tolerate_commit_errors:
                            raise
                        self.commit_errors.append(exc.args[0].name() if exc.args else repr(exc))
                        retry_commit = True
            self.log.owned(self.name, "stopped", ())
        finally:
            consumer.close()


class _KafkaPythonListener(kafka.ConsumerRebalanceListener):
    def __init__(self, owner: KafkaPythonConsumer) -> None:
        self.owner = owner

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.owner.log.owned(self.owner.name, "revoked", [(p.topic, p.partition) for p in revoked])

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.owner.log.owned(self.owner.name, "assigned", [(p.topic, p.partition) for p in assigned])

    def on_partitions_lost(self, lost: Any) -> None:
        self.owner.log.owned(self.owner.name, "lost", [(p.topic, p.partition) for p in lost])


@dataclass
class KafkaPythonConsumer(_ThreadedConsumer):
    bootstrap: str = ""
    group_id: str = ""
    topics: Sequence[str] = ()
    config: dict[str, Any] = field(default_factory=dict)

    def _run(self) -> None:
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group_id,
            client_id=self.name,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=10000,
            heartbeat_interval_ms=1000,
            **self.config,
        )
        consumer.subscribe(list(self.topics), listener=_KafkaPythonListener(self))
        try:
            while not self._stop.is_set():
                batches = consumer.poll(timeout_ms=int(POLL_S * 1000))
                for tp, records in batches.items():
                    for r in records:
                        self.log.consumed(self.name, tp.topic, tp.partition, r.offset, r.value)
                if batches:
                    consumer.commit()
            self.log.owned(self.name, "stopped", ())
        finally:
            consumer.close()


# --- aiokafka (asyncio) -------------------------------------------------------------------------------


class _AiokafkaListener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, owner: AiokafkaConsumer) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.owner.log.owned(self.owner.name, "revoked", [(p.topic, p.partition) for p in revoked])

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.owner.log.owned(self.owner.name, "assigned", [(p.topic, p.partition) for p in assigned])


@dataclass
class AiokafkaConsumer:
    """Runs as an asyncio task in the test's event loop: ``await start()``, ``await stop()``."""

    name: str
    log: EventLog
    bootstrap: str
    group_id: str
    topics: Sequence[str]
    _stop: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False, repr=False)

    async def start(self) -> AiokafkaConsumer:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group_id,
            client_id=self.name,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=10000,
            heartbeat_interval_ms=1000,
        )
        consumer.subscribe(list(self.topics), listener=_AiokafkaListener(self))
        await consumer.start()
        self._task = asyncio.create_task(self._run(consumer))
        return self

    async def _run(self, consumer: AIOKafkaConsumer) -> None:
        try:
            while not self._stop.is_set():
                batches = await consumer.getmany(timeout_ms=int(POLL_S * 1000))
                for tp, records in batches.items():
                    for r in records:
                        self.log.consumed(self.name, tp.topic, tp.partition, r.offset, r.value)
                if batches:
                    await consumer.commit()
            self.log.owned(self.name, "stopped", ())
        finally:
            await consumer.stop()

    async def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.wait_for(self._task, timeout_s)

    async def wait_until_count(self, n: int, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.log.count() < n:
            if self._task is not None and self._task.done():
                self._task.result()  # raises the consumer's error
                raise AssertionError(f"aiokafka consumer {self.name} ended early")
            if loop.time() > deadline:
                raise TimeoutError(f"aiokafka consumer {self.name}: {self.log.count()} of {n} records")
            await asyncio.sleep(0.1)
