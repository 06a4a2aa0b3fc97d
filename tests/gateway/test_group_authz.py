"""Authorization in the group layer (gateway/authz/groups.py) without a broker: ACL snapshots set by hand.

The upstream is unreachable (tests/gateway/_groups_support.py) and every read of the cluster's ACLs is
refused (a stub client): a denial's confirming read keeps the snapshot the test set, and without one
everything is refused.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import OffsetCommitRequest
from kafka.protocol.consumer.group import HeartbeatRequest, JoinGroupRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from gateway.config.coordinator import CoordinatorSettings
from gateway.config.settings import GatewayConfig
from gateway.groups.layer import GroupLayer
from gateway.wire.api_keys import ApiKey
from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest
from translate.authorizer import AclBinding, AclSnapshot, Operation, PatternType, Permission, ResourceType

from ._groups_support import StubConnection, StubGateway, call, layer_on

GROUP_AUTHORIZATION_FAILED = 30
TOPIC_AUTHORIZATION_FAILED = 29
MEMBER_ID_REQUIRED = 79
BOB = StubConnection(principal="User:bob")
ADMIN = StubConnection(principal="User:admin")


def acl(rtype: ResourceType, name: str, principal: str, op: Operation, *, prefixed: bool = False,
        deny: bool = False, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, PatternType.PREFIXED if prefixed else PatternType.LITERAL, principal, host, op,
                      Permission.DENY if deny else Permission.ALLOW)


async def started(*acls: AclBinding, read: bool = True, **config: Any) -> GroupLayer:
    gw = StubGateway()
    gw.config = gw.config.model_copy(update={"authorization": "on", "super_users": ["User:admin"], **config})
    settings = CoordinatorSettings.model_validate({"initial_rebalance_delay_ms": 0, "upstream_check_s": 0})
    layer = layer_on(gw, settings)
    # The cluster fails to list its ACLs (UNKNOWN_SERVER_ERROR): every read fails, quickly. (A refusal,
    # CLUSTER_AUTHORIZATION_FAILED, stops the start: test_a_principal_without_describe_on_the_cluster_does_not_start.)
    layer.acls.client = _StubAcls(error_code=-1)  # type: ignore[assignment]
    await layer.start()
    if read:
        layer.acls.snapshot = AclSnapshot.of(acls, super_users={"User:admin"})
        layer.acls.read_at = time.monotonic()
    return layer


def join(group: str, member: str = "") -> JoinGroupRequest:
    protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="p", metadata=b"m")]
    return JoinGroupRequest[5](group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                               member_id=member, group_instance_id=None, protocol_type="test", protocols=protocols)


def commit(group: str, *topics: str, member: str = "", generation: int = -1) -> OffsetCommitRequest:
    cls = OffsetCommitRequest
    part = cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    return cls[8](group_id=group, generation_id_or_member_epoch=generation, member_id=member, group_instance_id=None,
                  topics=[cls.OffsetCommitRequestTopic(name=t, partitions=[part(partition_index=0, committed_offset=1,
                          committed_leader_epoch=-1, committed_metadata="")]) for t in topics])


async def test_without_a_snapshot_everything_is_refused() -> None:
    """The cluster's ACLs could not be read: refused rather than allowed, for every principal."""
    layer = await started(read=False)
    try:
        for conn in (BOB, ADMIN):
            r = await call(layer, ApiKey.JOIN_GROUP, 5, join("g"), conn)
            assert r.error_code == GROUP_AUTHORIZATION_FAILED
            f = await call(layer, ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest[3](key="g", key_type=0), conn)
            assert f.error_code == GROUP_AUTHORIZATION_FAILED and f.node_id == -1
        assert layer.acls.reads == 0 and layer.acls.last_error
    finally:
        await layer.stop()


async def test_a_principal_without_describe_on_the_cluster_does_not_start() -> None:
    """DescribeAcls refused (CLUSTER_AUTHORIZATION_FAILED) at start: serve exits 2 naming the right."""
    from gateway.security.rights import MissingRight

    gw = StubGateway()
    gw.config = gw.config.model_copy(update={"authorization": "on"})
    layer = layer_on(gw, CoordinatorSettings.model_validate({"initial_rebalance_delay_ms": 0, "upstream_check_s": 0}))
    layer.acls.client = _StubAcls(error_code=31)  # type: ignore[assignment]
    try:
        with pytest.raises(MissingRight, match="lacks DESCRIBE on the cluster"):
            await layer.start()
    finally:
        await layer.stop()


async def test_join_heartbeat_and_commit_need_read_on_the_group() -> None:
    layer = await started(
        acl(ResourceType.GROUP, "g", "User:bob", Operation.DESCRIBE),
        acl(ResourceType.TOPIC, "t", "User:bob", Operation.READ),
    )
    try:
        assert (await call(layer, ApiKey.JOIN_GROUP, 5, join("g"), BOB)).error_code == GROUP_AUTHORIZATION_FAILED
        hb = HeartbeatRequest[4](group_id="g", generation_id=1, member_id="m", group_instance_id=None)
        assert (await call(layer, ApiKey.HEARTBEAT, 4, hb, BOB)).error_code == GROUP_AUTHORIZATION_FAILED
        r = await call(layer, ApiKey.OFFSET_COMMIT, 8, commit("g", "t"), BOB)
        assert [(t.name, [p.error_code for p in t.partitions]) for t in r.topics] == [("t", [GROUP_AUTHORIZATION_FAILED])]
        # DESCRIBE (implied by nothing weaker here) is what FindCoordinator needs.
        f = await call(layer, ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest[3](key="g", key_type=0), BOB)
        assert f.error_code == 0
        # A super user needs no ACL.
        assert (await call(layer, ApiKey.JOIN_GROUP, 5, join("g"), ADMIN)).error_code == MEMBER_ID_REQUIRED
        assert layer.counters["authorization_refusals"] == 3
    finally:
        await layer.stop()


async def test_a_topic_without_read_is_refused_per_partition_and_the_group_is_not_asked() -> None:
    layer = await started(
        acl(ResourceType.GROUP, "g", "User:bob", Operation.READ),
        acl(ResourceType.TOPIC, "open-", "User:bob", Operation.READ, prefixed=True),
    )
    try:
        # Only unreadable topics: answered without asking the group (a stale member is not even looked at).
        r = await call(layer, ApiKey.OFFSET_COMMIT, 8, commit("g", "secret", member="nobody", generation=7), BOB)
        assert [(t.name, t.partitions[0].error_code) for t in r.topics] == [("secret", TOPIC_AUTHORIZATION_FAILED)]
        # Mixed: the readable topic goes on to the group's check (an unknown member here), the other not.
        r = await call(layer, ApiKey.OFFSET_COMMIT, 8, commit("g", "open-1", "secret", member="nobody", generation=7), BOB)
        codes = {t.name: t.partitions[0].error_code for t in r.topics}
        assert codes["secret"] == TOPIC_AUTHORIZATION_FAILED
        assert codes["open-1"] not in (0, TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED)
    finally:
        await layer.stop()


async def test_deny_wins_and_hosts_count() -> None:
    """The client (StubConnection) comes from 10.1.2.3."""
    layer = await started(
        acl(ResourceType.GROUP, "*", "User:*", Operation.READ),
        acl(ResourceType.GROUP, "g", "User:bob", Operation.READ, deny=True, host="10.1.2.3"),
        acl(ResourceType.GROUP, "h", "User:bob", Operation.READ, deny=True, host="10.9.9.9"),
    )
    try:
        assert (await call(layer, ApiKey.JOIN_GROUP, 5, join("g"), BOB)).error_code == GROUP_AUTHORIZATION_FAILED
        assert (await call(layer, ApiKey.JOIN_GROUP, 5, join("h"), BOB)).error_code == MEMBER_ID_REQUIRED
    finally:
        await layer.stop()


async def test_list_groups_shows_what_may_be_described_and_describe_answers_per_group() -> None:
    layer = await started(
        acl(ResourceType.GROUP, "a", "User:bob", Operation.DESCRIBE, prefixed=True),
        acl(ResourceType.CLUSTER, "kafka-cluster", "User:carol", Operation.DESCRIBE),
    )
    try:
        for g in ("a1", "b1"):
            r = await call(layer, ApiKey.JOIN_GROUP, 5, join(g), ADMIN)
            assert (await call(layer, ApiKey.JOIN_GROUP, 5, join(g, r.member_id), ADMIN)).error_code == 0

        async def listed(conn: StubConnection) -> list[str]:
            r = await call(layer, ApiKey.LIST_GROUPS, 4, ListGroupsRequest[4](states_filter=[]), conn)
            return sorted(g.group_id for g in r.groups)

        assert await listed(BOB) == ["a1"]
        assert await listed(ADMIN) == ["a1", "b1"]
        assert await listed(StubConnection(principal="User:carol")) == ["a1", "b1"]  # DESCRIBE on the cluster
        d = await call(layer, ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest[5](
            groups=["a1", "b1"], include_authorized_operations=True), BOB)
        # As Kafka: the refused groups first, then the described ones with the principal's operations.
        assert [(g.group_id, g.error_code) for g in d.groups] == [("b1", GROUP_AUTHORIZATION_FAILED), ("a1", 0)]
        assert d.groups[1].authorized_operations == {int(Operation.DESCRIBE)}
    finally:
        await layer.stop()


async def test_consumer_group_heartbeat_needs_describe_on_its_subscription() -> None:
    layer = await started(
        acl(ResourceType.GROUP, "g", "User:bob", Operation.READ),
        acl(ResourceType.TOPIC, "t", "User:bob", Operation.DESCRIBE),
    )
    try:
        for topics, code in ((["t", "u"], TOPIC_AUTHORIZATION_FAILED), (["t"], 0)):
            req = ConsumerGroupHeartbeatRequest[1](group_id="g", member_id="m1", member_epoch=0,
                                                   rebalance_timeout_ms=5000, subscribed_topic_names=topics,
                                                   topic_partitions=[])
            assert (await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, req, BOB)).error_code == code
    finally:
        await layer.stop()


@pytest.mark.parametrize("authorizer,stale,refused", [
    ("org.apache.kafka.metadata.authorizer.StandardAuthorizer", False, False),
    ("com.example.CustomAuthorizer", False, True),
    ("", False, True),  # could not be read
    ("org.apache.kafka.metadata.authorizer.StandardAuthorizer", True, True),
])
async def test_strict_mode_refuses_what_it_cannot_be_sure_of(authorizer: str, stale: bool, refused: bool) -> None:
    layer = await started(acl(ResourceType.GROUP, "g", "User:bob", Operation.READ), authorization="strict",
                          acl_refresh_interval_ms=1000)
    try:
        layer.acls.authorizer_class = authorizer
        if stale:
            layer.acls.read_at = time.monotonic() - 10  # more than three refresh intervals ago
        r = await call(layer, ApiKey.JOIN_GROUP, 5, join("g"), BOB)
        assert r.error_code == (GROUP_AUTHORIZATION_FAILED if refused else MEMBER_ID_REQUIRED)
    finally:
        await layer.stop()


def test_settings_take_kafkas_names_and_default_to_sasl_listeners() -> None:
    c = GatewayConfig.model_validate({"upstream": "h:1", "super.users": "User:a; User:b",
                                      "allow.everyone.if.no.acl.found": True})
    assert c.super_users == ["User:a", "User:b"] and c.allow_everyone_if_no_acl_found
    assert not c.authorizes()  # auto, PLAINTEXT listeners: unaffected
    assert GatewayConfig.model_validate({"upstream": "h:1", "listener_security_protocol": "SASL_PLAINTEXT"}).authorizes()
    assert GatewayConfig.model_validate({"upstream": "h:1", "authorization": "on"}).authorizes()
    terminating = {"upstream": "h:1", "listener_security_protocol": "SASL_PLAINTEXT", "listener_sasl_mode": "terminate",
                   "listener_sasl_credentials_file": "users.json"}
    # Termination authorizes by default (gateway/authz/data.py), needing no acceptance of the gateway's rights.
    assert GatewayConfig.model_validate(terminating).authorizes()
    assert GatewayConfig.model_validate({**terminating, "authorization": "on"}).authorizes()
    with pytest.raises(ValueError, match="listener_sasl_terminate_grants_gateway_rights"):
        GatewayConfig.model_validate({**terminating, "authorization": "off"})
    with pytest.raises(ValueError, match="needs the group coordinator enabled"):
        GatewayConfig.model_validate({**terminating, "coordinator": {"enabled": False}})
    off = {**terminating, "authorization": "off", "listener_sasl_terminate_grants_gateway_rights": True}
    assert not GatewayConfig.model_validate(off).authorizes()  # clients have the gateway's rights there
    with pytest.raises(ValueError):
        GatewayConfig.model_validate({"upstream": "h:1", "super.users": "admin"})


@pytest.mark.parametrize("version", [1, 5, 8])
async def test_offset_fetch_without_describe_on_the_group_is_refused_in_the_versions_shape(version: int) -> None:
    from kafka.protocol.consumer import OffsetFetchRequest

    layer = await started(acl(ResourceType.GROUP, "g", "User:bob", Operation.DESCRIBE))
    try:
        cls = OffsetFetchRequest
        if version >= 8:
            req = cls[version](groups=[
                cls.OffsetFetchRequestGroup(group_id=n, topics=[
                    cls.OffsetFetchRequestGroup.OffsetFetchRequestTopics(name="t", partition_indexes=[0])])
                for n in ("h", "g")], require_stable=False)
            r = await call(layer, ApiKey.OFFSET_FETCH, version, req, BOB)
            # Per group: the other group of the batch is answered (here: the unreachable cluster's error).
            assert r.groups[0].group_id == "h" and r.groups[0].error_code == GROUP_AUTHORIZATION_FAILED
            assert r.groups[1].error_code != GROUP_AUTHORIZATION_FAILED
        else:
            req = cls[version](group_id="h", topics=[cls.OffsetFetchRequestTopic(name="t", partition_indexes=[0])])
            r = await call(layer, ApiKey.OFFSET_FETCH, version, req, BOB)
            if version >= 2:
                assert r.error_code == GROUP_AUTHORIZATION_FAILED
            else:  # no top-level error code before v2
                assert [p.error_code for t in r.topics for p in t.partitions] == [GROUP_AUTHORIZATION_FAILED]
    finally:
        await layer.stop()


async def test_consumer_group_describe_hides_groups_with_topics_that_may_not_be_described() -> None:
    from gateway.wire.protocol.messages import ConsumerGroupDescribeRequest

    layer = await started(acl(ResourceType.GROUP, "g", "User:bob", Operation.DESCRIBE))
    try:
        d = await call(layer, ApiKey.CONSUMER_GROUP_DESCRIBE, 0, ConsumerGroupDescribeRequest[0](
            group_ids=["h", "g"], include_authorized_operations=True), BOB)
        assert [(g.group_id, g.error_code) for g in d.groups][0] == ("h", GROUP_AUTHORIZATION_FAILED)
        assert d.groups[1].group_id == "g" and d.groups[1].error_code != GROUP_AUTHORIZATION_FAILED
    finally:
        await layer.stop()


async def test_metrics_show_refusals_and_the_age_of_the_acls() -> None:
    from gateway.ops.health import Health

    layer = await started(read=False)
    try:
        await call(layer, ApiKey.JOIN_GROUP, 5, join("g"), BOB)
        text = Health(layer.nodes, layer).render().decode()
        assert 'groupgate_group_layer_events_total{event="authorization_refusals"} 1' in text
        assert "groupgate_acl_snapshot_age_seconds -1" in text
    finally:
        await layer.stop()


class _StubAcls:
    """What AclCache asks of an UpstreamClient: DescribeAcls answered with ``error_code``, slowly."""

    def __init__(self, error_code: int) -> None:
        self.error_code = error_code
        self.sent = 0

    def version(self, api_key: int, wanted: int) -> int:
        return wanted

    async def send_any(self, api_key: int, version: int, msg: Any, node_id: int | None = None) -> Any:
        import asyncio
        from types import SimpleNamespace

        self.sent += 1
        await asyncio.sleep(0.05)
        return SimpleNamespace(error_code=self.error_code, error_message=None, resources=[])


async def test_a_cluster_without_an_authorizer_allows_everything_and_reads_are_coalesced() -> None:
    import asyncio

    from gateway.authz.acls import AclCache
    from gateway.authz.groups import GroupAuthorizer
    from translate.authorizer import ResourceType as Rt

    client = _StubAcls(error_code=54)  # SECURITY_DISABLED: the brokers run no authorizer
    cache = AclCache(client)  # type: ignore[arg-type]
    authz = GroupAuthorizer(cache, strict=False, refresh_interval_s=10)
    access = authz.access("User:bob", "/10.1.2.3")
    assert not access._decide(Operation.READ, Rt.GROUP, "g")  # nothing read yet: refused
    # Ten denials at once: each waits for a read that started after it asked; the first starts one, the
    # nine others share the next (one read in flight at a time), not ten reads.
    await asyncio.gather(*(cache.fresh() for _ in range(10)))
    assert client.sent == 2 and cache.open
    assert await access.allows(Operation.READ, Rt.GROUP, "g")
    assert access.group_operations("g") == sum(1 << int(op) for op in (3, 8, 6, 10, 11))


async def test_a_failed_read_keeps_the_last_snapshot() -> None:
    from gateway.authz.acls import AclCache

    client = _StubAcls(error_code=31)  # CLUSTER_AUTHORIZATION_FAILED: the gateway may not list ACLs
    cache = AclCache(client)  # type: ignore[arg-type]
    snap = AclSnapshot.of([acl(ResourceType.GROUP, "g", "User:bob", Operation.READ)])
    cache.snapshot = snap
    await cache.fresh()
    assert cache.snapshot is snap and "error 31" in cache.last_error


async def test_strict_mode_refuses_clients_known_by_certificate_only() -> None:
    from gateway.authz.groups import GroupAuthorizer

    layer = await started(acl(ResourceType.GROUP, "g", "User:ANONYMOUS", Operation.READ))
    try:
        assert (await call(layer, ApiKey.JOIN_GROUP, 5, join("g"))).error_code == MEMBER_ID_REQUIRED
        layer.authorizer = GroupAuthorizer(layer.acls, strict=True, refresh_interval_s=10, principals_known=False)
        layer.acls.authorizer_class = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        assert (await call(layer, ApiKey.JOIN_GROUP, 5, join("g"))).error_code == GROUP_AUTHORIZATION_FAILED
    finally:
        await layer.stop()


async def test_strict_mode_refuses_a_pattern_matching_a_topic_that_may_not_be_described() -> None:
    layer = await started(
        acl(ResourceType.GROUP, "g", "User:bob", Operation.READ),
        acl(ResourceType.TOPIC, "open-", "User:bob", Operation.DESCRIBE, prefixed=True),
        authorization="strict",
    )
    try:
        layer.acls.authorizer_class = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        layer.watch.topics = {"open-1": (uuid.uuid4(), 1), "secret": (uuid.uuid4(), 1)}  # type: ignore[dict-item]

        async def subscribe(pattern: str) -> int:
            req = ConsumerGroupHeartbeatRequest[1](group_id="g", member_id="m-" + pattern, member_epoch=0,
                                                   rebalance_timeout_ms=5000, subscribed_topic_names=None,
                                                   subscribed_topic_regex=pattern, topic_partitions=[])
            return int((await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, req, BOB)).error_code)

        assert await subscribe(".*") == TOPIC_AUTHORIZATION_FAILED
        assert await subscribe("open-.*") == 0
    finally:
        await layer.stop()
