"""Changing the managed groups without a restart: SIGHUP re-reads the configuration file.

docs/operations.md, "Changing the managed groups without a restart". One gateway process throughout; its
configuration file first manages group B only, then (SIGHUP) group A only:

- group A (classic protocol, two confluent-kafka consumers) consumed through the cluster's coordinator and
  is adopted by the gateway's: its clients rejoin there by themselves, its members leave the cluster's group;
- group B (consumer protocol, two confluent-kafka consumers) was coordinated by the gateway and is handed
  back: its members are told UNKNOWN_MEMBER_ID once and join the cluster's consumer group.

A producer runs throughout; every acknowledged record is consumed by both groups, no client is restarted
or fails, and the gateway process is the same one; the same SIGHUP rotates the rebalance event file. Then a
bad pattern in the file is refused and the running set kept.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import re2
from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse

from compat_tests.harness.brokers import ProcessBackend, free_port_block
from compat_tests.harness.clients import ConfluentConsumer, produce_confluent, values
from compat_tests.harness.events import EventLog, ProducedRecord
from compat_tests.harness.gateway_proc import GatewayProcess
from compat_tests.harness.invariants import assert_all_consumed
from compat_tests.harness.probe import roundtrip
from gateway.wire.protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse

pytestmark = pytest.mark.kafka

PARTITIONS = 4
CONFIG = """
[coordinator]
managed_groups = "{pattern}"
initial_rebalance_delay_ms = 0
min_session_timeout_ms = 1000
"group.consumer.min.session.timeout.ms" = 2000
"group.consumer.session.timeout.ms" = 10000
"group.consumer.min.heartbeat.interval.ms" = 200
"group.consumer.heartbeat.interval.ms" = 500
upstream_check_s = 2
"""


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str, gw: GatewayProcess) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:  # noqa: BLE001, S110 - a probe may fail while a group moves: asked again
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n--- gateway log tail:\n{gw.tail(60)}")


def _classic(address: str, group: str) -> Any:
    r = roundtrip(address, DescribeGroupsRequest[5](groups=[group]), DescribeGroupsResponse, 5)
    (g,) = r.groups
    return g


def _consumer(address: str, group: str) -> Any:
    r = roundtrip(address, ConsumerGroupDescribeRequest[0](group_ids=[group]), ConsumerGroupDescribeResponse, 0)
    (g,) = r.groups
    return g


def _stable_classic(address: str, group: str, n: int) -> bool:
    g = _classic(address, group)
    return g.error_code == 0 and g.group_state == "Stable" and len(g.members) == n


def _stable_consumer(address: str, group: str, n: int) -> bool:
    g = _consumer(address, group)
    return g.error_code == 0 and g.group_state == "Stable" and len(g.members) == n


class Producer:
    """Produces a few records every 100 ms through the gateway until stopped; keeps what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.produced: list[ProducedRecord] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def start(self) -> Producer:
        self._thread.start()
        return self

    def _run(self) -> None:
        n = 0
        try:
            while not self._stop.is_set():
                self.produced += produce_confluent(self.bootstrap, self.topic, values(f"r{n}", 10))
                n += 1
                self._stop.wait(0.1)
        except BaseException as e:  # noqa: BLE001 - reported by stop()
            self.error = e

    def stop(self) -> list[ProducedRecord]:
        self._stop.set()
        self._thread.join(60)
        assert self.error is None, self.error
        return list(self.produced)


@pytest.fixture
def reload_gateway(kafka: ProcessBackend, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[GatewayProcess]:
    if request.config.getoption("--compat-direct"):
        pytest.skip("--compat-direct: this is about the gateway's managed groups")
    gw = GatewayProcess(
        upstream=kafka.bootstrap,
        listen_port=free_port_block(3),
        log_dir=tmp_path,
        extra_args=[
            "--config", str(tmp_path / "gateway.toml"), "--state-dir", str(tmp_path / "state"),
            "--rebalance-events", str(tmp_path / "events.jsonl"),
        ],
    )
    (tmp_path / "gateway.toml").write_text(CONFIG.format(pattern="none"))
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


def _hup(gw: GatewayProcess, config: Path, pattern: str) -> None:
    config.write_text(CONFIG.format(pattern=pattern.replace("\\", "\\\\")))
    assert gw.pid is not None
    os.kill(gw.pid, signal.SIGHUP)


def test_sighup_adopts_one_live_group_and_hands_another_back(
    reload_gateway: GatewayProcess, kafka: ProcessBackend, make_topic: Any, names: Any, tmp_path: Path
) -> None:
    gw = reload_gateway
    config = tmp_path / "gateway.toml"
    topic = make_topic(PARTITIONS)
    group_a, group_b = names("adopted"), names("handed-back")
    # Group B is managed from the start (a SIGHUP before the clients start: nothing held changes).
    _hup(gw, config, re2.escape(group_b))
    _wait(lambda: "managed groups changed" in gw.tail(50), 10, "the first reload", gw)
    pid = gw.pid
    logs = {"a": EventLog(), "b": EventLog()}
    consumers = [
        ConfluentConsumer(
            name=f"a{i}", log=logs["a"], bootstrap=gw.bootstrap, group_id=group_a, topics=[topic],
            tolerate_commit_errors=True,
        ) for i in range(2)
    ] + [
        ConfluentConsumer(
            name=f"b{i}", log=logs["b"], bootstrap=gw.bootstrap, group_id=group_b, topics=[topic],
            group_protocol="consumer", tolerate_commit_errors=True,
        ) for i in range(2)
    ]  # fmt: skip
    producer = Producer(gw.bootstrap, topic).start()
    for c in consumers:
        c.start()
    try:
        # Before: A on the cluster's coordinator, B on the gateway's (the cluster holds no member of it).
        _wait(lambda: _stable_classic(kafka.bootstrap, group_a, 2), 60, "group A stable on the cluster", gw)
        _wait(lambda: _stable_consumer(gw.bootstrap, group_b, 2), 60, "group B stable on the gateway", gw)
        assert _consumer(kafka.bootstrap, group_b).error_code != 0 or not _consumer(kafka.bootstrap, group_b).members
        before = producer.produced[:]
        _wait(lambda: all(_covers(logs[k], before) for k in logs), 60, "records consumed before the change", gw)

        # The same SIGHUP still rotates the rebalance event file (moved away first, as logrotate does).
        (tmp_path / "events.jsonl").rename(tmp_path / "events.jsonl.1")
        _hup(gw, config, re2.escape(group_a))
        t0 = time.monotonic()
        _wait(lambda: _stable_classic(gw.bootstrap, group_a, 2), 60, "group A stable on the gateway", gw)
        adopt_s = time.monotonic() - t0
        _wait(lambda: _stable_consumer(kafka.bootstrap, group_b, 2), 60, "group B stable on the cluster", gw)
        back_s = time.monotonic() - t0
        _wait(lambda: not _classic(kafka.bootstrap, group_a).members, 30, "no member of A left on the cluster", gw)
        # Through the gateway B is the cluster's group again: its ConsumerGroupDescribe passes through.
        assert sorted(m.member_id for m in _consumer(gw.bootstrap, group_b).members) == sorted(
            m.member_id for m in _consumer(kafka.bootstrap, group_b).members
        )
        mark = len(producer.produced)
        _wait(lambda: len(producer.produced) > mark + 100, 30, "records acknowledged after the change", gw)
        assert "rebalance event log reopened" in gw.tail(400)
        rotated = (tmp_path / "events.jsonl").read_text()
        assert group_a in rotated, "group A's rebalance on the gateway is in the new event file"

        # A bad pattern: refused with one log line, the running set kept.
        _hup(gw, config, "oops-(")
        _wait(lambda: "configuration reload refused" in gw.tail(50), 10, "the refusal", gw)
        mark = len(producer.produced)
        _wait(lambda: len(producer.produced) > mark + 50, 30, "records acknowledged after the refusal", gw)
        produced = producer.stop()
        for k in logs:
            _wait(lambda k=k: _covers(logs[k], produced), 60, f"every record consumed by group {k.upper()}", gw)
        assert _stable_classic(gw.bootstrap, group_a, 2)
        assert gw.pid == pid and gw.alive(), "the same gateway process throughout"
    finally:
        producer.stop() if producer.error is None else None
        for c in consumers:
            c.stop()  # raises if a client failed
    for k in logs:
        assert_all_consumed(produced, logs[k])
    tail = gw.tail(400)
    assert "removed a member the client left on the upstream coordinator" in tail
    assert "told a member of a handed-back group to join the cluster's coordinator" in tail
    errors = [c.commit_errors for c in consumers]
    print(
        f"reload: group A stable on the gateway {adopt_s:.1f}s after SIGHUP, group B stable on the cluster "
        f"{back_s:.1f}s after it; {len(produced)} records, consumed again: "
        f"A {len(logs['a'].records) - len(produced)}, B {len(logs['b'].records) - len(produced)}; "
        f"commit errors {errors}"
    )


def _covers(log: EventLog, produced: list[ProducedRecord]) -> bool:
    seen = {r.position for r in log.records}
    return all(p.position in seen for p in produced)
