"""KIP-1263 ``group.consumer.assignor.offload.enable`` through the gateway, next to plain Kafka 4.4.0.

The gateway runs with offload on and its size threshold at 1 (``group.consumer.assignor.offload.min.size``),
so every target after a group's first is computed on a worker thread. Two members join a group whose
assignment interval is 0 and heartbeat (reporting what they own) until the group is Stable. Kafka 4.4.0
computes the target inline (its offload is defined but not yet in effect); the gateway answers the joiner
with the current target and installs the new one once computed, so the joiner's first answer differs
by design, and the group ends the same on both (Stable, assignment epoch = group epoch, two partitions
each, every partition assigned once).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.harness.brokers import ProcessBackend
from compat_tests.harness.gateway_proc import configured_gateway
from compat_tests.harness.probe import find_coordinator_endpoints, roundtrip
from compat_tests.test_assignment_interval import _alter_group_interval, _await_coordinator, _describe
from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse

pytestmark = pytest.mark.kafka

PARTITIONS = 4
ROUNDS = 20  # heartbeats per member at most; the group settles within a few


def _heartbeat(address: str, group: str, member: str, epoch: int, topic: str | None, owned: list[Any] | None) -> Any:
    cls = ConsumerGroupHeartbeatRequest[1]
    req = cls(
        group_id=group, member_id=member, member_epoch=epoch, rebalance_timeout_ms=30_000 if epoch == 0 else -1,
        subscribed_topic_names=None if topic is None else [topic], server_assignor=None,
        topic_partitions=None if owned is None else [
            cls.TopicPartitions(topic_id=t, partitions=sorted(p)) for t, p in owned
        ],
    )  # fmt: skip
    r = roundtrip(address, req, ConsumerGroupHeartbeatResponse, 1)
    assert r.error_code == 0, r
    return r


def scenario(coordinator: str, group: str, topic: str) -> dict[str, Any]:
    _await_coordinator(coordinator, group)
    members = {str(uuid.uuid4()): None, str(uuid.uuid4()): None}
    epochs: dict[str, int] = {}
    owned: dict[str, list[tuple[Any, list[int]]]] = {}
    first: dict[str, Any] = {}
    for m in members:
        r = _heartbeat(coordinator, group, m, 0, topic, [])
        first[m] = r
        epochs[m] = r.member_epoch
        owned[m] = [(tp.topic_id, list(tp.partitions)) for tp in r.assignment.topic_partitions]
    e1 = epochs[next(iter(members))]
    d = _describe(coordinator, group)
    for _ in range(ROUNDS):
        if d.group_state == "Stable":
            break
        for m in members:
            r = _heartbeat(coordinator, group, m, epochs[m], None, owned[m])
            epochs[m] = r.member_epoch
            if r.assignment is not None:
                owned[m] = [(tp.topic_id, list(tp.partitions)) for tp in r.assignment.topic_partitions]
        d = _describe(coordinator, group)
    parts = [p for m in members for _, ps in owned[m] for p in ps]
    m2 = list(members)[1]
    return {
        "m2 epoch at join": first[m2].member_epoch - e1,
        "state": d.group_state,
        "group epoch": d.group_epoch - e1,
        "assignment epoch": d.assignment_epoch - e1,
        "partitions per member": sorted(len(ps) for m in members for _, ps in owned[m]),
        "every partition once": sorted(parts) == list(range(PARTITIONS)),
    }


@pytest.fixture
def offload_gateway(kafka: ProcessBackend, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.config.getoption("--compat-direct"):
        pytest.skip("--compat-direct: this test runs the broker and the gateway side by side itself")
    group = f"offload-{uuid.uuid4().hex[:8]}"
    config = (
        f"""
[coordinator]
"group.consumer.assignor.offload.enable" = true
"group.consumer.assignor.offload.min.size" = 1

[coordinator.group_configs."{group}"]
"consumer.assignment.interval.ms" = 0
"""
    )
    with configured_gateway(kafka.bootstrap, tmp_path, config) as gw:
        yield gw, group


def test_a_group_is_assigned_with_offload_on_as_on_kafka(
    kafka: ProcessBackend, offload_gateway: Any, make_topic: Any, names: Any
) -> None:
    gw, ggroup = offload_gateway
    topic = make_topic(PARTITIONS)
    kgroup = names("offload")
    _alter_group_interval(kafka.bootstrap, kgroup, 0)
    on_kafka = scenario(find_coordinator_endpoints(kafka.bootstrap, kgroup, 3)[0].address, kgroup, topic)
    on_gateway = scenario(find_coordinator_endpoints(gw.bootstrap, ggroup, 3)[0].address, ggroup, topic)

    settled = {"state": "Stable", "partitions per member": [2, 2], "every partition once": True, "epochs equal": True}

    def outcome(r: dict[str, Any]) -> dict[str, Any]:
        return {
            "state": r["state"],
            "partitions per member": r["partitions per member"],
            "every partition once": r["every partition once"],
            "epochs equal": r["group epoch"] == r["assignment epoch"],
        }

    assert outcome(on_kafka) == settled, on_kafka
    assert outcome(on_gateway) == outcome(on_kafka), on_gateway
    # The gateway offloaded the joiner's target: answered at the current assignment epoch while the new
    # one computed, then one epoch for the join. (Kafka 4.4.0 answers at the new epoch once the group's
    # interval of 0 and the fresh topic have reached its coordinator; right after they were set its
    # answers vary, so they are not compared.)
    assert (on_gateway["m2 epoch at join"], on_gateway["group epoch"]) == (0, 1), on_gateway
