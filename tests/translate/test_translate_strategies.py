"""``classic_groups = translate`` keeps a purely classic group's declared strategy: the common protocol
(chosen as Kafka's classic group chooses it) is told to every joiner, and the server computes that
strategy's layout (translate/classic_strategies.py); a custom strategy falls back to the configured
server assignor with a warning, once."""

from __future__ import annotations

import logging
import uuid

import pytest
from migration_harness import REBALANCE, SESSION, TOPIC, TOPIC_ID, Driver, partitions_of

from coordinator.errors import Errors
from coordinator.outcome import StrategyFallback
from coordinator.target import select_assignor
from translate.classic_messages import JoinGroupRequest, JoinGroupRequestProtocol
from translate.classic_rebalance import ClassicGroupConfig
from translate.classic_strategies import (
    RDKAFKA_COOPERATIVE_STICKY,
    STRATEGIES,
    _hash_map_order,
    common_protocol,
    java_string_hash,
    strategy_assignor,
)
from translate.embedded import ConsumerProtocolSubscription, TopicPartitions, encode_subscription

OTHER, OTHER_ID = "bar", uuid.UUID(int=0xBA2)
GRACE_MS = ClassicGroupConfig().topic_change_grace_ms


def test_java_string_hash_and_hash_map_order() -> None:
    assert [java_string_hash(s) for s in ("", "a", "ab", "range")] == [0, 97, 3105, 108280125]
    assert java_string_hash("roundrobin") == -128548644  # wraps as Java's int does
    # Which of two tied protocols Kafka's vote map yields first: the same whatever the insertion order.
    assert _hash_map_order(["roundrobin", "range"]) == _hash_map_order(["range", "roundrobin"]) == ["range", "roundrobin"]
    assert _hash_map_order(["range", "sticky"]) == ["sticky", "range"]


class Fleet:
    """Classic members of one translated group, each with its protocols, joined and kept settled."""

    def __init__(self, d: Driver, topics: tuple[str, ...] = (TOPIC,), java: bool = False) -> None:
        # java: subscriptions as Java's CooperativeStickyAssignor sends them (the generation as userData);
        # otherwise as librdkafka's (no userData on a first join).
        self.d, self.topics, self.java = d, topics, java
        self.generation: dict[str, int] = {}
        self.protocols: dict[str, tuple[str, ...]] = {}
        self.owned: dict[str, dict[str, list[int]]] = {}
        self.protocol_told: dict[str, str] = {}

    def add(self, client: str, protocols: tuple[str, ...]) -> str:
        r = self.d.join_response(self.join("", client, protocols))
        assert r.error_code == Errors.MEMBER_ID_REQUIRED
        self.protocols[r.member_id] = protocols
        self.owned[r.member_id] = {}
        self.rejoin(r.member_id)
        return r.member_id

    def join(self, member_id: str, client: str, protocols: tuple[str, ...]) -> int:
        owned = self.owned.get(member_id, {})
        tps = [TopicPartitions(t, tuple(p)) for t, p in sorted(owned.items()) if p]
        user_data = self.generation.get(member_id, -1).to_bytes(4, "big", signed=True) if self.java else None
        meta = encode_subscription(ConsumerProtocolSubscription(list(self.topics), user_data, tps), 1)
        key, _ = self.d.send(
            JoinGroupRequest("g", SESSION, member_id, "consumer", [JoinGroupRequestProtocol(p, meta) for p in protocols],
                             REBALANCE, client_id=client, client_host="/10.0.0.1")
        )
        return key

    def rejoin(self, m: str) -> None:
        r = self.d.join_response(self.join(m, "c", self.protocols[m]))
        assert r.error_code == 0, r
        self.generation[m] = r.generation_id
        self.protocol_told[m] = r.protocol_name
        s = self.d.sync_response(self.d.sync(m, r.generation_id))
        assert s.error_code == 0, s
        self.owned[m] = partitions_of(s.assignment)

    def settle(self) -> None:
        for _ in range(10):
            moved = False
            for m in list(self.generation):
                if self.d.heartbeat(m, self.generation[m]) == Errors.REBALANCE_IN_PROGRESS:
                    self.rejoin(m)
                    moved = True
            if not moved:
                return
        raise AssertionError("not settled")

    def layout(self) -> dict[str, dict[str, list[int]]]:
        return {m: {t: ps for t, ps in sorted(o.items()) if ps} for m, o in self.owned.items()}


def two_topics(d: Driver, n: int = 2) -> None:
    d.absorb(d.service.on_metadata({TOPIC: (TOPIC_ID, n), OTHER: (OTHER_ID, n)}, d.now))


@pytest.mark.parametrize(
    "preferences,expected",
    [
        ([("range",), ("range", "roundrobin"), ("roundrobin", "range")], "range"),  # only range is common
        ([("range", "roundrobin"), ("roundrobin", "range"), ("roundrobin",)], "roundrobin"),
        ([("cooperative-sticky", "range"), ("range", "cooperative-sticky"), ("cooperative-sticky",)], "cooperative-sticky"),
        ([("range", "roundrobin"), ("roundrobin", "range")], "range"),  # a tie: Kafka's vote map order
    ],
)
def test_the_common_protocol_is_chosen_as_a_classic_group_chooses_it(
    preferences: list[tuple[str, ...]], expected: str
) -> None:
    d = Driver(mode="translate", partitions=4)
    fleet = Fleet(d)
    ids = [fleet.add(f"c{i}", p) for i, p in enumerate(preferences)]
    fleet.settle()
    group = d.cgroup()
    assert common_protocol(group) == expected
    assert select_assignor(d.service.coordinator.state.config, group)[0] == expected
    # Every member is told the group's protocol (its client runs that strategy's callbacks).
    assert {fleet.protocol_told[m] for m in ids} == {expected}


def test_roundrobin_members_get_interleaved_partitions() -> None:
    d = Driver(mode="translate", partitions=4)
    fleet = Fleet(d)
    a, b = fleet.add("a", ("roundrobin",)), fleet.add("b", ("roundrobin",))
    fleet.settle()
    first, second = sorted((a, b))
    assert fleet.layout() == {first: {TOPIC: [0, 2]}, second: {TOPIC: [1, 3]}}


def test_librdkafkas_default_range_roundrobin_group_gets_ranges() -> None:
    d = Driver(mode="translate", partitions=4)
    fleet = Fleet(d)
    a, b = fleet.add("a", ("range", "roundrobin")), fleet.add("b", ("range", "roundrobin"))
    fleet.settle()
    first, second = sorted((a, b))
    assert fleet.layout() == {first: {TOPIC: [0, 1]}, second: {TOPIC: [2, 3]}}


@pytest.mark.parametrize("java", [True, False], ids=["java", "librdkafka"])
def test_cooperative_sticky_over_two_topics_gives_one_partition_of_each_topic_per_member(java: bool) -> None:
    d = Driver(mode="translate", initial_delay_ms=1_000)
    two_topics(d)
    fleet = Fleet(d, (TOPIC, OTHER), java=java)
    # Started together (gathered): dealt in turn over both topics, by either client's rules.
    keys = {}
    for client in ("a", "b"):
        r = d.join_response(fleet.join("", client, ("cooperative-sticky",)))
        fleet.protocols[r.member_id], fleet.owned[r.member_id] = ("cooperative-sticky",), {}
        keys[r.member_id] = fleet.join(r.member_id, client, ("cooperative-sticky",))
    d.advance(1_000)
    for m, key in keys.items():
        r = d.join_response(key)
        fleet.generation[m] = r.generation_id
        s = d.sync_response(d.sync(m, r.generation_id))
        fleet.owned[m] = partitions_of(s.assignment)
    fleet.settle()
    first, second = sorted(keys)
    assert fleet.layout() == {first: {OTHER: [0], TOPIC: [0]}, second: {OTHER: [1], TOPIC: [1]}}
    expected = STRATEGIES["cooperative-sticky"] if java else RDKAFKA_COOPERATIVE_STICKY
    assert strategy_assignor(d.cgroup()) == ("cooperative-sticky", expected)


@pytest.mark.parametrize("java", [True, False], ids=["java", "librdkafka"])
def test_a_cooperative_sticky_newcomer_takes_what_the_leaders_client_gives_up(java: bool) -> None:
    """One member holds both topics; a second joins. Java's rules keep one partition of each topic
    (the lowest numbers), librdkafka's give the newcomer the first topic whole (as on Kafka)."""
    d = Driver(mode="translate")
    two_topics(d)
    fleet = Fleet(d, (TOPIC, OTHER), java=java)
    a = fleet.add("a", ("cooperative-sticky",))
    assert fleet.layout() == {a: {OTHER: [0, 1], TOPIC: [0, 1]}}
    b = fleet.add("b", ("cooperative-sticky",))
    fleet.settle()
    if java:
        assert fleet.layout() == {a: {OTHER: [0], TOPIC: [0]}, b: {OTHER: [1], TOPIC: [1]}}
    else:
        assert fleet.layout() == {a: {TOPIC: [0, 1]}, b: {OTHER: [0, 1]}}  # "bar" sorts first


def test_a_third_cooperative_sticky_member_takes_only_what_the_new_quota_frees() -> None:
    d = Driver(mode="translate", partitions=4)
    fleet = Fleet(d, java=True)
    ids = [fleet.add("a", ("cooperative-sticky",)), fleet.add("b", ("cooperative-sticky",))]
    fleet.settle()
    first, second = sorted(ids)
    before = fleet.layout()
    # Joined one after the other (no gathering here): the first kept its lowest two.
    assert before == {first: {TOPIC: [0, 1]}, second: {TOPIC: [2, 3]}}
    c = fleet.add("c", ("cooperative-sticky",))
    fleet.settle()
    # The member ordered second gives up its highest partition; nothing else moves.
    assert fleet.layout() == {first: {TOPIC: [0, 1]}, second: {TOPIC: [2]}, c: {TOPIC: [3]}}


def test_a_custom_strategy_falls_back_to_the_configured_assignor_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    d = Driver(mode="translate", partitions=4)
    fleet = Fleet(d)
    changes: list[object] = []
    original = d.absorb

    def absorb(result):  # type: ignore[no-untyped-def]
        changes.extend(result.changes)
        return original(result)

    d.absorb = absorb  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="translate.classic_member"):
        ids = [fleet.add("a", ("my-custom",)), fleet.add("b", ("my-custom",))]
        fleet.settle()
        for m in ids:
            fleet.rejoin(m)
    assert {fleet.protocol_told[m] for m in ids} == {"my-custom"}
    group = d.cgroup()
    assert select_assignor(d.service.coordinator.state.config, group)[0] == "uniform"
    fallbacks = [c for c in changes if isinstance(c, StrategyFallback)]
    assert len(fallbacks) == 1 and fallbacks[0].protocol == "my-custom" and fallbacks[0].assignor == "uniform"
    assert "'my-custom' is not a strategy the gateway can compute" in fallbacks[0].reason
    assert len([r for r in caplog.records if "my-custom" in r.getMessage()]) == 1
    assert sorted(p for o in fleet.owned.values() for p in o.get(TOPIC, [])) == [0, 1, 2, 3]


def test_a_sync_naming_any_protocol_the_member_supports_is_accepted() -> None:
    d = Driver(mode="translate", partitions=2)
    fleet = Fleet(d)
    m = fleet.add("a", ("range", "roundrobin"))
    from translate.classic_messages import SyncGroupRequest

    for name, error in (("roundrobin", 0), ("range", 0), ("sticky", Errors.INCONSISTENT_GROUP_PROTOCOL)):
        key, _ = d.send(SyncGroupRequest("g", fleet.generation[m], m, None, "consumer", name, []))
        assert d.sync_response(key).error_code == error, name


def test_native_mode_keeps_kip848_selection_and_the_members_own_protocol() -> None:
    d = Driver(mode="native", partitions=4)
    d.consumer("cg", assignor="range")
    r = d.join_response(d.join(member_id="", client="a", protocols=("roundrobin",)))
    assert r.error_code == Errors.MEMBER_ID_REQUIRED
    r = d.join_response(d.join(member_id=r.member_id, client="a", protocols=("roundrobin",)))
    assert r.error_code == 0 and r.protocol_name == "roundrobin"
    assert select_assignor(d.service.coordinator.state.config, d.cgroup())[0] == "range"


def test_a_member_holding_a_deleted_topic_is_left_to_notice_it_itself_for_a_while() -> None:
    """As on Kafka, where a classic group does not rebalance by itself when a topic goes: the client
    finds out from its metadata and reports the partitions lost; told to rejoin first, it would see them
    revoked. After the grace (``topic_change_grace_ms``) it is told anyway."""
    d = Driver(mode="translate")
    two_topics(d)
    fleet = Fleet(d, (TOPIC, OTHER), java=True)
    a = fleet.add("a", ("cooperative-sticky",))
    assert fleet.layout() == {a: {OTHER: [0, 1], TOPIC: [0, 1]}}
    d.absorb(d.service.on_metadata({TOPIC: (TOPIC_ID, 2)}, d.now))  # OTHER deleted
    assert d.heartbeat(a, fleet.generation[a]) == Errors.NONE
    d.advance(GRACE_MS - 1)
    assert d.heartbeat(a, fleet.generation[a]) == Errors.NONE
    d.advance(1)
    assert d.heartbeat(a, fleet.generation[a]) == Errors.REBALANCE_IN_PROGRESS
    fleet.rejoin(a)
    assert fleet.layout() == {a: {TOPIC: [0, 1]}}


def test_a_member_that_notices_the_deletion_itself_rejoins_without_being_told() -> None:
    d = Driver(mode="translate")
    two_topics(d)
    fleet = Fleet(d, (TOPIC, OTHER), java=True)
    a = fleet.add("a", ("cooperative-sticky",))
    d.absorb(d.service.on_metadata({TOPIC: (TOPIC_ID, 2)}, d.now))
    assert d.heartbeat(a, fleet.generation[a]) == Errors.NONE
    fleet.owned[a] = {TOPIC: [0, 1]}  # the client reported OTHER's partitions lost
    fleet.rejoin(a)
    assert fleet.layout() == {a: {TOPIC: [0, 1]}}
    assert d.heartbeat(a, fleet.generation[a]) == Errors.NONE


def test_a_topic_grown_where_the_gateway_sees_it_first_is_one_round_for_a_client_that_notices() -> None:
    """The gateway's refresh sees a subscribed topic grow before the client does. Told to rejoin at once,
    a classic client would rejoin with its old metadata, get the new partition, learn of it and rejoin
    again; left to notice it itself (as on Kafka), it rejoins once and gets the new partition then."""
    d = Driver(mode="translate")
    d.absorb(d.service.on_metadata({TOPIC: (TOPIC_ID, 1)}, d.now))
    fleet = Fleet(d, (TOPIC,))
    a = fleet.add("a", ("cooperative-sticky",))
    assert fleet.layout() == {a: {TOPIC: [0]}}
    generation = fleet.generation[a]
    d.absorb(d.service.on_metadata({TOPIC: (TOPIC_ID, 2)}, d.now))
    d.advance(GRACE_MS - 1)
    assert d.heartbeat(a, generation) == Errors.NONE
    fleet.rejoin(a)  # its own metadata refresh showed the second partition
    assert fleet.layout() == {a: {TOPIC: [0, 1]}}
    assert d.heartbeat(a, fleet.generation[a]) == Errors.NONE


def test_a_member_that_does_not_notice_a_grown_topic_is_told_after_the_grace() -> None:
    d = Driver(mode="translate")
    d.absorb(d.service.on_metadata({TOPIC: (TOPIC_ID, 1)}, d.now))
    fleet = Fleet(d, (TOPIC,), java=True)
    a = fleet.add("a", ("range",))
    d.absorb(d.service.on_metadata({TOPIC: (TOPIC_ID, 2)}, d.now))
    assert d.heartbeat(a, fleet.generation[a]) == Errors.NONE
    d.advance(GRACE_MS // 2)
    # A second change of the image within the grace does not extend it.
    d.absorb(d.service.on_metadata({TOPIC: (TOPIC_ID, 3)}, d.now))
    assert d.heartbeat(a, fleet.generation[a]) == Errors.NONE
    d.advance(GRACE_MS - GRACE_MS // 2)
    assert d.heartbeat(a, fleet.generation[a]) == Errors.REBALANCE_IN_PROGRESS
    fleet.rejoin(a)
    assert fleet.layout() == {a: {TOPIC: [0, 1, 2]}}


def test_a_join_during_the_grace_tells_the_other_members_at_once() -> None:
    """On Kafka the member that noticed the change rejoins and every other member is told of that
    rebalance: here too, whether or not the others noticed."""
    d = Driver(mode="translate")
    d.absorb(d.service.on_metadata({TOPIC: (TOPIC_ID, 2)}, d.now))
    fleet = Fleet(d, (TOPIC,))
    a = fleet.add("a", ("cooperative-sticky",))
    b = fleet.add("b", ("cooperative-sticky",))
    fleet.settle()
    d.absorb(d.service.on_metadata({TOPIC: (TOPIC_ID, 4)}, d.now))
    assert d.heartbeat(b, fleet.generation[b]) == Errors.NONE
    fleet.rejoin(a)
    assert d.heartbeat(b, fleet.generation[b]) == Errors.REBALANCE_IN_PROGRESS
    fleet.rejoin(b)
    fleet.settle()
    assert sorted(p for m in (a, b) for p in fleet.layout()[m][TOPIC]) == [0, 1, 2, 3]


def test_native_mode_tells_classic_members_of_a_grown_topic_at_once() -> None:
    """Outside translate mode classic members are inside a consumer group being migrated: Kafka's
    consumer groups tell them at once."""
    d = Driver()
    d.absorb(d.service.on_metadata({TOPIC: (TOPIC_ID, 1)}, d.now))
    d.consumer("c")
    fleet = Fleet(d, (TOPIC,))
    a = fleet.add("a", ("range",))
    fleet.settle()
    d.absorb(d.service.on_metadata({TOPIC: (TOPIC_ID, 2)}, d.now))
    assert d.heartbeat(a, fleet.generation[a]) == Errors.REBALANCE_IN_PROGRESS
