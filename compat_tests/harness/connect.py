"""Distributed Kafka Connect workers for compat tests: one worker process per call, its REST API, its
cluster's shared settings, and polling helpers that fail with the worker's log."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from compat_tests.harness import java
from gateway.ops import kafka_dist
from gateway.ops.embedded_kafka import free_port

WORKER = "org.apache.kafka.connect.cli.ConnectDistributed"


def connect_classpath() -> str:
    """The classpath of Kafka Connect's distribution, fetched once; a skip when it cannot be fetched."""
    dist = kafka_dist.connect()
    try:
        kafka_dist.fetch(dist)
    except kafka_dist.FetchError as e:
        pytest.skip(f"cannot fetch Kafka Connect {kafka_dist.CONNECT_KAFKA}: {e}")
    return dist.classpath()


@dataclass
class Worker:
    tool: java.JavaTool
    port: int
    group: str

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url(path), data=data, method=method)
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json")
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def log(self, what: str) -> str:
        return f"{what}; tail of the worker's log ({self.tool.stderr_path}):\n{self.tool.tail(40)}"


def cluster_props(bootstrap: str, names: Callable[[str], str]) -> dict[str, str]:
    """The settings every worker of one Connect cluster shares: its group and its storage topics."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": names("connect-cluster"),
        "config.storage.topic": names("connect-configs"),
        "offset.storage.topic": names("connect-offsets"),
        "status.storage.topic": names("connect-status"),
        # One broker: the internal topics cannot have Kafka's default replication factor of 3.
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "offset.storage.partitions": "1",
        "status.storage.partitions": "1",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "rest.advertised.host.name": "127.0.0.1",
        # Source offsets are stored, and sink offsets committed (the sink file flushed), this often.
        "offset.flush.interval.ms": "1000",
        # A departed worker's connectors and tasks are reassigned after this delay (KIP-415; 5 min by default).
        "scheduled.rebalance.max.delay.ms": "2000",
    }


def start_worker(classpath: str, cluster: dict[str, str], work: Path, log_dir: Path) -> Worker:
    port = free_port()
    props = {**cluster, "listeners": f"http://127.0.0.1:{port}", "rest.advertised.port": str(port)}
    properties = work / f"worker-{port}.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    tool = java.JavaTool(
        kafka_dist.CONNECT_KAFKA, WORKER, [str(properties)], heap="384m", log_dir=log_dir, classpath=classpath,
        # The herder's and the group clients' own account of a rebalance or a slow shutdown, in the worker's log.
        log_levels={
            "org.apache.kafka.connect.runtime.distributed": "info",
            "org.apache.kafka.connect.runtime.Worker": "info",
            "org.apache.kafka.connect.cli": "info",
            "org.apache.kafka.clients.consumer.internals": "info",
        },
    )
    tool.start()
    return Worker(tool, port, cluster["group.id"])


def wait_for(worker: Worker, what: str, timeout_s: float, check: Callable[[], Any]) -> Any:
    """Poll ``check`` until it returns something truthy; fail with the worker's log when it does not."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        if not worker.tool.alive():
            pytest.fail(worker.log(f"the Connect worker exited ({worker.tool.returncode}) waiting for {what}"))
        try:
            got = check()
        except (urllib.error.URLError, ConnectionError, OSError, ValueError) as e:
            got, last = None, e
        if got:
            return got
        if got is not None:
            last = got
        time.sleep(0.5)
    pytest.fail(worker.log(f"no {what} in {timeout_s}s (last: {last!r})"))


def running(worker: Worker, connector: str) -> Any:
    def check() -> Any:
        status = worker.request("GET", f"/connectors/{connector}/status")
        tasks = status.get("tasks", [])
        ok = status["connector"]["state"] == "RUNNING" and tasks and all(t["state"] == "RUNNING" for t in tasks)
        return status if ok else None

    return check


def sink_lines(path: Path, n: int) -> Callable[[], list[str] | None]:
    def check() -> list[str] | None:
        if not path.exists():
            return None
        lines = path.read_text().splitlines()
        return lines if len(lines) >= n else None

    return check


def file_connectors(worker: Worker, names: Callable[[str], str], source: Path, sink: Path, topic: str) -> tuple[str, str]:
    """A FileStreamSource (file -> topic) and a FileStreamSink (topic -> file), one task each."""
    src, snk = names("file-source"), names("file-sink")
    worker.request("PUT", f"/connectors/{src}/config", {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
        "tasks.max": "1", "file": str(source), "topic": topic,
    })
    worker.request("PUT", f"/connectors/{snk}/config", {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "tasks.max": "1", "file": str(sink), "topics": topic,
    })
    return src, snk


def stop_worker(worker: Worker) -> int | None:
    """SIGTERM: ConnectDistributed's shutdown hook stops the herder, its tasks and leaves the group."""
    return worker.tool.stop(grace_s=60)


def jetty_shutdown_race(worker: Worker) -> bool:
    """Whether a worker that had to be killed was stuck in a race of two JVM shutdown hooks: Jetty's own
    (``JettyShutdownThread``, which failed to destroy the still-started handlers) and Connect's, left
    waiting for a REST thread pool that then never stops. Connect stops its REST server before its group
    member, so such a worker never began to leave its group: what follows is the same as a crashed
    worker, its session expiring, on whatever coordinator it used. Seen with Connect 4.3.1's Jetty,
    against the broker directly as well as through the gateway."""
    dump = worker.tool.thread_dump or ""
    try:
        log_text = worker.tool.stderr_path.read_text(errors="replace")
    except OSError:
        return False
    return (
        "[JettyShutdownThread] WARN" in log_text
        and "Unable to destroy" in log_text
        and "RestServer.stop" in dump
        and "QueuedThreadPool.join" in dump
        and "DistributedHerder.stop" not in dump
    )


def assert_stopped_cleanly(worker: Worker, code: int | None) -> None:
    if code == -signal.SIGKILL and jetty_shutdown_race(worker):
        print(worker.log("killed after the REST server's shutdown race (see jetty_shutdown_race)"))
        return
    dump = worker.tool.thread_dump
    assert code in (0, 130, 143), worker.log(f"the worker did not stop cleanly on SIGTERM ({code})") + (
        f"\nthread dump before SIGKILL:\n{dump[-12000:]}" if dump else ""
    )


def numbered_lines(first: int, n: int) -> list[str]:
    return [f"line-{i:03d}" for i in range(first, first + n)]
