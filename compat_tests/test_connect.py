"""Kafka Connect 4.3.1 in distributed mode (``kafka_dist.CONNECT_KAFKA``: Maven Central has no 4.4.0
FileStream connectors), against the 4.4.0 broker directly and through the gateway.

A distributed Connect cluster's workers form a classic group of protocol type ``connect`` (protocols
``sessioned``/``compatible``, KIP-415/KIP-507) whose leader assigns connectors and tasks; through the
gateway that group is the gateway's to coordinate, while the worker's config, offset and status topics
and the sink connector's consumer group go through it as well. One worker per target (``group.id``
and storage topics unique to the run), a FileStreamSource connector reading N lines from a file into a
one-partition topic and a FileStreamSink connector writing that topic to another file; both targets must
end the same: every line in order in the sink file, connector and task RUNNING over the REST API, and
the worker group listed and described alike (protocol type ``connect``, Stable, one member).

A second test runs two workers in one cluster and stops the one running the sink task: the worker group
goes from two members to one and the remaining worker takes the tasks over after
``scheduled.rebalance.max.delay.ms`` (KIP-415's delay for departed workers), with every line still
delivered once and in order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from kafka.protocol.admin import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)

from compat_tests.harness.admin import admin
from compat_tests.harness.connect import (
    Worker,
    assert_stopped_cleanly,
    cluster_props,
    file_connectors,
    numbered_lines,
    running,
    sink_lines,
    start_worker,
    stop_worker,
    wait_for,
)
from compat_tests.harness.connect import connect_classpath as _connect_classpath
from compat_tests.harness.probe import find_coordinator_endpoints, roundtrip

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def connect_classpath() -> str:
    return _connect_classpath()


LINES = 50
RETRIABLE = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


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


def _stable_group(bootstrap: str, worker: Worker, members: int) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        view = _group_view(bootstrap, worker.group)
        return view if view.get("state") == "Stable" and view.get("members") == members else None

    return check


def _sink_group_view(bootstrap: str, group: str) -> dict[str, Any]:
    """The sink connector's consumer group as DescribeGroups / ConsumerGroupDescribe (confluent-kafka's
    AdminClient picks by group type) show it."""
    client = admin(bootstrap)  # kept referenced until the future resolves
    d = client.describe_consumer_groups([group])[group].result(30)
    return {"type": d.type.name, "state": d.state.name, "members": len(d.members),
            "partitions": sorted(tp.partition for m in d.members for tp in m.assignment.topic_partitions)}  # fmt: skip


def _run(
    classpath: str, bootstrap: str, topic: str, names: Callable[[str], str], work: Path, log_dir: Path,
    worker_props: dict[str, str] | None = None, then: Callable[[Worker, Path], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """One worker against ``bootstrap``: source file -> topic -> sink file; returns what it observed
    (and, under "then", what ``then(worker, source file)`` returned, run once that was seen)."""
    work.mkdir()
    source, sink = work / "source.txt", work / "sink.txt"
    lines = numbered_lines(0, LINES)
    source.write_text("".join(f"{line}\n" for line in lines))
    worker = start_worker(classpath, {**cluster_props(bootstrap, names), **(worker_props or {})}, work, log_dir)
    try:
        wait_for(worker, "REST API answer", 90, lambda: worker.request("GET", "/"))
        src, snk = file_connectors(worker, names, source, sink, topic)
        got = wait_for(worker, f"{LINES} lines in the sink file", 90, sink_lines(sink, LINES))
        statuses = {
            kind: wait_for(worker, f"{kind} connector and task RUNNING", 30, running(worker, name))
            for kind, name in (("source", src), ("sink", snk))
        }
        view = wait_for(worker, "a Stable worker group", 30, _stable_group(bootstrap, worker, 1))
        # Connect names a sink connector's consumer group connect-<connector name>.
        sink_group = wait_for(worker, "the sink's consumer group Stable", 30, lambda: (
            v if (v := _sink_group_view(bootstrap, f"connect-{snk}"))["state"] == "STABLE" else None
        ))  # fmt: skip
        after = then(worker, source) if then is not None else None
    finally:
        code = stop_worker(worker)
    assert_stopped_cleanly(worker, code)
    return {
        "lines": got, "expected": lines, "statuses": statuses, "group": view, "worker_group": worker.group,
        "sink_group": sink_group, "then": after,
    }  # fmt: skip


def _failover(
    classpath: str, bootstrap: str, topic: str, names: Callable[[str], str], work: Path, log_dir: Path
) -> dict[str, Any]:
    """Two workers of one cluster; the one running the sink task stops, more lines are appended to the
    source file, and the other worker takes the sink task over; returns what it observed."""
    work.mkdir()
    source, sink = work / "source.txt", work / "sink.txt"
    source.write_text("".join(f"{line}\n" for line in numbered_lines(0, LINES)))
    cluster = cluster_props(bootstrap, names)
    workers: list[Worker] = []
    try:
        for _ in range(2):
            worker = start_worker(classpath, cluster, work, log_dir)
            workers.append(worker)
            wait_for(worker, "REST API answer", 90, lambda w=worker: w.request("GET", "/"))
        first = workers[0]
        two = wait_for(first, "a Stable worker group of two", 60, _stable_group(bootstrap, first, 2))
        src, snk = file_connectors(first, names, source, sink, topic)
        wait_for(first, f"{LINES} lines in the sink file", 90, sink_lines(sink, LINES))
        # Both connectors and their tasks RUNNING before the stop: Connect 4.3.1's shutdown can hang past the
        # stop's grace when SIGTERM lands while a connector is still starting.
        wait_for(first, "source connector and task RUNNING", 30, running(first, src))
        status = wait_for(first, "sink connector and task RUNNING", 30, running(first, snk))
        # Stop whichever worker runs the sink task, so that the task has to move.
        leaving = next(w for w in workers if status["tasks"][0]["worker_id"] == f"127.0.0.1:{w.port}")
        staying = next(w for w in workers if w is not leaving)
        code = stop_worker(leaving)
        assert_stopped_cleanly(leaving, code)
        with source.open("a") as f:
            f.write("".join(f"{line}\n" for line in numbered_lines(LINES, LINES)))
        one = wait_for(staying, "a Stable worker group of one", 60, _stable_group(bootstrap, staying, 1))
        staying_id = f"127.0.0.1:{staying.port}"
        moved = {
            kind: wait_for(staying, f"{kind} connector and task RUNNING on the remaining worker", 60, lambda n=name: (
                st if (st := running(staying, n)()) and st["tasks"][0]["worker_id"] == staying_id else None
            ))
            for kind, name in (("source", src), ("sink", snk))
        }
        got = wait_for(staying, f"{2 * LINES} lines in the sink file", 60, sink_lines(sink, 2 * LINES))
    finally:
        codes = [stop_worker(w) for w in workers]
    for worker, code in zip(workers, codes, strict=True):
        assert_stopped_cleanly(worker, code)
    return {"two": two, "one": one, "moved": moved, "lines": got, "expected": numbered_lines(0, 2 * LINES)}


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


def test_a_second_worker_takes_over_the_tasks_of_one_that_stops_alike_direct_and_through_the_gateway(
    kafka: Any, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str],
    connect_classpath: str, java_logs: Path, tmp_path: Path,
) -> None:
    if getattr(module_gateway, "direct", False):
        pytest.skip("--compat-direct: the comparison needs the gateway")
    targets = {"direct": kafka.bootstrap, "gateway": module_gateway.bootstrap}
    results = {
        name: _failover(connect_classpath, address, make_topic(1), names, tmp_path / name, java_logs)
        for name, address in targets.items()
    }
    for name, r in results.items():
        assert (r["two"]["protocol_type"], r["two"]["members"]) == ("connect", 2), (name, r["two"])
        assert (r["one"]["protocol_type"], r["one"]["members"]) == ("connect", 1), (name, r["one"])
        for kind, status in r["moved"].items():
            assert [t["state"] for t in status["tasks"]] == ["RUNNING"], (name, kind, status)
        # Every line once and in order, across the handover (the stopped sink task committed on its way out).
        assert r["lines"] == r["expected"], (name, len(r["lines"]), r["lines"][LINES - 3 : LINES + 3])
    assert results["direct"]["two"]["protocol"] == results["gateway"]["two"]["protocol"], results


def test_sink_connector_consumers_with_the_consumer_protocol_alike_direct_and_through_the_gateway(
    kafka: Any, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str],
    connect_classpath: str, java_logs: Path, tmp_path: Path,
) -> None:
    """``consumer.group.protocol=consumer`` in the worker's configuration: the sink tasks' consumers join
    a KIP-848 consumer group (the worker group itself stays classic, Connect's own protocol). Then a
    second sink connector moves from a classic consumer to a KIP-848 one (``_sink_migration``)."""
    if getattr(module_gateway, "direct", False):
        pytest.skip("--compat-direct: the comparison needs the gateway")
    targets = {"direct": kafka.bootstrap, "gateway": module_gateway.bootstrap}
    props = {"consumer.group.protocol": "consumer"}
    results = {}
    for name, address in targets.items():
        topic = make_topic(2)

        def migrate(worker: Worker, source: Path, address: str = address, topic: str = topic) -> dict[str, Any]:
            return _sink_migration(worker, address, topic, source, names)

        results[name] = _run(connect_classpath, address, topic, names, tmp_path / name, java_logs, props, migrate)
    for name, r in results.items():
        assert r["lines"] == r["expected"], (name, r["lines"][:5], len(r["lines"]))  # all, once, in order
        assert r["group"]["listed"] == ("connect", "classic", "Stable"), (name, r["group"])
    consumer_group = {"type": "CONSUMER", "state": "STABLE", "members": 1, "partitions": [0, 1]}
    assert results["direct"]["sink_group"] == consumer_group
    assert results["gateway"]["sink_group"] == results["direct"]["sink_group"]
    # The migrated connector: every line once, its group classic before and a consumer group after.
    migrated = results["direct"]["then"]
    assert migrated["lines"] == sorted(numbered_lines(0, 2 * LINES)), (len(migrated["lines"]), migrated["lines"][:5])
    assert migrated["before"] == {**consumer_group, "type": "CLASSIC"}, migrated
    assert migrated["after"] == consumer_group, migrated
    assert migrated["task"] == ["RUNNING"], migrated
    assert results["gateway"]["then"] == migrated


def _sink_migration(
    worker: Worker, bootstrap: str, topic: str, source: Path, names: Callable[[str], str]
) -> dict[str, Any]:
    """A second sink connector of the topic, on a classic consumer (``consumer.override.group.protocol``,
    KIP-458's per-connector client override of the worker's ``consumer.group.protocol=consumer``), delivers
    the source's lines; the override is then dropped, so Connect stops the task (it commits and leaves)
    and starts it again on a KIP-848 consumer, whose join converts the empty classic group (KIP-848's
    upgrade); more lines follow. What its group was before and after, and every line its file holds.

    One task: with two, Connect 4.3.1 kills a sink task whose KIP-848 consumer has a partition revoked
    (UnsupportedOperationException in WorkerSinkTask's SinkTaskMetricsGroup.clearOffsets), direct and
    through the gateway alike (seen while the two tasks migrated)."""
    snk, sink = names("migrated-sink"), source.parent / "migrated-sink.txt"
    config = {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "tasks.max": "1", "file": str(sink), "topics": topic,
    }  # fmt: skip

    def group(kind: str) -> Callable[[], dict[str, Any] | None]:
        def check() -> dict[str, Any] | None:
            view = _sink_group_view(bootstrap, f"connect-{snk}")
            return view if (view["type"], view["state"]) == (kind, "STABLE") else None

        return check

    worker.request("PUT", f"/connectors/{snk}/config", {**config, "consumer.override.group.protocol": "classic"})
    wait_for(worker, f"{LINES} lines in the migrated sink's file", 60, sink_lines(sink, LINES))
    before = wait_for(worker, "the migrated sink's classic group Stable", 30, group("CLASSIC"))
    worker.request("PUT", f"/connectors/{snk}/config", config)
    with source.open("a") as f:
        f.write("".join(f"{line}\n" for line in numbered_lines(LINES, LINES)))
    after = wait_for(worker, "the migrated sink's KIP-848 group Stable", 60, group("CONSUMER"))
    got = wait_for(worker, f"{2 * LINES} lines in the migrated sink's file", 60, sink_lines(sink, 2 * LINES))
    status = wait_for(worker, "the migrated sink and its task RUNNING", 30, running(worker, snk))
    return {"before": before, "after": after, "task": [t["state"] for t in status["tasks"]], "lines": sorted(got)}


def _committed_view(bootstrap: str, topic: str) -> dict[str, Any]:
    """What a read_committed consumer sees of the one-partition ``topic``, and whether its log holds
    more offsets than records (transaction markers take an offset each)."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": "unused", "isolation.level": "read_committed",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })  # fmt: skip
    try:
        tp = confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)
        consumer.assign([tp])
        _, high = consumer.get_watermark_offsets(tp, timeout=30)
        values: list[str] = []
        deadline = time.monotonic() + 30
        while len(values) < LINES and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                values.append(msg.value().decode())
        return {"values": values, "markers": high > len(values)}
    finally:
        consumer.close()


def test_exactly_once_source_connector_alike_direct_and_through_the_gateway(
    kafka: Any, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str],
    connect_classpath: str, java_logs: Path, tmp_path: Path,
) -> None:
    """``exactly.once.source.support=enabled`` (KIP-618): the source task writes in transactions whose
    producer the worker leader fences first (Admin fenceProducers: FindCoordinator of the transactional
    id, InitProducerId), and commits its source offsets inside them."""
    if getattr(module_gateway, "direct", False):
        pytest.skip("--compat-direct: the comparison needs the gateway")
    targets = {"direct": kafka.bootstrap, "gateway": module_gateway.bootstrap}
    props = {"exactly.once.source.support": "enabled"}
    topics = {name: make_topic(1) for name in targets}

    def run(name: str) -> dict[str, Any]:
        r = _run(connect_classpath, targets[name], topics[name], names, tmp_path / name, java_logs, props)
        assert r["lines"] == r["expected"], (name, r["lines"][:5], len(r["lines"]))
        assert r["statuses"]["source"]["connector"]["state"] == "RUNNING", (name, r["statuses"])
        return _committed_view(targets[name], topics[name])

    with ThreadPoolExecutor(max_workers=2) as pool:  # one worker per target at once, each its own cluster
        views = dict(zip(targets, pool.map(run, targets), strict=True))
    assert views["direct"] == {"values": numbered_lines(0, LINES), "markers": True}  # written in committed transactions
    assert views["gateway"] == views["direct"]

