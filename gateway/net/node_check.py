"""ApiVersions v5 (KIP-1242): the cluster id and node id a client expects, checked against the node table
the gateway gave it.

A 4.4 client sends, on every connection to a node it knows from Metadata (or FindCoordinator), the
cluster id and that node's id; a Kafka 4.4 broker answers REBOOTSTRAP_REQUIRED (129) when either is not
its own, and the client then bootstraps again instead of talking to the wrong node or cluster. Through the
gateway the client's table is the gateway's: the cluster id is the one the gateway presents (the
upstream's, passed through in Metadata and DescribeCluster) and each node is a gateway listener (a
broker's listener, or in a fleet an instance's coordinator node at its bootstrap address). So the
gateway answers the check itself, as a broker would for the node the connection arrived on, and sends the
request on without the two fields: the upstream broker behind a listener is not the node the client
named (a coordinator node's bootstrap listener forwards to any broker).

In Kafka's order: a request with only one of the two fields set is INVALID_REQUEST, as is one whose client
software name or version is malformed (both left to the upstream, which answers them so); only then is a
mismatch REBOOTSTRAP_REQUIRED, answered with an empty api list in the request's version.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Collection
from dataclasses import dataclass

from coordinator.errors import Errors
from gateway.logging import get_logger
from gateway.net.contracts import ClientSide, Slot
from gateway.net.refusals import peer_host
from gateway.wire import codec, frames
from gateway.wire.api_keys import ApiKey

log = get_logger("gateway.net.node_check")

CHECKED_FROM = 5  # the first ApiVersions version carrying ClusterId and NodeId
# Kafka's ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN.
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


@dataclass(frozen=True, slots=True)
class Checked:
    """``answer``: the response payload to send back instead of forwarding (a mismatch); otherwise
    ``forward``: the request frame to send upstream (the fields cleared when they were checked here)."""

    answer: bytes | None = None
    forward: bytes | None = None
    expected: tuple[str | None, int] | None = None  # (cluster id, node id) a mismatching client expected


def check(
    frame: bytes, version: int, cluster_id: str | None, node_ids: Collection[int] | None
) -> Checked:
    """``frame``: an ApiVersions v5+ request frame (size prefix included). ``cluster_id``: the cluster id
    the gateway presents (None: not known yet, not checked). ``node_ids``: the node ids of the listener the
    connection arrived on (None: cannot be told yet, not checked)."""
    payload = frame[4:]
    header, msg = codec.decode_request(ApiKey.API_VERSIONS, version, payload)
    expected_cluster, expected_node = msg.cluster_id, msg.node_id
    if expected_cluster is None and expected_node == -1:
        return Checked(forward=frame)
    if expected_cluster is None or expected_node == -1 or not _valid_software(msg):
        return Checked(forward=frame)  # the upstream answers INVALID_REQUEST, as Kafka does
    mismatch = (cluster_id is not None and expected_cluster != cluster_id) or (
        node_ids is not None and expected_node not in node_ids
    )
    if mismatch:
        body = codec.RESPONSES[ApiKey.API_VERSIONS][version](
            error_code=Errors.REBOOTSTRAP_REQUIRED, api_keys=[], throttle_time_ms=0
        )
        return Checked(
            answer=codec.encode_response(ApiKey.API_VERSIONS, version, header.correlation_id, body),
            expected=(expected_cluster, expected_node),
        )
    msg.cluster_id, msg.node_id = None, -1
    return Checked(forward=frames.frame(bytes(payload[: header.body_offset]) + codec.encode_body(msg, version)))


def _valid_software(msg: object) -> bool:
    name = getattr(msg, "client_software_name", "") or ""
    software_version = getattr(msg, "client_software_version", "") or ""
    return bool(_SOFTWARE.fullmatch(name) and _SOFTWARE.fullmatch(software_version))


def answer_or_forward(conn: ClientSide, node_id: int | None, frame: bytes, version: int) -> bytes | None:
    """The frame ``conn`` (on the listener of ``node_id``, None: bootstrap) sends on, or None when the check
    answered the request (in order, like any answer): REBOOTSTRAP_REQUIRED for a client whose table names another node or cluster. A request that
    does not read as its schema says goes on unchanged (the upstream answers or closes, as Kafka does)."""
    gw = conn.gw
    try:
        checked = check(frame, version, gw.directory.cluster_id, gw.presented_node_ids(node_id))
    except (ValueError, struct.error, IndexError, EOFError, frames.FrameError):
        return frame
    if checked.answer is None:
        return checked.forward
    cluster, node = checked.expected or (None, -1)
    log.info(
        "client expects another node or cluster; answered REBOOTSTRAP_REQUIRED",
        peer=peer_host(conn.peer), expected_cluster_id=cluster, expected_node_id=node,
        cluster_id=gw.directory.cluster_id, listener_node_id=node_id,
    )
    conn.pending.append(Slot(frames.frame(checked.answer)))
    conn.flush()
    return None
