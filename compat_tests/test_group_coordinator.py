"""The gateway as the group coordinator of real clients, in front of a real broker.

Every group here is coordinated by the gateway (FindCoordinator names a gateway listener, the
membership lives in the gateway's state log) while the offsets land in the real cluster: a client
talking to the broker directly must see them. Session timeouts are short (the coordinator's lower
bounds are lowered in the gateway's config) so that the suite runs fast.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import confluent_kafka
import pytest
from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse

from compat_tests.harness.admin import admin
from compat_tests.harness.brokers import ProcessBackend, free_port_block
from compat_tests.harness.clients import ConfluentConsumer, KafkaPythonConsumer, produce_confluent, values
from compat_tests.harness.events import EventLog, ingest_verifiable_consumer
from compat_tests.harness.gateway_proc import GatewayProcess, configured_gateway
from compat_tests.harness.java import verifiable_consumer
from compat_tests.harness.probe import find_coordinator_endpoints, metadata_endpoints, roundtrip
from gateway.wire.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

pytestmark = pytest.mark.kafka

CONFIG = """
[coordinator]
initial_rebalance_delay_ms = 0
min_session_timeout_ms = 1000
"group.consumer.min.session.timeout.ms" = 2000
"group.consumer.session.timeout.ms" = 6000
"group.consumer.min.heartbeat.interval.ms" = 200
"group.consumer.heartbeat.interval.ms" = 500
# The raw members below never acknowledge a revocation, so each join's target assignment is computed at
# once (KIP-1263's interval, 1000 ms by default, is covered by test_assignment_interval.py).
"group.consumer.assignment.interval.ms" = 0
upstream_check_s = 2
"""

ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
STALE_MEMBER_EPOCH = 113


@pytest.fixture(scope="module")
def coordinator_gateway(
    kafka: ProcessBackend, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    root = tmp_path_factory.mktemp("gw-coordinator")
    with configured_gateway(kafka.bootstrap, root, CONFIG) as gw:
        yield gw


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str, gw: GatewayProcess | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    tail = f"\n--- gateway log tail:\n{gw.tail(80)}" if gw is not None else ""
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}{tail}")


def _committed_on_broker(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets as the real cluster has them (no gateway involved)."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        tps = [confluent_kafka.TopicPartition(topic, p) for p in range(partitions)]
        return {tp.partition: tp.offset for tp in c.committed(tps, timeout=10) if tp.offset >= 0}
    finally:
        c.close()


def _gateway_answers_coordinator(gw: GatewayProcess, group: str) -> tuple[int, str, int]:
    (c,) = find_coordinator_endpoints(gw.bootstrap, group, 3)
    # The client-requirements pitfall: the coordinator must be a broker of Metadata, same address.
    brokers = {(e.node_id, e.host, e.port) for e in metadata_endpoints(gw.bootstrap)}
    assert (c.node_id, c.host, c.port) in brokers, (c, brokers)
    return c.node_id, c.host, c.port


def _consumed_all(log: EventLog, n: int) -> bool:
    return len({r.position for r in log.records}) >= n


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka"])
def test_classic_group_coordinated_by_the_gateway_commits_to_the_cluster(
    client: str, coordinator_gateway: GatewayProcess, kafka: ProcessBackend, make_topic: Any, names: Any
) -> None:
    topic = make_topic(3)
    group = names("group")
    produce_confluent(kafka.bootstrap, topic, values("v", 60))
    node, host, port = _gateway_answers_coordinator(coordinator_gateway, group)
    assert (host, port) != tuple(kafka.bootstrap.rsplit(":", 1)), "the coordinator must be a gateway listener"
    log = EventLog()
    cls: Any = KafkaPythonConsumer if client == "kafka-python" else ConfluentConsumer
    consumers = [
        cls(name=f"c{i}", log=log, bootstrap=coordinator_gateway.bootstrap, group_id=group, topics=[topic])
        for i in range(2)
    ]
    for c in consumers:
        c.start()
    try:
        _wait(lambda: _consumed_all(log, 60), 60, "all 60 records consumed", coordinator_gateway)
        _wait(
            lambda: sum(_committed_on_broker(kafka.bootstrap, group, topic, 3).values()) == 60,
            30,
            "offsets committed on the broker",
        )
    finally:
        for c in consumers:
            c.stop()
    assert len({r.position for r in log.records}) == 60
    # The gateway coordinated the group: the broker never saw a member of it.
    assert _broker_members(kafka.bootstrap, group) == 0
    # OffsetFetch through the gateway answers what the cluster holds.
    on_broker = _committed_on_broker(kafka.bootstrap, group, topic, 3)
    assert _committed_on_broker(coordinator_gateway.bootstrap, group, topic, 3) == on_broker


def _broker_members(bootstrap: str, group: str) -> int:
    """Members the broker itself knows in ``group`` (a single-node cluster: it is the coordinator)."""
    r = roundtrip(bootstrap, DescribeGroupsRequest[5](groups=[group]), DescribeGroupsResponse, 5)
    return sum(len(g.members) for g in r.groups if g.error_code == 0)


def test_confluent_consumer_protocol_group_coordinated_by_the_gateway(
    coordinator_gateway: GatewayProcess, kafka: ProcessBackend, make_topic: Any, names: Any
) -> None:
    """KIP-848 clients (group.protocol=consumer): server-side assignment by the gateway."""
    topic = make_topic(4)
    group = names("group")
    produce_confluent(kafka.bootstrap, topic, values("v", 80))
    log = EventLog()
    consumers = [
        ConfluentConsumer(
            name=f"c{i}", log=log, bootstrap=coordinator_gateway.bootstrap, group_id=group, topics=[topic],
            group_protocol="consumer",
        )
        for i in range(2)
    ]
    for c in consumers:
        c.start()
    try:
        _wait(lambda: _consumed_all(log, 80), 60, "all 80 records consumed", coordinator_gateway)
        _wait(
            lambda: sum(_committed_on_broker(kafka.bootstrap, group, topic, 4).values()) == 80,
            30,
            "offsets committed on the broker",
        )
        # Consuming everything can finish while the second member is still reconciling: wait for Stable.
        _wait(lambda: _describe(coordinator_gateway, group).group_state == "Stable", 30, "group stable", coordinator_gateway)
        described = _describe(coordinator_gateway, group)
        assert described.error_code == 0 and described.group_state == "Stable", described
        assert sorted(m.client_id for m in described.members) == ["c0", "c1"]
        owned = sorted(p for m in described.members for t in m.assignment.topic_partitions for p in t.partitions)
        assert owned == [0, 1, 2, 3], described
    finally:
        for c in consumers:
            c.stop()
    assert _broker_members(kafka.bootstrap, group) == 0


def test_java_verifiable_consumer_with_the_consumer_protocol(
    coordinator_gateway: GatewayProcess, kafka: ProcessBackend, make_topic: Any, names: Any, java_logs: Any
) -> None:
    topic = make_topic(3)
    group = names("group")
    produce_confluent(kafka.bootstrap, topic, values("v", 30))
    tool = verifiable_consumer(
        "4.4.0", coordinator_gateway.bootstrap, topic, group, group_protocol="consumer", log_dir=java_logs
    ).start()
    log = EventLog()
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            log = EventLog()
            ingest_verifiable_consumer(log, "java", tool)
            if _consumed_all(log, 30):
                break
            time.sleep(0.3)
    finally:
        tool.stop()
    assert _consumed_all(log, 30), tool.tail()
    failed = [e for e in tool.named("offsets_committed") if not e.data.get("success")]
    assert not failed, failed[:3]
    assert sum(_committed_on_broker(kafka.bootstrap, group, topic, 3).values()) == 30


def _describe(gw: GatewayProcess, group: str) -> Any:
    (c,) = find_coordinator_endpoints(gw.bootstrap, group, 3)
    r = roundtrip(c.address, ConsumerGroupDescribeRequest[0](group_ids=[group]), ConsumerGroupDescribeResponse, 0)
    return r.groups[0]


def _heartbeat(address: str, group: str, member_id: str, epoch: int, topics: list[str] | None) -> Any:
    req = ConsumerGroupHeartbeatRequest[1](
        group_id=group, member_id=member_id, member_epoch=epoch, rebalance_timeout_ms=10000,
        subscribed_topic_names=topics, server_assignor=None, topic_partitions=[] if epoch == 0 else None,
    )
    return roundtrip(address, req, ConsumerGroupHeartbeatResponse, 1)


def _commit(address: str, group: str, member_id: str, epoch: int, topic: str, offset: int) -> int:
    cls = OffsetCommitRequest
    req = cls[9](
        group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id, group_instance_id=None,
        topics=[
            cls.OffsetCommitRequestTopic(
                name=topic,
                partitions=[cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                    partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata=""
                )],
            )
        ],
    )
    r = roundtrip(address, req, OffsetCommitResponse, 9)
    return int(r.topics[0].partitions[0].error_code)


def test_zombie_commits_are_fenced_and_never_reach_the_cluster(
    coordinator_gateway: GatewayProcess, kafka: ProcessBackend, make_topic: Any, names: Any
) -> None:
    topic = make_topic(1)
    group = names("group")
    (c,) = find_coordinator_endpoints(coordinator_gateway.bootstrap, group, 3)
    member = str(uuid.uuid4())
    joined = _heartbeat(c.address, group, member, 0, [topic])
    assert joined.error_code == 0 and joined.member_epoch >= 1, joined
    epoch = joined.member_epoch

    assert _commit(c.address, group, member, epoch, topic, 7) == 0
    assert _committed_on_broker(kafka.bootstrap, group, topic, 1) == {0: 7}
    # A zombie of an older epoch, a member the group never had, and a classic-style generation.
    assert _commit(c.address, group, member, epoch - 1, topic, 3) == STALE_MEMBER_EPOCH
    assert _commit(c.address, group, "ghost", epoch, topic, 3) == UNKNOWN_MEMBER_ID
    assert _committed_on_broker(kafka.bootstrap, group, topic, 1) == {0: 7}

    # A classic group's zombie: a generation the group is past.
    classic = names("classic")
    log = EventLog()
    with KafkaPythonConsumer(
        name="k0", log=log, bootstrap=coordinator_gateway.bootstrap, group_id=classic, topics=[topic]
    ):
        _wait(
            lambda: any(e.kind == "assigned" and e.partitions for e in log.ownership),
            60,
            "an assignment",
            coordinator_gateway,
        )
        r = roundtrip(c.address, DescribeGroupsRequest[5](groups=[classic]), DescribeGroupsResponse, 5)
        (m,) = r.groups[0].members
        assert _commit(c.address, classic, m.member_id, 1000, topic, 5) == ILLEGAL_GENERATION
        assert _commit(c.address, classic, "ghost", 1, topic, 5) == UNKNOWN_MEMBER_ID
    assert _committed_on_broker(kafka.bootstrap, classic, topic, 1).get(0) != 5


def test_members_keep_their_ids_and_epochs_across_a_gateway_restart(
    kafka: ProcessBackend, make_topic: Any, names: Any, tmp_path: Any
) -> None:
    topic = make_topic(2)
    group = names("group")
    gw = configured_gateway(kafka.bootstrap, tmp_path, CONFIG).start()
    try:
        (c,) = find_coordinator_endpoints(gw.bootstrap, group, 3)
        members = {str(uuid.uuid4()): 0 for _ in range(2)}
        for m in members:
            r = _heartbeat(c.address, group, m, 0, [topic])
            assert r.error_code == 0, r
        # Heartbeat until both members settle on their epochs (the first one sees the second's join).
        for _ in range(3):
            for m in members:
                r = _heartbeat(c.address, group, m, _epoch_of(gw, group, m), [topic])
                assert r.error_code == 0, r
                members[m] = r.member_epoch
        before = _describe(gw, group)
        assert before.error_code == 0 and len(before.members) == 2
        snapshot = sorted((m.member_id, m.member_epoch) for m in before.members)

        gw.restart(hard=True)

        after = _describe(gw, group)
        assert after.error_code == 0
        assert sorted((m.member_id, m.member_epoch) for m in after.members) == snapshot
        assert after.group_epoch == before.group_epoch
        # The members carry on without rejoining: their next heartbeat is accepted at the same epoch.
        for member_id, epoch in snapshot:
            r = _heartbeat(c.address, group, member_id, epoch, None)
            assert r.error_code == 0 and r.member_epoch == epoch, r
    finally:
        gw.stop()


def _epoch_of(gw: GatewayProcess, group: str, member_id: str) -> int:
    for m in _describe(gw, group).members:
        if m.member_id == member_id:
            return int(m.member_epoch)
    raise AssertionError(f"{member_id} is not a member of {group}")


def test_members_on_the_upstream_coordinator_are_reported_loudly(
    coordinator_gateway: GatewayProcess, kafka: ProcessBackend, make_topic: Any, names: Any
) -> None:
    """A client that talks to the broker directly joins a group the gateway manages: the gateway says so."""
    topic = make_topic(1)
    group = names("group")
    produce_confluent(kafka.bootstrap, topic, values("v", 10))
    log = EventLog()
    direct = KafkaPythonConsumer(name="direct", log=log, bootstrap=kafka.bootstrap, group_id=group, topics=[topic])
    through = KafkaPythonConsumer(
        name="through", log=log, bootstrap=coordinator_gateway.bootstrap, group_id=group, topics=[topic]
    )
    direct.start()
    try:
        _wait(lambda: _broker_members(kafka.bootstrap, group) == 1, 30, "the direct member on the broker")
        through.start()
        try:
            _wait(
                lambda: "clients bypass the gateway" in coordinator_gateway.tail(400)
                and group in coordinator_gateway.tail(400),
                30,
                "the gateway's bypass warning",
            )
        finally:
            try:
                through.stop()
            except AssertionError:
                # The upstream refuses the gateway's commits while it has members of its own: the
                # gateway passes that refusal on, and kafka-python raises it from commit().
                assert "CommitFailedError" in repr(through.error), through.error
    finally:
        direct.stop()


def test_unmanaged_groups_stay_on_the_cluster_and_mixed_requests_are_merged(
    kafka: ProcessBackend, make_topic: Any, names: Any, tmp_path: Any
) -> None:
    topic = make_topic(2)
    managed, unmanaged = f"managed-{names('g')}", f"plain-{names('g')}"
    config = tmp_path / "gateway.toml"
    config.write_text(CONFIG)
    gw = GatewayProcess(
        upstream=kafka.bootstrap,
        listen_port=free_port_block(3),
        log_dir=tmp_path,
        extra_args=["--config", str(config), "--managed-groups", "managed-.*"],
    )
    gw.start()
    log = EventLog()
    consumers = [
        ConfluentConsumer(name=f"c-{g}", log=log, bootstrap=gw.bootstrap, group_id=g, topics=[topic])
        for g in (managed, unmanaged)
    ]
    try:
        for c in consumers:
            c.start()
        _wait(
            lambda: {e.consumer for e in log.ownership if e.kind == "assigned" and e.partitions}
            == {f"c-{managed}", f"c-{unmanaged}"},
            60,
            "both groups assigned",
            gw,
        )
        # The unmanaged group lives on the broker, the managed one does not.
        assert _broker_members(kafka.bootstrap, unmanaged) == 1
        assert _broker_members(kafka.bootstrap, managed) == 0
        # One DescribeGroups naming both: split between the gateway and the broker, merged in order.
        (c,) = find_coordinator_endpoints(gw.bootstrap, managed, 3)
        r = roundtrip(c.address, DescribeGroupsRequest[5](groups=[unmanaged, managed]), DescribeGroupsResponse, 5)
        assert [(g.group_id, g.error_code, len(g.members)) for g in r.groups] == [(unmanaged, 0, 1), (managed, 0, 1)]
        # ListGroups through the gateway: each group exactly once.
        client = admin(gw.bootstrap)  # kept referenced: a destroyed client fails its futures
        listed = client.list_consumer_groups().result(timeout=30)
        assert not listed.errors, listed.errors
        ids = [g.group_id for g in listed.valid]
        assert ids.count(managed) == 1 and ids.count(unmanaged) == 1, ids
    finally:
        for c in consumers:
            c.stop()
        gw.stop()


def test_api_versions_advertise_what_the_group_handlers_speak(coordinator_gateway: GatewayProcess) -> None:
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    from gateway.wire.group_codec import LOCAL_API

    req = ApiVersionsRequest[3](client_software_name="compat", client_software_version="1")
    r = roundtrip(coordinator_gateway.bootstrap, req, ApiVersionsResponse, 3)
    ranges = {a.api_key: (a.min_version, a.max_version) for a in r.api_keys}
    for api_key, rng in LOCAL_API.items():
        assert ranges.get(api_key) == rng, (api_key, ranges.get(api_key), rng)
    assert ranges[68] == (0, 1) and ranges[69] == (0, 1)
    assert ranges[8][1] == 10 and ranges[9][1] == 10 and ranges[11][1] == 9 and ranges[14][1] == 5
