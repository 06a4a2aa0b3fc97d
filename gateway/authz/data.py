"""Authorization of the requests a terminating gateway passes through (docs/gateway.md, "Authorization of
passed-through requests under SASL termination").

With ``listener_sasl_mode = "terminate"`` the cluster sees only the gateway's own principal, so it cannot
authorize what a client sends through. The gateway does, for the principal the client authenticated as,
with the cluster's ACLs (gateway/authz/acls.py, translate/authorizer.py) and the checks and error codes of Kafka
4.3's KafkaApis:

| API | checks | refused as |
| --- | --- | --- |
| Produce | WRITE on the transactional id (if any); WRITE per topic | TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition; TOPIC_AUTHORIZATION_FAILED per partition |
| Fetch (asked without a fetch session) | READ per topic; a follower's fetch: CLUSTER_ACTION on the cluster | TOPIC_AUTHORIZATION_FAILED per partition |
| ListOffsets, OffsetForLeaderEpoch | DESCRIBE per topic; a follower's OffsetForLeaderEpoch: CLUSTER_ACTION | TOPIC_ / CLUSTER_AUTHORIZATION_FAILED per partition |
| Metadata | DESCRIBE per topic; auto-creation: CREATE on the cluster or the topic | named: TOPIC_AUTHORIZATION_FAILED for that topic; listing all: left out |
| InitProducerId | WRITE on the transactional id; without one, IDEMPOTENT_WRITE on the cluster or WRITE on some topic | TRANSACTIONAL_ID_ / CLUSTER_AUTHORIZATION_FAILED |
| AddPartitionsToTxn v0-3 | WRITE on the transactional id, WRITE per topic | TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition; TOPIC_AUTHORIZATION_FAILED on refused topics, OPERATION_NOT_ATTEMPTED on the others |
| AddPartitionsToTxn v4+ (brokers') | CLUSTER_ACTION on the cluster | CLUSTER_AUTHORIZATION_FAILED |
| AddOffsetsToTxn | WRITE on the transactional id, READ on the group | TRANSACTIONAL_ID_ / GROUP_AUTHORIZATION_FAILED |
| EndTxn | WRITE on the transactional id | TRANSACTIONAL_ID_AUTHORIZATION_FAILED |
| TxnOffsetCommit (groups passed through) | WRITE on the transactional id, READ on the group, READ per topic | the request, on every partition |
| group APIs of groups passed through | as gateway/authz/groups.py's table (an all-topics OffsetFetch is refused) | the request; describe answers filtered |
| ApiVersions, DescribeCluster, SaslHandshake/Authenticate | none (as Kafka; DescribeCluster's authorized operations are the client's) | |
| anything else | only super users | the API's authorization error (CLUSTER_AUTHORIZATION_FAILED ...) |

Produce, Fetch, ListOffsets, OffsetForLeaderEpoch and Metadata mixing allowed and refused topics: the
allowed part is forwarded and the refusals merged into the cluster's answer, as Kafka answers per topic.
Decisions are made on the ACL snapshot as last read (no fresh read per denial, unlike the group APIs: a
data request is not held back for a read); a grant counts from the next read (``acl_refresh_interval_ms``).
Without a snapshot, or when strict mode is unsure, everything is refused (fail closed).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from coordinator.errors import Errors
from gateway.authz.groups import (
    CLUSTER_NAME,
    GROUP_OPERATION,
    PER_GROUP_OPERATION,
    TOPIC_OPERATION,
    Access,
    GroupAuthorizer,
    streams_topology_topics,
)
from gateway.net import unreachable
from gateway.net.contracts import Verdict
from gateway.wire import codec, frames
from gateway.wire import group_codec as gc
from gateway.wire.api_keys import ApiKey
from gateway.wire.group_codec import group_ids
from translate.authorizer import AclBinding, Operation, Permission, ResourceType

READ, WRITE, DESCRIBE, CREATE = Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.CREATE
TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID

# Kafka authorizes nothing of these (DescribeCluster's authorized operations are computed, not checked).
FREE = frozenset({ApiKey.API_VERSIONS, ApiKey.DESCRIBE_CLUSTER, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
# The per-topic APIs: (request topics field, name field, response topics field, operation).
PER_TOPIC: dict[int, tuple[str, str, str, Operation]] = {
    ApiKey.PRODUCE: ("topic_data", "name", "responses", WRITE),
    ApiKey.FETCH: ("topics", "topic", "responses", READ),
    ApiKey.LIST_OFFSETS: ("topics", "name", "topics", DESCRIBE),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: ("topics", "topic", "topics", DESCRIBE),
}
# The first versions naming topics by id (KIP-516): Produce v13, Fetch v13.
TOPIC_ID_FROM: dict[int, int] = {ApiKey.PRODUCE: 13, ApiKey.FETCH: 13}
_NULL_ID = uuid.UUID(int=0)


class DataAuthorizer:
    """The per-API checks of the table above. ``names()``: topic id -> name (the gateway's topic image);
    ``unknown_id()``: a request named an id it lacks (the image is read again)."""

    def __init__(
        self, authz: GroupAuthorizer, names: Callable[[], dict[uuid.UUID, str]],
        unknown_id: Callable[[], None] = lambda: None,
    ) -> None:
        self.authz = authz
        self.names = names
        self.unknown_id = unknown_id  # called when a request names an id ``names()`` lacks

    def check(self, principal: str, host: str, api_key: int, version: int, frame: bytes, acks0: bool = False) -> Verdict | None:
        """None: pass ``frame`` on unchanged."""
        if api_key in FREE and api_key != ApiKey.DESCRIBE_CLUSTER:
            return None
        access = self.authz.access(principal, host)
        if self.authz.unsure() is None and (self.authz.cache.open or principal in self.authz.cache.super_users):
            return None
        corr = int.from_bytes(frame[8:12], "big", signed=True)
        try:
            header, msg = codec.decode_request(api_key, version, frame[4:])
        except Exception as e:  # noqa: BLE001 - a broker closes a connection on a request it cannot read
            return Verdict(f"unreadable request ({e})", close=True)
        head = bytes(frame[4 : 4 + header.body_offset])
        d = _Decider(access)
        if api_key == ApiKey.DESCRIBE_CLUSTER:
            return _describe_cluster(access, version, msg)
        if api_key in PER_TOPIC:
            return self._per_topic(d, api_key, version, corr, head, msg, acks0)
        if api_key == ApiKey.METADATA:
            return self._metadata(d, version, corr, head, msg)
        if api_key == ApiKey.ADD_PARTITIONS_TO_TXN and version <= 3:
            return _add_partitions(d, version, corr, msg)
        code = self._refusal_code(d, api_key, version, msg)
        if code is None:
            if api_key in (ApiKey.DESCRIBE_GROUPS, ApiKey.CONSUMER_GROUP_DESCRIBE):
                return _describe_groups(access, api_key, version, msg)
            return None
        return _refuse(api_key, version, corr, msg, code, d.reason)

    # --- Produce, Fetch, ListOffsets, OffsetForLeaderEpoch ---------------------------------------------

    def _per_topic(
        self, d: _Decider, api_key: int, version: int, corr: int, head: bytes, msg: Any, acks0: bool
    ) -> Verdict | None:
        req_field, name_field, resp_field, op = PER_TOPIC[api_key]
        topics = list(getattr(msg, req_field) or ())
        whole: int | None = None
        if api_key == ApiKey.PRODUCE and msg.transactional_id is not None and not d.allows(WRITE, TXN, msg.transactional_id):
            whole = Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if api_key == ApiKey.FETCH and _replica_id(msg, version) >= 0 and not d.allows(Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
            whole = Errors.TOPIC_AUTHORIZATION_FAILED  # a follower's fetch (KafkaApis: every partition)
        if (
            api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH and version >= 3 and msg.replica_id >= 0
            and not d.allows(Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)
        ):
            whole = Errors.CLUSTER_AUTHORIZATION_FAILED  # a follower's (KafkaApis: every partition)
        sessionless = False
        if api_key == ApiKey.FETCH and version >= 7 and msg.session_epoch == 0:
            # No fetch sessions (KIP-227): an incremental fetch names only changed partitions, and the
            # broker would keep serving a session's partitions after their ACL is gone. Asked as a fetch
            # without a session (epoch -1), the broker creates none and the client keeps sending full
            # fetches, each checked whole (as against brokers with no session cache slots).
            msg.session_epoch = -1
            sessionless = True
        by_id = version >= TOPIC_ID_FROM.get(api_key, 1 << 15)
        names = self.names() if by_id else {}
        kept: list[Any] = []
        denied: dict[int, list[Any]] = {}
        for t in topics:
            if whole is not None:
                denied.setdefault(whole, []).append(t)
                continue
            name = names.get(t.topic_id) if by_id else getattr(t, name_field)
            if name is None:
                d.reason = d.reason or f"unknown topic id {t.topic_id}"
                self.unknown_id()
                denied.setdefault(Errors.UNKNOWN_TOPIC_ID, []).append(t)
            elif d.allows(op, TOPIC, name):
                kept.append(t)
            else:
                denied.setdefault(Errors.TOPIC_AUTHORIZATION_FAILED, []).append(t)
        if not denied:
            if sessionless:
                return Verdict("", forward=frames.frame(head + codec.encode_body(msg, version)), refused=False)
            return None
        if acks0:
            return Verdict(d.reason + "; acks=0, connection closed as Kafka does", close=True)
        refused: list[Any] = []
        for code, ts in denied.items():
            setattr(msg, req_field, ts)
            refused.extend(getattr(unreachable.partition_errors(api_key, version, msg, code), resp_field))
        if not kept:
            setattr(msg, req_field, topics)
            body = unreachable.partition_errors(api_key, version, msg, 0)
            setattr(body, resp_field, refused)
            return Verdict(d.reason, answer=codec.encode_response(api_key, version, corr, body))
        setattr(msg, req_field, kept)
        forward = frames.frame(head + codec.encode_body(msg, version))

        def merge(payload: bytes) -> bytes:
            rhead, body = codec.decode_response(api_key, version, payload)
            setattr(body, resp_field, list(getattr(body, resp_field) or ()) + refused)
            return rhead + codec.encode_body(body, version)

        return Verdict(d.reason, forward=forward, merge=merge)

    # --- Metadata --------------------------------------------------------------------------------------

    def _metadata(self, d: _Decider, version: int, corr: int, head: bytes, msg: Any) -> Verdict | None:
        named = msg.topics is not None
        no_create: set[str] = set()
        forward = None
        if named and getattr(msg, "allow_auto_topic_creation", False) and not d.allows(CREATE, CLUSTER, CLUSTER_NAME):
            # Auto-creation would run under the gateway's rights: the cluster is asked not to, and a
            # missing topic the principal may not CREATE is refused as Kafka refuses it.
            no_create = {t.name for t in msg.topics if t.name is not None and not d.allows(CREATE, TOPIC, t.name)}
            if no_create:
                msg.allow_auto_topic_creation = False
                forward = frames.frame(head + codec.encode_body(msg, version))
        # Authorized operations (KIP-430) the cluster computed for the gateway's principal: the client's instead.
        ops = version >= 8 and getattr(msg, "include_topic_authorized_operations", False)
        cluster_ops = 8 <= version <= 10 and getattr(msg, "include_cluster_authorized_operations", False)
        access = d.access

        def merge(payload: bytes) -> bytes:
            rhead, body = codec.decode_response(api_key=ApiKey.METADATA, version=version, payload=payload)
            out = []
            for t in body.topics:
                name = t.name
                if name is not None and not d.allows(DESCRIBE, TOPIC, name):
                    if not named:
                        continue  # left out of an all-topics listing
                    t.error_code, t.partitions, t.is_internal = Errors.TOPIC_AUTHORIZATION_FAILED, [], False
                    if version >= 10:
                        t.topic_id = _NULL_ID
                elif name in no_create and t.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION:
                    t.error_code = Errors.TOPIC_AUTHORIZATION_FAILED
                if ops and t.error_code == 0 and name is not None:
                    t.authorized_operations = _operations(access, TOPIC, name, _TOPIC_OPERATIONS)
                out.append(t)
            body.topics = out
            if cluster_ops:
                body.authorized_operations = _operations(access, CLUSTER, CLUSTER_NAME, _CLUSTER_OPERATIONS)
            return rhead + codec.encode_body(body, version)

        return Verdict(d.reason or "metadata answer filtered", forward=forward, merge=merge, refused=False)

    # --- everything else: allowed whole or refused whole ----------------------------------------------

    def _refusal_code(self, d: _Decider, api_key: int, version: int, msg: Any) -> int | None:
        if api_key == ApiKey.INIT_PRODUCER_ID:
            if msg.transactional_id is not None:
                return None if d.allows(WRITE, TXN, msg.transactional_id) else Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            # KIP-679: IDEMPOTENT_WRITE on the cluster, or WRITE on any topic.
            if d.allows(Operation.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME) or d.writes_some_topic():
                return None
            return Errors.CLUSTER_AUTHORIZATION_FAILED
        if api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
            return None if d.allows(Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME) else Errors.CLUSTER_AUTHORIZATION_FAILED
        if api_key == ApiKey.ADD_OFFSETS_TO_TXN:
            if not d.allows(WRITE, TXN, msg.transactional_id):
                return Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            return None if d.allows(READ, GROUP, msg.group_id) else Errors.GROUP_AUTHORIZATION_FAILED
        if api_key == ApiKey.END_TXN:
            return None if d.allows(WRITE, TXN, msg.transactional_id) else Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if api_key == ApiKey.TXN_OFFSET_COMMIT and not d.allows(WRITE, TXN, msg.transactional_id):
            return Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if api_key == ApiKey.FIND_COORDINATOR:
            key_type, keys = gc.find_coordinator_keys(msg, version)
            rtype = GROUP if key_type == gc.KEY_TYPE_GROUP else TXN
            return None if all(d.allows(DESCRIBE, rtype, k) for k in keys) else (
                Errors.GROUP_AUTHORIZATION_FAILED if rtype == GROUP else Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        group_op = GROUP_OPERATION.get(api_key) or PER_GROUP_OPERATION.get(api_key)
        if group_op is not None or api_key == ApiKey.LIST_GROUPS:
            if group_op is not None and not all(d.allows(group_op, GROUP, g) for g in group_ids(api_key, version, msg)):
                return Errors.GROUP_AUTHORIZATION_FAILED
            topic_op = TOPIC_OPERATION.get(api_key)
            if topic_op is not None:
                for name in self._group_request_topics(api_key, version, msg):
                    if name is None:
                        # All of a group's topics (OffsetFetch), or an id the gateway cannot name: the
                        # cluster's answer would not be filtered per topic, so it is not asked.
                        d.reason = d.reason or "a request for topics the gateway cannot name passed through"
                        return Errors.TOPIC_AUTHORIZATION_FAILED
                    if not d.allows(topic_op, TOPIC, name):
                        return Errors.TOPIC_AUTHORIZATION_FAILED
            if api_key == ApiKey.LIST_GROUPS and not d.allows(DESCRIBE, CLUSTER, CLUSTER_NAME):
                return Errors.CLUSTER_AUTHORIZATION_FAILED  # groups the cluster lists would be its own view
            return None
        # Not in the table: only super users (handled above) get it through under the gateway's rights.
        d.reason = d.reason or f"{d.access.principal} may not send api key {api_key} through a terminating gateway"
        return Errors.CLUSTER_AUTHORIZATION_FAILED

    def _group_request_topics(self, api_key: int, version: int, msg: Any) -> list[str | None]:
        """The topics a group request names (None: all of a group's, or an id the image lacks)."""
        names: dict[uuid.UUID, str] | None = None

        def of(t: Any) -> str | None:
            nonlocal names
            if getattr(t, "name", None):
                return str(t.name)
            if getattr(t, "topic_id", None) is None:
                return None
            if names is None:
                names = self.names()
            name = names.get(t.topic_id)
            if name is None:
                self.unknown_id()
            return name

        if api_key == ApiKey.CONSUMER_GROUP_HEARTBEAT:
            return list(msg.subscribed_topic_names or ())
        if api_key == ApiKey.STREAMS_GROUP_HEARTBEAT:
            return list(streams_topology_topics(msg))
        if api_key in (ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT, ApiKey.OFFSET_DELETE):
            return [of(t) for t in msg.topics or ()]
        if api_key == ApiKey.OFFSET_FETCH:
            if version <= 7:
                return [None] if msg.topics is None else [of(t) for t in msg.topics]
            out: list[str | None] = []
            for g in msg.groups or ():
                out.extend([None] if g.topics is None else [of(t) for t in g.topics])
            return out
        return []


class _Decider:
    """Decisions on the snapshot as last read, remembering why the first denial was made."""

    def __init__(self, access: Access) -> None:
        self.access = access
        self.reason = ""

    def allows(self, op: Operation, rtype: ResourceType, name: str | None) -> bool:
        if name is None:
            return False
        if self.access.now(op, rtype, name):
            return True
        self.reason = self.reason or self.access.reason
        return False

    def writes_some_topic(self) -> bool:
        """Kafka's authorizeByResourceType(WRITE, TOPIC), approximated: an ALLOW of WRITE (or ALL) on some
        topic pattern for the principal from its host, not denied by a DENY on every topic."""
        authz = self.access.authz
        assert authz is not None
        snap = authz.cache.snapshot
        if snap is None:
            return False
        principal, host = self.access.principal, self.access.host

        def applies(a: AclBinding, perm: Permission) -> bool:
            return (
                a.resource_type == TOPIC and a.permission == perm and a.principal in (principal, "User:*")
                and a.host in (host, "*") and a.operation in (WRITE, Operation.ALL)
            )

        if any(applies(a, Permission.DENY) and a.resource_name == "*" for a in snap.bindings):
            return False
        if any(applies(a, Permission.ALLOW) for a in snap.bindings):
            return True
        return snap.allow_everyone_if_no_acl_found and not any(a.resource_type == TOPIC for a in snap.bindings)


# Topic operations a Metadata answer reports (KIP-430), in Kafka's order.
_TOPIC_OPERATIONS = (
    Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE, Operation.ALTER, Operation.DESCRIBE,
    Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
)


_CLUSTER_OPERATIONS = (
    Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
    Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE,
)


def _operations(access: Access, rtype: ResourceType, name: str, supported: tuple[Operation, ...]) -> set[int]:
    """The bits set (kafka-python's form of a bit field) for the operations allowed."""
    return {int(op) for op in supported if access.now(op, rtype, name)}


def _describe_cluster(access: Access, version: int, msg: Any) -> Verdict | None:
    """DescribeCluster needs nothing, but the authorized operations the cluster computed are the gateway's."""
    if not msg.include_cluster_authorized_operations:
        return None

    def merge(payload: bytes) -> bytes:
        rhead, body = codec.decode_response(ApiKey.DESCRIBE_CLUSTER, version, payload)
        if body.error_code == 0:
            body.authorized_operations = _operations(access, CLUSTER, CLUSTER_NAME, _CLUSTER_OPERATIONS)
        return rhead + codec.encode_body(body, version)

    return Verdict("authorized operations for the client", merge=merge, refused=False)


def _describe_groups(access: Access, api_key: int, version: int, msg: Any) -> Verdict | None:
    """Groups the cluster describes (passed through): authorized operations (KIP-430) for the client, not
    the gateway; ConsumerGroupDescribe also needs DESCRIBE on every assigned topic (as the group layer's)."""
    ops = bool(getattr(msg, "include_authorized_operations", False))
    if api_key == ApiKey.DESCRIBE_GROUPS and not ops:
        return None

    def merge(payload: bytes) -> bytes:
        rhead, body = codec.decode_response(api_key, version, payload)
        groups = []
        for g in body.groups:
            if g.error_code == 0 and api_key == ApiKey.CONSUMER_GROUP_DESCRIBE:
                names = {
                    tp.topic_name
                    for m in g.members or ()
                    for a in (m.assignment, m.target_assignment)
                    if a is not None
                    for tp in a.topic_partitions or ()
                }
                if not all(access.now(DESCRIBE, TOPIC, n) for n in names):
                    g = type(g)(
                        group_id=g.group_id, error_code=Errors.TOPIC_AUTHORIZATION_FAILED,
                        error_message="The group has described topic(s) that the client is not authorized to describe.",
                        members=[],
                    )
            if g.error_code == 0 and ops:
                bits = access.group_operations(g.group_id) or 0
                # DescribeGroups carries a bit field (kafka-python: the set of bits), ConsumerGroupDescribe an int32.
                g.authorized_operations = bits if api_key == ApiKey.CONSUMER_GROUP_DESCRIBE else {
                    i for i in range(31) if bits >> i & 1}
            groups.append(g)
        body.groups = groups
        return rhead + codec.encode_body(body, version)

    return Verdict("groups described for the client", merge=merge, refused=False)


def _replica_id(msg: Any, version: int) -> int:
    if version >= 15:
        state = getattr(msg, "replica_state", None)
        return -1 if state is None else int(state.replica_id)
    return int(msg.replica_id)


def _add_partitions(d: _Decider, version: int, corr: int, msg: Any) -> Verdict | None:
    """AddPartitionsToTxn v0-3 (a client's): the transactional id refused refuses every partition; else
    topics refused get TOPIC_AUTHORIZATION_FAILED and the others OPERATION_NOT_ATTEMPTED (KafkaApis)."""
    topics = list(msg.v3_and_below_topics or ())
    if d.allows(WRITE, TXN, msg.v3_and_below_transactional_id):
        denied = {t.name for t in topics if not d.allows(WRITE, TOPIC, t.name)}
        if not denied:
            return None
        codes = {t.name: Errors.TOPIC_AUTHORIZATION_FAILED if t.name in denied else Errors.OPERATION_NOT_ATTEMPTED for t in topics}
    else:
        codes = {t.name: Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for t in topics}
    cls = codec.RESPONSES[ApiKey.ADD_PARTITIONS_TO_TXN]
    tcls = cls.AddPartitionsToTxnTopicResult
    pcls = tcls.AddPartitionsToTxnPartitionResult
    body = cls[version](
        throttle_time_ms=0,
        results_by_topic_v3_and_below=[
            tcls(name=t.name, results_by_partition=[pcls(partition_index=p, partition_error_code=codes[t.name]) for p in t.partitions])
            for t in topics
        ],
    )
    return Verdict(d.reason, answer=codec.encode_response(ApiKey.ADD_PARTITIONS_TO_TXN, version, corr, body))


def _refuse(api_key: int, version: int, corr: int, msg: Any, code: int, reason: str) -> Verdict:
    payload = codec.error_response(api_key, version, corr, code)
    if payload is None:
        refused = gc.refusal(api_key, version, msg, code) if api_key in gc.LOCAL_API else None
        if refused is not None:
            payload = codec.encode_response(api_key, version, corr, refused)
    if payload is None:
        return Verdict(reason + "; no response shape to refuse it in, connection closed", close=True)
    return Verdict(reason, answer=payload)


__all__ = ["DataAuthorizer", "Verdict"]
