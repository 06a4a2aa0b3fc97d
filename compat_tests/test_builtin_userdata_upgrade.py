"""Online upgrades Kafka refuses: classic fleets whose assignments carry a built-in sticky assignor's
userData (docs/compatibility.md, "Online upgrades Kafka refuses").

librdkafka's group leader copies every member's subscription userData into that member's assignment.
Its sticky and cooperative-sticky assignors write userData (the previous assignment and its generation)
as soon as a member has been assigned something, so after any rebalance that is not the group's first
the stored assignments carry userData, and Kafka 4.4.0 refuses the first KIP-848 member
(GROUP_ID_NOT_FOUND, "custom assignor", KAFKA-18134). The gateway recognises the copy and converts.
Each test runs the same fleet against the broker's own coordinator and through the gateway.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse

from compat_tests.harness.admin import create_topic
from compat_tests.harness.brokers import ProcessBackend
from compat_tests.harness.events import now_ms
from compat_tests.harness.gateway_proc import GatewayProcess
from compat_tests.harness.invariants import assert_all_consumed, assert_exclusive_ownership
from compat_tests.harness.names import unique
from compat_tests.harness.probe import roundtrip
from compat_tests.upgrade import endpoints, group_probe
from compat_tests.upgrade.checks import assert_rolling_upgrade
from compat_tests.upgrade.members import MemberSpec
from compat_tests.upgrade.scenario import RollingUpgrade
from coordinator.errors import Errors
from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from translate.embedded import decode_assignment, decode_subscription

pytestmark = pytest.mark.kafka

FLEET = 3
PARTITIONS = 4
CLASSIC = MemberSpec("confluent", "classic", assignor="cooperative-sticky")
CONSUMER = MemberSpec("confluent", "consumer")
# Both coordinators gather a new group's first members for 5 s (the harness's broker otherwise uses 0), so a
# fleet started together joins one generation even on a busy machine.
GATHER = {"group.initial.rebalance.delay.ms": 5000}


@pytest.fixture(scope="module")
def broker() -> Iterator[ProcessBackend]:
    backend = endpoints.broker({k: str(v) for k, v in GATHER.items()})
    backend.start()
    try:
        yield backend
    finally:
        backend.stop()


@pytest.fixture(scope="module")
def gateway(
    request: pytest.FixtureRequest, broker: ProcessBackend, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    if request.config.getoption("--compat-direct"):
        pytest.skip("--compat-direct: these tests compare the broker's coordinator with the gateway's themselves")
    gw = endpoints.gateway(broker.bootstrap, tmp_path_factory.mktemp("gateway"), extra=GATHER)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()
        print(f"--- tail of {gw.log_path}\n{gw.tail(40)}")


@pytest.fixture
def runs() -> Iterator[list[RollingUpgrade]]:
    made: list[RollingUpgrade] = []
    yield made
    for run in made:
        run.close()


def new_run(runs: list[RollingUpgrade], broker: ProcessBackend, bootstrap: str, log_dir: Path) -> RollingUpgrade:
    log_dir.mkdir(parents=True, exist_ok=True)
    topic = create_topic(broker.bootstrap, unique("userdata-topic"), PARTITIONS)
    run = RollingUpgrade(
        bootstrap,
        topic,
        unique("userdata-group"),
        [CLASSIC] * FLEET,
        [CONSUMER] * FLEET,
        partitions=PARTITIONS,
        log_dir=log_dir,
        settle_between=True,
    )
    runs.append(run)
    return run


def _described(bootstrap: str, group: str) -> Any:
    req = DescribeGroupsRequest[5](groups=[group], include_authorized_operations=False)
    resp = roundtrip(group_probe.coordinator(bootstrap, group), req, DescribeGroupsResponse, 5)
    (g,) = resp.groups
    assert g.error_code == 0, g
    return g


def assignment_user_data(bootstrap: str, group: str) -> dict[str, bytes | None]:
    """Each classic member's assignment userData, as the coordinator stores it (DescribeGroups v5)."""
    g = _described(bootstrap, group)
    return {m.member_id: decode_assignment(bytes(m.member_assignment)).user_data for m in g.members}


def subscription_user_data(bootstrap: str, group: str) -> dict[str, bytes | None]:
    """Each classic member's subscription userData (its metadata for the group's protocol)."""
    g = _described(bootstrap, group)
    return {m.member_id: decode_subscription(bytes(m.member_metadata)).user_data for m in g.members}


def kip848_join(bootstrap: str, group: str, topic: str) -> Any:
    """A KIP-848 join (ConsumerGroupHeartbeat, epoch 0) as a consumer's first heartbeat sends it."""
    join_v0: Any = ConsumerGroupHeartbeatRequest[0]  # type: ignore[misc]
    req = join_v0(
        group_id=group,
        member_id="",
        member_epoch=0,
        rebalance_timeout_ms=30000,
        subscribed_topic_names=[topic],
        topic_partitions=[],
    )
    return roundtrip(group_probe.coordinator(bootstrap, group), req, ConsumerGroupHeartbeatResponse, 0)


def kip848_leave(bootstrap: str, group: str, member_id: str) -> Any:
    leave_v0: Any = ConsumerGroupHeartbeatRequest[0]  # type: ignore[misc]
    req = leave_v0(group_id=group, member_id=member_id, member_epoch=-1)
    return roundtrip(group_probe.coordinator(bootstrap, group), req, ConsumerGroupHeartbeatResponse, 0)


def fleet_after_a_rebalance(run: RollingUpgrade) -> None:
    """The classic fleet up and consuming, then one member stopped: the two left rejoin with their
    sticky userData, which the librdkafka leader copies into their new assignments."""
    run.start_fleet()
    run.start_producer()
    started = now_ms()
    run.stop_slot(0)
    run.settle("slot 0 stopped", started)
    user_data = assignment_user_data(run.bootstrap, run.group)
    assert len(user_data) == FLEET - 1 and all(user_data.values()), (
        f"expected every assignment to carry the leader's copy of the sticky userData: {user_data}"
    )


def test_librdkafka_cooperative_sticky_fleet_refused_by_kafka_upgrades_and_downgrades_through_the_gateway(
    broker: ProcessBackend, gateway: GatewayProcess, runs: list[RollingUpgrade], tmp_path: Path
) -> None:
    # Kafka 4.4.0: the first KIP-848 member is refused and the group stays as it was.
    direct = new_run(runs, broker, broker.bootstrap, tmp_path / "kafka")
    fleet_after_a_rebalance(direct)
    refused = kip848_join(broker.bootstrap, direct.group, direct.topic)
    assert refused.error_code == Errors.GROUP_ID_NOT_FOUND, refused
    assert "custom assignor" in (refused.error_message or ""), refused.error_message
    view = group_probe.describe(broker.bootstrap, direct.group)
    assert (view.group_type, view.stable, len(view.members)) == ("classic", True, FLEET - 1)
    produced = direct.finish()
    assert_all_consumed(produced, direct.log)
    assert_exclusive_ownership(direct.log)

    # The gateway: the same fleet rolls to KIP-848 one member at a time, then back to classic.
    through = new_run(runs, broker, gateway.bootstrap, tmp_path / "gateway")
    fleet_after_a_rebalance(through)
    joined = through.add({0: CONSUMER}, "slot 0: first KIP-848 member")
    assert joined.group.group_type == "consumer"
    for slot in range(1, FLEET):
        through.restart(slot, CONSUMER)
    through.downgrade()
    produced = through.finish()
    assert_rolling_upgrade(through, produced)


def first_generation_fleet(
    runs: list[RollingUpgrade], broker: ProcessBackend, bootstrap: str, log_dir: Path, attempts: int = 3
) -> RollingUpgrade:
    """A fresh fleet all of whose members joined the group's first generation together. Should a member
    still join after the initial rebalance delay (GATHER), the cooperative rebalances that follow leave
    sticky userData behind: such a fleet is closed and a fresh one started."""
    seen = []
    for attempt in range(attempts):
        run = new_run(runs, broker, bootstrap, log_dir / f"attempt-{attempt}")
        run.start_fleet()
        user_data = assignment_user_data(bootstrap, run.group)
        if len(user_data) == FLEET and not any(user_data.values()):
            return run
        seen.append(user_data)
        run.close()
    raise AssertionError(f"no fleet of {attempts} joined one generation together: {seen}")


def test_librdkafka_cooperative_sticky_fleet_in_its_first_generation_upgrades_on_both(
    broker: ProcessBackend, gateway: GatewayProcess, runs: list[RollingUpgrade], tmp_path: Path
) -> None:
    """Members that join the group's first generation together have no previous assignment, so
    their assignments carry no userData: Kafka converts the group too, and both agree."""
    outcomes = []
    for where, bootstrap in (("kafka", broker.bootstrap), ("gateway", gateway.bootstrap)):
        run = first_generation_fleet(runs, broker, bootstrap, tmp_path / where)
        step = run.add({FLEET: CONSUMER}, "a KIP-848 member joined")
        outcomes.append((step.group.group_type, len(step.group.members)))
        run.close()
        assert_exclusive_ownership(run.log)
    assert outcomes == [("consumer", FLEET + 1)] * 2


JAVA_STICKY = MemberSpec("java", "classic", "4.4.0", "org.apache.kafka.clients.consumer.StickyAssignor")


def test_java_sticky_fleet_writes_no_assignment_userdata_and_upgrades_on_both(
    broker: ProcessBackend, gateway: GatewayProcess, runs: list[RollingUpgrade], tmp_path: Path
) -> None:
    """Java's StickyAssignor writes userData in the subscription only; Kafka checks assignments, so
    both coordinators convert the group (a KIP-848 join is accepted, and its leave turns it back)."""
    outcomes = []
    for where, bootstrap in (("kafka", broker.bootstrap), ("gateway", gateway.bootstrap)):
        log_dir = tmp_path / where
        log_dir.mkdir(parents=True, exist_ok=True)
        run = RollingUpgrade(
            bootstrap,
            create_topic(broker.bootstrap, unique("userdata-topic"), PARTITIONS),
            unique("userdata-group"),
            [JAVA_STICKY] * FLEET,
            [JAVA_STICKY] * FLEET,
            partitions=PARTITIONS,
            log_dir=log_dir,
        )
        runs.append(run)
        run.start_fleet()
        started = now_ms()
        run.stop_slot(0)
        run.settle("slot 0 stopped", started)
        subscriptions = subscription_user_data(bootstrap, run.group)
        assert len(subscriptions) == FLEET - 1 and all(subscriptions.values()), f"{where}: {subscriptions}"
        assignments = assignment_user_data(bootstrap, run.group)
        assert not any(assignments.values()), f"{where}: {assignments}"
        joined = kip848_join(bootstrap, run.group, run.topic)
        converted = group_probe.list_group(bootstrap, run.group)[0]
        left = kip848_leave(bootstrap, run.group, joined.member_id) if joined.error_code == 0 else None
        outcomes.append((joined.error_code, converted, left.error_code if left is not None else None))
        run.close()
        assert_exclusive_ownership(run.log)
    assert outcomes == [(Errors.NONE, "consumer", Errors.NONE)] * 2
