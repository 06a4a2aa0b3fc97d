"""``classic_groups = translate`` keeps each group's declared strategy: the same scenario runs against
the broker directly (Kafka's classic group, client-side assignment) and through a gateway that
translates the classic members into a consumer group, and must give the same layouts, revocations and
lost-partition callbacks:

- librdkafka (confluent-kafka, ``group.protocol=classic``): ``roundrobin`` interleaves, ``range`` gives
  contiguous ranges, ``cooperative-sticky`` over two topics gives one partition of each topic per member
  and moves only those partitions when the second member joins; deleting one of the topics makes each
  member lose (``on_lost``) its partition of it;
- a subscribed topic growing from 1 to 2 partitions is one assignment round, with partition 1;
- Java consumers (VerifiableConsumer, 4.3.1) with ``RoundRobinAssignor``.

Members are started one after the other and settle before the next starts, so that Kafka's own
layout does not depend on the timing of the joins (the shared broker runs
``group.initial.rebalance.delay.ms = 0``). Layouts are compared up to the members' order by id: the
ids differ between the two runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import NewTopic

from compat_tests.harness.admin import admin, create_topic, delete_topic, wait_for_leaders
from compat_tests.harness.brokers import ProcessBackend
from compat_tests.harness.gateway_proc import GatewayProcess, configured_gateway
from compat_tests.harness.java import PartitionsAssigned, PartitionsRevoked, verifiable_consumer

pytestmark = pytest.mark.kafka

CONFIG = """
classic_groups = "translate"
initial_rebalance_delay_ms = 500
min_session_timeout_ms = 1000
"""
QUIET_S = 3.0  # no callback for this long (several heartbeat intervals and metadata refreshes): settled
SETTLE_TIMEOUT_S = 45.0

TP = tuple[str, int]


@pytest.fixture(scope="module")
def strategies_gateway(kafka: ProcessBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with configured_gateway(kafka.bootstrap, tmp_path_factory.mktemp("gw-strategies"), "[coordinator]\n" + CONFIG) as gw:
        yield gw


@dataclass
class Member:
    """One librdkafka classic consumer polled from the test thread, and what its callbacks saw."""

    consumer: Any
    assigns: list[list[TP]] = field(default_factory=list)
    revokes: list[list[TP]] = field(default_factory=list)
    losts: list[list[TP]] = field(default_factory=list)
    owned: set[TP] = field(default_factory=set)
    last_change: float = field(default_factory=time.monotonic)

    @property
    def member_id(self) -> str:
        return str(self.consumer.memberid() or "")


def start(bootstrap: str, group: str, subscription: list[str], strategy: str) -> Member:
    c = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "classic",
            "partition.assignment.strategy": strategy,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 500,
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    m = Member(c)
    cooperative = strategy == "cooperative-sticky"

    def tps(parts: list[Any]) -> list[TP]:
        return sorted((p.topic, p.partition) for p in parts)

    def on_assign(_c: Any, parts: list[Any]) -> None:
        m.assigns.append(tps(parts))
        m.owned = m.owned | set(tps(parts)) if cooperative else set(tps(parts))
        m.last_change = time.monotonic()

    def on_revoke(_c: Any, parts: list[Any]) -> None:
        if parts:
            m.revokes.append(tps(parts))
        m.owned -= set(tps(parts))
        m.last_change = time.monotonic()

    def on_lost(_c: Any, parts: list[Any]) -> None:
        m.losts.append(tps(parts))
        m.owned -= set(tps(parts))
        m.last_change = time.monotonic()

    c.subscribe(subscription, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    return m


def settle(members: list[Member], partitions: set[TP], where: str, assigned: bool = True) -> None:
    """Poll every member until all partitions are owned, once each, and nothing changed for QUIET_S
    (``assigned``: and every member has had an assignment callback)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        for m in members:
            m.consumer.poll(0.05)
        owned = sorted(tp for m in members for tp in m.owned)
        quiet = all(time.monotonic() - m.last_change >= QUIET_S for m in members)
        if quiet and owned == sorted(partitions) and (not assigned or all(m.assigns for m in members)):
            return
    raise AssertionError(f"{where}: not settled: {[(m.assigns, m.revokes, m.losts) for m in members]}")


def close(members: list[Member]) -> None:
    for m in members:
        try:
            m.consumer.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass


def layout(members: list[Member], topics: list[str]) -> list[list[tuple[int, int]]]:
    """Each member's partitions as (topic position, partition), members in member id order."""
    ordered = sorted(members, key=lambda m: m.member_id)
    return [sorted((topics.index(t), p) for t, p in m.owned) for m in ordered]


def positions(tps: list[TP], topics: list[str]) -> list[tuple[int, int]]:
    return sorted((topics.index(t), p) for t, p in tps)


Scenario = Callable[[str, str, str], Any]


def both(kafka: ProcessBackend, gw: GatewayProcess, names: Callable[[str], str], scenario: Scenario) -> tuple[Any, Any]:
    """The scenario on the broker directly, then through the translating gateway (fresh groups and topics)."""
    return (scenario(kafka.bootstrap, names("kafka-group"), "kafka"),
            scenario(gw.bootstrap, names("translate-group"), "translate"))


@pytest.mark.parametrize(
    "strategy,expected",
    [
        ("roundrobin", [[(0, 0), (0, 2)], [(0, 1), (0, 3)]]),
        ("range", [[(0, 0), (0, 1)], [(0, 2), (0, 3)]]),
    ],
)
def test_librdkafka_layouts_are_the_strategys_as_on_kafka(
    strategy: str, expected: list[list[tuple[int, int]]], kafka: ProcessBackend,
    strategies_gateway: GatewayProcess, names: Callable[[str], str],
) -> None:
    def scenario(bootstrap: str, group: str, where: str) -> list[list[tuple[int, int]]]:
        topic = create_topic(kafka.bootstrap, names(f"t-{where}"), 4)
        partitions = {(topic, p) for p in range(4)}
        members = [start(bootstrap, group, [topic], strategy)]
        try:
            settle(members, partitions, where)
            members.append(start(bootstrap, group, [topic], strategy))
            settle(members, partitions, where)
            return layout(members, [topic])
        finally:
            close(members)

    on_kafka, translated = both(kafka, strategies_gateway, names, scenario)
    assert on_kafka == expected, on_kafka
    assert translated == on_kafka


def test_librdkafka_cooperative_sticky_over_two_topics_and_lost_partitions_as_on_kafka(
    kafka: ProcessBackend, strategies_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    """Two members join over a topic ``z``, which is then deleted: both are in the group holding
    nothing. Two topics ``a`` and ``b`` of two partitions appear together (one CreateTopics request):
    each member gets one partition of each, nothing is revoked. Deleting ``b`` makes each member report
    its partition of it lost (``on_lost``). Created one after the other, the layout depends on whether
    the clients see ``a`` alone first: on a loaded machine librdkafka on Kafka itself then gives each
    member a whole topic."""

    @dataclass
    class Seen:
        layout: list[list[tuple[int, int]]]
        revoked: list[list[tuple[int, int]]]
        lost: list[list[tuple[int, int]]]
        after: list[list[tuple[int, int]]]

    def scenario(bootstrap: str, group: str, where: str) -> Seen:
        topics = [names(f"{where}-{x}") for x in ("a", "b", "z")]
        create_topic(kafka.bootstrap, topics[2], 2)
        members: list[Member] = []
        try:
            for _ in range(2):
                members.append(start(bootstrap, group, topics, "cooperative-sticky"))
                settle(members, {(topics[2], p) for p in range(2)}, where)
            delete_topic(kafka.bootstrap, topics[2])
            settle(members, set(), where)
            marks = [(len(m.revokes), len(m.losts)) for m in members]
            client = admin(kafka.bootstrap)
            created = client.create_topics([NewTopic(t, num_partitions=2, replication_factor=1) for t in topics[:2]])
            for t in topics[:2]:
                created[t].result(timeout=30)
                wait_for_leaders(client, t, 2)
            settle(members, {(t, p) for t in topics[:2] for p in range(2)}, where)
            ordered = sorted(members, key=lambda m: m.member_id)
            since = {id(m): mark for m, mark in zip(members, marks, strict=True)}
            new = [positions(list(m.owned), topics) for m in ordered]
            revoked = [positions([tp for r in m.revokes[since[id(m)][0]:] for tp in r], topics) for m in ordered]
            delete_topic(kafka.bootstrap, topics[1])
            settle(members, {(topics[0], p) for p in range(2)}, where)
            lost = [positions([tp for x in m.losts[since[id(m)][1]:] for tp in x], topics) for m in ordered]
            return Seen(new, revoked, lost, layout(members, topics))
        finally:
            close(members)

    on_kafka, translated = both(kafka, strategies_gateway, names, scenario)
    print(f"cooperative-sticky over two topics: kafka={on_kafka} translate={translated}")
    assert on_kafka == Seen(
        layout=[[(0, 0), (1, 0)], [(0, 1), (1, 1)]], revoked=[[], []], lost=[[(1, 0)], [(1, 1)]],
        after=[[(0, 0)], [(0, 1)]],
    ), on_kafka
    assert translated == on_kafka


def test_librdkafka_cooperative_sticky_newcomer_takes_what_it_takes_on_kafka(
    kafka: ProcessBackend, strategies_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    """A member holding two topics, then a second member: librdkafka's cooperative-sticky (KIP-54's
    algorithm) revokes one whole topic from the first and gives it to the second, only that."""

    def scenario(bootstrap: str, group: str, where: str) -> tuple[Any, ...]:
        topics = [create_topic(kafka.bootstrap, names(f"{where}-{x}"), 2) for x in ("a", "b")]
        partitions = {(t, p) for t in topics for p in range(2)}
        first = start(bootstrap, group, topics, "cooperative-sticky")
        members = [first]
        try:
            settle(members, partitions, where)
            members.append(start(bootstrap, group, topics, "cooperative-sticky"))
            settle(members, partitions, where)
            second = members[1]
            return (
                positions([tp for a in first.assigns for tp in a], topics),
                positions([tp for r in first.revokes for tp in r], topics),
                positions([tp for a in second.assigns for tp in a], topics),
                list(second.revokes),  # a copy: closing revokes too
            )
        finally:
            close(members)

    on_kafka, translated = both(kafka, strategies_gateway, names, scenario)
    print(f"cooperative-sticky newcomer (first assigned, first revoked, second assigned): kafka={on_kafka} translate={translated}")
    assert on_kafka == ([(0, 0), (0, 1), (1, 0), (1, 1)], [(0, 0), (0, 1)], [(0, 0), (0, 1)], []), on_kafka
    assert translated == on_kafka


def partition_growth(
    kafka: ProcessBackend, gw: GatewayProcess, names: Callable[[str], str], strategy: str
) -> tuple[Any, Any]:
    """A subscribed topic grows from 1 to 2 partitions under one member: the assignments and
    revocations it saw from then on, on Kafka and through the gateway."""

    def scenario(bootstrap: str, group: str, where: str) -> tuple[list[list[TP]], list[list[TP]]]:
        topic = create_topic(kafka.bootstrap, names(f"grow-{where}"), 1)
        m = start(bootstrap, group, [topic], strategy)
        try:
            settle([m], {(topic, 0)}, where)
            before_assigns, before_revokes = len(m.assigns), len(m.revokes)
            client = admin(kafka.bootstrap)
            client.create_partitions([confluent_kafka.admin.NewPartitions(topic, 2)])[topic].result(timeout=30)
            wait_for_leaders(client, topic, 2)
            settle([m], {(topic, 0), (topic, 1)}, where)
            return m.assigns[before_assigns:], m.revokes[before_revokes:]
        finally:
            close([m])

    on_kafka, translated = both(kafka, gw, names, scenario)
    print(f"{strategy}: partition growth 1 -> 2 (assignments, revocations): kafka={on_kafka} translate={translated}")
    return tuple([[p for _, p in a] for a in x] for x in on_kafka), tuple([[p for _, p in a] for a in x] for x in translated)


def test_a_partition_count_change_is_one_assignment_round_as_on_kafka(
    kafka: ProcessBackend, strategies_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    """A subscribed topic grows from 1 to 2 partitions: the member is given partition 1 in one round,
    whichever of the client and the gateway's periodic refresh sees the change first."""
    on_kafka, translated = partition_growth(kafka, strategies_gateway, names, "cooperative-sticky")
    assert on_kafka == ([[1]], [])
    assert translated == on_kafka


@pytest.fixture(scope="module")
def quick_refresh_gateway(kafka: ProcessBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    """A translating gateway refreshing its topic image every 0.3 s: it sees a topic grow before the
    clients (which refresh every second) do."""
    root = tmp_path_factory.mktemp("gw-quick-refresh")
    with configured_gateway(kafka.bootstrap, root, "[coordinator]\n" + CONFIG + "metadata_refresh_s = 0.3\n") as gw:
        yield gw


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
def test_a_partition_count_change_the_gateway_sees_first_is_one_round_as_on_kafka(
    strategy: str, kafka: ProcessBackend, quick_refresh_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    """The gateway's refresh sees the topic grow first. Told to rejoin at once, the client would rejoin
    with its old metadata, be given partition 1, learn of it and rejoin once more: two rounds (with
    range, two full ones). Left to notice it itself within the grace, it has the one round it has on
    Kafka."""
    on_kafka, translated = partition_growth(kafka, quick_refresh_gateway, names, strategy)
    assert on_kafka == (([[1]], []) if strategy == "cooperative-sticky" else ([[0, 1]], [[0]]))
    assert translated == on_kafka


def test_java_roundrobin_consumers_get_the_layout_they_get_on_kafka(
    kafka: ProcessBackend, strategies_gateway: GatewayProcess, names: Callable[[str], str], java_logs: Path
) -> None:
    strategy = "org.apache.kafka.clients.consumer.RoundRobinAssignor"

    def scenario(bootstrap: str, group: str, where: str) -> list[list[int]]:
        topic = create_topic(kafka.bootstrap, names(f"java-{where}"), 4)
        tools = []
        try:
            for i in range(2):
                (java_logs / f"{where}-{i}").mkdir()
                tool = verifiable_consumer(
                    "4.3.1", bootstrap, topic, group, assignment_strategy=strategy,
                    session_timeout_ms=10000, log_dir=java_logs / f"{where}-{i}",
                ).start()
                tools.append(tool)
                tool.wait_for(lambda t: bool(t.of_type(PartitionsAssigned)), 60, "first assignment")

            def current(t: Any) -> set[int]:
                owned: set[int] = set()
                for e in t.events:
                    if isinstance(e, PartitionsAssigned):
                        owned |= {tp.partition for tp in e.partitions}
                    elif isinstance(e, PartitionsRevoked):
                        owned -= {tp.partition for tp in e.partitions}
                return owned

            deadline = time.monotonic() + SETTLE_TIMEOUT_S
            while time.monotonic() < deadline:
                owned = [current(t) for t in tools]
                if sorted(p for o in owned for p in o) == [0, 1, 2, 3] and all(owned):
                    time.sleep(QUIET_S)
                    if [current(t) for t in tools] == owned:
                        return sorted(sorted(o) for o in owned)
                time.sleep(0.2)
            raise AssertionError(f"{where}: not settled: {[t.tail() for t in tools]}")
        finally:
            for t in tools:
                t.stop()

    on_kafka, translated = both(kafka, strategies_gateway, names, scenario)
    assert on_kafka == [[0, 2], [1, 3]]
    assert translated == on_kafka
