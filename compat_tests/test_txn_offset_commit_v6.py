"""TxnOffsetCommit v6 (KIP-1319, Kafka 4.4): topics by id, a consumer member's stale epoch answered
STALE_MEMBER_EPOCH and an unknown group GROUP_ID_NOT_FOUND (v5 answers both ILLEGAL_GENERATION).

Two views, each against the Kafka 4.4.0 broker directly and through the gateway (which coordinates the
group itself and writes the offsets through to the cluster):
- Kafka 4.4.0's own transactional producer (``sendOffsetsToTransaction``, compat_tests/java/TxnRoundtrip.java)
  sends TxnOffsetCommit v6 when its metadata knows the id of every topic it commits for (here: the topic
  it produces to), v5 by name otherwise; the versions are read from its NetworkClient's debug log;
- raw requests within one real transaction (InitProducerId, then the commits, then EndTxn) for a KIP-848
  member joined with a raw ConsumerGroupHeartbeat: the same error code per partition for each case.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.metadata import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)

from compat_tests.harness import java
from compat_tests.harness.probe import roundtrip
from coordinator.errors import Errors
from gateway.ops import kafka_dist
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey

pytestmark = pytest.mark.kafka

JAVA_DIR = Path(__file__).resolve().parent / "java"
RELEASE = kafka_dist.CURRENT_KAFKA
GROUP, TXN = 0, 1  # FindCoordinator key types
# Retriable while the coordinators' internal topics are created or a previous transaction completes:
# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS.
_RETRIABLE = {14, 15, 16, 51}
UNSTABLE_OFFSET_COMMIT = 88


def _targets(kafka: Any, gateway: Any) -> dict[str, str]:
    if getattr(gateway, "direct", False):
        pytest.skip("--compat-direct: the comparison needs the gateway")
    return {"direct": kafka.bootstrap, "gateway": gateway.bootstrap}


def _retried(send: Callable[[], Any], code_of: Callable[[Any], int], what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        response = send()
        if code_of(response) not in _RETRIABLE or time.monotonic() > deadline:
            return response
        time.sleep(0.3)


def _coordinator(bootstrap: str, key: str, key_type: int) -> str:
    def send() -> Any:
        req = FindCoordinatorRequest[4](key_type=key_type, coordinator_keys=[key])
        return roundtrip(bootstrap, req, FindCoordinatorResponse, 4).coordinators[0]

    c = _retried(send, lambda c: c.error_code, f"FindCoordinator {key}")
    assert c.error_code == 0, (key, c.error_code, c.error_message)
    return f"{c.host}:{c.port}"


def _topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    req = MetadataRequest[12](topics=[MetadataRequest[12].MetadataRequestTopic(topic_id=None, name=topic)],
                              allow_auto_topic_creation=False)  # fmt: skip
    resp = roundtrip(bootstrap, req, MetadataResponse, 12)
    (t,) = resp.topics
    assert t.error_code == 0, t
    return t.topic_id


def _send(address: str, api_key: int, version: int, **fields: Any) -> Any:
    return roundtrip(address, codec.REQUESTS[api_key][version](**fields), codec.RESPONSES[api_key], version)


# --- what Kafka 4.4.0's transactional producer sends ---------------------------------------------------

_SENT = re.compile(r"Sending TXN_OFFSET_COMMIT request with header RequestHeader\(apiKey=TXN_OFFSET_COMMIT, apiVersion=(\d+)")


def test_kafka_4_4_transactional_producer_sends_txn_offset_commit_v6_alike_direct_and_through_the_gateway(
    kafka: Any, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str], java_logs: Path,
) -> None:
    """``sendOffsetsToTransaction`` of kafka-clients 4.4.0 builds TxnOffsetCommit by topic id when its
    metadata knows every committed topic's id (TransactionManager.txnOffsetCommitHandler, ``forTopicIdsOrNames``)
    and transaction version 2 is on: it then sends v6 to the broker, and to the gateway, which advertises
    v6 because the broker does. The transactions' outcome is the same both ways."""
    targets = _targets(kafka, module_gateway)
    try:
        jars = java.tools_classpath(RELEASE)
        classes = java.compiled(JAVA_DIR / "TxnRoundtrip.java", jars)
    except (FileNotFoundError, kafka_dist.FetchError) as e:
        pytest.skip(f"cannot build the Java transactional clients: {e}")
    tools = {}
    for name, address in targets.items():
        args = ["roundtrip", address, make_topic(1), names(f"txn-{name}"), names(f"group-{name}"), "3", "2"]
        tools[name] = java.JavaTool(
            RELEASE, "TxnRoundtrip", args, heap="256m", log_dir=java_logs, classpath=f"{classes}:{jars}",
            log_levels={"org.apache.kafka.clients.NetworkClient": "debug"},
        ).start()
    try:
        for tool in tools.values():
            tool.wait_for(lambda t: bool(t.named("result")), 120, "result line")
            tool.wait(30)
    finally:
        for tool in tools.values():
            tool.stop()
    sent = {name: _SENT.findall(tool.stderr_path.read_text(errors="replace")) for name, tool in tools.items()}
    results = {name: tool.named("result")[-1].data for name, tool in tools.items()}
    # At least one TxnOffsetCommit per transaction (one more after a retriable error), all at v6; on the
    # broker first.
    assert len(sent["direct"]) >= 3 and set(sent["direct"]) == {"6"}, sent
    assert len(sent["gateway"]) >= 3 and set(sent["gateway"]) == {"6"}, sent
    assert results["gateway"] == results["direct"]
    assert results["direct"]["group_offset"] == 1000 + 1  # the transaction k = 2 was aborted


# --- raw TxnOffsetCommit v6 within a transaction ------------------------------------------------------


def _join(coordinator: str, group: str, topic: str, topic_id: uuid.UUID) -> tuple[str, int]:
    """A KIP-848 member of ``group`` subscribed to ``topic`` (one partition), heartbeating until partition
    0 is assigned and acknowledged: (member id, member epoch)."""
    member = uuid.uuid4().hex[:22]
    epoch, owned = 0, []
    owns = codec.REQUESTS[ApiKey.CONSUMER_GROUP_HEARTBEAT][1].TopicPartitions
    deadline = time.monotonic() + 60
    while True:
        r = _send(
            coordinator, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1,
            group_id=group, member_id=member, member_epoch=epoch, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30000, subscribed_topic_names=[topic], subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=[owns(topic_id=t["topic_id"], partitions=t["partitions"]) for t in owned],
        )  # fmt: skip
        assert r.error_code in (0, *_RETRIABLE), (r.error_code, r.error_message)
        if r.error_code == 0:
            epoch = r.member_epoch
            if r.assignment is not None:
                got = [{"topic_id": t.topic_id, "partitions": list(t.partitions)} for t in r.assignment.topic_partitions]
                if got == [{"topic_id": topic_id, "partitions": [0]}] and owned == got:
                    return member, epoch
                owned = got
        assert time.monotonic() < deadline, "the member got no assignment"
        time.sleep(0.2)


def _commit(
    coordinator: str, version: int, txn: dict[str, Any], group: str, member: str, epoch: int,
    topic: str, topic_id: uuid.UUID, offset: int,
) -> list[tuple[str, int, int]]:
    """TxnOffsetCommit of partition 0 at ``offset``: (topic, partition, error code) per partition, the
    topic named ``<topic>`` when it is the one committed for (by id from v6, by name before)."""
    cls = codec.REQUESTS[ApiKey.TXN_OFFSET_COMMIT][version]
    tcls = cls.TxnOffsetCommitRequestTopic
    part = tcls.TxnOffsetCommitRequestPartition(
        partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata="",
    )
    by_id = version >= 6
    t = tcls(topic_id=topic_id, partitions=[part]) if by_id else tcls(name=topic, partitions=[part])
    r = _send(
        coordinator, ApiKey.TXN_OFFSET_COMMIT, version, transactional_id=txn["id"], group_id=group,
        producer_id=txn["producer_id"], producer_epoch=txn["producer_epoch"],
        generation_id_or_member_epoch=epoch, member_id=member, group_instance_id=None, topics=[t],
    )  # fmt: skip
    ours = topic_id if by_id else topic
    return [
        ("<topic>" if (rt.topic_id if by_id else rt.name) == ours else "<another>", p.partition_index, p.error_code)
        for rt in r.topics for p in rt.partitions
    ]  # fmt: skip


def _scenario(bootstrap: str, topic: str, group: str, txn_id: str) -> dict[str, Any]:
    topic_id = _topic_id(bootstrap, topic)
    group_coordinator = _coordinator(bootstrap, group, GROUP)
    member, epoch = _join(group_coordinator, group, topic, topic_id)
    txn_coordinator = _coordinator(bootstrap, txn_id, TXN)
    init = _retried(
        lambda: _send(txn_coordinator, ApiKey.INIT_PRODUCER_ID, 5, transactional_id=txn_id,
                      transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1),
        lambda r: r.error_code, "InitProducerId",
    )  # fmt: skip
    assert init.error_code == 0, init
    txn = {"id": txn_id, "producer_id": init.producer_id, "producer_epoch": init.producer_epoch}
    unknown_group = group + "-unknown"

    def commit(version: int, group_id: str, member_id: str, member_epoch: int, offset: int, tid: uuid.UUID = topic_id) -> Any:
        return _commit(group_coordinator if group_id == group else _coordinator(bootstrap, group_id, GROUP),
                       version, txn, group_id, member_id, member_epoch, topic, tid, offset)  # fmt: skip

    out: dict[str, Any] = {}
    # In the order a client meets them; the valid commit last, so the transaction commits its offset.
    out["v6 epoch below the member's"] = commit(6, group, member, epoch - 1, 3)
    out["v6 epoch above the member's"] = commit(6, group, member, epoch + 1, 4)
    out["v6 unknown member"] = commit(6, group, uuid.uuid4().hex[:22], epoch, 5)
    out["v6 unknown group"] = commit(6, unknown_group, "", epoch, 5)
    out["v6 unknown topic id"] = commit(6, group, member, epoch, 6, uuid.uuid4())
    out["v5 epoch below the member's"] = commit(5, group, member, epoch - 1, 3)
    out["v5 unknown group"] = commit(5, unknown_group, "", epoch, 5)
    # The one deliberate difference (docs/compatibility.md, "Offset commits"): a member id committing to a
    # group the gateway does not know is told UNKNOWN_MEMBER_ID, so that the members of a group moving
    # over from the cluster's coordinator rejoin (docs/operations.md, "Adopting a live group").
    out["adopted: v6 unknown group, a member id"] = commit(6, unknown_group, member, epoch, 5)
    out["v6 valid"] = commit(6, group, member, epoch, 7)
    end = _retried(
        lambda: _send(txn_coordinator, ApiKey.END_TXN, 5, transactional_id=txn_id, producer_id=txn["producer_id"],
                      producer_epoch=txn["producer_epoch"], committed=True),
        lambda r: r.error_code, "EndTxn",
    )  # fmt: skip
    out["EndTxn"] = end.error_code
    out["committed"] = _committed_offset(group_coordinator, group, member, epoch, topic_id)
    return out


def _committed_offset(coordinator: str, group: str, member: str, epoch: int, topic_id: uuid.UUID) -> tuple[int, int]:
    """OffsetFetch v10 (stable offsets only, as the member asks): (error code, offset) of partition 0,
    retried while the transaction's markers are being written (UNSTABLE_OFFSET_COMMIT)."""

    def send() -> Any:
        cls = codec.REQUESTS[ApiKey.OFFSET_FETCH][10]
        gcls = cls.OffsetFetchRequestGroup
        g = gcls(group_id=group, member_id=member, member_epoch=epoch,
                 topics=[gcls.OffsetFetchRequestTopics(topic_id=topic_id, partition_indexes=[0])])  # fmt: skip
        r = roundtrip(coordinator, cls(groups=[g], require_stable=True), codec.RESPONSES[ApiKey.OFFSET_FETCH], 10)
        return r.groups[0]

    def code(g: Any) -> int:
        if g.error_code:
            return int(g.error_code)
        return 51 if g.topics[0].partitions[0].error_code == UNSTABLE_OFFSET_COMMIT else int(g.topics[0].partitions[0].error_code)

    g = _retried(send, code, "OffsetFetch")
    if g.error_code:
        return int(g.error_code), -1
    p = g.topics[0].partitions[0]
    return int(p.error_code), int(p.committed_offset)


def test_txn_offset_commit_v6_answers_a_consumer_member_as_kafka_4_4_does_direct_and_through_the_gateway(
    kafka: Any, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str],
) -> None:
    """Kafka 4.4.0 checks the transaction before the group (TV2: a TxnOffsetCommit v5+ adds the group's
    offsets partition to the transaction itself), so every case below runs inside one open transaction of
    a real transactional id, as a producer's ``sendOffsetsToTransaction`` does. The gateway refuses a bad
    member, group or topic id without asking the cluster: the offsets partition of those groups is then
    not in the transaction it ends, which no answer shows; the per-partition error codes, EndTxn's and
    the committed offset are compared, and they are equal."""
    targets = _targets(kafka, module_gateway)
    topic = make_topic(1)
    outcomes = {name: _scenario(address, topic, names(f"g-{name}"), names(f"t-{name}")) for name, address in targets.items()}
    broker = outcomes["direct"]
    # Kafka 4.4.0's own answers first.
    stale = [("<topic>", 0, int(Errors.STALE_MEMBER_EPOCH))]
    assert broker["v6 epoch below the member's"] == stale, broker
    assert broker["v6 epoch above the member's"] == stale, broker
    assert broker["v6 unknown member"] == [("<topic>", 0, int(Errors.UNKNOWN_MEMBER_ID))], broker
    assert broker["v6 unknown group"] == [("<topic>", 0, int(Errors.GROUP_ID_NOT_FOUND))], broker
    assert broker["v6 unknown topic id"] == [("<topic>", 0, int(Errors.UNKNOWN_TOPIC_ID))], broker
    assert broker["v5 epoch below the member's"] == [("<topic>", 0, int(Errors.ILLEGAL_GENERATION))], broker
    assert broker["v5 unknown group"] == [("<topic>", 0, int(Errors.ILLEGAL_GENERATION))], broker
    assert broker["adopted: v6 unknown group, a member id"] == [("<topic>", 0, int(Errors.GROUP_ID_NOT_FOUND))], broker
    assert broker["v6 valid"] == [("<topic>", 0, 0)], broker
    assert broker["EndTxn"] == 0 and broker["committed"] == (0, 7), broker
    gateway = dict(outcomes["gateway"])
    assert gateway.pop("adopted: v6 unknown group, a member id") == [("<topic>", 0, int(Errors.UNKNOWN_MEMBER_ID))]
    broker.pop("adopted: v6 unknown group, a member id")
    assert gateway == broker
