"""Answers for requests that need the cluster while no upstream link can be made (a broker outage).

A client connection reads and answers what the gateway answers itself whether or not it has an
upstream link; a request that must go to the cluster waits for the link, and when the link cannot be
made (or breaks with the request in flight) it is answered here, in its own response format, with an
error that the Java client and librdkafka retry without giving up their group membership:

- ApiVersions: the last answer the upstream gave to the identical request (same client id and body),
  else the gateway's own version ranges. A client can (re)connect during an outage.
- Metadata, DescribeCluster: the last answer to the identical request (what the client already had:
  no topic or partition disappears, so no consumer group leader sees a changed subscription and
  rebalances). A Metadata request not seen before: the brokers of the last Metadata response and
  the last entry seen of each topic it names (LEADER_NOT_AVAILABLE for a topic never seen). Nothing
  cached (a DescribeCluster never answered, no Metadata ever): the connection is closed (there is
  nothing true to say).
- Fetch, Produce, ListOffsets, OffsetForLeaderEpoch: NOT_LEADER_OR_FOLLOWER on every partition named (both clients refresh
  metadata and retry after their backoff); an incremental Fetch (KIP-227 session epoch > 0)
  FETCH_SESSION_ID_NOT_FOUND, which makes the client send a full fetch.
- Group and transaction coordinator requests (groups the gateway does not manage, transactions):
  COORDINATOR_NOT_AVAILABLE, top-level or on every group / partition named.
- Any other API with a top-level ErrorCode: REQUEST_TIMED_OUT (retriable). Without one: None, and
  the connection is closed, as the broker's death would have closed it.

Nothing here does I/O; ``Replies`` is the bounded cache of the last upstream answers.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from typing import Any

from coordinator.errors import Errors
from gateway.wire import codec
from gateway.wire import group_codec as gc
from gateway.wire.api_keys import ApiKey

_HEAD = struct.Struct(">hh")
_MAX_TOPICS = 100_000

# Requests served by a group or transaction coordinator (groups the gateway does not manage pass
# through): COORDINATOR_NOT_AVAILABLE makes clients look the coordinator up again and retry, where
# another error code would be fatal to some (the Java consumer's JoinGroup).
COORDINATOR_APIS = frozenset(
    {
        ApiKey.FIND_COORDINATOR, ApiKey.OFFSET_COMMIT, ApiKey.OFFSET_FETCH, ApiKey.JOIN_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP,
        ApiKey.SYNC_GROUP, ApiKey.DESCRIBE_GROUPS, ApiKey.LIST_GROUPS, ApiKey.TXN_OFFSET_COMMIT, ApiKey.DELETE_GROUPS,
        ApiKey.OFFSET_DELETE, ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE,
        22, 24, 25, 26,  # InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn
    }
)  # fmt: skip

# Reads whose last answer is replayed during an outage.
REPLAYED = frozenset({ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.DESCRIBE_CLUSTER})
_MAX_REPLIES = 1024


def _key(frame: bytes) -> bytes:
    # api key + version, then everything after the correlation id (client id, tagged fields, body)
    return frame[4:8] + frame[12:]


class Replies:
    """The last upstream answer (rewritten, header included) to each distinct replayable request, and
    the last Metadata seen of each topic, to answer Metadata requests not seen before."""

    def __init__(self, limit: int = _MAX_REPLIES) -> None:
        self.limit = limit
        self._last: OrderedDict[bytes, bytes] = OrderedDict()
        self._metadata: Any = None  # the last Metadata response (rewritten, decoded), any version
        self._topics: dict[Any, Any] = {}  # topic name and topic id -> its last entry, any version

    def remember(self, request_frame: bytes, response_payload: bytes) -> None:
        key = _key(request_frame)
        self._last[key] = response_payload
        self._last.move_to_end(key)
        if len(self._last) > self.limit:
            self._last.popitem(last=False)
        api_key, version = _HEAD.unpack_from(request_frame, 4)
        if api_key == ApiKey.METADATA:
            try:
                msg = codec.decode_response(api_key, version, response_payload)[1]
            except Exception:  # noqa: BLE001 - it was just rewritten from a decoded response; keep serving
                return
            self._metadata = msg
            topics = self._topics
            if len(topics) > _MAX_TOPICS:
                topics.clear()
            for t in msg.topics:
                if t.error_code == 0:
                    # Entries encode at any version; one from a version without topic ids keeps the id
                    # an earlier entry had.
                    tid = getattr(t, "topic_id", None)
                    if (tid is None or tid.int == 0) and t.name in topics:
                        t.topic_id = getattr(topics[t.name], "topic_id", None)
                        tid = t.topic_id
                    topics[t.name] = t
                    if tid is not None and tid.int != 0:
                        topics[tid] = t

    def metadata(self, request_frame: bytes, version: int, correlation_id: int) -> bytes | None:
        """A Metadata response assembled from the last ones seen, of any version (brokers of the latest,
        each named topic's latest entry; a topic never seen: LEADER_NOT_AVAILABLE), or None before any."""
        latest = self._metadata
        if latest is None:
            return None
        known = self._topics
        try:
            _, req = codec.decode_request(ApiKey.METADATA, version, request_frame[4:])
        except (ValueError, struct.error, IndexError):
            return None  # a request the broker could not read either: no answer, the connection closes
        cls = codec.RESPONSES[ApiKey.METADATA]
        if req.topics is None:
            topics = list({id(t): t for t in known.values()}.values())
        else:
            topics = []
            for rt in req.topics:
                name = rt.name
                tid = getattr(rt, "topic_id", None)
                found = known.get(name) if name is not None else known.get(tid)
                if found is None:
                    found = cls.MetadataResponseTopic(
                        error_code=Errors.LEADER_NOT_AVAILABLE, name=name, topic_id=tid, is_internal=False, partitions=[]
                    )
                topics.append(found)
        msg = cls[version](
            throttle_time_ms=0,
            brokers=latest.brokers,
            cluster_id=getattr(latest, "cluster_id", None),
            controller_id=getattr(latest, "controller_id", -1),
            topics=topics,
        )
        return codec.encode_response(ApiKey.METADATA, version, correlation_id, msg)

    def replay(self, request_frame: bytes, correlation_id: int) -> bytes | None:
        payload = self._last.get(_key(request_frame))
        if payload is None:
            return None
        return correlation_id.to_bytes(4, "big", signed=True) + payload[4:]


def answer(
    frame: bytes, api_key: int, version: int, correlation_id: int, replies: Replies, api_ranges: dict[int, tuple[int, int]]
) -> bytes | None:
    """The response payload (header + body) for a request the cluster cannot be asked, or None."""
    if api_key in REPLAYED:
        replayed = replies.replay(frame, correlation_id)
        if replayed is not None:
            return replayed
        if api_key == ApiKey.METADATA:
            return replies.metadata(frame, version, correlation_id)
        if api_key != ApiKey.API_VERSIONS:
            return None
        api_versions = codec.RESPONSES[ApiKey.API_VERSIONS]
        msg = api_versions[version](
            error_code=0,
            api_keys=[
                api_versions.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in sorted(api_ranges.items())
            ],
            throttle_time_ms=0,
        )
        return codec.encode_response(api_key, version, correlation_id, msg)
    try:
        body = _partition_errors(frame, api_key, version)
    except Exception:  # noqa: BLE001 - a request we cannot read back: no per-partition answer
        body = None
    if body is not None:
        return codec.encode_response(api_key, version, correlation_id, body)
    coordinator = api_key in COORDINATOR_APIS
    code = Errors.COORDINATOR_NOT_AVAILABLE if coordinator else Errors.REQUEST_TIMED_OUT
    payload = codec.error_response(api_key, version, correlation_id, code)
    if payload is None and coordinator and api_key in gc.LOCAL_API:
        _, msg = codec.decode_request(api_key, version, frame[4:])
        refused = gc.refusal(api_key, version, msg, code)
        if refused is not None:
            payload = codec.encode_response(api_key, version, correlation_id, refused)
    return payload


def _partition_errors(frame: bytes, api_key: int, version: int) -> object | None:
    if api_key not in (ApiKey.FETCH, ApiKey.PRODUCE, ApiKey.LIST_OFFSETS, ApiKey.OFFSET_FOR_LEADER_EPOCH) or not codec.known(api_key):
        return None
    _, msg = codec.decode_request(api_key, version, frame[4:])
    if api_key == ApiKey.FETCH and version >= 7 and msg.session_epoch > 0:
        return codec.RESPONSES[api_key][version](error_code=Errors.FETCH_SESSION_ID_NOT_FOUND, session_id=0, responses=[])
    return partition_errors(api_key, version, msg, Errors.NOT_LEADER_OR_FOLLOWER)


def partition_errors(api_key: int, version: int, msg: Any, code: int) -> Any:
    """The response to Fetch, Produce, ListOffsets or OffsetForLeaderEpoch request ``msg`` carrying ``code``
    on every partition it names (also the refusals of gateway/authz/data.py)."""
    cls = codec.RESPONSES[api_key]
    if api_key == ApiKey.FETCH:
        tcls = cls.FetchableTopicResponse
        pcls = tcls.PartitionData
        return cls[version](
            error_code=0,
            session_id=0,
            responses=[
                tcls(
                    topic=t.topic if version <= 12 else "",
                    topic_id=t.topic_id if version >= 13 else None,
                    partitions=[
                        pcls(partition_index=p.partition, error_code=code, high_watermark=-1,
                             last_stable_offset=-1, log_start_offset=-1, records=b"")
                        for p in t.partitions
                    ],
                )
                for t in msg.topics
            ],
        )  # fmt: skip
    if api_key == ApiKey.PRODUCE:
        tcls = cls.TopicProduceResponse
        pcls = tcls.PartitionProduceResponse
        return cls[version](
            responses=[
                tcls(
                    name=t.name if version <= 12 else "",
                    topic_id=t.topic_id if version >= 13 else None,
                    partition_responses=[
                        pcls(index=p.index, error_code=code, base_offset=-1, log_start_offset=-1)
                        for p in t.partition_data
                    ],
                )
                for t in msg.topic_data
            ]
        )
    if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
        tcls = cls.OffsetForLeaderTopicResult
        pcls = tcls.EpochEndOffset
        return cls[version](
            topics=[
                tcls(
                    topic=t.topic,
                    partitions=[
                        pcls(error_code=code, partition=p.partition, leader_epoch=-1, end_offset=-1)
                        for p in t.partitions
                    ],
                )
                for t in msg.topics
            ]
        )
    tcls = cls.ListOffsetsTopicResponse
    pcls = tcls.ListOffsetsPartitionResponse
    return cls[version](
        topics=[
            tcls(
                name=t.name,
                partitions=[pcls(partition_index=p.partition_index, error_code=code) for p in t.partitions],
            )
            for t in msg.topics
        ]
    )

