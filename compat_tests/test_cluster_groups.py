"""Groups the cluster holds and the gateway does not coordinate: offsets-only groups, share groups
(KIP-932) and streams groups (KIP-1071), with Kafka 4.4.0's own tools and clients.

Every scenario runs against the broker directly and through the gateway, and the outcomes must match:
what ``kafka-consumer-groups``, ``kafka-share-groups`` and ``kafka-streams-groups`` print (coordinator
addresses aside, which the gateway rewrites by design), what the share consumer receives, what a Streams
application with ``group.protocol=streams`` processes and commits.
"""

from __future__ import annotations

import re
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from kafka.protocol.consumer.group import JoinGroupRequest, JoinGroupResponse

from compat_tests.harness.admin import admin, wait_for_leaders
from compat_tests.harness.brokers import ProcessBackend
from compat_tests.harness.clients import produce_confluent, values
from compat_tests.harness.java import JavaTool
from compat_tests.harness.probe import find_coordinator_endpoints, roundtrip
from coordinator.errors import Errors
from gateway.ops import kafka_dist
from gateway.ops.embedded_kafka import java_binary
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey
from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse

pytestmark = pytest.mark.kafka

RELEASE = kafka_dist.CURRENT_KAFKA
TOOL_TIMEOUT_S = 60.0
STREAMS_APP = Path(__file__).parent / "java" / "StreamsApp.java"


# --- helpers ------------------------------------------------------------------------------------------


def _tool(main_class: str, *args: str, timeout_s: float = TOOL_TIMEOUT_S) -> list[str]:
    """Run one of Kafka's command-line tools to completion; its stdout lines."""
    tool = JavaTool(RELEASE, main_class, list(args)).start()
    try:
        tool.wait(timeout_s)
    finally:
        tool.stop()
    return tool.lines


def _normalised(lines: list[str], group: str) -> list[str]:
    """A tool's table with the group id and the coordinator's address (rewritten by the gateway) masked."""
    out = []
    for line in lines:
        line = re.sub(r"\S+:\d+\s+\(\d+\)", "<coordinator>", line)
        out.append(" ".join(line.replace(group, "<group>").split()))
    return out


def _describe_all(main_class: str, bootstrap: str, groups: list[str], *extra: str) -> dict[str, list[str]]:
    """``--describe --all-groups`` (which lists the groups first: ListGroups and the describe APIs in one
    tool run), the lines of each of ``groups`` normalised; the broker is shared, others' groups are left out."""
    lines = _tool(main_class, "--bootstrap-server", bootstrap, "--describe", "--all-groups", *extra)
    out: dict[str, list[str]] = {g: [] for g in groups}
    for line in lines:
        for g in groups:
            if g in line.split() or f"'{g}'" in line:
                out[g].extend(_normalised([line], g))
    return out


def _consume_and_stop(bootstrap: str, topic: str, group: str, n: int) -> None:
    """A classic consumer that reads ``n`` records, commits them and leaves (its group: offsets only)."""
    c = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        c.subscribe([topic])
        got = 0
        for _ in range(120):
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got += 1
                if got == n:
                    break
        assert got == n, f"consumed {got} of {n} records"
        c.commit(asynchronous=False)
    finally:
        c.close()


def _committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    a = admin(bootstrap)
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(partitions)])
    result = a.list_consumer_group_offsets([req])[group].result(TOOL_TIMEOUT_S)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def _join_answers(bootstrap: str, group: str, topic: str) -> tuple[int, int]:
    """The error codes of a ConsumerGroupHeartbeat join and of a classic JoinGroup for ``group``."""
    protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
    heartbeat = roundtrip(bootstrap, ConsumerGroupHeartbeatRequest[1](
        group_id=group, member_id=uuid.uuid4().hex[:22], member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30000, subscribed_topic_names=[topic], subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=[],
    ), ConsumerGroupHeartbeatResponse, 1)  # fmt: skip
    join = roundtrip(bootstrap, JoinGroupRequest[9](
        group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
        group_instance_id=None, protocol_type="consumer", protocols=protocols, reason=None,
    ), JoinGroupResponse, 9)  # fmt: skip
    return int(heartbeat.error_code), int(join.error_code)


def _targets(kafka: ProcessBackend, gateway: Any) -> list[tuple[str, str]]:
    return [("broker", kafka.bootstrap), ("gateway", gateway.bootstrap)]


# --- offsets-only groups -------------------------------------------------------------------------------


def test_offsets_only_groups_are_listed_and_described_as_the_broker_does(
    kafka: ProcessBackend, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str]
) -> None:
    topic = make_topic(1)
    produce_confluent(kafka.bootstrap, topic, values("r", 20))
    # One group committed on the cluster itself (as before the gateway), one through the gateway; both
    # consumers stopped after committing 12 of the 20 records.
    before = names("before-gateway")
    _consume_and_stop(kafka.bootstrap, topic, before, 12)
    through = names("through-gateway")
    _consume_and_stop(module_gateway.bootstrap, topic, through, 12)

    cg = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
    groups = [before, through]

    def views(bootstrap: str) -> dict[str, list[str]]:
        offsets = _describe_all(cg, bootstrap, groups)
        state = _describe_all(cg, bootstrap, groups, "--state")
        return {g: offsets[g] + state[g] for g in groups}

    on_broker = views(kafka.bootstrap)
    reference = on_broker[before]
    # Kafka's answer for a stopped consumer's group: its offsets and lag (8 records), Empty, no members.
    assert any(r.split()[:6] == ["<group>", topic, "0", "12", "20", "8"] for r in reference), reference
    assert any(r.split()[-2:] == ["Empty", "0"] for r in reference), reference  # STATE, #MEMBERS
    # Both groups read alike on the broker, and through the gateway: the group the gateway never saw
    # and the gateway's own group once its consumer stopped.
    assert on_broker[through] == reference
    assert views(module_gateway.bootstrap) == {before: reference, through: reference}

    if getattr(module_gateway, "direct", False):
        return
    # A gateway that lost its state (ephemeral here) holds nothing for ``through``: the cluster's offsets
    # still make it an Empty consumer group, listed and described as before.
    module_gateway.restart()
    assert views(module_gateway.bootstrap) == {before: reference, through: reference}


# --- share groups (KIP-932) ------------------------------------------------------------------------------


def _share_from_earliest(bootstrap: str, group: str, **more: str) -> None:
    """share.auto.offset.reset=earliest for the group (share groups start at the end by default), and
    ``more`` group configs (dots spelled as underscores)."""
    configs = {"share.auto.offset.reset": "earliest", **{k.replace("_", "."): v for k, v in more.items()}}
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
        ],
    )
    client = admin(bootstrap)  # kept alive until the futures are answered
    for fut in client.incremental_alter_configs([resource]).values():
        fut.result(TOOL_TIMEOUT_S)


def test_share_consumer_and_share_groups_tool_through_the_gateway(
    kafka: ProcessBackend, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str]
) -> None:
    topic = make_topic(2)
    produced = {v.decode() for v in values("s", 20)}
    produce_confluent(kafka.bootstrap, topic, [v.encode() for v in sorted(produced)])
    sg = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
    groups = {}
    for label, bootstrap in _targets(kafka, module_gateway):
        group = groups[label] = names(f"share-{label}")
        _share_from_earliest(kafka.bootstrap, group)
        got = _tool(
            "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
            "--bootstrap-server", bootstrap, "--topic", topic, "--group", group,
            "--max-messages", "20", "--timeout-ms", "30000",
        )  # fmt: skip
        assert {line for line in got if line in produced} == produced, (label, got[-5:])

    described = {}
    for label, bootstrap in _targets(kafka, module_gateway):
        offsets = _describe_all(sg, bootstrap, list(groups.values()))
        state = _describe_all(sg, bootstrap, list(groups.values()), "--state")
        described[label] = {g: offsets[g] + state[g] for g in groups.values()}
    assert described["gateway"] == described["broker"]
    for rows in described["broker"].values():
        assert any("Empty" in row.split() for row in rows), rows
        assert any(row.split()[:2] == ["<group>", topic] for row in rows), rows

    # AlterShareGroupOffsets and DeleteShareGroupOffsets (one group each, forwarded to its coordinator).
    changed = {}
    for label, bootstrap in _targets(kafka, module_gateway):
        g = groups[label]
        reset = _tool(sg, "--bootstrap-server", bootstrap, "--reset-offsets", "--group", g, "--topic", topic,
                      "--to-earliest", "--execute")  # fmt: skip
        deleted = _tool(sg, "--bootstrap-server", bootstrap, "--delete-offsets", "--group", g, "--topic", topic)
        changed[label] = _normalised(reset, g) + _normalised(deleted, g)
    assert changed["gateway"] == changed["broker"]
    assert any(row.split()[:3] == ["<group>", topic, "0"] for row in changed["broker"]), changed["broker"]

    # A consumer-protocol or classic member joining under a share group's id: refused alike.
    refusals = {
        label: _join_answers(bootstrap, groups["broker"], topic) for label, bootstrap in _targets(kafka, module_gateway)
    }
    assert refusals["gateway"] == refusals["broker"], refusals
    assert refusals["broker"][0] != 0 and refusals["broker"][1] != 0, refusals


def _read_all(bootstrap: str, topic: str, n: int, timeout_s: float = 30.0) -> list[str]:
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4()}",
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    out: list[str] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None and m.value() is not None:
                out.append(m.value().decode())
    finally:
        c.close()
    return out


def test_rejected_share_records_reach_the_dead_letter_topic_alike_direct_and_through_the_gateway(
    kafka: ProcessBackend, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str]
) -> None:
    """KIP-1191 (Kafka 4.4, share.version 2, which the gateway carries): the console share consumer
    rejects every record it gets; the group's dead-letter topic (errors.deadletterqueue.topic.name, a topic
    enabled for it) receives each one, written by the broker, the same with the consumer on the broker and
    through the gateway."""
    topic = make_topic(1)
    produced = sorted(v.decode() for v in values("dlq", 10))
    produce_confluent(kafka.bootstrap, topic, [v.encode() for v in produced])
    dead: dict[str, list[str]] = {}
    client = admin(kafka.bootstrap)
    for label, bootstrap in _targets(kafka, module_gateway):
        group, dlq = names(f"dlq-{label}"), "dlq." + names(f"dead-{label}")
        client.create_topics([NewTopic(dlq, num_partitions=1, replication_factor=1,
                                       config={"errors.deadletterqueue.group.enable": "true"})])[dlq].result(30)
        wait_for_leaders(client, dlq, 1, 30)
        _share_from_earliest(kafka.bootstrap, group, errors_deadletterqueue_topic_name=dlq,
                             **{"errors_deadletterqueue_copy_record_enable": "true"})
        got = _tool(
            "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
            "--bootstrap-server", bootstrap, "--topic", topic, "--group", group, "--reject",
            "--max-messages", str(len(produced)), "--timeout-ms", "30000",
        )  # fmt: skip
        assert {line for line in got if line in produced} == set(produced), (label, got[-5:])
        dead[label] = sorted(_read_all(kafka.bootstrap, dlq, len(produced)))
    assert dead["broker"] == produced, dead["broker"]
    assert dead["gateway"] == dead["broker"]


# --- streams groups (KIP-1071) ---------------------------------------------------------------------------


@dataclass
class StreamsApp(JavaTool):
    """tests' StreamsApp.java on Kafka Streams' classpath (the JDK compiles the one source file)."""

    def command(self) -> list[str]:
        dist = kafka_dist.streams(RELEASE)
        kafka_dist.fetch(dist)
        return [
            java_binary(),
            "-Xmx256m",
            "-Djava.awt.headless=true",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            dist.classpath(),
            str(STREAMS_APP),
            *self.args,
        ]


def _processed(app: JavaTool) -> int:
    counts = [int(line.split()[1]) for line in app.lines if line.startswith("PROCESSED ")]
    return max(counts, default=0)


def test_streams_app_with_the_streams_protocol_through_the_gateway(
    kafka: ProcessBackend, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str]
) -> None:
    source = make_topic(2)
    produce_confluent(kafka.bootstrap, source, values("w", 20))
    sgc = "org.apache.kafka.tools.streams.StreamsGroupCommand"
    apps = {}
    for label, bootstrap in _targets(kafka, module_gateway):
        app_id = apps[label] = names(f"app-{label}")
        sink = make_topic(2)
        with tempfile.TemporaryDirectory(prefix="groupgate-streams-") as state_dir:
            app = StreamsApp(RELEASE, "StreamsApp", [bootstrap, app_id, source, sink, state_dir, "streams"])
            with app:
                app.wait_for(lambda t: "STATE RUNNING" in t.lines, 90.0, "RUNNING")
                app.wait_for(lambda t: _processed(t) >= 20, 60.0, "20 records processed")
                # Streams commits every 200 ms (commit.interval.ms) on the group's coordinator.
                app.wait_for(
                    lambda t, app_id=app_id: sum(_committed(kafka.bootstrap, app_id, source, 2).values()) == 20,
                    30.0,
                    "offsets committed",
                )
                # Through either address, the committed offsets of the streams group read the same.
                assert _committed(bootstrap, app_id, source, 2) == _committed(kafka.bootstrap, app_id, source, 2)
                described_live = _normalised(
                    _tool(sgc, "--bootstrap-server", bootstrap, "--describe", "--group", app_id, "--state"), app_id
                )
                assert any("Stable" in row.split() for row in described_live), (label, described_live)
        assert _processed(app) == 20, (label, app.lines[-5:])

    described = {
        label: _describe_all(sgc, bootstrap, list(apps.values()), "--state")
        for label, bootstrap in _targets(kafka, module_gateway)
    }
    assert described["gateway"] == described["broker"]
    for rows in described["broker"].values():
        assert any("Empty" in row.split() for row in rows), rows


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> int:
    """How many records ``topic`` holds (the sum of its partitions' high watermarks)."""
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-watermarks"})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions))
    finally:
        c.close()


def _streams_offline_migration(
    kafka: ProcessBackend, bootstrap: str, app_id: str, source: str, sink: str
) -> dict[str, Any]:
    """KIP-1071's offline migration of one application: it runs with ``group.protocol=classic`` over the
    source's first 20 records and stops, leaving the group (Empty, offsets only); restarted with
    ``group.protocol=streams``, its first heartbeat turns the empty classic group into a streams group that
    resumes from the committed offsets; 10 more records follow. What each run processed, what the sink
    holds, the committed offsets and the streams group's state while it runs."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="groupgate-streams-") as state_dir:
        args = [bootstrap, app_id, source, sink, state_dir]
        with StreamsApp(RELEASE, "StreamsApp", [*args, "classic", "leave"]) as app:
            app.wait_for(lambda t: "STATE RUNNING" in t.lines and _processed(t) >= 20, 90.0, "20 records processed")
            app.wait_for(
                lambda t: sum(_committed(kafka.bootstrap, app_id, source, 2).values()) == 20, 30.0, "offsets committed"
            )
        out["classic run processed"] = _processed(app)
        out["classic group after the stop"] = _described(bootstrap, app_id, ApiKey.DESCRIBE_GROUPS, 5)
        with StreamsApp(RELEASE, "StreamsApp", [*args, "streams"]) as app:
            app.wait_for(lambda t: "STATE RUNNING" in t.lines, 90.0, "RUNNING")
            produce_confluent(kafka.bootstrap, source, values("m2-", 10))
            app.wait_for(lambda t: _processed(t) >= 10, 60.0, "10 new records processed")
            app.wait_for(
                lambda t: sum(_committed(kafka.bootstrap, app_id, source, 2).values()) == 30, 30.0, "offsets committed"
            )
            out["streams group described"] = _described(bootstrap, app_id, ApiKey.STREAMS_GROUP_DESCRIBE, 0)
        out["streams run processed"] = _processed(app)
    out["committed"] = _committed(kafka.bootstrap, app_id, source, 2)
    out["sink records"] = _end_offsets(kafka.bootstrap, sink, 2)
    return out


def _described(bootstrap: str, group: str, api_key: int, version: int) -> tuple[int, str, str, int]:
    """DescribeGroups, ConsumerGroupDescribe or StreamsGroupDescribe of ``group`` at its coordinator as
    ``bootstrap`` names it: (error code, state, protocol type or group type, members)."""
    (coordinator,) = find_coordinator_endpoints(bootstrap, group, 3, timeout_s=60.0)
    if api_key == ApiKey.DESCRIBE_GROUPS:
        req = codec.REQUESTS[api_key][version](groups=[group], include_authorized_operations=False)
    else:
        req = codec.REQUESTS[api_key][version](group_ids=[group], include_authorized_operations=False)
    g = roundtrip(coordinator.address, req, codec.RESPONSES[api_key], version).groups[0]
    kind = {ApiKey.DESCRIBE_GROUPS: None, ApiKey.CONSUMER_GROUP_DESCRIBE: "consumer group"}.get(api_key, "streams group")
    return g.error_code, g.group_state, kind or g.protocol_type, len(g.members or [])


def test_streams_app_migrates_offline_from_the_classic_to_the_streams_protocol_alike_direct_and_through_the_gateway(
    kafka: ProcessBackend, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str]
) -> None:
    """Kafka 4.4.0 migrates a Streams application from ``group.protocol=classic`` to ``streams`` offline
    only: every instance stopped (leaving the group, or its session expired), the next streams heartbeat
    converts the empty classic group, keeping only the committed offsets (a classic group with members is
    refused: "is not a streams group"). The same migration through the gateway, which coordinates the
    classic group while the cluster holds the streams group: nothing processed twice, nothing skipped."""
    targets = dict(_targets(kafka, module_gateway))
    # A source and sink of its own per target: the committed offsets are then comparable as they are.
    topics = {label: (make_topic(2), make_topic(2)) for label in targets}
    for source, _ in topics.values():
        produce_confluent(kafka.bootstrap, source, values("m1-", 20))
    with ThreadPoolExecutor(max_workers=2) as pool:  # both at once: each has its own group and topics
        futures = {
            label: pool.submit(_streams_offline_migration, kafka, bootstrap, names(f"mig-{label}"), *topics[label])
            for label, bootstrap in targets.items()
        }
        outcomes = {label: f.result() for label, f in futures.items()}
    broker = outcomes["broker"]
    # Plain Kafka's own outcome first: the classic run left an Empty classic group; the streams run took
    # over its offsets (no record of the first 20 again), Stable; 30 records in the sink, 30 committed.
    assert broker["classic run processed"] == 20, broker
    assert broker["classic group after the stop"] == (0, "Empty", "consumer", 0), broker
    assert broker["streams run processed"] == 10, broker
    assert broker["streams group described"] == (0, "Stable", "streams group", 1), broker
    assert sum(broker["committed"].values()) == 30 and broker["sink records"] == 30, broker
    assert outcomes["gateway"] == broker


def _streams_join_answer(bootstrap: str, group: str, topic: str) -> tuple[int, str | None]:
    """(error code, message) of a StreamsGroupHeartbeat join (epoch 0) of ``group`` with a one-subtopology
    topology reading ``topic``."""
    (coordinator,) = find_coordinator_endpoints(bootstrap, group, 3, timeout_s=60.0)
    cls = codec.REQUESTS[ApiKey.STREAMS_GROUP_HEARTBEAT][0]
    topology = cls.Topology(epoch=0, subtopologies=[cls.Topology.Subtopologies(
        subtopology_id="0", source_topics=[topic], source_topic_regex=[], state_changelog_topics=[],
        repartition_sink_topics=[], repartition_source_topics=[], copartition_groups=[],
    )])  # fmt: skip
    req = cls(
        group_id=group, member_id=uuid.uuid4().hex, member_epoch=0, rebalance_timeout_ms=30000,
        topology=topology, active_tasks=[], standby_tasks=[], warmup_tasks=[], process_id=uuid.uuid4().hex,
        client_tags=[], task_offsets=None, task_end_offsets=None,
    )  # fmt: skip
    r = roundtrip(coordinator.address, req, codec.RESPONSES[ApiKey.STREAMS_GROUP_HEARTBEAT], 0)
    return int(r.error_code), r.error_message


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_streams_member_is_refused_a_classic_group_with_members_alike_direct_and_through_the_gateway(
    kafka: ProcessBackend, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str],
    protocol: str,
) -> None:
    """No online migration in Kafka 4.4.0: while a classic member is in the group, a streams member's join
    is refused (GROUP_ID_NOT_FOUND, "... is not a streams group."), and the classic member keeps its group;
    so is a join of a consumer group's id (KIP-848 member)."""
    topic = make_topic(1)
    answers = {}
    for label, bootstrap in _targets(kafka, module_gateway):
        group = names(f"online-{label}")
        member = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol})
        try:
            member.subscribe([topic])
            deadline = time.monotonic() + 60
            while not member.assignment():
                assert time.monotonic() < deadline, f"{label}: the classic member got no assignment"
                member.poll(0.2)
            code, message = _streams_join_answer(bootstrap, group, topic)
            member.poll(0.2)
            if protocol == "classic":
                described = _described(bootstrap, group, ApiKey.DESCRIBE_GROUPS, 5)
            else:
                described = _described(bootstrap, group, ApiKey.CONSUMER_GROUP_DESCRIBE, 0)
            answers[label] = (code, (message or "").replace(group, "<group>"), described)
        finally:
            member.close()
    # Kafka's own answer first: refused, the group Stable with its member.
    state = (0, "Stable", "consumer", 1) if protocol == "classic" else (0, "Stable", "consumer group", 1)
    assert answers["broker"] == (int(Errors.GROUP_ID_NOT_FOUND), "Group <group> is not a streams group.", state), answers
    assert answers["gateway"] == answers["broker"]


def _librdkafka_share_round(bootstrap: str, group: str, topic: str, expect: int) -> dict[str, Any]:
    """Two librdkafka share consumers of ``group`` until ``expect`` records came (acknowledged implicitly,
    committed with commit_sync), then a third member of the group: it must find nothing left to deliver
    (records acquired but not acknowledged are released when their member's share session closes, so a
    lost acknowledgement would show here as a redelivery)."""
    conf = {"bootstrap.servers": bootstrap, "group.id": group}
    members = [confluent_kafka.ShareConsumer({**conf, "client.id": f"share-{i}"}) for i in range(2)]
    got: list[str] = []
    try:
        for m in members:
            m.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < expect and time.monotonic() < deadline:
            for m in members:
                got += [msg.value().decode() for msg in m.poll(0.2) if msg.error() is None]
        for m in members:
            m.commit_sync(30)  # the implicit acknowledgements of the last batches
    finally:
        for m in members:
            m.close()
    late = confluent_kafka.ShareConsumer({**conf, "client.id": "share-late"})
    leftover: list[str] = []
    try:
        late.subscribe([topic])
        until = time.monotonic() + 4
        while time.monotonic() < until:
            leftover += [msg.value().decode() for msg in late.poll(0.2) if msg.error() is None]
    finally:
        late.close()
    return {"received": sorted(got), "redelivered after commit": sorted(leftover)}


def test_librdkafka_share_consumers_alike_direct_and_through_the_gateway(
    kafka: ProcessBackend, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str]
) -> None:
    """confluent-kafka 2.16's ShareConsumer (librdkafka's KIP-932 client): ShareGroupHeartbeat,
    ShareFetch and ShareAcknowledge through the gateway, to the cluster's share coordinator."""
    topic = make_topic(2)
    produced = sorted(v.decode() for v in values("sh", 20))
    produce_confluent(kafka.bootstrap, topic, [v.encode() for v in produced])
    outcomes = {}
    for label, bootstrap in _targets(kafka, module_gateway):
        group = names(f"rdk-share-{label}")
        _share_from_earliest(kafka.bootstrap, group)
        outcomes[label] = _librdkafka_share_round(bootstrap, group, topic, len(produced))
    assert outcomes["broker"] == {"received": produced, "redelivered after commit": []}  # each record once
    assert outcomes["gateway"] == outcomes["broker"]
