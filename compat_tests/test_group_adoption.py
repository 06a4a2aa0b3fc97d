"""Adopting a live group: a fleet that the cluster coordinates is moved onto the gateway's coordinator.

The operator's procedure (docs/operations.md, "Adopting a live group"):

1. clients bootstrap at the gateway while the group is NOT managed: its group APIs pass through to the
   cluster's coordinator;
2. the gateway is restarted (same state dir, same ports) with a ``--managed-groups`` pattern that now
   matches the group: the clients' next group requests reach the gateway's coordinator, which does not
   know their member ids; they rejoin there and carry on from the offsets committed in the cluster.

Measured here with real classic consumers (two Java 4.4.0 ``VerifiableConsumer``s and one confluent-kafka
consumer) and a producer running throughout: every acknowledged record is consumed, the offsets the
cluster holds never go backwards, the clients are never restarted, afterwards the cluster's coordinator
has no members and the gateway's DescribeGroups shows all three, and a commit by a member of the
cluster's old generation is refused by the gateway.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import re2
from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.consumer import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)

from compat_tests.harness.brokers import ProcessBackend, free_port_block
from compat_tests.harness.clients import ConfluentConsumer
from compat_tests.harness.events import EventLog, ProducedRecord, ingest_verifiable_consumer
from compat_tests.harness.gateway_proc import GatewayProcess
from compat_tests.harness.invariants import assert_all_consumed
from compat_tests.harness.java import (
    JavaTool,
    OffsetsCommitted,
    ProducerSendSuccess,
    RecordsConsumed,
    verifiable_consumer,
    verifiable_producer,
)
from compat_tests.harness.probe import roundtrip

pytestmark = pytest.mark.kafka

PARTITIONS = 4
SESSION_TIMEOUT_MS = 10000
CONFIG = """
[coordinator]
initial_rebalance_delay_ms = 0
min_session_timeout_ms = 1000
upstream_check_s = 2
"""
UNKNOWN_MEMBER_ID = 25
ILLEGAL_GENERATION = 22


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str, gw: GatewayProcess | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    tail = f"\n--- gateway log tail:\n{gw.tail(60)}" if gw is not None else ""
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}{tail}")


def _commit(address: str, group: str, member_id: str, generation: int, topic: str, offset: int) -> int:
    cls = OffsetCommitRequest
    req = cls[8](
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=None,
        topics=[
            cls.OffsetCommitRequestTopic(
                name=topic,
                partitions=[cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                    partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""
                )],
            )
        ],
    )
    r = roundtrip(address, req, OffsetCommitResponse, 8)
    return int(r.topics[0].partitions[0].error_code)


def _describe(address: str, group: str) -> Any:
    r = roundtrip(address, DescribeGroupsRequest[5](groups=[group]), DescribeGroupsResponse, 5)
    (g,) = r.groups
    return g


def _committed(broker: str, group: str, topic: str) -> dict[int, int]:
    """What the cluster holds for the group (asked of the broker itself: single node, it is the coordinator)."""
    cls = OffsetFetchRequest
    req = cls[3](group_id=group, topics=[cls.OffsetFetchRequestTopic(name=topic, partition_indexes=list(range(PARTITIONS)))])
    r = roundtrip(broker, req, OffsetFetchResponse, 3)
    return {p.partition_index: p.committed_offset for t in r.topics for p in t.partitions if p.committed_offset >= 0}


class OffsetWatch:
    """Polls the group's committed offsets on the broker and records every value seen, in order."""

    def __init__(self, broker: str, group: str, topic: str) -> None:
        self.broker, self.group, self.topic = broker, group, topic
        self.history: dict[int, list[int]] = {}
        self.changes: list[float] = []  # time.monotonic() of every change seen
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="offset-watch", daemon=True)

    def start(self) -> OffsetWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for p, o in _committed(self.broker, self.group, self.topic).items():
                    seen = self.history.setdefault(p, [])
                    if not seen or seen[-1] != o:
                        seen.append(o)
                        self.changes.append(time.monotonic())
            except Exception as e:  # noqa: BLE001 - a probe failure is kept and reported, not fatal
                self.errors.append(str(e))
            self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def first_change_after(self, t: float) -> float | None:
        return next((c for c in self.changes if c > t), None)

    def regressions(self) -> dict[int, list[int]]:
        return {p: h for p, h in self.history.items() if any(b < a for a, b in zip(h, h[1:], strict=False))}


@pytest.fixture
def adoption_gateway(kafka: ProcessBackend, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[GatewayProcess]:
    if request.config.getoption("--compat-direct"):
        pytest.skip("--compat-direct: adoption is about the gateway taking a group over")
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG)
    gw = GatewayProcess(
        upstream=kafka.bootstrap,
        listen_port=free_port_block(3),
        log_dir=tmp_path,
        extra_args=[
            "--config", str(config), "--state-dir", str(tmp_path / "state"), "--managed-groups", "none-.*",
            "--rebalance-events", str(tmp_path / "events.jsonl"),
        ],
    )
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


def _consumed(tools: list[JavaTool], log: EventLog) -> set[tuple[str, int, int]]:
    seen = {r.position for r in log.records}
    for t in tools:
        for e in t.of_type(RecordsConsumed):
            for r in e.ranges:
                seen.update((r.partition.topic, r.partition.partition, o) for o in range(r.min_offset, r.max_offset + 1))
    return seen


def _wait_committed(
    broker: str, group: str, topic: str, produced: list[ProducedRecord], tools: list[JavaTool], log: EventLog,
    commit_errors: list[str], what: str, gw: GatewayProcess,
) -> None:
    """Wait until the cluster holds, for every partition, an offset past the last produced record; a
    timeout says which partitions lag, who consumed their last records and which commits failed."""
    high = {p: max((r.offset for r in produced if r.partition == p), default=-1) for p in range(PARTITIONS)}
    try:
        _wait(lambda: all(_committed(broker, group, topic).get(p, -1) > high[p] for p in range(PARTITIONS)), 60, what)
    except AssertionError as e:
        committed = _committed(broker, group, topic)
        lagging = {p: (committed.get(p), high[p]) for p in range(PARTITIONS) if committed.get(p, -1) <= high[p]}
        last = {p: sorted({r.consumer for r in log.records if r.partition == p and r.offset == high[p]}) for p in lagging}
        java = {
            f"java-{id(t):x}": sorted({r.partition.partition for e in t.of_type(RecordsConsumed) for r in e.ranges
                                       if r.partition.partition in lagging
                                       and r.min_offset <= high[r.partition.partition] <= r.max_offset})
            for t in tools
        }  # fmt: skip
        raise AssertionError(
            f"{e}\nlagging partitions (committed, last produced): {lagging}; last record consumed by "
            f"librdkafka consumers {last}, Java consumers {java}; librdkafka commit errors {commit_errors}; "
            f"Java commit errors {sorted(set(_failed_commits(tools, 0)))}\n--- gateway log tail:\n{gw.tail(40)}"
        ) from None


def _events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _covers(tools: list[JavaTool], log: EventLog, produced: list[ProducedRecord]) -> bool:
    seen = _consumed(tools, log)
    return all(p.position in seen for p in produced)


def _produced(producer: JavaTool) -> list[ProducedRecord]:
    return [
        ProducedRecord(e.partition.topic, e.partition.partition, e.offset, e.value.encode())
        for e in producer.of_type(ProducerSendSuccess)
    ]


def _failed_commits(tools: list[JavaTool], since_ms: float) -> list[str]:
    return [
        str(e.error) for t in tools for e in t.of_type(OffsetsCommitted) if not e.success and e.timestamp_ms >= since_ms
    ]


def test_a_live_classic_group_moves_onto_the_gateway_coordinator(
    adoption_gateway: GatewayProcess, kafka: ProcessBackend, make_topic: Any, names: Any, java_logs: Path,
    tmp_path: Path,
) -> None:
    gw = adoption_gateway
    topic = make_topic(PARTITIONS)
    group = names("group")
    log = EventLog()
    producer = verifiable_producer("4.4.0", gw.bootstrap, topic, -1, throughput=200, log_dir=java_logs).start()
    tools = [
        verifiable_consumer(
            "4.4.0", gw.bootstrap, topic, group, session_timeout_ms=SESSION_TIMEOUT_MS, log_dir=java_logs
        ).start()
        for _ in range(2)
    ]
    confluent = ConfluentConsumer(
        name="confluent", log=log, bootstrap=gw.bootstrap, group_id=group, topics=[topic],
        config={"session.timeout.ms": SESSION_TIMEOUT_MS}, tolerate_commit_errors=True,
    ).start()
    watch = OffsetWatch(kafka.bootstrap, group, topic).start()
    try:
        # Step 1: unmanaged. The cluster coordinates the group: its three members live on the broker.
        _wait(lambda: len(_describe(kafka.bootstrap, group).members) == 3, 60, "3 members on the broker", gw)
        _wait(lambda: _describe(kafka.bootstrap, group).group_state == "Stable", 60, "broker group stable", gw)
        before = _describe(kafka.bootstrap, group)
        old_members = [m.member_id for m in before.members]
        # DescribeGroups carries no generation; the cluster's is at least 1 and the gateway's group does
        # not know the member id whatever the generation.
        before_generation = 1
        _wait(lambda: len(_committed(kafka.bootstrap, group, topic)) == PARTITIONS, 60, "commits on the broker", gw)

        # Step 2: restart the gateway with the group managed (same ports, same state dir).
        moved_at = time.time() * 1000
        gw.extra_args[gw.extra_args.index("--managed-groups") + 1] = "none-.*|" + re2.escape(group)
        gw.restart(hard=False)
        t0 = time.monotonic()

        def adopted() -> bool:
            g = _describe(gw.bootstrap, group)
            return g.group_state == "Stable" and len(g.members) == 3

        _wait(adopted, 90, "the gateway's group stable with the 3 clients", gw)
        adopt_s = time.monotonic() - t0
        # Records produced after the move are consumed (through the gateway's group) and committed.
        mark = len(producer.of_type(ProducerSendSuccess))
        _wait(lambda: len(producer.of_type(ProducerSendSuccess)) > mark + 200, 30, "more records acknowledged", gw)
        after_move = _produced(producer)
        _wait(lambda: _covers(tools, log, after_move), 60, "records consumed after the move", gw)
        _wait_committed(kafka.bootstrap, group, topic, after_move, tools, log, confluent.commit_errors,
                        "commits after the move on the broker", gw)
        # The cluster's coordinator no longer holds members; the gateway's does.
        _wait(lambda: not _describe(kafka.bootstrap, group).members, 30, "no members left on the broker", gw)
        upstream_members = len(_describe(kafka.bootstrap, group).members)
        here = _describe(gw.bootstrap, group)
        assert here.group_state == "Stable" and len(here.members) == 3, here
        assert not {m.member_id for m in here.members} & set(old_members), "new member ids, given by the gateway"
        # A member of the cluster's old generation is not a member of the gateway's group: refused.
        stale_error = _commit(gw.bootstrap, group, old_members[0], before_generation, topic, 0)
        assert stale_error in (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION), stale_error
        assert _committed(kafka.bootstrap, group, topic).get(0, -1) > 0, "the stale commit must not land"

        # Read before the way back: once unmanaged, the gateway's copy of the group expires by its timers.
        expired = [e for e in _events(tmp_path / "events.jsonl") if e.get("event") == "timer_expired"
                   and e.get("kind") == "classic-heartbeat"]

        # Step 3, the way back: the group is unmanaged again and returns to the cluster's coordinator.
        gw.extra_args[gw.extra_args.index("--managed-groups") + 1] = "none-.*"
        gw.restart(hard=False)
        t1 = time.monotonic()
        _wait(lambda: len(_describe(kafka.bootstrap, group).members) == 3, 60, "3 members back on the broker", gw)
        _wait(lambda: _describe(kafka.bootstrap, group).group_state == "Stable", 60, "broker group stable again", gw)
        back_s = time.monotonic() - t1
        # Through the gateway the group's requests pass through again: it describes the broker's group.
        assert sorted(m.member_id for m in _describe(gw.bootstrap, group).members) == sorted(
            m.member_id for m in _describe(kafka.bootstrap, group).members
        )
        mark = len(producer.of_type(ProducerSendSuccess))
        _wait(lambda: len(producer.of_type(ProducerSendSuccess)) > mark + 200, 30, "records acknowledged after", gw)
        producer.stop()
        produced = _produced(producer)
        _wait_committed(kafka.bootstrap, group, topic, produced, tools, log, confluent.commit_errors,
                        "commits on the broker after the way back", gw)
        _wait(lambda: _covers(tools, log, produced), 60, "every record consumed", gw)
        alive = [t.alive() for t in tools]
    finally:
        for t in tools:
            t.stop()
        producer.stop()
        watch.stop()
        confluent.stop()  # last: it raises if the librdkafka consumer failed
    # The clients were never restarted and none of them died: the same processes ran from start to end.
    assert alive == [True] * len(tools), [t.tail() for t in tools]
    for t in tools:
        ingest_verifiable_consumer(log, f"java-{id(t):x}", t)
    assert_all_consumed(produced, log)
    assert not watch.regressions(), f"committed offsets went backwards: {watch.regressions()}"
    assert watch.history, watch.errors[:3]
    assert upstream_members == 0
    # The members the clients left on the cluster's coordinator were removed there by the gateway, so no
    # member of the gateway's group was abandoned and expired by its session timer.
    assert "removed a member the client left on the upstream coordinator" in gw.tail(400)
    assert not expired, expired
    first = watch.first_change_after(t0)
    assert first is not None
    commit_gap_s = first - t0
    failed = _failed_commits(tools, moved_at) + confluent.commit_errors
    # Commits refused around the move must be ones a classic client answers by rejoining, never an
    # error it cannot act on (GROUP_ID_NOT_FOUND was one, before the gateway mapped it). librdkafka reports
    # the error's name; the Java classic client reports its exception's message, which names no error:
    # UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION are "has already rebalanced" (CommitFailedException) or, when it
    # is already rejoining, "generation is already stale"; REBALANCE_IN_PROGRESS is "is executing a
    # rebalance"; a commit it refuses itself while it rejoins is "undergoing a rebalance" or, after it lost
    # its membership, "not part of an active group".
    rejoin_errors = (
        "UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS", "RebalanceInProgressException",
        "has already rebalanced", "generation is already stale", "is executing a rebalance",
        "undergoing a rebalance", "not part of an active group",
    )  # fmt: skip
    unexpected = sorted({f for f in failed if not any(k in f for k in rejoin_errors)})
    assert not unexpected, "commits refused with errors a classic client cannot rejoin on:\n" + "\n".join(unexpected)
    print(
        f"adoption: group stable on the gateway {adopt_s:.1f}s after the restart; first commit reached the "
        f"cluster {commit_gap_s:.1f}s after it; back on the cluster's coordinator {back_s:.1f}s after the "
        f"second restart; "
        f"{len(produced)} records produced, {len(log.records)} consumed ({len(log.records) - len(produced)} again); "
        f"commits refused after the move: {len(failed)} {sorted({f[:40] for f in failed})}"
    )
