"""The gateway's rebalance event log: the events translate/rebalance_events.py derives, as JSON lines.

Turned on with ``--rebalance-events PATH`` (``coordinator.rebalance_events``); every event is one JSON
object per line written through its own structlog logger (JSON renderer only: the line is exactly the
rehearsal event, docs/rehearsal-events.md), appended and flushed line by line, so that
``groupgate rehearse report PATH`` can analyse a real rolling upgrade through the gateway. When the
option is off nothing of this runs.

Appending to an existing log continues it: ``seq`` goes on from the number of lines already there, and
the ``client_mix`` each group of the same run was written with is kept (a group belongs to one fleet
variant within a run).

``--rebalance-events kafka://BOOTSTRAP/TOPIC`` produces the same lines to a Kafka topic instead (keyed by
group, so a group's events stay in order in one partition), for ``groupgate rehearse live`` to follow a
rolling upgrade while it runs. The group calls only put the line on a bounded queue; a thread of its own
owns kafka-python's KafkaProducer, so a slow or unreachable topic never blocks a group request: when the
queue is full the event is dropped and counted (``dropped``), and a warning says so.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
from pathlib import Path
from typing import IO, Any

import structlog

from gateway.logging import get_logger
from translate.group_service import GroupService
from translate.rebalance_events import RebalanceEventDeriver

log = get_logger("gateway.groups.rebalance_log")


def _existing(path: Path, run: str) -> tuple[int, dict[str, str]]:
    """(lines already in the log, group -> client_mix of ``run`` found there)."""
    lines = 0
    mixes: dict[str, str] = {}
    if not path.exists():
        return lines, mixes
    with path.open("rb") as f:
        for raw in f:
            lines += 1
            try:
                obj = json.loads(raw)
            except ValueError:
                continue  # e.g. a line torn by a crash; the validator reports it
            if isinstance(obj, dict) and obj.get("run") == run and isinstance(obj.get("group"), str):
                mix = obj.get("client_mix")
                if isinstance(mix, str):
                    mixes.setdefault(obj["group"], mix)
    return lines, mixes


KAFKA_SCHEME = "kafka://"
# Events waiting for the producer thread; beyond this they are dropped (a stalled topic must not grow
# the gateway's memory without bound). A rolling upgrade of a few thousand members writes fewer.
QUEUE_LIMIT = 100_000


def parse_kafka_uri(uri: str) -> tuple[str, str]:
    """kafka://host:port[,host:port]/topic -> (bootstrap servers, topic)."""
    servers, _, topic = uri[len(KAFKA_SCHEME) :].partition("/")
    if not uri.startswith(KAFKA_SCHEME) or not servers or not topic or "/" in topic:
        raise ValueError(f"expected kafka://BOOTSTRAP/TOPIC, got {uri!r}")
    return servers, topic


class KafkaEventSink:
    """The lines, produced to a topic by a thread of their own; ``put`` never blocks.

    ``dropped`` counts the lines that found the queue full (the topic slower than the groups, or
    unreachable for a long time) or that the producer failed to deliver."""

    def __init__(self, uri: str, *, limit: int = QUEUE_LIMIT) -> None:
        self.uri = uri
        self.servers, self.topic = parse_kafka_uri(uri)
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue(maxsize=limit)
        self.dropped = 0
        self.sent = 0
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rebalance-events-kafka", daemon=True)
        self._thread.start()

    def put(self, key: str, line: str) -> None:
        try:
            self._queue.put_nowait((key, line))
        except queue.Full:
            self._drop("queue full")

    def _drop(self, why: str, n: int = 1) -> None:
        self.dropped += n
        # One warning per power of two: visible without flooding the log while the topic is stuck.
        if self.dropped & (self.dropped - 1) == 0 or n > 1:
            log.warning("rebalance events dropped", topic=self.topic, why=why, dropped=self.dropped)

    def _producer(self) -> Any:
        from kafka import KafkaProducer

        delay = 0.5
        while not self._closing.is_set():
            try:
                return KafkaProducer(
                    bootstrap_servers=self.servers.split(","),
                    acks=1,
                    linger_ms=20,
                    client_id="groupgate-rebalance-events",
                )
            except Exception as e:  # the cluster is not reachable yet: the queue holds (or drops) meanwhile
                log.warning("rebalance events: cannot reach the topic's cluster", uri=self.uri, error=repr(e))
                self._closing.wait(delay)
                delay = min(delay * 2, 10.0)
        return None

    def _run(self) -> None:
        producer = self._producer()
        if producer is None:
            self._drain("closed before the cluster was reachable")
            return
        try:
            while True:
                try:
                    item = self._queue.get(timeout=0.2)
                except queue.Empty:
                    if self._closing.is_set():
                        break  # closing and everything queued is handed to the producer
                    continue
                if item is None:
                    break
                key, line = item
                try:
                    future = producer.send(self.topic, key=key.encode(), value=line.encode())
                    future.add_callback(self._delivered).add_errback(self._failed)
                except Exception as e:
                    self._drop(f"send failed: {e!r}")
        finally:
            try:
                producer.flush(timeout=10)
            except Exception as e:
                log.warning("rebalance events: flush failed", uri=self.uri, error=repr(e))
            producer.close(timeout=5)

    def _drain(self, why: str) -> None:
        """Count what is still queued as dropped (whoever drains an item counts it, once)."""
        n = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            n += item is not None
        if n:
            self._drop(why, n)

    def _delivered(self, _metadata: Any) -> None:
        self.sent += 1

    def _failed(self, exc: BaseException) -> None:
        self._drop(f"delivery failed: {exc!r}")

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is queued (for at most timeout_s), then stop the thread."""
        if not self._thread.is_alive():
            return
        deadline = time.monotonic() + timeout_s
        self._closing.set()
        with contextlib.suppress(queue.Full):  # a full queue: the thread ends once it has taken it all
            self._queue.put_nowait(None)
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():  # still connecting (or delivering): what it has not taken is lost
            self._drain(f"not delivered within {timeout_s:g}s of closing")


class RebalanceEventLog:
    """``log = RebalanceEventLog(path, run, service)``; then call ``log.deriver`` instead of the service.

    A ``kafka://BOOTSTRAP/TOPIC`` path produces the events to that topic (KafkaEventSink); its ``seq``
    starts at 0 in every gateway process (the topic is not read back), so a restarted gateway's groups
    may be given a new ``client_mix``, which the file log keeps."""

    def __init__(self, path: str | Path, run: str, service: GroupService) -> None:
        self.sink: KafkaEventSink | None = None
        self.run = run
        self.derivers: dict[int, RebalanceEventDeriver] = {}
        if isinstance(path, str) and path.startswith(KAFKA_SCHEME):
            self.sink = KafkaEventSink(path)
            self.path = Path(path)
            self.written = 0
            self.seq, self.mixes = 0, {}
            self.deriver = self.deriver_for(service)
            log.info("producing rebalance events", uri=path, run=run)
            return
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        first_seq, mixes = _existing(self.path, run)
        self._file: IO[str] = self._open()
        self.written = 0
        self.seq, self.mixes = first_seq, dict(mixes)
        self.deriver = self.deriver_for(service)
        log.info("writing rebalance events", path=str(self.path), run=run, first_seq=first_seq)

    def deriver_for(self, service: GroupService, shard: int = 0) -> RebalanceEventDeriver:
        """The deriver of one shard's service (a new one after the shard was re-read). Every shard's events
        go to this one log: ``seq`` is numbered here, as written, and the groups' client_mix is shared."""
        deriver = RebalanceEventDeriver(
            service, self._write, self.run, first_seq=self.seq, client_mixes=self.mixes, on_error=self._failed
        )
        deriver.mixes = self.mixes  # one table for all shards, carried across re-reads
        self.derivers[shard] = deriver
        if shard == 0:
            self.deriver = deriver
        return deriver

    def rebind(self, service: GroupService) -> None:
        """Derive events from a freshly loaded service (after the state log was re-read); seq and the
        groups' client_mix carry on."""
        self.deriver_for(service)

    def _open(self) -> IO[str]:
        f = self.path.open("a", encoding="utf-8")
        self._logger: Any = structlog.wrap_logger(
            structlog.WriteLogger(f), processors=[structlog.processors.JSONRenderer()]
        )
        return f

    def reopen(self) -> None:
        """Continue in a new file at the same path (after logrotate moved the old one away; SIGHUP).

        seq and the groups' client_mix carry on: the rotated files together are one log."""
        if self.sink is not None:
            return  # a topic has nothing to rotate
        old = self._file
        self._file = self._open()
        old.close()
        log.info("rebalance event log reopened", path=str(self.path), written=self.written)

    def _write(self, event: dict[str, Any]) -> None:
        event["seq"] = self.seq  # one sequence across the shards' derivers
        self.seq += 1
        if self.sink is not None:
            self.sink.put(str(event["group"]), json.dumps(event, separators=(",", ":")))
            self.written += 1
            return
        fields = dict(event)
        kind = fields.pop("event")  # structlog's message key is "event": the event type
        self._logger.info(kind, **fields)
        self.written += 1

    def _failed(self, exc: Exception) -> None:
        # The group call itself went through; only its events are missing from the log.
        failures = sum(d.failures for d in self.derivers.values())
        log.error("rebalance events not written", path=str(self.path), error=repr(exc), failures=failures)

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()
            log.info("rebalance events produced", uri=self.sink.uri, sent=self.sink.sent, dropped=self.sink.dropped)
            return
        if not self._file.closed:
            self._file.close()
