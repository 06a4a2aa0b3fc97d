"""The checks a terminating gateway makes on passed-through requests (gateway/authz/data.py), on ACL
snapshots set by hand: allowed, refused, super users, requests mixing allowed and refused topics."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kafka.protocol.metadata import MetadataRequest

from coordinator.errors import Errors
from gateway.authz.acls import AclCache
from gateway.authz.data import DataAuthorizer, Verdict
from gateway.authz.groups import GroupAuthorizer
from gateway.wire import codec, frames
from gateway.wire.api_keys import ApiKey
from translate.authorizer import AclBinding, AclSnapshot, Operation, PatternType, Permission, ResourceType

TOPIC_AUTHORIZATION_FAILED = Errors.TOPIC_AUTHORIZATION_FAILED
ALICE, ADMIN, HOST = "User:alice", "User:admin", "127.0.0.1"
A, B = "topic-a", "topic-b"
IDS = {uuid.uuid4(): A, uuid.uuid4(): B}
ID_OF = {name: tid for tid, name in IDS.items()}


def allow(rtype: ResourceType, name: str, op: Operation, principal: str = ALICE) -> AclBinding:
    return AclBinding(rtype, name, PatternType.LITERAL, principal, "*", op, Permission.ALLOW)


def authorizer(*acls: AclBinding, snapshot: bool = True) -> DataAuthorizer:
    cache = AclCache(None, frozenset({ADMIN}))  # type: ignore[arg-type]  # never reads: the snapshot is set
    if snapshot:
        cache.snapshot = AclSnapshot.of(acls, super_users={ADMIN})
        cache.read_at = time.monotonic()
    return DataAuthorizer(GroupAuthorizer(cache, strict=False, refresh_interval_s=30), lambda: IDS)


# alice may WRITE and READ topic A (and so DESCRIBE it), nothing on B.
ACLS = (allow(ResourceType.TOPIC, A, Operation.WRITE), allow(ResourceType.TOPIC, A, Operation.READ))


def framed(api_key: int, version: int, msg: Any, corr: int = 7) -> bytes:
    msg.with_header(correlation_id=corr, client_id="t")
    return bytes(msg.encode(version=version, header=True, framed=True))


def produce(version: int, *topics: str, transactional_id: str | None = None) -> Any:
    cls = codec.REQUESTS[ApiKey.PRODUCE]
    tcls = cls.TopicProduceData
    pcls = tcls.PartitionProduceData
    return cls[version](
        transactional_id=transactional_id, acks=-1, timeout_ms=1000,
        topic_data=[tcls(name=t if version < 13 else "", topic_id=ID_OF[t] if version >= 13 else None,
                         partition_data=[pcls(index=0, records=None)]) for t in topics],
    )


def fetch(version: int, *topics: str) -> Any:
    cls = codec.REQUESTS[ApiKey.FETCH]
    tcls = cls.FetchTopic
    pcls = tcls.FetchPartition
    return cls[version](
        replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1000, isolation_level=0, session_id=0,
        session_epoch=-1, rack_id="",
        topics=[tcls(topic=t if version < 13 else "", topic_id=ID_OF[t] if version >= 13 else None,
                     partitions=[pcls(partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                                      log_start_offset=-1, partition_max_bytes=1000)]) for t in topics],
        forgotten_topics_data=[],
    )


def answer(v: Verdict, api_key: int, version: int) -> Any:
    assert v.answer is not None and v.forward is None
    return codec.decode_response(api_key, version, v.answer)[1]


def partition_codes(body: Any, field: str = "responses", parts: str = "partition_responses") -> dict[str, int]:
    out = {}
    for t in getattr(body, field):
        name = t.name if hasattr(t, "name") else t.topic
        out[name or IDS[t.topic_id]] = {p.error_code for p in getattr(t, parts)}.pop()
    return out


@pytest.mark.parametrize("version", [3, 9, 12, 13])
def test_produce_allowed_refused_and_by_super_user(version: int) -> None:
    authz = authorizer(*ACLS)
    assert authz.check(ALICE, HOST, ApiKey.PRODUCE, version, framed(0, version, produce(version, A))) is None
    refused = authz.check(ALICE, HOST, ApiKey.PRODUCE, version, framed(0, version, produce(version, B)))
    assert refused is not None
    assert partition_codes(answer(refused, ApiKey.PRODUCE, version)) == {B: TOPIC_AUTHORIZATION_FAILED}
    assert "may not WRITE TOPIC 'topic-b'" in refused.reason
    assert authz.check(ADMIN, HOST, ApiKey.PRODUCE, version, framed(0, version, produce(version, B))) is None


def test_produce_mixing_topics_forwards_the_allowed_part_and_merges_the_refusal() -> None:
    authz = authorizer(*ACLS)
    v = authz.check(ALICE, HOST, ApiKey.PRODUCE, 9, framed(0, 9, produce(9, A, B)))
    assert v is not None and v.forward is not None and v.merge is not None and v.answer is None
    assert v.refused  # logged as a refusal
    header, forwarded = codec.decode_request(ApiKey.PRODUCE, 9, v.forward[4:])
    assert header.correlation_id == 7 and [t.name for t in forwarded.topic_data] == [A]
    # The cluster answers for A; the client gets A's answer and B's refusal.
    cluster = produce(9, A)
    cluster_answer = codec.encode_response(
        ApiKey.PRODUCE, 9, 7, _with_code(codec.RESPONSES[ApiKey.PRODUCE], cluster, 0))
    merged = codec.decode_response(ApiKey.PRODUCE, 9, v.merge(cluster_answer))[1]
    assert partition_codes(merged) == {A: 0, B: TOPIC_AUTHORIZATION_FAILED}


def _with_code(_cls: Any, msg: Any, code: int) -> Any:
    from gateway.net.unreachable import partition_errors
    return partition_errors(ApiKey.PRODUCE, 9, msg, code)


def test_transactional_produce_needs_write_on_the_transactional_id() -> None:
    authz = authorizer(*ACLS)
    v = authz.check(ALICE, HOST, ApiKey.PRODUCE, 9, framed(0, 9, produce(9, A, transactional_id="tx")))
    assert v is not None
    assert partition_codes(answer(v, ApiKey.PRODUCE, 9)) == {A: Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    authz = authorizer(*ACLS, allow(ResourceType.TRANSACTIONAL_ID, "tx", Operation.WRITE))
    assert authz.check(ALICE, HOST, ApiKey.PRODUCE, 9, framed(0, 9, produce(9, A, transactional_id="tx"))) is None


def test_acks0_produce_to_a_refused_topic_closes() -> None:
    v = authorizer(*ACLS).check(ALICE, HOST, ApiKey.PRODUCE, 9, framed(0, 9, produce(9, B)), acks0=True)
    assert v is not None and v.close


@pytest.mark.parametrize("version", [4, 12, 13])
def test_fetch_needs_read_per_topic(version: int) -> None:
    authz = authorizer(allow(ResourceType.TOPIC, A, Operation.READ), allow(ResourceType.TOPIC, B, Operation.WRITE))
    assert authz.check(ALICE, HOST, ApiKey.FETCH, version, framed(1, version, fetch(version, A))) is None
    v = authz.check(ALICE, HOST, ApiKey.FETCH, version, framed(1, version, fetch(version, A, B)))
    assert v is not None and v.forward is not None and v.merge is not None
    _, forwarded = codec.decode_request(ApiKey.FETCH, version, v.forward[4:])
    assert len(forwarded.topics) == 1
    v = authz.check(ALICE, HOST, ApiKey.FETCH, version, framed(1, version, fetch(version, B)))
    assert v is not None
    assert partition_codes(answer(v, ApiKey.FETCH, version), parts="partitions") == {B: TOPIC_AUTHORIZATION_FAILED}


def test_follower_fetch_is_refused() -> None:
    msg = fetch(12, A)
    msg.replica_id = 1
    v = authorizer(*ACLS).check(ALICE, HOST, ApiKey.FETCH, 12, framed(1, 12, msg))
    assert v is not None
    assert partition_codes(answer(v, ApiKey.FETCH, 12), parts="partitions") == {A: TOPIC_AUTHORIZATION_FAILED}


def test_unknown_topic_id_is_answered_as_kafka_does_and_the_image_read_again() -> None:
    msg = fetch(13, A)
    msg.topics[0].topic_id = uuid.uuid4()
    authz = authorizer(*ACLS)
    asked: list[bool] = []
    authz.unknown_id = lambda: asked.append(True)
    v = authz.check(ALICE, HOST, ApiKey.FETCH, 13, framed(1, 13, msg))
    assert v is not None and v.answer is not None
    body = codec.decode_response(ApiKey.FETCH, 13, v.answer)[1]
    assert body.responses[0].partitions[0].error_code == Errors.UNKNOWN_TOPIC_ID
    assert asked == [True]


def _metadata_answer(version: int, *names: str, code: int = 0) -> bytes:
    cls = codec.RESPONSES[ApiKey.METADATA]
    tcls = cls.MetadataResponseTopic
    body = cls[version](
        throttle_time_ms=0, brokers=[], cluster_id="c", controller_id=1,
        topics=[tcls(error_code=code, name=n, topic_id=ID_OF.get(n, uuid.UUID(int=0)), is_internal=False, partitions=[],
                     authorized_operations=None) for n in names],
    )
    return codec.encode_response(ApiKey.METADATA, version, 7, body)


def test_metadata_names_refused_topics_and_leaves_them_out_of_a_listing() -> None:
    authz = authorizer(*ACLS)
    req = MetadataRequest[12](topics=[MetadataRequest[12].MetadataRequestTopic(topic_id=None, name=n) for n in (A, B)],
                              allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    v = authz.check(ALICE, HOST, ApiKey.METADATA, 12, framed(3, 12, req))
    assert v is not None and v.merge is not None and v.forward is None and not v.refused
    merged = codec.decode_response(ApiKey.METADATA, 12, v.merge(_metadata_answer(12, A, B)))[1]
    assert [(t.name, t.error_code) for t in merged.topics] == [(A, 0), (B, TOPIC_AUTHORIZATION_FAILED)]
    listing = MetadataRequest[12](topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    v = authz.check(ALICE, HOST, ApiKey.METADATA, 12, framed(3, 12, listing))
    assert v is not None and v.merge is not None
    merged = codec.decode_response(ApiKey.METADATA, 12, v.merge(_metadata_answer(12, A, B)))[1]
    assert [t.name for t in merged.topics] == [A]


def test_metadata_auto_creation_needs_create() -> None:
    authz = authorizer(*ACLS)
    req = MetadataRequest[12](topics=[MetadataRequest[12].MetadataRequestTopic(topic_id=None, name=A)],
                              allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    v = authz.check(ALICE, HOST, ApiKey.METADATA, 12, framed(3, 12, req))
    assert v is not None and v.forward is not None and v.merge is not None
    _, forwarded = codec.decode_request(ApiKey.METADATA, 12, v.forward[4:])
    assert forwarded.allow_auto_topic_creation is False  # the cluster does not create it under our rights
    merged = codec.decode_response(ApiKey.METADATA, 12, v.merge(
        _metadata_answer(12, A, code=Errors.UNKNOWN_TOPIC_OR_PARTITION)))[1]
    assert merged.topics[0].error_code == TOPIC_AUTHORIZATION_FAILED
    creator = authorizer(*ACLS, allow(ResourceType.TOPIC, A, Operation.CREATE))
    v = creator.check(ALICE, HOST, ApiKey.METADATA, 12, framed(3, 12, req))
    assert v is not None and v.forward is None  # asked as sent


def test_init_producer_id_rules() -> None:
    cls = codec.REQUESTS[22]

    def init(tx: str | None) -> bytes:
        return framed(22, 4, cls[4](transactional_id=tx, transaction_timeout_ms=1000, producer_id=-1, producer_epoch=-1))

    nothing = authorizer(allow(ResourceType.TOPIC, A, Operation.READ))
    v = nothing.check(ALICE, HOST, 22, 4, init(None))
    assert v is not None and answer(v, 22, 4).error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
    # KIP-679: WRITE on some topic is enough for an idempotent producer.
    assert authorizer(*ACLS).check(ALICE, HOST, 22, 4, init(None)) is None
    v = authorizer(*ACLS).check(ALICE, HOST, 22, 4, init("tx"))
    assert v is not None and answer(v, 22, 4).error_code == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_unhandled_api_is_refused_fail_closed_but_free_apis_pass() -> None:
    authz = authorizer(*ACLS)
    create_topics = codec.REQUESTS[19][5](topics=[], timeout_ms=1000, validate_only=False)
    v = authz.check(ALICE, HOST, 19, 5, framed(19, 5, create_topics))
    assert v is not None and (v.answer is not None or v.close)
    assert authz.check(ADMIN, HOST, 19, 5, framed(19, 5, create_topics)) is None
    describe_cluster = codec.REQUESTS[ApiKey.DESCRIBE_CLUSTER][0](include_cluster_authorized_operations=False)
    assert authz.check(ALICE, HOST, ApiKey.DESCRIBE_CLUSTER, 0, framed(60, 0, describe_cluster)) is None


def test_without_a_snapshot_everything_is_refused() -> None:
    v = authorizer(snapshot=False).check(ADMIN, HOST, ApiKey.PRODUCE, 9, framed(0, 9, produce(9, A)))
    assert v is not None and partition_codes(answer(v, ApiKey.PRODUCE, 9)) == {A: TOPIC_AUTHORIZATION_FAILED}


def test_verdict_frames_are_whole() -> None:
    v = authorizer(*ACLS).check(ALICE, HOST, ApiKey.PRODUCE, 9, framed(0, 9, produce(9, A, B)))
    assert v is not None and v.forward is not None
    assert frames.FrameBuffer(1 << 20).feed(v.forward) == [v.forward]


def test_metadata_reports_the_clients_authorized_operations() -> None:
    req = MetadataRequest[12](topics=[MetadataRequest[12].MetadataRequestTopic(topic_id=None, name=A)],
                              allow_auto_topic_creation=False, include_topic_authorized_operations=True)
    v = authorizer(*ACLS).check(ALICE, HOST, ApiKey.METADATA, 12, framed(3, 12, req))
    assert v is not None and v.merge is not None
    merged = codec.decode_response(ApiKey.METADATA, 12, v.merge(_metadata_answer(12, A)))[1]
    # READ, WRITE and (implied) DESCRIBE: not the gateway's own rights the cluster computed.
    assert merged.topics[0].authorized_operations == {Operation.READ, Operation.WRITE, Operation.DESCRIBE}


def test_follower_offset_for_leader_epoch_is_refused() -> None:
    cls = codec.REQUESTS[23]
    tcls = cls.OffsetForLeaderTopic
    req = cls[4](replica_id=1, topics=[tcls(topic=A, partitions=[tcls.OffsetForLeaderPartition(
        partition=0, current_leader_epoch=-1, leader_epoch=0)])])
    v = authorizer(*ACLS).check(ALICE, HOST, 23, 4, framed(23, 4, req))
    assert v is not None
    body = answer(v, 23, 4)
    assert body.topics[0].partitions[0].error_code == Errors.CLUSTER_AUTHORIZATION_FAILED
    req.replica_id = -1  # a consumer's: DESCRIBE on the topic suffices
    assert authorizer(*ACLS).check(ALICE, HOST, 23, 4, framed(23, 4, req)) is None


def test_describe_cluster_is_free_but_reports_the_clients_operations() -> None:
    authz = authorizer(*ACLS, allow(ResourceType.CLUSTER, "kafka-cluster", Operation.DESCRIBE))
    req = codec.REQUESTS[ApiKey.DESCRIBE_CLUSTER][1](include_cluster_authorized_operations=True, endpoint_type=1)
    v = authz.check(ALICE, HOST, ApiKey.DESCRIBE_CLUSTER, 1, framed(60, 1, req))
    assert v is not None and v.merge is not None and v.forward is None and v.answer is None
    cls = codec.RESPONSES[ApiKey.DESCRIBE_CLUSTER]
    cluster = cls[1](throttle_time_ms=0, error_code=0, error_message=None, endpoint_type=1, cluster_id="c",
                     controller_id=1, brokers=[], authorized_operations={int(o) for o in Operation if 3 <= o <= 12})
    merged = codec.decode_response(ApiKey.DESCRIBE_CLUSTER, 1, v.merge(
        codec.encode_response(ApiKey.DESCRIBE_CLUSTER, 1, 7, cluster)))[1]
    assert merged.authorized_operations == {Operation.DESCRIBE}


def test_fetch_sessions_are_not_opened() -> None:
    """A full fetch asking for a session (epoch 0) is forwarded sessionless (epoch -1): a session would
    serve its partitions without naming them in later requests, past an ACL's removal."""
    msg = fetch(12, A)
    msg.session_epoch = 0
    v = authorizer(*ACLS).check(ALICE, HOST, ApiKey.FETCH, 12, framed(1, 12, msg))
    assert v is not None and v.forward is not None and v.merge is None and not v.refused
    _, forwarded = codec.decode_request(ApiKey.FETCH, 12, v.forward[4:])
    assert (forwarded.session_id, forwarded.session_epoch, [t.topic for t in forwarded.topics]) == (0, -1, [A])


GROUP_ACL = allow(ResourceType.GROUP, "g", Operation.READ)


def test_offset_fetch_of_a_passed_through_group_checks_its_topics() -> None:
    cls = codec.REQUESTS[ApiKey.OFFSET_FETCH]
    authz = authorizer(*ACLS, GROUP_ACL)

    def fetch_offsets(*topics: str | None) -> bytes:
        gcls = cls.OffsetFetchRequestGroup
        tcls = gcls.OffsetFetchRequestTopics
        group = gcls(group_id="g", member_id=None, member_epoch=-1,
                     topics=None if topics == (None,) else [tcls(name=t, partition_indexes=[0]) for t in topics])
        return framed(ApiKey.OFFSET_FETCH, 9, cls[9](groups=[group], require_stable=False))

    assert authz.check(ALICE, HOST, ApiKey.OFFSET_FETCH, 9, fetch_offsets(A)) is None
    for refused in (fetch_offsets(A, B), fetch_offsets(None)):  # all topics: the answer would not be filtered
        v = authz.check(ALICE, HOST, ApiKey.OFFSET_FETCH, 9, refused)
        assert v is not None and v.answer is not None
        assert answer(v, ApiKey.OFFSET_FETCH, 9).groups[0].error_code == TOPIC_AUTHORIZATION_FAILED


def test_offset_commit_by_topic_id_is_checked_by_name() -> None:
    cls = codec.REQUESTS[ApiKey.OFFSET_COMMIT]
    tcls = cls.OffsetCommitRequestTopic
    pcls = tcls.OffsetCommitRequestPartition
    req = cls[10](group_id="g", generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                  topics=[tcls(name="", topic_id=ID_OF[B], partitions=[pcls(
                      partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])])
    v = authorizer(*ACLS, GROUP_ACL).check(ALICE, HOST, ApiKey.OFFSET_COMMIT, 10, framed(ApiKey.OFFSET_COMMIT, 10, req))
    assert v is not None and v.answer is not None
    parts = answer(v, ApiKey.OFFSET_COMMIT, 10).topics[0].partitions
    assert parts[0].error_code == TOPIC_AUTHORIZATION_FAILED


def test_consumer_group_describe_passed_through_hides_groups_assigned_refused_topics() -> None:
    authz = authorizer(*ACLS, allow(ResourceType.GROUP, "g", Operation.DESCRIBE))
    req = codec.REQUESTS[ApiKey.CONSUMER_GROUP_DESCRIBE][0](group_ids=["g"], include_authorized_operations=True)
    v = authz.check(ALICE, HOST, ApiKey.CONSUMER_GROUP_DESCRIBE, 0, framed(69, 0, req))
    assert v is not None and v.merge is not None and not v.refused
    cls = codec.RESPONSES[ApiKey.CONSUMER_GROUP_DESCRIBE]
    gcls = cls.DescribedGroup
    mcls = gcls.Member
    acls_ = mcls.Assignment
    tpcls = acls_.TopicPartitions

    def described(topic: str) -> bytes:
        assignment = acls_(topic_partitions=[tpcls(topic_id=ID_OF[topic], topic_name=topic, partitions=[0])])
        member = mcls(member_id="m", instance_id=None, rack_id=None, member_epoch=1, client_id="c", client_host="/h",
                      subscribed_topic_names=[topic], subscribed_topic_regex=None, assignment=assignment,
                      target_assignment=assignment)
        group = gcls(error_code=0, error_message=None, group_id="g", group_state="Stable", group_epoch=1,
                     assignment_epoch=1, assignor_name="uniform", members=[member], authorized_operations=2**31 - 1)
        return codec.encode_response(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 7, cls[0](throttle_time_ms=0, groups=[group]))

    ok = codec.decode_response(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, v.merge(described(A)))[1].groups[0]
    assert ok.error_code == 0 and ok.authorized_operations == 1 << int(Operation.DESCRIBE)
    hidden = codec.decode_response(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, v.merge(described(B)))[1].groups[0]
    assert (hidden.error_code, hidden.members) == (TOPIC_AUTHORIZATION_FAILED, [])


def test_describe_groups_passed_through_reports_the_clients_operations() -> None:
    authz = authorizer(*ACLS, allow(ResourceType.GROUP, "g", Operation.READ))
    req = codec.REQUESTS[ApiKey.DESCRIBE_GROUPS][5](groups=["g"], include_authorized_operations=True)
    v = authz.check(ALICE, HOST, ApiKey.DESCRIBE_GROUPS, 5, framed(15, 5, req))
    assert v is not None and v.merge is not None
    cls = codec.RESPONSES[ApiKey.DESCRIBE_GROUPS]
    group = cls.DescribedGroup(error_code=0, group_id="g", group_state="Stable", protocol_type="consumer",
                               protocol_data="range", members=[], authorized_operations=None)
    cluster = codec.encode_response(ApiKey.DESCRIBE_GROUPS, 5, 7, cls[5](throttle_time_ms=0, groups=[group]))
    merged = codec.decode_response(ApiKey.DESCRIBE_GROUPS, 5, v.merge(cluster))[1].groups[0]
    assert merged.authorized_operations == {int(Operation.READ), int(Operation.DESCRIBE)}


def test_add_partitions_to_txn_answers_per_topic_as_kafka() -> None:
    cls = codec.REQUESTS[24]
    tcls = cls.AddPartitionsToTxnTopic
    req = cls[3](v3_and_below_transactional_id="tx", v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
                 v3_and_below_topics=[tcls(name=t, partitions=[0]) for t in (A, B)])
    with_tx = authorizer(*ACLS, allow(ResourceType.TRANSACTIONAL_ID, "tx", Operation.WRITE))
    v = with_tx.check(ALICE, HOST, 24, 3, framed(24, 3, req))
    assert v is not None
    codes = {t.name: t.results_by_partition[0].partition_error_code
             for t in answer(v, 24, 3).results_by_topic_v3_and_below}
    assert codes == {A: Errors.OPERATION_NOT_ATTEMPTED, B: TOPIC_AUTHORIZATION_FAILED}
    v = authorizer(*ACLS).check(ALICE, HOST, 24, 3, framed(24, 3, req))
    assert v is not None
    assert {t.results_by_partition[0].partition_error_code for t in answer(v, 24, 3).results_by_topic_v3_and_below} == {
        Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
