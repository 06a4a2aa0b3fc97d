"""``classic_groups = translate`` with real librdkafka classic consumers (group.protocol=classic),
each scenario run against the broker directly (Kafka's classic groups) and through a gateway that
translates classic members into consumer groups, with the same assertion:

- a consumer subscribing to a topic created a moment ago (by name or by pattern) gets all of its
  partitions in its first assignment;
- several eager consumers started together settle with no more rebalances, revocations or moved
  partitions than Kafka's classic group gives them;
- the range strategy gets range's assignment.

The shared test broker runs ``group.initial.rebalance.delay.ms = 0`` (harness setting); the gateway
runs its default-like 1500 ms, so the translated start is compared with Kafka's least calm one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka
import pytest

from compat_tests.harness.admin import create_topic
from compat_tests.harness.brokers import ProcessBackend
from compat_tests.harness.gateway_proc import GatewayProcess, configured_gateway

pytestmark = pytest.mark.kafka

INITIAL_DELAY_MS = 1500
CONFIG = f"""
classic_groups = "translate"
initial_rebalance_delay_ms = {INITIAL_DELAY_MS}
min_session_timeout_ms = 1000
"""
# No assignment change for this long (several heartbeat intervals) counts as settled.
QUIET_S = 4.0
SETTLE_TIMEOUT_S = 45.0

TP = tuple[str, int]


@pytest.fixture(scope="module")
def translate_gateway(kafka: ProcessBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with configured_gateway(kafka.bootstrap, tmp_path_factory.mktemp("gw-translate"), "[coordinator]\n" + CONFIG) as gw:
        yield gw


@dataclass
class Member:
    """One librdkafka classic consumer, polled from the test thread; what its rebalance callbacks saw."""

    name: str
    consumer: Any
    assigns: list[list[TP]] = field(default_factory=list)
    revokes: list[list[TP]] = field(default_factory=list)
    owned: set[TP] = field(default_factory=set)
    # When settled (closing the consumer revokes, too): the figures the test compares.
    final: set[TP] = field(default_factory=set)
    settled_assigns: int = 0
    settled_revokes: int = 0
    settled_moved: int = 0
    last_change: float = field(default_factory=time.monotonic)

    @property
    def moved(self) -> int:
        """Partitions assigned to this member that it later had to give back."""
        return sum(len(r) for r in self.revokes)


def start_members(
    bootstrap: str, group: str, subscription: list[str], n: int, strategy: str = "range", prefix: str = "m"
) -> list[Member]:
    members: list[Member] = []
    for i in range(n):
        c = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": f"{prefix}{i}",
                "group.protocol": "classic",
                "partition.assignment.strategy": strategy,
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 500,
                "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        m = Member(f"{prefix}{i}", c)

        def on_assign(_c: Any, parts: list[Any], m: Member = m) -> None:
            tps = [(p.topic, p.partition) for p in parts]
            m.assigns.append(tps)
            m.owned = set(tps)
            m.last_change = time.monotonic()

        def on_revoke(_c: Any, parts: list[Any], m: Member = m) -> None:
            tps = [(p.topic, p.partition) for p in parts]
            if tps:
                m.revokes.append(tps)
            m.owned = set()
            m.last_change = time.monotonic()

        c.subscribe(subscription, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        members.append(m)
    return members


def settle(members: list[Member], partitions: set[TP], where: str) -> None:
    """Poll every member until all partitions are owned, once each, and nothing changed for QUIET_S."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while time.monotonic() < deadline:
        for m in members:
            m.consumer.poll(0.05)
        owned = [tp for m in members for tp in m.owned]
        quiet = all(time.monotonic() - m.last_change >= QUIET_S for m in members)
        if quiet and sorted(owned) == sorted(partitions) and all(m.assigns for m in members):
            return
    raise AssertionError(f"{where}: not settled: {[(m.name, m.assigns, m.revokes) for m in members]}")


def close(members: list[Member]) -> None:
    for m in members:
        try:
            m.consumer.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass


def run(bootstrap: str, group: str, subscription: list[str], partitions: set[TP], n: int,
        strategy: str = "range", where: str = "") -> list[Member]:
    members = start_members(bootstrap, group, subscription, n, strategy)
    try:
        settle(members, partitions, where)
        for m in members:
            m.final = set(m.owned)
            m.settled_assigns, m.settled_revokes, m.settled_moved = len(m.assigns), len(m.revokes), m.moved
    finally:
        close(members)
    return members


def both(kafka: ProcessBackend, gw: GatewayProcess, names: Callable[[str], str],
         scenario: Callable[[str, str, str], list[Member]]) -> tuple[list[Member], list[Member]]:
    """The scenario on the broker directly, then through the translating gateway (fresh groups)."""
    return (scenario(kafka.bootstrap, names("kafka-group"), "kafka"),
            scenario(gw.bootstrap, names("translate-group"), "translate"))


@pytest.mark.parametrize("by", ["name", "pattern"])
def test_a_topic_created_a_moment_ago_is_assigned_in_the_first_assignment(
    by: str, kafka: ProcessBackend, translate_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    def scenario(bootstrap: str, group: str, where: str) -> list[Member]:
        topic = create_topic(kafka.bootstrap, names(f"fresh-{where}"), 3)
        subscription = [topic] if by == "name" else [f"^{topic}$".replace(".", "\\.")]
        return run(bootstrap, group, subscription, {(topic, p) for p in range(3)}, 1, where=where)

    for members in both(kafka, translate_gateway, names, scenario):
        (m,) = members
        # The first assignment already holds the whole topic: no empty start, no second rebalance.
        assert m.settled_assigns == 1 and len(m.assigns[0]) == 3 and m.settled_revokes == 0, (m.assigns, m.revokes)


def test_eager_consumers_started_together_settle_no_worse_than_on_kafka(
    kafka: ProcessBackend, translate_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    topic = create_topic(kafka.bootstrap, names("topic"), 6)
    partitions = {(topic, p) for p in range(6)}

    def scenario(bootstrap: str, group: str, where: str) -> list[Member]:
        return run(bootstrap, group, [topic], partitions, 4, where=where)

    on_kafka, translated = both(kafka, translate_gateway, names, scenario)

    def figures(members: list[Member]) -> tuple[int, int, int]:
        return (sum(m.settled_assigns for m in members), sum(m.settled_revokes for m in members),
                sum(m.settled_moved for m in members))

    k, t = figures(on_kafka), figures(translated)
    print(f"eager start of 4 range consumers, 6 partitions (assignments, revocations, partitions moved): "
          f"kafka={k} translate={t}")
    assert t[0] <= k[0] and t[1] <= k[1] and t[2] <= k[2], (k, t)
    # Gathered: each member is assigned once and gives nothing back.
    assert t == (4, 0, 0), [(m.name, m.assigns, m.revokes) for m in translated]


def test_the_range_strategy_gets_ranges_as_on_kafka(
    kafka: ProcessBackend, translate_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    topics = [create_topic(kafka.bootstrap, names(f"topic{i}"), 3) for i in range(2)]
    partitions = {(t, p) for t in topics for p in range(3)}

    def scenario(bootstrap: str, group: str, where: str) -> list[Member]:
        return run(bootstrap, group, topics, partitions, 2, strategy="range", where=where)

    def shapes(members: list[Member]) -> list[list[tuple[int, tuple[int, ...]]]]:
        """Per member: each topic's partitions (topics by position: the names differ per run)."""
        out = []
        for m in members:
            out.append([(i, tuple(sorted(p for tt, p in m.final if tt == t))) for i, t in enumerate(topics)])
        return sorted(out)

    on_kafka, translated = both(kafka, translate_gateway, names, scenario)
    assert shapes(translated) == shapes(on_kafka) == [[(0, (0, 1)), (1, (0, 1))], [(0, (2,)), (1, (2,))]]


def test_a_new_pattern_match_rebalances_no_more_than_on_kafka(
    kafka: ProcessBackend, translate_gateway: GatewayProcess, names: Callable[[str], str]
) -> None:
    """Two eager pattern consumers settle, then a topic matching the pattern appears: each member
    rejoins with the new match; the translated group must not rebalance more than Kafka's."""

    def scenario(bootstrap: str, group: str, where: str) -> list[Member]:
        prefix = names(f"pat-{where}")
        first = create_topic(kafka.bootstrap, f"{prefix}-a", 4)
        pattern = f"^{prefix}-.*".replace(".", "\\.")
        members = start_members(bootstrap, group, [pattern], 2)
        try:
            settle(members, {(first, p) for p in range(4)}, where)
            before = [(len(m.assigns), len(m.revokes), m.moved) for m in members]
            second = create_topic(kafka.bootstrap, f"{prefix}-b", 2)
            settle(members, {(t, p) for t, n in ((first, 4), (second, 2)) for p in range(n)}, where)
            for m, (a, r, mv) in zip(members, before, strict=True):
                m.settled_assigns, m.settled_revokes, m.settled_moved = len(m.assigns) - a, len(m.revokes) - r, m.moved - mv
        finally:
            close(members)
        return members

    on_kafka, translated = both(kafka, translate_gateway, names, scenario)

    def figures(members: list[Member]) -> tuple[int, int, int]:
        return (sum(m.settled_assigns for m in members), sum(m.settled_revokes for m in members),
                sum(m.settled_moved for m in members))

    k, t = figures(on_kafka), figures(translated)
    print(f"new pattern match, 2 eager consumers (assignments, revocations, partitions moved): kafka={k} translate={t}")
    assert t[0] <= k[0] and t[1] <= k[1] and t[2] <= k[2], (k, t)
