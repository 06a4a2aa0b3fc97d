"""Per-group configs set over the wire (IncrementalAlterConfigs on a GROUP resource, what
``kafka-configs --alter --entity-type groups`` sends), on plain Kafka 4.4.0 and through the gateway.

The cluster stores them; the gateway passes IncrementalAlterConfigs through and reads the values back
with DescribeConfigs (gateway/groups/cluster_configs.py): before a new group's first join, and every
``cluster_group_configs_refresh_ms`` for the groups it holds. What a member can see of a group's
configs on the wire is ``consumer.heartbeat.interval.ms``: every ConsumerGroupHeartbeat response
carries it. ``consumer.session.timeout.ms`` takes the same path (it is set alongside here), but Kafka's
bounds (45 s to 60 s by default) keep an expiry test out of a seconds-long suite.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse

from compat_tests.harness.brokers import ProcessBackend, free_port_block
from compat_tests.harness.gateway_proc import GatewayProcess
from compat_tests.harness.probe import find_coordinator_endpoints, roundtrip
from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse

pytestmark = pytest.mark.kafka

GROUP_RESOURCE = 32  # ConfigResource.Type.GROUP
SET = 0  # AlterConfigOp.OpType.SET
RETRIABLE = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
REFRESH_MS = 300
OVERRIDE_MS = 6_000  # the gateway's [coordinator.group_configs] value for the override group


@pytest.fixture
def configs_gateway(kafka: ProcessBackend, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[Any, str]]:
    """A gateway that reads the cluster's group configs every REFRESH_MS, with a TOML override for one group."""
    if request.config.getoption("--compat-direct"):
        pytest.skip("--compat-direct: this test runs the broker and the gateway side by side itself")
    override = f"override-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "gateway.toml"
    config.write_text(
        f"""
[coordinator]
cluster_group_configs_refresh_ms = {REFRESH_MS}

[coordinator.group_configs."{override}"]
"consumer.heartbeat.interval.ms" = {OVERRIDE_MS}
"""
    )
    gw = GatewayProcess(
        upstream=kafka.bootstrap, listen_port=free_port_block(3), log_dir=tmp_path,
        extra_args=["--config", str(config), "--ephemeral-state"],
    )  # fmt: skip
    gw.start()
    try:
        yield gw, override
    finally:
        gw.stop()


def _alter(bootstrap: str, group: str, **configs: int) -> None:
    cls = IncrementalAlterConfigsRequest
    entries = [
        cls.AlterConfigsResource.AlterableConfig(name=name.replace("_", "."), config_operation=SET, value=str(value))
        for name, value in configs.items()
    ]
    req = cls[0](
        resources=[cls.AlterConfigsResource(resource_type=GROUP_RESOURCE, resource_name=group, configs=entries)],
        validate_only=False,
    )
    r = roundtrip(bootstrap, req, IncrementalAlterConfigsResponse, 0)
    assert [x.error_code for x in r.responses] == [0], r


def _heartbeat(address: str, group: str, member_id: str, epoch: int, topic: str) -> Any:
    req = ConsumerGroupHeartbeatRequest[1](
        group_id=group, member_id=member_id, member_epoch=epoch, rebalance_timeout_ms=30_000,
        subscribed_topic_names=[topic] if epoch == 0 else None, server_assignor=None,
        topic_partitions=[] if epoch == 0 else None,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        r = roundtrip(address, req, ConsumerGroupHeartbeatResponse, 1)
        if r.error_code not in RETRIABLE or time.monotonic() > deadline:
            assert r.error_code == 0, r
            return r
        time.sleep(0.2)


def _intervals(bootstrap: str, group: str, topic: str) -> dict[str, int]:
    """The heartbeat intervals a member is told: at its join (the group's config set before), and
    after the config changed while it was a member (heartbeats until it shows, at most 5 s)."""
    _alter(bootstrap, group, consumer_heartbeat_interval_ms=7_000, consumer_session_timeout_ms=50_000)
    (coordinator,) = find_coordinator_endpoints(bootstrap, group, 3, timeout_s=60.0)
    member = str(uuid.uuid4())
    joined = _heartbeat(coordinator.address, group, member, 0, topic)
    _alter(bootstrap, group, consumer_heartbeat_interval_ms=9_000)
    epoch, changed = joined.member_epoch, joined.heartbeat_interval_ms
    deadline = time.monotonic() + 5
    while changed != 9_000 and time.monotonic() < deadline:
        time.sleep(REFRESH_MS / 1000)
        r = _heartbeat(coordinator.address, group, member, epoch, topic)
        epoch, changed = r.member_epoch, r.heartbeat_interval_ms
    return {"at join": joined.heartbeat_interval_ms, "after the change": changed}


def test_group_configs_altered_over_the_wire_apply_alike_on_kafka_and_the_gateway(
    kafka: ProcessBackend, configs_gateway: tuple[Any, str], make_topic: Any, names: Any
) -> None:
    gw, override = configs_gateway
    topic = make_topic(2)
    direct = _intervals(kafka.bootstrap, names("direct"), topic)
    through = _intervals(gw.bootstrap, names("gateway"), topic)
    assert direct == {"at join": 7_000, "after the change": 9_000}
    assert through == direct
    # The gateway's own [coordinator.group_configs] value wins over the cluster's for its group.
    _alter(gw.bootstrap, override, consumer_heartbeat_interval_ms=7_000)
    (coordinator,) = find_coordinator_endpoints(gw.bootstrap, override, 3, timeout_s=60.0)
    assert _heartbeat(coordinator.address, override, str(uuid.uuid4()), 0, topic).heartbeat_interval_ms == OVERRIDE_MS
