"""Kafka Connect 4.3.1 in distributed mode, against the broker directly and through the gateway.

A distributed Connect cluster's workers form a classic group of protocol type ``connect`` (protocols
``sessioned``/``compatible``, KIP-415/KIP-507) whose leader assigns connectors and tasks; through the
gateway that group is the gateway's to coordinate, while the worker's config, offset and status topics
and the sink connector's consumer group go through it as well. One worker per target (``group.id``
and storage topics unique to the run), a FileStreamSource connector reading N lines from a file into a
one-partition topic and a FileStreamSink connector writing that topic to another file; both targets must
end the same: every line in order in the sink file, connector and task RUNNING over the REST API, and
the worker group listed and described alike (protocol type ``connect``, Stable, one member).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)

from compat_tests.harness import java
from compat_tests.harness.probe import find_coordinator_endpoints, roundtrip
from gateway import kafka_dist
from gateway.embedded_kafka import free_port

pytestmark = pytest.mark.kafka

WORKER = "org.apache.kafka.connect.cli.ConnectDistributed"
LINES = 50
RETRIABLE = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


@pytest.fixture(scope="module")
def connect_classpath() -> str:
    dist = kafka_dist.connect()
    try:
        kafka_dist.fetch(dist)
    except kafka_dist.FetchError as e:
        pytest.skip(f"cannot fetch Kafka Connect {kafka_dist.CURRENT_KAFKA}: {e}")
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


def _start_worker(
    classpath: str, bootstrap: str, names: Callable[[str], str], work: Path, log_dir: Path
) -> Worker:
    port = free_port()
    group = names("connect-cluster")
    props = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
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
        "listeners": f"http://127.0.0.1:{port}",
        "rest.advertised.host.name": "127.0.0.1",
        "rest.advertised.port": str(port),
        # Sink offsets are committed (and the sink file flushed) this often.
        "offset.flush.interval.ms": "1000",
    }
    properties = work / "worker.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    tool = java.JavaTool(
        kafka_dist.CURRENT_KAFKA, WORKER, [str(properties)], heap="384m", log_dir=log_dir, classpath=classpath
    )
    tool.start()
    return Worker(tool, port, group)


def _wait(worker: Worker, what: str, timeout_s: float, check: Callable[[], Any]) -> Any:
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


def _running(worker: Worker, connector: str) -> Any:
    def check() -> Any:
        status = worker.request("GET", f"/connectors/{connector}/status")
        tasks = status.get("tasks", [])
        ok = status["connector"]["state"] == "RUNNING" and tasks and all(t["state"] == "RUNNING" for t in tasks)
        return status if ok else None

    return check


def _sink_lines(path: Path, n: int) -> Callable[[], list[str] | None]:
    def check() -> list[str] | None:
        if not path.exists():
            return None
        lines = path.read_text().splitlines()
        return lines if len(lines) >= n else None

    return check


def _group_view(bootstrap: str, group: str) -> dict[str, Any]:
    """The worker group as ListGroups v5 and DescribeGroups v5 show it, asked of its coordinator."""
    address = find_coordinator_endpoints(bootstrap, group, 3)[0].address
    listed = roundtrip(address, ListGroupsRequest[5](states_filter=[], types_filter=[]), ListGroupsResponse, 5)
    assert listed.error_code == 0, f"ListGroups error {listed.error_code}"
    entry = next((g for g in listed.groups if g.group_id == group), None)
    described = roundtrip(
        address, DescribeGroupsRequest[5](groups=[group], include_authorized_operations=False), DescribeGroupsResponse, 5
    ).groups[0]
    if described.error_code in RETRIABLE:
        return {}
    assert described.error_code == 0, f"DescribeGroups error {described.error_code}"
    return {
        "listed": None if entry is None else (entry.protocol_type, entry.group_type, entry.group_state),
        "protocol_type": described.protocol_type,
        "state": described.group_state,
        "protocol": described.protocol_data,
        "members": len(described.members),
        "coordinator": address,
    }


def _run(
    classpath: str, bootstrap: str, topic: str, names: Callable[[str], str], work: Path, log_dir: Path
) -> dict[str, Any]:
    """One worker against ``bootstrap``: source file -> topic -> sink file; returns what it observed."""
    work.mkdir()
    source, sink = work / "source.txt", work / "sink.txt"
    lines = [f"line-{i:03d}" for i in range(LINES)]
    source.write_text("".join(f"{line}\n" for line in lines))
    worker = _start_worker(classpath, bootstrap, names, work, log_dir)
    try:
        _wait(worker, "REST API answer", 90, lambda: worker.request("GET", "/"))
        src, snk = names("file-source"), names("file-sink")
        worker.request("PUT", f"/connectors/{src}/config", {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "tasks.max": "1", "file": str(source), "topic": topic,
        })
        worker.request("PUT", f"/connectors/{snk}/config", {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "tasks.max": "1", "file": str(sink), "topics": topic,
        })
        got = _wait(worker, f"{LINES} lines in the sink file", 90, _sink_lines(sink, LINES))
        statuses = {
            kind: _wait(worker, f"{kind} connector and task RUNNING", 30, _running(worker, name))
            for kind, name in (("source", src), ("sink", snk))
        }
        view = _wait(worker, "a Stable worker group", 30, lambda: (
            v if (v := _group_view(bootstrap, worker.group)).get("state") == "Stable" else None
        ))
        return {
            "lines": got, "expected": lines, "statuses": statuses, "group": view, "worker_group": worker.group,
        }
    finally:
        code = worker.tool.stop(grace_s=30)
        # ConnectDistributed's shutdown hook stops the herder and leaves the group; a kill is a failure.
        assert code in (0, 130, 143), worker.log(f"the worker did not stop cleanly on SIGTERM ({code})")


def test_a_distributed_connect_worker_runs_file_connectors_alike_direct_and_through_the_gateway(
    kafka: Any, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str],
    connect_classpath: str, java_logs: Path, tmp_path: Path,
) -> None:
    if getattr(module_gateway, "direct", False):
        pytest.skip("--compat-direct: the comparison needs the gateway")
    targets = {"direct": kafka.bootstrap, "gateway": module_gateway.bootstrap}
    results = {
        name: _run(connect_classpath, address, make_topic(1), names, tmp_path / name, java_logs)
        for name, address in targets.items()
    }
    for name, r in results.items():
        assert r["lines"] == r["expected"], (name, r["lines"][:5], len(r["lines"]))  # all, once, in order
        for kind, status in r["statuses"].items():
            assert status["connector"]["state"] == "RUNNING", (name, kind, status)
            assert [t["state"] for t in status["tasks"]] == ["RUNNING"], (name, kind, status)
        view = r["group"]
        assert view["listed"] == ("connect", "classic", "Stable"), (name, view)
        assert (view["protocol_type"], view["state"], view["members"]) == ("connect", "Stable", 1), (name, view)
    # Both coordinators chose the same Connect protocol for their worker group.
    assert results["direct"]["group"]["protocol"] == results["gateway"]["group"]["protocol"], results
    # Through the gateway the worker group is the gateway's: FindCoordinator named the gateway itself,
    # and the broker does not hold the group.
    gw_group = results["gateway"]["worker_group"]
    coordinator = results["gateway"]["group"]["coordinator"]
    assert coordinator != kafka.bootstrap and coordinator != results["direct"]["group"]["coordinator"], coordinator
    on_broker = roundtrip(
        kafka.bootstrap,
        DescribeGroupsRequest[5](groups=[gw_group], include_authorized_operations=False),
        DescribeGroupsResponse,
        5,
    ).groups[0]
    assert on_broker.group_state in ("Dead", ""), (on_broker.group_state, on_broker.protocol_type)
