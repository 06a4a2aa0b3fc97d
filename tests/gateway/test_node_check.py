"""ApiVersions v5's node check (gateway/net/node_check.py), without sockets."""

from __future__ import annotations

import struct

from coordinator.errors import Errors
from gateway.net import node_check
from gateway.wire import codec, frames
from gateway.wire.api_keys import ApiKey

CLUSTER = "8zJobMC5SRaoaZuV87Bljg"


def _frame(cluster_id: str | None, node_id: int, software: str = "apache-kafka-java") -> bytes:
    client = b"c1"
    header = struct.pack(">hhih", ApiKey.API_VERSIONS, 5, 42, len(client)) + client + b"\x00"
    body = codec.REQUESTS[ApiKey.API_VERSIONS][5](
        client_software_name=software, client_software_version="4.4.0", cluster_id=cluster_id, node_id=node_id
    ).encode(version=5)
    return frames.frame(header + bytes(body))


def _sent(frame: bytes) -> tuple[str | None, int]:
    _, msg = codec.decode_request(ApiKey.API_VERSIONS, 5, frame[4:])
    return msg.cluster_id, msg.node_id


def test_the_node_and_cluster_the_client_expects_go_upstream_cleared_once_checked() -> None:
    checked = node_check.check(_frame(CLUSTER, 3), 5, CLUSTER, frozenset({3}))
    assert checked.answer is None and checked.forward is not None
    assert _sent(checked.forward) == (None, -1)


def test_another_node_or_cluster_is_answered_rebootstrap_required_in_the_request_version() -> None:
    for cluster, node in ((CLUSTER, 4), ("AAAAAAAAAAAAAAAAAAAAAA", 3)):
        checked = node_check.check(_frame(cluster, node), 5, CLUSTER, frozenset({3}))
        assert checked.answer is not None and checked.expected == (cluster, node)
        assert struct.unpack_from(">i", checked.answer)[0] == 42  # the request's correlation id
        # Kafka's body: error 129, no api keys, throttle 0, no tagged fields.
        assert checked.answer[4:] == struct.pack(">h", Errors.REBOOTSTRAP_REQUIRED) + b"\x01" + b"\x00" * 5
    # The bootstrap listener of a single gateway is no node: any node id there is another node.
    assert node_check.check(_frame(CLUSTER, 3), 5, CLUSTER, frozenset()).answer is not None


def test_what_kafka_refuses_as_invalid_and_what_it_does_not_check_go_upstream_unchanged() -> None:
    for frame in (_frame(None, -1), _frame(CLUSTER, -1), _frame(None, 3), _frame("x", 9, software="-bad-")):
        checked = node_check.check(frame, 5, CLUSTER, frozenset({3}))
        assert checked.answer is None and checked.forward == frame
    # Not known yet (no cluster id, or a fleet instance without its table): not checked.
    assert node_check.check(_frame("x", 9), 5, None, None).answer is None
