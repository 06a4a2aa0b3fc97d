"""Authorization of what the gateway answers itself: the same error codes as the broker's StandardAuthorizer.

Every scenario runs against the SASL broker (``sasl_kafka``: SCRAM and PLAIN, StandardAuthorizer,
super.users=User:admin, no access without an ACL) directly and through a gateway in front of it, and
compares what the principal is told. The gateway reads the cluster's ACLs under its own principal
(User:admin) and decides with translate/authorizer.py; ACLs are created and removed through the broker's
administrative PLAINTEXT listener, as in compat_tests/test_sasl.py.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import AclOperation, ResourceType
from kafka.protocol.admin import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.consumer.group import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest

from compat_tests.harness.admin import create_topic
from compat_tests.harness.gateway_proc import GatewayProcess
from compat_tests.harness.sasl import (
    ADMIN,
    BOB,
    WAIT_S,
    SaslSession,
    allow,
    confluent_conf,
    grant,
    revoke,
    sasl_gateway,
)
from compat_tests.harness.sasl import targets as sasl_targets
from gateway.ops.embedded_kafka import EmbeddedKafka
from gateway.wire.protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

REFRESH_MS = 1000
GROUP_AUTHORIZATION_FAILED = 30
TOPIC_AUTHORIZATION_FAILED = 29
MEMBER_ID_REQUIRED = 79


@pytest.fixture(scope="module")
def authz_gateway(sasl_kafka: EmbeddedKafka, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    # Kafka's names for the brokers' authorizer settings, as the broker has them (the harness's PLAINTEXT
    # listener makes User:ANONYMOUS a super user too).
    # Strict: the gateway must identify the brokers' StandardAuthorizer (DescribeConfigs) to decide at all,
    # so every scenario here also shows that it does.
    settings = {
        "authorization": "strict",
        "super.users": "User:ANONYMOUS;User:admin",
        "allow.everyone.if.no.acl.found": False,
        "acl_refresh_interval_ms": REFRESH_MS,
    }
    with sasl_gateway(sasl_kafka, tmp_path_factory.mktemp("authz-gateway"), settings,
                      coordinator={"initial_rebalance_delay_ms": 0}) as gw:
        yield gw


@pytest.fixture
def targets(sasl_kafka: EmbeddedKafka, authz_gateway: GatewayProcess) -> dict[str, str]:
    return sasl_targets(sasl_kafka, authz_gateway)


# --- raw requests: exactly what the principal is told ------------------------------------------------


def _join(s: SaslSession, group: str) -> Any:
    protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="p", metadata=b"m")]
    join: dict[str, Any] = {"group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                            "member_id": "", "group_instance_id": None, "protocol_type": "test", "protocols": protocols}
    r = s.call(11, 5, JoinGroupRequest[5](**join))
    if r.error_code == MEMBER_ID_REQUIRED:
        join["member_id"] = r.member_id
        r = s.call(11, 5, JoinGroupRequest[5](**join))
    return r


def _heartbeat(s: SaslSession, group: str, generation: int, member: str) -> int:
    return int(s.call(12, 4, HeartbeatRequest[4](group_id=group, generation_id=generation, member_id=member,
                                                 group_instance_id=None)).error_code)


def _commit(s: SaslSession, group: str, *topics: str, generation: int = -1, member: str = "") -> dict[str, int]:
    cls = OffsetCommitRequest
    req = cls[8](
        group_id=group, generation_id_or_member_epoch=generation, member_id=member, group_instance_id=None,
        topics=[
            cls.OffsetCommitRequestTopic(name=t, partitions=[cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])
            for t in topics
        ],
    )
    r = s.call(8, 8, req)
    return {t.name: int(t.partitions[0].error_code) for t in r.topics}


def _fetch(s: SaslSession, group: str, *topics: str) -> tuple[int, dict[str, int]]:
    cls = OffsetFetchRequest
    g = cls.OffsetFetchRequestGroup(group_id=group, member_id=None, member_epoch=-1, topics=[
        cls.OffsetFetchRequestGroup.OffsetFetchRequestTopics(name=t, partition_indexes=[0]) for t in topics])
    r = s.call(9, 9, cls[9](groups=[g], require_stable=False)).groups[0]
    return int(r.error_code), {t.name: int(t.partitions[0].error_code) for t in r.topics}


def _describe(s: SaslSession, group: str) -> Any:
    """DescribeGroups v5 with authorized operations, again while the broker's coordinator is loading."""
    deadline = time.monotonic() + 2.0  # within one SASL session (4 s)
    while True:
        d = s.call(15, 5, DescribeGroupsRequest[5](groups=[group], include_authorized_operations=True)).groups[0]
        if d.error_code not in (14, 15, 16) or time.monotonic() > deadline:
            return d
        time.sleep(0.1)


def _coordinator_ready(sasl_kafka: EmbeddedKafka, *groups: str) -> None:
    """Until the broker coordinates these groups (its __consumer_offsets is created on first use and
    loaded a moment later): asked as the admin, so that no answer under test is a loading error."""
    from kafka.protocol.metadata import FindCoordinatorRequest

    for g in groups:
        deadline = time.monotonic() + WAIT_S
        while True:
            # A session per attempt: the broker's SASL sessions last 4 s (connections.max.reauth.ms).
            with SaslSession(sasl_kafka.sasl_bootstrap, ADMIN) as s:
                if s.call(10, 3, FindCoordinatorRequest[3](key=g, key_type=0)).error_code == 0:
                    if _describe(s, g).error_code == 0:
                        break
            assert time.monotonic() < deadline, f"no coordinator for {g}"
            time.sleep(0.1)


def _session(targets: dict[str, str], user: tuple[str, str]) -> dict[str, SaslSession]:
    return {name: SaslSession(b, user) for name, b in targets.items()}


def test_group_without_read_is_refused_alike(
    targets: dict[str, str], sasl_kafka: EmbeddedKafka, names: Callable[[str], str]
) -> None:
    """Bob may describe the group and read the topic, not read the group: join, sync, heartbeat and
    commit are GROUP_AUTHORIZATION_FAILED; describing and fetching offsets are allowed."""
    group = names("group")
    topic = create_topic(sasl_kafka.bootstrap, names("topic"), 1)
    grant(sasl_kafka, allow(ResourceType.GROUP, group, "User:bob", AclOperation.DESCRIBE),
          allow(ResourceType.TOPIC, topic, "User:bob", AclOperation.READ))
    _coordinator_ready(sasl_kafka, group)
    seen: dict[str, tuple[Any, ...]] = {}
    for name, s in _session(targets, BOB).items():
        with s:
            join = _join(s, group).error_code
            sync = s.call(14, 5, SyncGroupRequest[5](group_id=group, generation_id=1, member_id="m",
                                                     group_instance_id=None, protocol_type="test",
                                                     protocol_name="p", assignments=[])).error_code
            hb = _heartbeat(s, group, 1, "m")
            commit = _commit(s, group, topic)
            fetch = _fetch(s, group, topic)
            d = _describe(s, group)
            seen[name] = (join, sync, hb, commit, fetch, d.error_code, d.authorized_operations)
    assert seen["direct"][:4] == (GROUP_AUTHORIZATION_FAILED,) * 3 + ({topic: GROUP_AUTHORIZATION_FAILED},)
    assert seen["direct"][4] == (0, {topic: 0}) and seen["direct"][5] == 0
    assert seen["gateway"] == seen["direct"]


def test_topic_without_read_is_refused_on_commit_alike(
    targets: dict[str, str], sasl_kafka: EmbeddedKafka, names: Callable[[str], str]
) -> None:
    """READ on the group and on one topic, nothing on the other: the commit of the one is written, the
    other's partitions are TOPIC_AUTHORIZATION_FAILED; so is fetching its offset."""
    group = names("group")
    readable = create_topic(sasl_kafka.bootstrap, names("readable"), 1)
    secret = create_topic(sasl_kafka.bootstrap, names("secret"), 1)
    grant(sasl_kafka, allow(ResourceType.GROUP, group, "User:bob", AclOperation.READ),
          allow(ResourceType.TOPIC, readable, "User:bob", AclOperation.READ))
    _coordinator_ready(sasl_kafka, group)
    seen = {}
    for name, s in _session(targets, BOB).items():
        with s:
            seen[name] = (_commit(s, group, readable, secret), _fetch(s, group, readable, secret))
    assert seen["direct"] == (
        {readable: 0, secret: TOPIC_AUTHORIZATION_FAILED}, (0, {readable: 0, secret: TOPIC_AUTHORIZATION_FAILED})
    )
    assert seen["gateway"] == seen["direct"]


def test_consumer_group_heartbeat_checks_group_and_subscription_alike(
    targets: dict[str, str], sasl_kafka: EmbeddedKafka, names: Callable[[str], str]
) -> None:
    """KIP-848: READ on the group, then DESCRIBE on every subscribed topic."""
    group, other = names("group"), names("other")
    topic = create_topic(sasl_kafka.bootstrap, names("topic"), 1)
    grant(sasl_kafka, allow(ResourceType.GROUP, group, "User:bob", AclOperation.READ))

    def join(s: SaslSession, g: str) -> int:
        req = ConsumerGroupHeartbeatRequest[1](group_id=g, member_id="m-" + g, member_epoch=0,
                                               rebalance_timeout_ms=5000, subscribed_topic_names=[topic],
                                               topic_partitions=[])
        return int(s.call(68, 1, req).error_code)

    seen = {}
    for name, s in _session(targets, BOB).items():
        with s:
            seen[name] = (join(s, other), join(s, group))
    assert seen["direct"] == (GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED)
    assert seen["gateway"] == seen["direct"]


def test_list_and_delete_show_only_permitted_groups_alike(
    targets: dict[str, str], sasl_kafka: EmbeddedKafka, names: Callable[[str], str]
) -> None:
    """ListGroups lists only what Bob may describe (the admin, with DESCRIBE on the cluster, sees all);
    DeleteGroups without DELETE is refused per group."""
    topic = create_topic(sasl_kafka.bootstrap, names("topic"), 1)
    visible, hidden = names("visible"), names("hidden")
    _coordinator_ready(sasl_kafka, visible, hidden)
    with SaslSession(sasl_kafka.sasl_bootstrap, ADMIN) as admin:
        for g in (visible, hidden):  # offsets-only groups of the cluster, listed by both targets
            assert _commit(admin, g, topic) == {topic: 0}
    grant(sasl_kafka, allow(ResourceType.GROUP, visible, "User:bob", AclOperation.DESCRIBE))
    seen = {}
    for name, b in targets.items():
        listed = {}
        for user in (BOB, ADMIN):
            with SaslSession(b, user) as s:
                r = s.call(16, 4, ListGroupsRequest[4](states_filter=[]))
                listed[user[0]] = (r.error_code, sorted(g.group_id for g in r.groups if g.group_id in (visible, hidden)))
        with SaslSession(b, BOB) as s:
            deleted = s.call(42, 2, DeleteGroupsRequest[2](groups_names=[hidden, visible]))
            listed["delete"] = sorted((x.group_id, x.error_code) for x in deleted.results)
            listed["describe"] = [(g.group_id, g.error_code) for g in s.call(15, 5, DescribeGroupsRequest[5](
                groups=[visible, hidden], include_authorized_operations=False)).groups]
            cgd = s.call(69, 0, ConsumerGroupDescribeRequest[0](group_ids=[hidden], include_authorized_operations=False))
            listed["consumer-describe"] = [(g.group_id, g.error_code) for g in cgd.groups]
        seen[name] = listed
    assert seen["direct"]["bob"] == (0, [visible])
    assert seen["direct"]["admin"] == (0, sorted([visible, hidden]))
    assert seen["direct"]["delete"] == sorted([(hidden, GROUP_AUTHORIZATION_FAILED), (visible, GROUP_AUTHORIZATION_FAILED)])
    # Per group, the refused one listed first.
    assert seen["direct"]["describe"] == [(hidden, GROUP_AUTHORIZATION_FAILED), (visible, 0)]
    assert seen["direct"]["consumer-describe"] == [(hidden, GROUP_AUTHORIZATION_FAILED)]
    assert seen["gateway"] == seen["direct"]


def test_acl_removed_while_a_member_runs_takes_effect_alike(
    targets: dict[str, str], sasl_kafka: EmbeddedKafka, names: Callable[[str], str]
) -> None:
    """A member heartbeats; its group's READ is revoked: the broker refuses its next heartbeat, the
    gateway within its ACL refresh interval (acl_refresh_interval_ms)."""
    # One group per target (the gateway coordinates its own; the broker's is the direct one), Bob may read both.
    groups = {name: names(f"group-{name}") for name in targets}
    acls = [allow(ResourceType.GROUP, g, "User:bob", AclOperation.READ) for g in groups.values()]
    grant(sasl_kafka, *acls)
    _coordinator_ready(sasl_kafka, groups["direct"])
    members = {}
    # Sessions per step: the broker's SASL sessions last 4 s (connections.max.reauth.ms), the membership
    # is the member id's, not the connection's.
    for name, s in _session(targets, BOB).items():
        with s:
            g = groups[name]
            r = _join(s, g)
            assert r.error_code == 0, (name, r)
            sync = s.call(14, 5, SyncGroupRequest[5](
                group_id=g, generation_id=r.generation_id, member_id=r.member_id, group_instance_id=None,
                protocol_type="test", protocol_name="p",
                assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=r.member_id, assignment=b"a")]))
            assert sync.error_code == 0, (name, sync)
            members[name] = (r.generation_id, r.member_id)
            assert _heartbeat(s, g, *members[name]) == 0, name
    revoke(sasl_kafka, *acls)
    revoked_at = time.monotonic()
    took: dict[str, float] = {}
    codes: dict[str, int] = {}
    for name, b in targets.items():
        while True:
            with SaslSession(b, BOB) as s:
                code = _heartbeat(s, groups[name], *members[name])
            if code != 0 or time.monotonic() - revoked_at > WAIT_S:
                break
            time.sleep(0.1)
        codes[name], took[name] = code, time.monotonic() - revoked_at
    assert codes == {"direct": GROUP_AUTHORIZATION_FAILED, "gateway": GROUP_AUTHORIZATION_FAILED}
    # The periodic read plus one DescribeAcls round trip and the heartbeat spacing, with room for a loaded
    # machine: the revocation ends the membership at the gateway's refresh, not later.
    assert took["gateway"] < REFRESH_MS / 1000 + 5.0, took


def test_consumer_without_group_read_fails_alike(
    targets: dict[str, str], sasl_kafka: EmbeddedKafka, names: Callable[[str], str], tmp_path: Path
) -> None:
    """A real client (librdkafka, classic protocol) subscribing in a group it may not read."""
    topic = create_topic(sasl_kafka.bootstrap, names("topic"), 1)
    grant(sasl_kafka, allow(ResourceType.TOPIC, topic, "User:bob", AclOperation.READ))
    seen = {}
    for name, b in targets.items():
        c = Consumer(confluent_conf(b, "SCRAM-SHA-256", BOB, **{"group.id": names("group"),
                                                                 "enable.auto.commit": False}))
        try:
            c.subscribe([topic])
            code = None
            deadline = time.monotonic() + WAIT_S
            while code is None and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and m.error() is not None:
                    code = m.error().code()
            seen[name] = code
        finally:
            c.close()
    assert seen["direct"] == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert seen["gateway"] == seen["direct"]


def test_consumer_group_describe_hides_assigned_topics_alike(
    targets: dict[str, str], sasl_kafka: EmbeddedKafka, names: Callable[[str], str]
) -> None:
    """A KIP-848 member (the admin) is assigned a topic Bob may not describe: Bob may describe the group,
    yet is told TOPIC_AUTHORIZATION_FAILED for it, without members."""
    topic = create_topic(sasl_kafka.bootstrap, names("topic"), 2)
    groups = {name: names(f"group-{name}") for name in targets}
    grant(sasl_kafka, *(allow(ResourceType.GROUP, g, "User:bob", AclOperation.DESCRIBE) for g in groups.values()))
    _coordinator_ready(sasl_kafka, groups["direct"])
    seen = {}
    for name, b in targets.items():
        g = groups[name]
        member = str(uuid.uuid4())  # KIP-848: the client's own UUID
        deadline = time.monotonic() + WAIT_S
        while True:  # the broker's coordinator may still be loading on first use
            # A session per attempt: the broker's SASL sessions last 4 s (connections.max.reauth.ms).
            with SaslSession(b, ADMIN) as admin:
                r = admin.call(68, 1, ConsumerGroupHeartbeatRequest[1](
                    group_id=g, member_id=member, member_epoch=0, rebalance_timeout_ms=5000,
                    subscribed_topic_names=[topic], server_assignor=None, topic_partitions=[]))
            if r.error_code not in (14, 15, 16) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert r.error_code == 0 and r.assignment is not None, (name, r)
        with SaslSession(b, ADMIN) as admin:
            mine = admin.call(69, 0, ConsumerGroupDescribeRequest[0](group_ids=[g], include_authorized_operations=False))
            assert mine.groups[0].error_code == 0 and mine.groups[0].members, (name, mine)
        with SaslSession(b, BOB) as s:
            d = s.call(69, 0, ConsumerGroupDescribeRequest[0](group_ids=[g], include_authorized_operations=True)).groups[0]
            seen[name] = (d.error_code, len(d.members))
    assert seen["direct"] == (TOPIC_AUTHORIZATION_FAILED, 0)
    assert seen["gateway"] == seen["direct"]


def test_offset_delete_txn_commit_and_find_coordinator_alike(
    targets: dict[str, str], sasl_kafka: EmbeddedKafka, names: Callable[[str], str]
) -> None:
    """OffsetDelete needs DELETE on the group (top-level refusal) and READ on each topic (per partition);
    TxnOffsetCommit WRITE on the transactional id first, then READ on the group; FindCoordinator DESCRIBE
    on each group key."""
    from kafka.protocol.consumer.group import OffsetDeleteRequest
    from kafka.protocol.metadata import FindCoordinatorRequest
    from kafka.protocol.producer.transaction import TxnOffsetCommitRequest

    group, deletable, txn = names("group"), names("deletable"), names("txn")
    readable = create_topic(sasl_kafka.bootstrap, names("readable"), 1)
    secret = create_topic(sasl_kafka.bootstrap, names("secret"), 1)
    grant(
        sasl_kafka,
        allow(ResourceType.GROUP, group, "User:bob", AclOperation.READ),
        allow(ResourceType.GROUP, deletable, "User:bob", AclOperation.DELETE),
        allow(ResourceType.TOPIC, readable, "User:bob", AclOperation.READ),
        allow(ResourceType.TRANSACTIONAL_ID, txn, "User:bob", AclOperation.WRITE),
    )
    _coordinator_ready(sasl_kafka, group, deletable)
    with SaslSession(sasl_kafka.sasl_bootstrap, ADMIN) as admin:  # offsets to delete
        assert _commit(admin, deletable, readable, secret) == {readable: 0, secret: 0}

    def offset_delete(s: SaslSession, g: str) -> tuple[int, dict[str, int]]:
        cls = OffsetDeleteRequest
        r = s.call(47, 0, cls[0](group_id=g, topics=[
            cls.OffsetDeleteRequestTopic(name=t, partitions=[cls.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(
                partition_index=0)]) for t in (readable, secret)]))
        return int(r.error_code), {t.name: int(t.partitions[0].error_code) for t in r.topics}

    def txn_commit(s: SaslSession, transactional_id: str, g: str) -> list[int]:
        cls = TxnOffsetCommitRequest
        r = s.call(28, 3, cls[3](
            transactional_id=transactional_id, group_id=g, producer_id=1, producer_epoch=0, generation_id=-1,
            member_id="", group_instance_id=None, topics=[cls.TxnOffsetCommitRequestTopic(name=readable, partitions=[
                cls.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata="")])]))
        return [int(p.error_code) for t in r.topics for p in t.partitions]

    seen = {}
    for name, s in _session(targets, BOB).items():
        with s:
            found = s.call(10, 4, FindCoordinatorRequest[4](key_type=0, coordinator_keys=[group, deletable, names("x")]))
            seen[name] = (
                offset_delete(s, group),  # no DELETE on the group
                offset_delete(s, deletable),  # DELETE on the group, READ on one topic only
                txn_commit(s, names("other-txn"), group),  # no WRITE on that transactional id
                txn_commit(s, txn, deletable),  # no READ on that group
                [(c.key == group, c.error_code) for c in found.coordinators][1:],
            )
    assert seen["direct"] == (
        (GROUP_AUTHORIZATION_FAILED, {}), (0, {readable: 0, secret: TOPIC_AUTHORIZATION_FAILED}), [53],
        [GROUP_AUTHORIZATION_FAILED],
        [(False, 0), (False, GROUP_AUTHORIZATION_FAILED)],
    )
    assert seen["gateway"] == seen["direct"]
