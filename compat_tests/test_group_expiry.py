"""Empty groups expire from the gateway's state after offsets.retention.minutes, as Kafka deletes them,
while their committed offsets stay in the cluster (which expires them by its own retention).

The gateway runs with a retention of 6 s checked every 500 ms (Kafka's setting names in its TOML
config). Plain Kafka cannot run the same scenario here: offsets.retention.minutes is a static broker
setting and the session's broker keeps Kafka's 7 days.
"""

from __future__ import annotations

import itertools
import socket
import struct
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.consumer.group import (
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
)

from compat_tests.harness.brokers import ProcessBackend, free_port_block
from compat_tests.harness.clients import ConfluentConsumer, produce_confluent, values
from compat_tests.harness.events import EventLog
from compat_tests.harness.gateway_proc import GatewayProcess
from compat_tests.harness.probe import find_coordinator_endpoints, roundtrip, split_address
from coordinator.records.codec import decode as decode_consumer_key
from gateway.state.file_store import shard_dirs
from gateway.state.log import FileStateLog
from groupgate.testing.wire import read_exact
from translate.group_records import decode_key as decode_classic_key

pytestmark = pytest.mark.kafka

CONFIG = """
[coordinator]
initial_rebalance_delay_ms = 0
min_session_timeout_ms = 1000
"group.consumer.min.session.timeout.ms" = 2000
"group.consumer.session.timeout.ms" = 6000
"group.consumer.min.heartbeat.interval.ms" = 200
"group.consumer.heartbeat.interval.ms" = 500
upstream_check_s = 0
"offsets.retention.minutes" = 0.1
"offsets.retention.check.interval.ms" = 500
"""
RETENTION_S = 6.0
RAW_GROUPS = 2000
RECORDS = 30


@pytest.fixture
def expiring_gateway(kafka: ProcessBackend, tmp_path: Path) -> Iterator[GatewayProcess]:
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG)
    metrics = f"127.0.0.1:{free_port_block(1)}"
    gw = GatewayProcess(
        upstream=kafka.bootstrap,
        listen_port=free_port_block(3),
        log_dir=tmp_path,
        extra_args=["--config", str(config), "--state-dir", str(tmp_path / "state"), "--metrics-listen", metrics],
    )
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str, gw: GatewayProcess) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n--- gateway log tail:\n{gw.tail(60)}")


def _group_gauges(gw: GatewayProcess) -> dict[tuple[str, str], float]:
    """groupgate_groups{type,state} from the gateway's /metrics: the groups held in its memory."""
    metrics = gw.extra_args[gw.extra_args.index("--metrics-listen") + 1]
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as r:
        text = r.read().decode()
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if line.startswith("groupgate_groups{"):
            labels, value = line[len("groupgate_groups{"):].rsplit("} ", 1)
            kv = dict(part.split("=", 1) for part in labels.split(","))
            out[kv["type"].strip('"'), kv["state"].strip('"')] = float(value)
    return out


def _describe(address: str, group: str) -> Any:
    r = roundtrip(address, DescribeGroupsRequest[5](groups=[group]), DescribeGroupsResponse, 5)
    return r.groups[0]


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    for _ in range(50):
        try:
            return _committed_once(bootstrap, group, topic)
        except confluent_kafka.KafkaException as exc:
            # A fresh broker answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS while its offsets
            # topic is being created and loaded.
            if not exc.args[0].retriable() and exc.args[0].code() != confluent_kafka.KafkaError.NOT_COORDINATOR:
                raise
            time.sleep(0.2)
    return _committed_once(bootstrap, group, topic)


def _committed_once(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = [confluent_kafka.TopicPartition(topic, p) for p in range(3)]
        return {tp.partition: tp.offset for tp in c.committed(tps, timeout=10) if tp.offset >= 0}
    finally:
        c.close()


class _Pipe:
    """One connection with up to ``window`` requests in flight (the gateway answers in order)."""

    def __init__(self, address: str, window: int = 200) -> None:
        self.sock = socket.create_connection(split_address(address), timeout=30)
        self.window = window
        self.ids = itertools.count(1)

    def run(self, requests: list[tuple[Any, Any, int]]) -> list[Any]:
        out: list[Any] = []
        for start in range(0, len(requests), self.window):
            batch = requests[start:start + self.window]
            expected = []
            for req, resp_cls, version in batch:
                cid = next(self.ids)
                req.with_header(correlation_id=cid, client_id="expiry-probe")
                self.sock.sendall(req.encode(version=version, header=True, framed=True))
                expected.append((cid, resp_cls, version))
            for cid, resp_cls, version in expected:
                (size,) = struct.unpack(">i", read_exact(self.sock, 4))
                resp = resp_cls[version].decode(read_exact(self.sock, size), version=version, header=True)
                assert resp.header.correlation_id == cid
                out.append(resp)
        return out

    def close(self) -> None:
        self.sock.close()


def _raw_empty_groups(address: str, groups: list[str]) -> None:
    """Each group: one classic member joins (v3: no MEMBER_ID_REQUIRED round) and leaves."""
    protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")]
    pipe = _Pipe(address)
    try:
        joins = pipe.run([
            (JoinGroupRequest[3](group_id=g, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="",
                                 protocol_type="consumer", protocols=protocols), JoinGroupResponse, 3)
            for g in groups
        ])
        assert all(j.error_code == 0 for j in joins), {j.error_code for j in joins}
        leaves = pipe.run([
            (LeaveGroupRequest[1](group_id=g, member_id=j.member_id), LeaveGroupResponse, 1)
            for g, j in zip(groups, joins, strict=True)
        ])
        assert all(r.error_code == 0 for r in leaves), {r.error_code for r in leaves}
    finally:
        pipe.close()


def _state_log_groups(state_dir: Path) -> set[str]:
    """The group ids with a live record in the state log's shards (what a restart replays)."""
    ids = set()
    for shard in shard_dirs(state_dir):
        log = FileStateLog(shard)
        try:
            for r in log.replay():
                version = int.from_bytes(r.key[:2], "big", signed=True)
                ids.add(decode_classic_key(r.key) if version == 2 else decode_consumer_key(r.key, None).group_id)
            log.compact()  # what compaction keeps: no byte of an expired group
        finally:
            log.close()
    return ids


def test_empty_groups_expire_from_the_gateway_while_their_offsets_stay_in_the_cluster(
    expiring_gateway: GatewayProcess, kafka: ProcessBackend, make_topic: Any, names: Any, tmp_path: Path
) -> None:
    gw = expiring_gateway
    topic = make_topic(3)
    produce_confluent(kafka.bootstrap, topic, values("v", RECORDS))
    classic, consumer, live = names("classic"), names("kip848"), names("live")
    (coordinator,) = find_coordinator_endpoints(gw.bootstrap, live, 3)

    log = EventLog()
    stayer = ConfluentConsumer(name="live", log=log, bootstrap=gw.bootstrap, group_id=live, topics=[topic]).start()
    try:
        raw = _expire_around(gw, kafka, coordinator.address, topic, classic, consumer, live, names, log)
    finally:
        stayer.stop()
    gw.stop()
    state_dir = tmp_path / "state"
    assert _state_log_groups(state_dir) == {live}
    segments = b"".join(p.read_bytes() for p in state_dir.glob("shard-*/*.log"))
    assert classic.encode() not in segments and consumer.encode() not in segments and raw[0].encode() not in segments

    # A restart from the same state does not bring any of them back.
    gw.start()
    assert sum(_group_gauges(gw).values()) == 1 and _group_gauges(gw)["classic", "Empty"] == 1
    assert _describe(coordinator.address, raw[0]).group_state == "Dead"
    # The live group, empty now, goes the same way.
    _wait(lambda: sum(_group_gauges(gw).values()) == 0, 30 + RETENTION_S, "the last group expired", gw)


def _expire_around(
    gw: GatewayProcess, kafka: ProcessBackend, coordinator: str, topic: str, classic: str, consumer: str,
    live: str, names: Any, log: EventLog,
) -> list[str]:
    """Two groups consume, commit and close, thousands more join and leave; all of them expire while
    the live group carries on."""
    leavers = [
        ConfluentConsumer(name="classic", log=log, bootstrap=gw.bootstrap, group_id=classic, topics=[topic]),
        ConfluentConsumer(name="kip848", log=log, bootstrap=gw.bootstrap, group_id=consumer, topics=[topic],
                          group_protocol="consumer"),
    ]
    for c in leavers:
        c.start()
    try:
        for g in (classic, consumer):
            def done(g: str = g) -> bool:
                return sum(_committed(kafka.bootstrap, g, topic).values()) == RECORDS

            _wait(done, 60, f"{g} consumed and committed everything", gw)
    finally:
        for c in leavers:
            c.stop()  # commit done, close: each group becomes Empty

    raw = [names("raw") for _ in range(RAW_GROUPS)]
    started = time.monotonic()
    _raw_empty_groups(coordinator, raw)
    created_s = time.monotonic() - started
    assert _describe(coordinator, raw[-1]).group_state == "Empty"
    _wait(lambda: _describe(coordinator, live).group_state == "Stable", 30, "live group stable", gw)
    (member,) = _describe(coordinator, live).members

    # Everything Empty goes; only the live group is left in the gateway's memory.
    _wait(lambda: sum(_group_gauges(gw).values()) == 1, 60 + created_s, "the empty groups expired", gw)
    assert _group_gauges(gw)["classic", "Stable"] == 1
    assert "expired empty groups" in gw.tail(400)
    # The live group was never touched: same member, still Stable.
    live_now = _describe(coordinator, live)
    assert live_now.group_state == "Stable" and [m.member_id for m in live_now.members] == [member.member_id]
    # A group the cluster holds no offsets for is not known to anyone any more.
    for g in (raw[0], raw[len(raw) // 2], raw[-1]):
        assert _describe(coordinator, g).group_state == "Dead"
    # The offsets are the cluster's: still there, read directly and through the gateway.
    for g in (classic, consumer):
        assert sum(_committed(kafka.bootstrap, g, topic).values()) == RECORDS
        assert _committed(gw.bootstrap, g, topic) == _committed(kafka.bootstrap, g, topic)
    return raw

