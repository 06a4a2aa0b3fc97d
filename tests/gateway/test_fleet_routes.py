"""The brokers' routing over a fleet's instances (gateway/net/routes.py), the table it reads (the
assignment's listener rules, gateway/fleet/assignor.py) and the node table every instance answers with
(gateway/fleet/membership.py, gateway/net/rewrite.py)."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.config.coordinator import CoordinatorSettings
from gateway.fleet.assignor import FleetAssignment, MemberClaim, assign
from gateway.fleet.membership import COORDINATOR_NODE_BASE, FleetMembership
from gateway.loop_thread import LoopThread
from gateway.net import rewrite
from gateway.net.routes import ListenerRule, pick, routes
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey

BROKERS = list(range(1, 13))
INSTANCES = [f"10.0.0.{i}:9092" for i in range(1, 6)]

_addresses = st.lists(
    st.builds(lambda a, p: f"10.0.{a}:{p}", st.integers(0, 255), st.integers(1024, 65535)), min_size=1, max_size=8,
    unique=True,
)


def test_the_mapping_is_deterministic_whatever_the_order_of_the_instances() -> None:
    one = routes(BROKERS, INSTANCES)
    for seed in range(5):
        shuffled = list(INSTANCES)
        random.Random(seed).shuffle(shuffled)
        assert routes(BROKERS, shuffled) == one
    assert set(one) == set(BROKERS) and set(one.values()) <= set(INSTANCES)
    # Spread: with 12 brokers over 5 instances, more than one instance carries traffic.
    assert len(set(one.values())) > 1


def test_no_instances_no_route() -> None:
    assert pick(1, []) is None and routes(BROKERS, []) == {}


@settings(max_examples=200, deadline=None)
@given(_addresses, st.data())
def test_a_leaving_instance_moves_only_its_own_brokers(instances: list[str], data: Any) -> None:
    before = routes(BROKERS, instances)
    if len(instances) < 2:
        return
    gone = data.draw(st.sampled_from(instances))
    after = routes(BROKERS, [i for i in instances if i != gone])
    for b in BROKERS:
        if before[b] != gone:
            assert after[b] == before[b], f"broker {b} moved though its instance stayed"
        else:
            assert after[b] != gone


@settings(max_examples=200, deadline=None)
@given(_addresses, st.builds(lambda p: f"10.9.9.9:{p}", st.integers(1024, 65535)))
def test_a_joining_instance_takes_brokers_only_for_itself(instances: list[str], joining: str) -> None:
    before = routes(BROKERS, instances)
    after = routes(BROKERS, [*instances, joining])
    for b in BROKERS:
        assert after[b] in (before[b], joining), f"broker {b} moved between two instances that stayed"


def test_listener_rules_name_the_port_mapping_of_the_config() -> None:
    rule = ListenerRule("gw-2.example", 19093, id_base=1, count=3, explicit={100: 20000})
    assert rule.address(1) == ("gw-2.example", 19093)
    assert rule.address(3) == ("gw-2.example", 19095)
    assert rule.address(4) is None  # outside its range: it cannot serve that broker
    assert rule.address(100) == ("gw-2.example", 20000)
    assert ListenerRule.decode(rule.encode()) == rule
    assert ListenerRule.decode({"host": "x"}) is None and ListenerRule.decode("garbage") is None


def test_the_assignment_carries_every_members_listener_rule_and_older_members_publish_none() -> None:
    rule_a = ListenerRule("10.0.0.1", 9093).encode()
    claims = {
        "m-a": MemberClaim("10.0.0.1:9092", listeners=rule_a),
        "m-old": MemberClaim("10.0.0.2:9092"),
    }
    assert MemberClaim.decode(claims["m-a"].encode()) == claims["m-a"]
    out = assign(4, claims)
    table = FleetAssignment.decode(out["m-a"].shards, out["m-a"].encode())
    assert dict(table.listeners) == {"m-a": rule_a}
    # An older member's table (no listener rules) still reads.
    assert FleetAssignment.decode((), b'{"v":1,"epoch":2,"endpoints":{},"owners":[]}').listeners == {}


def _instance(endpoint: str, table: FleetAssignment) -> FleetMembership:
    settings_ = CoordinatorSettings(instances_group="gg-instances", state_store="kafka")
    runtime: Any = SimpleNamespace(shard_count=4)
    store: Any = SimpleNamespace(topic="__state", client_id="gg", clients=LoopThread("gg-clients"))
    host, _, port = endpoint.rpartition(":")
    fleet = FleetMembership(runtime, settings_, store, endpoint, listeners=ListenerRule(host, int(port) + 1))
    fleet.table = table
    return fleet


def test_every_instance_answers_the_same_node_table() -> None:
    endpoints = {"m-1": "10.0.0.1:9092", "m-2": "10.0.0.2:19092", "m-3": "10.0.0.3:29092"}
    rules = {m: ListenerRule(e.rpartition(":")[0], int(e.rpartition(":")[2]) + 1).encode() for m, e in endpoints.items()}
    table = FleetAssignment((), 3, endpoints, (), {"m-1": 0, "m-2": 2, "m-3": 1}, rules)
    fleet = [_instance(e, table) for e in endpoints.values()]
    expected = routes(BROKERS, endpoints.values())

    def answered(f: FleetMembership, node: int) -> tuple[str, int]:
        # What the gateway's addr_of does: the picked instance's listener, else this process's own.
        own = f.endpoint.rpartition(":")
        return f.broker_address(node) or (own[0], int(own[2]) + 1 + node)

    for node in BROKERS:
        answers = {answered(f, node) for f in fleet}
        assert len(answers) == 1, f"broker {node} has several addresses: {answers}"
        host, port = answers.pop()
        owner = expected[node]
        assert (host, port) == (owner.rpartition(":")[0], int(owner.rpartition(":")[2]) + 1 + node)
    coordinators = [f.coordinator_nodes() for f in fleet]
    assert coordinators[0] == coordinators[1] == coordinators[2] == [
        (COORDINATOR_NODE_BASE, "10.0.0.1", 9092),
        (COORDINATOR_NODE_BASE + 1, "10.0.0.3", 29092),
        (COORDINATOR_NODE_BASE + 2, "10.0.0.2", 19092),
    ]
    # No table yet: every broker at this process's own listener, no coordinator nodes listed.
    lone = _instance("10.0.0.1:9092", table)
    lone.table = None
    assert lone.broker_address(1) is None and lone.coordinator_nodes() == []


def _metadata(version: int) -> bytes:
    cls = codec.RESPONSES[ApiKey.METADATA][version]
    msg = cls(
        throttle_time_ms=0, brokers=[cls.MetadataResponseBroker(node_id=1, host="kafka-1", port=9092, rack=None)],
        cluster_id="c", controller_id=1, topics=[],
    )
    return codec.encode_response(ApiKey.METADATA, version, 7, msg)


def test_metadata_and_describe_cluster_list_the_coordinator_nodes_beside_the_brokers() -> None:
    listed = [rewrite.Broker(COORDINATOR_NODE_BASE, "10.0.0.1", 9092), rewrite.Broker(COORDINATOR_NODE_BASE + 1, "10.0.0.2", 9092)]

    def addr_of(node: int) -> tuple[str, int] | None:
        return ("10.0.0.2", 9094) if node == 1 else None

    for version in (1, 9, 12):
        out = rewrite.rewrite_response(ApiKey.METADATA, _metadata(version), version, addr_of, listed)
        _, msg = codec.decode_response(ApiKey.METADATA, version, out.payload)
        assert [(b.node_id, b.host, b.port) for b in msg.brokers] == [
            (1, "10.0.0.2", 9094), (COORDINATOR_NODE_BASE, "10.0.0.1", 9092), (COORDINATOR_NODE_BASE + 1, "10.0.0.2", 9092),
        ]
        assert [b.node_id for b in out.brokers or []] == [1]  # the directory learns the upstream's brokers only
    cls = codec.RESPONSES[ApiKey.DESCRIBE_CLUSTER][0]
    dc = cls(throttle_time_ms=0, error_code=0, error_message=None, cluster_id="c", controller_id=1,
             brokers=[cls.DescribeClusterBroker(broker_id=1, host="kafka-1", port=9092, rack=None)],
             authorized_operations=set())
    out = rewrite.rewrite_response(ApiKey.DESCRIBE_CLUSTER, codec.encode_response(ApiKey.DESCRIBE_CLUSTER, 0, 3, dc), 0,
                                   addr_of, listed)
    _, msg = codec.decode_response(ApiKey.DESCRIBE_CLUSTER, 0, out.payload)
    assert [b.broker_id for b in msg.brokers] == [1, COORDINATOR_NODE_BASE, COORDINATOR_NODE_BASE + 1]
    # Without a fleet nothing is added.
    out = rewrite.rewrite_response(ApiKey.METADATA, _metadata(12), 12, addr_of)
    _, msg = codec.decode_response(ApiKey.METADATA, 12, out.payload)
    assert [b.node_id for b in msg.brokers] == [1]


def test_a_broker_whose_listener_did_not_open_is_routed_to_an_instance_serving_it() -> None:
    """An instance that could not bind its listener for a broker (the port held by another process)
    publishes it as unserved: every instance then names another instance's listener for that broker,
    never the port nobody of the fleet serves, and the other brokers keep their routes."""
    endpoints = {"m-1": "10.0.0.1:9092", "m-2": "10.0.0.2:19092", "m-3": "10.0.0.3:29092"}
    expected = routes(BROKERS, endpoints.values())
    broken = next(n for n in BROKERS if expected[n] == endpoints["m-1"])
    rules = {m: ListenerRule(e.rpartition(":")[0], int(e.rpartition(":")[2]) + 1,
                             unserved=frozenset({broken}) if m == "m-1" else frozenset()).encode()
             for m, e in endpoints.items()}
    assert ListenerRule.decode(rules["m-1"]) == ListenerRule("10.0.0.1", 9093, unserved=frozenset({broken}))
    assert ListenerRule.decode(rules["m-1"]).address(broken) is None  # type: ignore[union-attr]
    table = FleetAssignment((), 3, endpoints, (), {"m-1": 0, "m-2": 2, "m-3": 1}, rules)
    fleet = [_instance(e, table) for e in endpoints.values()]

    def answered(f: FleetMembership, node: int) -> tuple[str, int]:
        own = f.endpoint.rpartition(":")
        return f.broker_address(node) or (own[0], int(own[2]) + 1 + node)

    answers = {answered(f, broken) for f in fleet}
    assert len(answers) == 1, f"broker {broken} has several addresses: {answers}"
    host, port = answers.pop()
    assert host != "10.0.0.1" and (host, port) in {("10.0.0.2", 19093 + broken), ("10.0.0.3", 29093 + broken)}
    for node in BROKERS:
        if node != broken:
            owner = expected[node]
            assert {answered(f, node) for f in fleet} == {
                (owner.rpartition(":")[0], int(owner.rpartition(":")[2]) + 1 + node)}
