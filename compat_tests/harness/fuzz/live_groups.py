"""Live consumer groups beside the fuzzer: a producer and consumer groups of either protocol on one topic
through the gateway, which must consume and commit everything while the fuzzed frames arrive."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka

from ..clients import ConfluentConsumer, values
from ..events import EventLog, ProducedRecord


@dataclass
class LiveGroups:
    """A producer and consumer groups on one topic through the gateway, running while the fuzzer runs.

    ``groups`` maps a group id to its members' group protocols (``classic`` or ``consumer``, KIP-848).
    Consumers commit synchronously after each batch; every group must consume every produced record and
    end with its committed offsets at the end of each partition.
    """

    bootstrap: str
    topic: str
    groups: dict[str, Sequence[str]]
    records_per_s: float = 50.0
    produced: list[ProducedRecord] = field(default_factory=list)
    logs: dict[str, EventLog] = field(default_factory=dict)
    consumers: list[ConfluentConsumer] = field(default_factory=list)
    produce_errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> LiveGroups:
        for gid, protocols in self.groups.items():
            log = self.logs.setdefault(gid, EventLog())
            for i, proto in enumerate(protocols):
                c = ConfluentConsumer(
                    name=f"{gid}-{i}", log=log, bootstrap=self.bootstrap, group_id=gid, topics=[self.topic],
                    group_protocol=proto, tolerate_commit_errors=True,
                )
                self.consumers.append(c.start())  # type: ignore[arg-type]
        self._thread = threading.Thread(target=self._produce, name="live-producer", daemon=True)
        self._thread.start()
        return self

    def _produce(self) -> None:
        producer = confluent_kafka.Producer({
            "bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True,
        })
        lock = threading.Lock()

        def delivered(err: Any, msg: Any) -> None:
            with lock:
                if err is not None:
                    self.produce_errors.append(str(err))
                else:
                    self.produced.append(ProducedRecord(msg.topic(), msg.partition(), msg.offset(), msg.value()))

        i = 0
        interval = 1.0 / self.records_per_s
        next_at = time.monotonic()
        while not self._stop.is_set():
            for v in values(f"live-{i}", 1):
                producer.produce(self.topic, key=str(i).encode(), value=v, on_delivery=delivered)
            i += 1
            producer.poll(0)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
        left = producer.flush(60)
        if left:
            self.produce_errors.append(f"{left} records undelivered at the end")

    def stop_producing(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(90)

    def missing(self) -> dict[str, int]:
        """Per group: produced records not consumed by any of its members."""
        want = {r.position for r in self.produced}
        return {gid: len(want - {r.position for r in log.records}) for gid, log in self.logs.items()}

    def end_offsets(self) -> dict[int, int]:
        ends: dict[int, int] = {}
        for r in self.produced:
            ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
        return ends

    def committed(self, bootstrap: str, group: str) -> dict[int, int]:
        """Committed offsets of ``group`` on the topic, read with a consumer that does not join the group."""
        c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                      "enable.auto.commit": False})
        try:
            md = c.list_topics(self.topic, timeout=10)
            parts = [confluent_kafka.TopicPartition(self.topic, p) for p in md.topics[self.topic].partitions]
            return {tp.partition: tp.offset for tp in c.committed(parts, timeout=10)}
        except confluent_kafka.KafkaException:
            return {}  # unreadable now: settle() tries again until its deadline
        finally:
            c.close()

    def settle(self, timeout_s: float) -> tuple[dict[str, int], dict[str, dict[int, int]]]:
        """Wait until every group consumed everything and committed the end offsets (or time runs out).

        Returns (records missing per group, committed offsets per group as read through the gateway).
        """
        deadline = time.monotonic() + timeout_s
        ends = self.end_offsets()
        while True:
            missing = self.missing()
            committed = {gid: self.committed(self.bootstrap, gid) for gid in self.groups}
            done = not any(missing.values()) and all(
                all(c.get(p, -1001) >= end for p, end in ends.items()) for c in committed.values())
            if done or time.monotonic() > deadline:
                return missing, committed
            time.sleep(0.5)

    def stop(self) -> list[str]:
        """Stop the consumers; their errors, if any."""
        errors = []
        self._stop.set()
        for c in self.consumers:
            try:
                c.stop()
            except AssertionError as exc:
                errors.append(str(exc))
        return errors
