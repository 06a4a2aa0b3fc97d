"""The harness's own checks must be able to fail: invariants, event parsing, the container port layout, and
the gateway launcher's way out of a port taken before its first start.

Only that last one needs the broker; the others run in milliseconds.
"""

from __future__ import annotations

import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from compat_tests.harness.connect import Worker, assert_stopped_cleanly
from compat_tests.harness.events import EventLog, ProducedRecord
from compat_tests.harness.invariants import duplicates, missing, overlaps
from compat_tests.harness.java import (
    OffsetsCommitted,
    PartitionsAssigned,
    ProducerSendSuccess,
    RecordsConsumed,
    TopicPartition,
    parse_consumer_perf,
    parse_event,
    parse_producer_perf,
    verifiable_consumer,
    verifiable_producer,
)
from gateway.config.settings import GatewayConfig

T = "t"


def _produced(n: int) -> list[ProducedRecord]:
    return [ProducedRecord(T, 0, off, None) for off in range(n)]


def test_missing_and_duplicate_records_are_reported() -> None:
    log = EventLog()
    for off in (0, 1, 1, 3):
        log.consumed("a", T, 0, off, None)
    assert missing(_produced(4), log) == [(T, 0, 2)]
    assert duplicates(log) == {(T, 0, 1): 2}


def test_overlapping_ownership_is_found_and_handover_is_not() -> None:
    clean = EventLog()
    clean.owned("a", "assigned", [(T, 0)], at_ms=1)
    clean.owned("a", "revoked", [(T, 0)], at_ms=5)
    clean.owned("b", "assigned", [(T, 0)], at_ms=5)
    clean.owned("b", "stopped", [], at_ms=9)
    clean.owned("a", "assigned", [(T, 0)], at_ms=9)
    assert overlaps(clean) == []

    bad = EventLog()
    bad.owned("a", "assigned", [(T, 0), (T, 1)], at_ms=1)
    bad.owned("b", "assigned", [(T, 1)], at_ms=3)
    bad.owned("a", "revoked", [(T, 1)], at_ms=4)
    found = overlaps(bad)
    assert [(o.partition, o.first.consumer, o.second.consumer) for o in found] == [((T, 1), "a", "b")]


def test_a_consumer_that_never_revokes_keeps_its_partitions() -> None:
    log = EventLog()
    log.owned("a", "assigned", [(T, 0)], at_ms=1)
    log.owned("b", "assigned", [(T, 0)], at_ms=100)
    assert len(overlaps(log)) == 1
    assert not log.settled(T, 1, ["a", "b"])


def test_settled_needs_every_partition_once_and_every_member() -> None:
    log = EventLog()
    log.owned("a", "assigned", [(T, 0), (T, 1)])
    assert log.settled(T, 2, ["a"])
    assert not log.settled(T, 2, ["a", "b"])
    log.owned("a", "revoked", [(T, 1)])
    log.owned("b", "assigned", [(T, 1)])
    assert log.settled(T, 2, ["a", "b"])


def test_verifiable_consumer_events_parse() -> None:
    assigned = parse_event(
        {"timestamp": 7, "name": "partitions_assigned", "partitions": [{"topic": T, "partition": 2}]}
    )
    assert isinstance(assigned, PartitionsAssigned) and assigned.partitions == (TopicPartition(T, 2),)
    consumed = parse_event(
        {
            "timestamp": 8,
            "name": "records_consumed",
            "count": 3,
            "partitions": [{"topic": T, "partition": 0, "count": 3, "minOffset": 4, "maxOffset": 6}],
        }
    )
    assert isinstance(consumed, RecordsConsumed) and consumed.ranges[0].max_offset == 6
    committed = parse_event(
        {
            "timestamp": 9,
            "name": "offsets_committed",
            "success": False,
            "error": "boom",
            "offsets": [{"topic": T, "partition": 0, "offset": 7}],
        }
    )
    assert isinstance(committed, OffsetsCommitted) and not committed.success and committed.error == "boom"
    sent = parse_event(
        {"timestamp": 1, "name": "producer_send_success", "key": None, "value": "5", "topic": T, "partition": 1,
         "offset": 42}
    )
    assert isinstance(sent, ProducerSendSuccess) and (sent.partition.partition, sent.offset) == (1, 42)
    assert type(parse_event({"name": "tool_data", "timestamp": 0})).__name__ == "ToolEvent"


def test_perf_tool_output_parses() -> None:
    lines = ["500 records sent, 100.0 records/sec", "2000 records sent, 9876.5 records/sec (0.94 MB/sec), 3.1 ms avg"]
    summary = parse_producer_perf(lines)
    assert summary is not None and (summary.records, summary.records_per_sec) == (2000, 9876.5)
    csv = ["start.time, end.time, data.consumed.in.nMsg", "2026-01-01, 2026-01-01, 2000"]
    assert parse_consumer_perf(csv) == {"start.time": "2026-01-01", "end.time": "2026-01-01",
                                        "data.consumed.in.nMsg": "2000"}


def test_old_releases_get_their_own_flags() -> None:
    old = verifiable_producer("2.8.2", "h:1", T, 10).args
    new = verifiable_producer("4.4.0", "h:1", T, 10).args
    assert "--broker-list" in old and "--bootstrap-server" in new
    assert "--group-protocol" not in verifiable_consumer("2.8.2", "h:1", T, "g").args
    assert "--group-protocol" in verifiable_consumer("3.9.1", "h:1", T, "g").args


def test_container_publishes_every_port_the_gateway_advertises() -> None:
    from groupgate.testing.containers import serve_command
    from groupgate.testing.settings import GatewaySettings

    # GroupgateContainer publishes P..P+brokers one to one; the single-node broker images use node id 1.
    brokers = 1
    args = serve_command("kafka:19092", 40000, GatewaySettings(), node_id_base=1)
    port = int(args[args.index("--listen") + 1].rsplit(":", 1)[1])
    base = int(args[args.index("--node-id-base") + 1])
    config = GatewayConfig(listen_host="0.0.0.0", listen_port=port, advertised_host="127.0.0.1", node_id_base=base)
    assert port < config.broker_port(1) <= port + brokers


@pytest.mark.kafka
def test_a_gateway_whose_port_was_taken_before_its_first_start_moves_to_a_free_block(kafka, tmp_path) -> None:
    import socket

    from compat_tests.harness.gateway_proc import GatewayProcess

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        gw = GatewayProcess(upstream=kafka.bootstrap, listen_port=port, log_dir=tmp_path)
        with gw:
            assert gw.listen_port != port and gw.bootstrap == f"127.0.0.1:{gw.listen_port}"
        assert "address already in use" in gw.log_path.read_text()
    finally:
        taken.close()


def test_a_killed_connect_worker_is_excused_only_for_the_rest_servers_shutdown_race(tmp_path: Path) -> None:
    """A worker killed while its shutdown hook waited on Jetty's thread pool after Jetty's own hook
    failed is the known race; killed anywhere else (its group member leaving, say) it is a failure."""
    log = tmp_path / "worker.log"
    log.write_text("6483 [JettyShutdownThread] WARN org.eclipse.jetty.util.component.ContainerLifeCycle - Unable to destroy\n")
    race = "at org.eclipse.jetty.util.thread.QueuedThreadPool.join\nat org.apache.kafka.connect.runtime.rest.RestServer.stop\n"
    herder = "at org.apache.kafka.connect.runtime.distributed.DistributedHerder.stop\n"

    def worker(dump: str) -> Worker:
        tool = SimpleNamespace(thread_dump=dump, stderr_path=log, tail=lambda n: log.read_text())
        return Worker(tool=tool, port=1, group="g")  # type: ignore[arg-type]

    assert_stopped_cleanly(worker(race), -signal.SIGKILL)
    assert_stopped_cleanly(worker(""), 143)
    for dump in (herder, race + herder, ""):
        with pytest.raises(AssertionError):
            assert_stopped_cleanly(worker(dump), -signal.SIGKILL)
    log.write_text("nothing of Jetty's hook\n")
    with pytest.raises(AssertionError):
        assert_stopped_cleanly(worker(race), -signal.SIGKILL)
