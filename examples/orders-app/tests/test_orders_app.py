"""orders_app's suite, run directly against Kafka and through a groupgate gateway with groupgate's pytest
plugin; one scenario also in containers (skipped where no Docker engine answers)."""

from __future__ import annotations

import uuid

import pytest
from orders_app import create_topic, publish_orders, read_orders

from groupgate.testing import group_type


def _name(kind: str) -> str:
    return f"orders-{kind}-{uuid.uuid4().hex[:8]}"


def test_every_order_is_read(groupgate_target) -> None:
    """Runs twice: [direct] against the broker, [gateway] through a gateway (the same assertions)."""
    topic, group = _name("topic"), _name("group")
    create_topic(groupgate_target.bootstrap, topic)
    publish_orders(groupgate_target.bootstrap, topic, 20)
    assert read_orders(groupgate_target.bootstrap, topic, group, 20) == [f"order-{i}" for i in range(20)]


@pytest.mark.groupgate(classic_groups="translate")
def test_orders_survive_a_gateway_restart_on_the_new_protocol(groupgate) -> None:
    """A KIP-848 group through a translate-mode gateway, the gateway SIGKILLed and restarted between two
    reads: the second read starts from the first one's commits; the gateway's rebalance events show the
    member joining."""
    topic, group = _name("topic"), _name("group")
    create_topic(groupgate.bootstrap, topic)
    publish_orders(groupgate.bootstrap, topic, 10)
    assert len(read_orders(groupgate.bootstrap, topic, group, 10, protocol="consumer")) == 10

    groupgate.restart(hard=True)
    publish_orders(groupgate.bootstrap, topic, 5)
    assert len(read_orders(groupgate.bootstrap, topic, group, 5, protocol="consumer")) == 5
    assert group_type(groupgate.bootstrap, group) == ("consumer", "Empty")
    assert groupgate.events(group, "member_joined")


def test_every_order_is_read_through_the_gateway_container(groupgate_container) -> None:
    """The gateway image in front of an apache/kafka container (groupgate.testing.containers)."""
    topic, group = _name("topic"), _name("group")
    create_topic(groupgate_container.upstream, topic)
    publish_orders(groupgate_container.bootstrap, topic, 20)
    assert len(read_orders(groupgate_container.bootstrap, topic, group, 20)) == 20
