"""KIP-1263 assignment batching, on plain Kafka 4.4.0 and through the gateway: the same scenario, the
same epochs.

Two members join a group back to back with raw ConsumerGroupHeartbeat requests. In a group whose
``consumer.assignment.interval.ms`` is long, the second join bumps the group epoch but the target is
not recomputed: the joiner is told the current assignment epoch and ConsumerGroupDescribe shows the
assignment epoch behind the group epoch. In a group whose interval is 0 the target follows at once.
Once the interval has passed, nothing happens until a member heartbeats (ConsumerGroupDescribe still
says Assigning); the first member's next heartbeat computes one target for the batch.

The per-group values are set on the broker with IncrementalAlterConfigs (GROUP resource) and on the
gateway with its ``[coordinator.group_configs]`` table (the gateway passes IncrementalAlterConfigs
through to the cluster). Everything asserted is an epoch, a state or a partition count, never a duration (the one wait is a
lower bound: the interval must have passed).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

from compat_tests.harness.brokers import ProcessBackend
from compat_tests.harness.gateway_proc import configured_gateway
from compat_tests.harness.probe import find_coordinator_endpoints, roundtrip
from gateway.wire.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 4
SLOW_MS = 4_000  # long enough for two back-to-back joins and a describe on a loaded machine
GROUP_RESOURCE = 32  # ConfigResource.Type.GROUP
SET = 0  # AlterConfigOp.OpType.SET
RETRIABLE = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


def _alter_group_interval(bootstrap: str, group: str, interval_ms: int) -> None:
    cls = IncrementalAlterConfigsRequest
    req = cls[0](
        resources=[
            cls.AlterConfigsResource(
                resource_type=GROUP_RESOURCE,
                resource_name=group,
                configs=[cls.AlterConfigsResource.AlterableConfig(
                    name="consumer.assignment.interval.ms", config_operation=SET, value=str(interval_ms)
                )],
            )
        ],
        validate_only=False,
    )
    r = roundtrip(bootstrap, req, IncrementalAlterConfigsResponse, 0)
    assert [x.error_code for x in r.responses] == [0], r


def _heartbeat(address: str, group: str, member_id: str, epoch: int, topic: str | None) -> Any:
    req = ConsumerGroupHeartbeatRequest[1](
        group_id=group, member_id=member_id, member_epoch=epoch, rebalance_timeout_ms=30_000,
        subscribed_topic_names=None if topic is None else [topic], server_assignor=None,
        topic_partitions=[] if epoch == 0 else None,
    )
    r = roundtrip(address, req, ConsumerGroupHeartbeatResponse, 1)
    assert r.error_code == 0, r
    return r


def _describe(address: str, group: str) -> Any:
    r = roundtrip(address, ConsumerGroupDescribeRequest[0](group_ids=[group]), ConsumerGroupDescribeResponse, 0)
    (g,) = r.groups
    assert g.error_code == 0, g
    return g


def _await_coordinator(address: str, group: str, timeout_s: float = 60.0) -> None:
    """A fresh broker answers COORDINATOR_LOAD_IN_PROGRESS until its offsets partition is loaded."""
    deadline = time.monotonic() + timeout_s
    while True:
        r = roundtrip(address, ConsumerGroupDescribeRequest[0](group_ids=[group]), ConsumerGroupDescribeResponse, 0)
        if r.groups[0].error_code not in RETRIABLE:
            return
        assert time.monotonic() < deadline, f"the coordinator of {group} never became ready: {r}"
        time.sleep(0.2)


def _count(r: Any) -> int | None:
    return None if r.assignment is None else sum(len(t.partitions) for t in r.assignment.topic_partitions)


def scenario(coordinator: str, group: str, topic: str, wait_for_batch: bool) -> dict[str, Any]:
    """Two joins back to back; with ``wait_for_batch``, once the interval has passed, a describe and
    one heartbeat of the first member. Epochs are relative to the first member's, so runs compare."""
    _await_coordinator(coordinator, group)
    m1, m2 = str(uuid.uuid4()), str(uuid.uuid4())
    r1 = _heartbeat(coordinator, group, m1, 0, topic)
    joined = time.monotonic()
    r2 = _heartbeat(coordinator, group, m2, 0, topic)
    d = _describe(coordinator, group)
    e1 = r1.member_epoch
    out: dict[str, Any] = {
        "m1 partitions at join": _count(r1),
        "m2 epoch at join": r2.member_epoch - e1,
        "m2 partitions at join": _count(r2),
        "group epoch": d.group_epoch - e1,
        "assignment epoch": d.assignment_epoch - e1,
    }
    if wait_for_batch:
        # Past the interval (it runs from m1's join, the last computation), with nobody heartbeating.
        time.sleep(max(0.0, joined + SLOW_MS / 1000 + 0.5 - time.monotonic()))
        d = _describe(coordinator, group)
        out["state past the interval, no heartbeat"] = (d.group_state, d.assignment_epoch - e1)
        r = _heartbeat(coordinator, group, m1, e1, None)
        d = _describe(coordinator, group)
        out["m1 epoch, partitions told to keep"] = (r.member_epoch - e1, _count(r))
        out["assignment epoch after m1's heartbeat"] = d.assignment_epoch - e1
    return out


SLOW = {
    "m1 partitions at join": PARTITIONS,
    "m2 epoch at join": 0,  # the current assignment epoch: nothing recomputed for the join
    "m2 partitions at join": 0,
    "group epoch": 1,
    "assignment epoch": 0,  # behind the group epoch: "Assigning"
    # Nothing is computed when the interval ends ...
    "state past the interval, no heartbeat": ("Assigning", 0),
    # ... but by the next heartbeat: one target for the batch, m1 revokes half (its epoch moves once
    # it has).
    "m1 epoch, partitions told to keep": (0, PARTITIONS // 2),
    "assignment epoch after m1's heartbeat": 1,
}
FAST = {
    "m1 partitions at join": PARTITIONS,
    "m2 epoch at join": 1,  # the new target at once; its partitions wait for m1 to release them
    "m2 partitions at join": 0,
    "group epoch": 1,
    "assignment epoch": 1,
}


@pytest.fixture
def interval_gateway(kafka: ProcessBackend, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A gateway whose groups slow-* / fast-* have their own consumer.assignment.interval.ms."""
    if request.config.getoption("--compat-direct"):
        pytest.skip("--compat-direct: this test runs the broker and the gateway side by side itself")
    prefix = f"kip1263-{uuid.uuid4().hex[:8]}"
    config = (
        f"""
[coordinator]
"group.consumer.assignment.interval.ms" = 1000

[coordinator.group_configs."{prefix}-slow"]
"consumer.assignment.interval.ms" = {SLOW_MS}

[coordinator.group_configs."{prefix}-fast"]
"consumer.assignment.interval.ms" = 0
"""
    )
    with configured_gateway(kafka.bootstrap, tmp_path, config) as gw:
        yield gw, prefix


def test_assignment_interval_holds_back_the_second_join_on_kafka_and_the_gateway(
    kafka: ProcessBackend, interval_gateway: Any, make_topic: Any, names: Any
) -> None:
    gw, prefix = interval_gateway
    topic = make_topic(PARTITIONS)

    # Plain Kafka 4.4.0: the per-group configs through IncrementalAlterConfigs.
    kslow, kfast = names("kip1263-slow"), names("kip1263-fast")
    _alter_group_interval(kafka.bootstrap, kslow, SLOW_MS)
    _alter_group_interval(kafka.bootstrap, kfast, 0)
    broker = {g: find_coordinator_endpoints(kafka.bootstrap, g, 3)[0].address for g in (kslow, kfast)}
    on_kafka = (
        scenario(broker[kslow], kslow, topic, wait_for_batch=True),
        scenario(broker[kfast], kfast, topic, wait_for_batch=False),
    )

    # The gateway: the same values from its [coordinator.group_configs] table.
    gslow, gfast = f"{prefix}-slow", f"{prefix}-fast"
    coordinator = {g: find_coordinator_endpoints(gw.bootstrap, g, 3)[0].address for g in (gslow, gfast)}
    on_gateway = (
        scenario(coordinator[gslow], gslow, topic, wait_for_batch=True),
        scenario(coordinator[gfast], gfast, topic, wait_for_batch=False),
    )

    assert on_kafka == (SLOW, FAST)
    assert on_gateway == on_kafka
