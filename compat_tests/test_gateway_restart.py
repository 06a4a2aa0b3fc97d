"""The harness's gateway process can be SIGKILLed and restarted on the same addresses, and a client
that lived through it carries on: the footing for the fault-injection suites."""

from __future__ import annotations

from typing import Any

import confluent_kafka
import pytest

from compat_tests.harness.gateway_proc import GatewayProcess

pytestmark = pytest.mark.kafka


def _send(producer: confluent_kafka.Producer, topic: str, values: list[bytes]) -> list[tuple[int, int]]:
    acked: list[tuple[int, int]] = []
    errors: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            acked.append((msg.partition(), msg.offset()))

    for v in values:
        producer.produce(topic, value=v, on_delivery=on_delivery)
    assert producer.flush(60) == 0 and not errors, errors[:3]
    return acked


def test_a_producer_survives_a_gateway_sigkill_and_restart(gateway: Any, make_topic: Any) -> None:
    if getattr(gateway, "direct", False):
        pytest.skip("--compat-direct: there is no gateway process to kill")
    assert isinstance(gateway, GatewayProcess)
    topic = make_topic(1)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": gateway.bootstrap, "acks": "all", "message.timeout.ms": 60000}
    )
    before = _send(producer, topic, [b"before-%d" % i for i in range(20)])
    first_pid, first_bootstrap = gateway.pid, gateway.bootstrap

    gateway.restart(hard=True)
    assert gateway.pid != first_pid and gateway.bootstrap == first_bootstrap

    after = _send(producer, topic, [b"after-%d" % i for i in range(20)])
    assert len(before) == len(after) == 20
    # One partition: offsets continue where they stopped, so nothing was lost or written twice.
    assert [o for _, o in before + after] == list(range(40))
