"""Group requests with nulls where Kafka's schemas allow none, sent raw through the gateway.

kafka-python (like any hand-rolled client) can put a null string or array (length -1) in any field. Kafka
4.4.0 cannot parse such a request and closes the connection. The gateway answers INVALID_REQUEST in the
request's own response shape, acts on nothing, and, above all, never passes it on over the connections it
shares between clients (an OffsetFetch with a null group id sent there once made the broker drop the
gateway's shared link and failed the commits of every other group in flight on it). Meanwhile a real
consumer group keeps committing through the same gateway: none of its commits may fail.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

import pytest

from compat_tests.harness.clients import ConfluentConsumer, produce_confluent, values
from compat_tests.harness.events import EventLog
from compat_tests.harness.probe import split_address
from coordinator.errors import Errors
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey

pytestmark = pytest.mark.kafka

INVALID_REQUEST = Errors.INVALID_REQUEST
R = codec.REQUESTS


def _raw(address: str, api_key: int, version: int, msg: Any) -> Any | None:
    """The decoded response, or None when the peer closed the connection without answering."""
    msg.with_header(correlation_id=7, client_id="null-probe")
    frame = bytes(msg.encode(version=version, header=True, framed=True))
    with socket.create_connection(split_address(address), timeout=15) as sock:
        sock.sendall(frame)
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            buf += chunk
    return codec.decode_response(api_key, version, buf[4:])[1]


OF = R[ApiKey.OFFSET_FETCH]
OC = R[ApiKey.OFFSET_COMMIT]
JG = R[ApiKey.JOIN_GROUP]
SG = R[ApiKey.SYNC_GROUP]
LG = R[ApiKey.LEAVE_GROUP]


def _cases(group: str) -> list[tuple[str, int, int, Any, Callable[[Any], list[int]]]]:
    """(what, api key, version, request, error codes the answer carries)."""
    top = lambda r: [r.error_code]  # noqa: E731
    groups = lambda r: [g.error_code for g in r.groups]  # noqa: E731
    proto = [JG.JoinGroupRequestProtocol(name="range", metadata=b"")]
    return [
        ("JoinGroup v5 null protocols", ApiKey.JOIN_GROUP, 5,
         JG[5](group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
               group_instance_id=None, protocol_type="consumer", protocols=None), top),
        ("JoinGroup v9 null group id", ApiKey.JOIN_GROUP, 9,
         JG[9](group_id=None, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
               group_instance_id=None, protocol_type="consumer", protocols=proto, reason=None), top),
        ("JoinGroup v5 null protocol metadata", ApiKey.JOIN_GROUP, 5,
         JG[5](group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
               group_instance_id=None, protocol_type="consumer",
               protocols=[JG.JoinGroupRequestProtocol(name="range", metadata=None)]), top),
        ("SyncGroup v3 null assignments", ApiKey.SYNC_GROUP, 3,
         SG[3](group_id=group, generation_id=1, member_id="m", group_instance_id=None, assignments=None), top),
        ("Heartbeat v3 null member id", ApiKey.HEARTBEAT, 3,
         R[ApiKey.HEARTBEAT][3](group_id=group, generation_id=1, member_id=None, group_instance_id=None), top),
        ("LeaveGroup v3 null members", ApiKey.LEAVE_GROUP, 3, LG[3](group_id=group, members=None), top),
        ("ConsumerGroupHeartbeat v0 null member id", ApiKey.CONSUMER_GROUP_HEARTBEAT, 0,
         R[ApiKey.CONSUMER_GROUP_HEARTBEAT][0](group_id=group, member_id=None, member_epoch=0, instance_id=None,
                                           rack_id=None, rebalance_timeout_ms=10000, subscribed_topic_names=["t"],
                                           subscribed_topic_regex=None, server_assignor=None,
                                           topic_partitions=[]), top),
        ("OffsetFetch v7 null group id", ApiKey.OFFSET_FETCH, 7, OF[7](group_id=None, topics=None, require_stable=False), top),
        ("OffsetFetch v9 null group id", ApiKey.OFFSET_FETCH, 9,
         OF[9](groups=[OF.OffsetFetchRequestGroup(group_id=None, member_id=None, member_epoch=-1, topics=None)],
               require_stable=False), groups),
        ("OffsetCommit v8 null topics", ApiKey.OFFSET_COMMIT, 8,
         OC[8](group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
               topics=None), lambda r: [INVALID_REQUEST] if r.topics == [] else [0]),
        ("OffsetCommit v8 null group id", ApiKey.OFFSET_COMMIT, 8,
         OC[8](group_id=None, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
               topics=[OC.OffsetCommitRequestTopic(name="t", partitions=[
                   OC.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                       partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])]),
         lambda r: [p.error_code for t in r.topics for p in t.partitions]),
        ("DescribeGroups v5 null group id", ApiKey.DESCRIBE_GROUPS, 5,
         R[ApiKey.DESCRIBE_GROUPS][5](groups=[None], include_authorized_operations=False), groups),
        ("ConsumerGroupDescribe v0 null group id", ApiKey.CONSUMER_GROUP_DESCRIBE, 0,
         R[ApiKey.CONSUMER_GROUP_DESCRIBE][0](group_ids=[None], include_authorized_operations=False), groups),
        ("DeleteGroups v2 null group id", ApiKey.DELETE_GROUPS, 2, R[ApiKey.DELETE_GROUPS][2](groups_names=[None]),
         lambda r: [x.error_code for x in r.results]),
        ("OffsetDelete v0 null group id", ApiKey.OFFSET_DELETE, 0, R[ApiKey.OFFSET_DELETE][0](group_id=None, topics=[]), top),
        ("ListGroups v4 null states filter", ApiKey.LIST_GROUPS, 4, R[ApiKey.LIST_GROUPS][4](states_filter=None), top),
        ("FindCoordinator v4 null keys", ApiKey.FIND_COORDINATOR, 4,
         R[ApiKey.FIND_COORDINATOR][4](key_type=0, coordinator_keys=None), lambda r: [INVALID_REQUEST] if not r.coordinators else [0]),
    ]  # fmt: skip


def test_null_fields_get_invalid_request_while_a_group_commits(kafka, module_gateway, make_topic, names):
    topic = make_topic(partitions=2)
    produced = produce_confluent(kafka.bootstrap, topic, values("n", 2000))
    log = EventLog()
    consumer = ConfluentConsumer(
        name="c1", log=log, bootstrap=module_gateway.bootstrap, group_id=names("group"), topics=[topic],
        tolerate_commit_errors=True, config={"max.partition.fetch.bytes": 1024},
    )
    probe_group = names("probe")
    with consumer:
        log.wait_until(lambda e: e.count() > 0, 30, "the consumer group consumes")
        stop = threading.Event()
        results: dict[str, tuple[Any, Any]] = {}

        def probe_all() -> None:
            # Twice over, while the consumer commits: any bad request reaching a shared link would show.
            for _ in range(2):
                for what, api_key, version, msg, _errors in _cases(probe_group):
                    results[what] = (_raw(module_gateway.bootstrap, api_key, version, msg), None)
            stop.set()

        t = threading.Thread(target=probe_all)
        t.start()
        t.join(60)
        assert stop.is_set()
        log.wait_until(lambda e: e.covers(produced), 60, "every record consumed")
    assert consumer.commit_errors == [], f"commits failed while bad requests were answered: {consumer.commit_errors}"
    for what, _api, _v, _msg, errors in _cases(probe_group):
        response = results[what][0]
        assert response is not None, f"{what}: the gateway closed the connection instead of answering"
        assert set(errors(response)) == {INVALID_REQUEST}, f"{what}: {response}"
    if not getattr(module_gateway, "direct", False):
        text = module_gateway.log_path.read_text()
        assert "Traceback" not in text, text[text.index("Traceback") - 2000 :][:6000]


@pytest.mark.parametrize("what", ["OffsetFetch v7 null group id", "JoinGroup v5 null protocols", "Heartbeat v3 null member id"])
def test_kafka_itself_drops_the_connection(kafka, what):
    """What the gateway answers INVALID_REQUEST to, Kafka 4.4.0 cannot parse: it closes the connection
    without a response (so there is no error code of Kafka's to compare with)."""
    ((_, api_key, version, msg, _),) = [c for c in _cases("null-probe-direct") if c[0] == what]
    assert _raw(kafka.bootstrap, api_key, version, msg) is None
