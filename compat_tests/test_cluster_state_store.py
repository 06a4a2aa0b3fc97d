"""Group state in the cluster (the default of `groupgate serve`), on a 3-broker KRaft cluster with the
state topic replicated three times: a rolling upgrade of a live librdkafka fleet survives

- the gateway SIGKILLed and started again with nothing on its disk: its state comes back from the topic,
  with the same member ids, epochs and assignments, and no rebalance;
- the broker leading the group's state partition SIGKILLed mid-upgrade: leadership moves, the
  gateway's appends are retried, nothing acknowledged is lost and no member is fenced for it; Kafka's
  own coordinator runs the same scenario on the same cluster (the broker leading the group's
  ``__consumer_offsets`` partition killed) as the reference;
- a Java fleet's classic -> consumer upgrade (test_rolling_upgrade.py's checks) through a gateway
  stopped with SIGTERM mid-upgrade and replaced by a process with a new, empty working directory;

and a zombie (a gateway paused with SIGSTOP while a second one took its shards over, then resumed) is
fenced: it answers nothing from its stale memory, its writes fail, and nothing it tried to write after
the takeover is visible.
"""

from __future__ import annotations

import os
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compat_tests.harness.admin import create_topic
from compat_tests.harness.brokers import free_port_block
from compat_tests.harness.cluster import KafkaCluster
from compat_tests.harness.gateway_proc import GatewayProcess
from compat_tests.harness.names import unique
from compat_tests.upgrade.checks import assert_rolling_upgrade, assert_same_membership
from compat_tests.upgrade.endpoints import FAST_GROUP_SETTINGS, STATE_TOPIC_SHARDS, gateway_config
from compat_tests.upgrade.members import COOPERATIVE_STICKY, MemberSpec
from compat_tests.upgrade.scenario import RollingUpgrade
from gateway.ops.embedded_kafka import free_port
from gateway.state.store import shard_of

pytestmark = pytest.mark.kafka

MEMBERS = 3
PARTITIONS = 6
SHARDS = STATE_TOPIC_SHARDS  # a small state topic: the cluster is shared with other tests
# Commits that time out while a killed broker's partitions change leader are retried, not fatal.
BEFORE = [MemberSpec("confluent", "classic", assignor="range", retry_commits=True) for _ in range(MEMBERS)]
AFTER = [MemberSpec("confluent", "consumer", retry_commits=True) for _ in range(MEMBERS)]


def _gateway(kafka3: KafkaCluster, work: Path, topic: str, listen_port: int | None = None) -> GatewayProcess:
    """``listen_port``: a successor's, on its predecessor's ports (the clients reconnect to them)."""
    work.mkdir(parents=True, exist_ok=True)
    return GatewayProcess(
        upstream=kafka3.bootstrap,
        extra_args=[
            "--config", str(gateway_config(work / "gateway.toml", state_topic=topic)), "--state-store", "kafka",
            "--metrics-listen", f"127.0.0.1:{free_port()}",
        ],
        # Node ids 1..3 are served on bootstrap + 1 + id.
        listen_port=listen_port if listen_port is not None else free_port_block(2 + max(kafka3.brokers)),
        log_dir=work,
    )


@pytest.fixture
def cluster_gateway(kafka3: KafkaCluster, tmp_path: Path) -> Iterator[tuple[GatewayProcess, str]]:
    """A gateway in front of the 3-broker cluster keeping group state in a state topic of its own; no
    --state-dir: nothing of its state is on the local disk."""
    if any(not b.alive() for b in kafka3.brokers.values()):
        for n, b in kafka3.brokers.items():
            if not b.alive():
                kafka3.restart(n)
    topic = unique("gg-state")
    gw = _gateway(kafka3, tmp_path / "gateway", topic)
    gw.start(timeout_s=120)
    try:
        yield gw, topic
    finally:
        gw.stop()
        print(f"--- tail of {gw.log_path}\n{gw.tail(40)}")


def _run(kafka3: KafkaCluster, bootstrap: str, tmp_path: Path, group: str | None = None) -> RollingUpgrade:
    topic = create_topic(kafka3.bootstrap, unique("upgrade-topic"), PARTITIONS, replication_factor=3)
    return RollingUpgrade(
        bootstrap, topic, group or unique("upgrade-group"), BEFORE, AFTER, partitions=PARTITIONS,
        log_dir=tmp_path, settle_between=True, allow_send_errors=True,
    )


def _group_whose_state_partition_is_led_by(kafka3: KafkaCluster, state_topic: str, node: int) -> str:
    """A group id whose shard's partition of the (fresh) state topic ``node`` leads; each broker leads
    SHARDS / 3 of them."""
    led = {p for p in range(SHARDS) if kafka3.wait_leader(state_topic, p) == node}
    assert led, f"broker {node} leads no partition of {state_topic}"
    return next(g for g in (unique("upgrade-group") for _ in range(10_000)) if shard_of(g, SHARDS) in led)


def _expired(gw: GatewayProcess) -> float:
    """Members the gateway removed with a timer (session or rebalance expiry), from its /metrics."""
    i = gw.extra_args.index("--metrics-listen")
    with urllib.request.urlopen(f"http://{gw.extra_args[i + 1]}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("groupgate_group_members_expired_total{")
    )


def _lost(run: RollingUpgrade, after_ms: float) -> list[Any]:
    """Partitions a member lost (fenced, or its session expired) after ``after_ms``."""
    return [e for e in list(run.log.ownership) if e.kind == "lost" and e.at_ms > after_ms]


def test_a_gateway_sigkilled_and_started_with_an_empty_disk_keeps_members_epochs_and_assignments(
    kafka3: KafkaCluster, cluster_gateway: tuple[GatewayProcess, str], tmp_path: Path
) -> None:
    gw, _ = cluster_gateway
    run = _run(kafka3, gw.bootstrap, tmp_path)
    try:
        run.start_fleet()
        run.start_producer()
        run.restart(0, AFTER[0])  # a mixed group: one KIP-848 member beside two classic ones
        snapshot = run.settle("before the gateway restart", time.time() * 1000).group
        owned = {slot: m.owned() for slot, m in run.members.items()}
        mark = time.time() * 1000

        gw.restart(hard=True)  # SIGKILL; the new process has no state of its own to read
        time.sleep(3.0)  # several heartbeat intervals of both protocols go through the new process
        restarted = run.settle("after the gateway restart", mark).group

        assert_same_membership(snapshot, restarted)
        assert {slot: m.owned() for slot, m in run.members.items()} == owned, "ownership moved"
        assert not _lost(run, mark)

        for slot in range(1, MEMBERS):  # the upgrade goes on through the restarted gateway
            run.restart(slot, AFTER[slot])
        assert_rolling_upgrade(run, run.finish())
    finally:
        run.close()


def _kill_the_leader_mid_upgrade(kafka3: KafkaCluster, run: RollingUpgrade, topic: str, partition: int) -> float:
    """Fleet up, one slot upgraded (a mixed group), then the broker leading ``topic``/``partition``
    SIGKILLed: the next two slots are upgraded while leadership moves, and the broker comes back. Returns
    when it was killed (wall clock, ms)."""
    run.start_fleet()
    run.start_producer()
    run.restart(0, AFTER[0])
    leader = kafka3.wait_leader(topic, partition)
    if run.bootstrap == kafka3.brokers[leader].bootstrap:  # a broker's own coordinator: ask a live one
        run.bootstrap = next(b.bootstrap for n, b in kafka3.brokers.items() if n != leader)
    killed_ms = time.time() * 1000
    kafka3.kill(leader)  # the next joins and leaves go to a partition without its leader
    try:
        run.restart(1, AFTER[1])
        assert kafka3.wait_leader(topic, partition, not_on=leader) != leader
        run.restart(2, AFTER[2])
    finally:
        kafka3.restart(leader)
    return killed_ms


def _lost_by(run: RollingUpgrade, after_ms: float, protocol: str) -> list[str]:
    """Members of ``protocol`` that lost partitions after ``after_ms``.

    A KIP-848 ("consumer") member loses them only when its coordinator fences it (FENCED_MEMBER_EPOCH,
    or UNKNOWN_MEMBER_ID once its session expired there). A librdkafka classic member also gives up on
    its own: when its heartbeat is unanswered for longer than its session timeout (SESSTMOUT), which a
    coordinator failover of about that long causes with either coordinator (broker.session.timeout.ms,
    the election, the load), it declares its partitions lost and joins again under a new member id; the
    id it abandoned is then expired by the coordinator's session timer, rightly."""
    names = {m.name for m in run.all_members() if m.spec.protocol == protocol}
    return sorted({e.consumer for e in _lost(run, after_ms) if e.consumer in names})


def test_kafkas_own_coordinator_with_its_offsets_partition_leader_killed_mid_upgrade(
    kafka3: KafkaCluster, tmp_path: Path
) -> None:
    """The reference for the gateway's scenario below, on the same cluster: Kafka's own coordinator,
    ``__consumer_offsets`` replicated three times, the broker leading the group's partition of it killed
    mid-upgrade. Nothing acknowledged is lost and Kafka fences no member (its new partition leader loads
    the group and starts every session afresh); the gateway must do no worse: it fences none either.
    (A librdkafka classic member may give up its session itself meanwhile, with either coordinator: see
    _lost_by.)"""
    from compat_tests.harness.cluster import CLUSTER_CONFIG

    # The cluster runs the gateway's group timings, or the two runs would not be comparable.
    assert {k: CLUSTER_CONFIG[k] for k in FAST_GROUP_SETTINGS} == {k: str(v) for k, v in FAST_GROUP_SETTINGS.items()}
    for n, b in kafka3.brokers.items():
        if not b.alive():
            kafka3.restart(n)
    run = _run(kafka3, kafka3.brokers[1].bootstrap, tmp_path)  # one address: the group probes dial it
    partition = shard_of(run.group, int(CLUSTER_CONFIG["offsets.topic.num.partitions"]))  # Kafka's partitionFor
    try:
        killed_ms = _kill_the_leader_mid_upgrade(kafka3, run, "__consumer_offsets", partition)
        assert _lost_by(run, killed_ms, "consumer") == [], "Kafka's coordinator fenced members for its failover"
        print(f"classic members that gave up their session themselves: {_lost_by(run, killed_ms, 'classic')}")
        assert_rolling_upgrade(run, run.finish())
    finally:
        run.close()


def test_the_broker_leading_the_groups_state_partition_killed_mid_upgrade_loses_nothing(
    kafka3: KafkaCluster, cluster_gateway: tuple[GatewayProcess, str], tmp_path: Path
) -> None:
    """As Kafka's own coordinator above: nothing acknowledged lost, no member fenced. While the state
    partition has no leader the gateway postpones the session and rebalance deadlines that come due, and
    answers that waited 0.5 s for the stalled append NOT_COORDINATOR, as Kafka's coordinator answers
    while it moves (gateway/groups/runtime.py): held longer, librdkafka's KIP-848 member timed its heartbeats
    out and declared itself fenced. The killed broker is also the gateway's coordinator node (the lowest
    listed): the groups' coordinator moves to the next node the cluster's metadata lists, since
    librdkafka drops nodes its Metadata does not list, and a consumer started then, told the dropped
    node again and again, was not admitted until the gateway closed that listener
    (broker_absent_grace_s; gateway/groups/layer.py, home_node)."""
    gw, state_topic = cluster_gateway
    # The worst case, every time: the broker killed is also the one whose listener the gateway names as
    # the groups' coordinator (the lowest node id the cluster lists).
    group = _group_whose_state_partition_is_led_by(kafka3, state_topic, min(kafka3.brokers))
    run = _run(kafka3, gw.bootstrap, tmp_path, group)
    try:
        killed_ms = _kill_the_leader_mid_upgrade(kafka3, run, state_topic, shard_of(run.group, SHARDS))
        # No KIP-848 member was fenced, and the gateway's session and rebalance timers removed no member
        # but the ids that classic members abandoned themselves (see _lost_by).
        assert _lost_by(run, killed_ms, "consumer") == []
        gave_up = _lost_by(run, killed_ms, "classic")
        print(f"classic members that gave up their session themselves: {gave_up}")
        # Slot 1's classic member is closed right after the kill, while the partition has no leader: its
        # LeaveGroup may be answered NOT_COORDINATOR (as Kafka's coordinator answers while its partition
        # moves), and librdkafka does not send a failed leave again, so that id stays until its session
        # expires, with either coordinator. It held no partitions by then (it revoked them closing); a
        # live member expired would have lost its partitions and be counted above.
        assert _expired(gw) <= len(gave_up) + 1, "the gateway expired members while the state partition changed leader"
        # What the gateway acknowledged is in the topic: a gateway started now reads the same group.
        settled = run.settle("before a second gateway process", time.time() * 1000).group
        gw.restart(hard=True)
        time.sleep(3.0)  # several heartbeat intervals go through the second process
        again = run.settle("after a second gateway process", time.time() * 1000).group
        assert sorted(again.members) == sorted(settled.members)
        assert again.group_epoch == settled.group_epoch
        assert_rolling_upgrade(run, run.finish())
    finally:
        run.close()


# The smallest Java fleet of test_rolling_upgrade.py's matrix kind: cooperative classic members of the
# current release, upgraded to KIP-848 with the server-side uniform assignor.
JAVA_BEFORE = [MemberSpec("java", "classic", "4.4.0", COOPERATIVE_STICKY) for _ in range(MEMBERS)]
JAVA_AFTER = [MemberSpec("java", "consumer", "4.4.0", "uniform") for _ in range(MEMBERS)]


def test_a_java_fleet_upgraded_through_a_gateway_restarted_mid_upgrade_on_the_cluster_store(
    kafka3: KafkaCluster, cluster_gateway: tuple[GatewayProcess, str], tmp_path: Path
) -> None:
    """test_rolling_upgrade.py's Java classic -> consumer upgrade with the cluster as state store
    (replication factor 3), its checks (nothing lost, no partition owned twice, the group type following
    the migration policy at every step, Stable and fully assigned at the end), and a gateway stopped with
    SIGTERM in the middle of it and replaced by a process with a new, empty working directory: the same
    member ids, epochs and assignments, no rebalance."""
    gw, state_topic = cluster_gateway
    topic = create_topic(kafka3.bootstrap, unique("upgrade-topic"), PARTITIONS, replication_factor=3)
    run = RollingUpgrade(
        gw.bootstrap, topic, unique("upgrade-group"), JAVA_BEFORE, JAVA_AFTER, partitions=PARTITIONS,
        log_dir=tmp_path, allow_send_errors=True,
    )
    successor: GatewayProcess | None = None
    try:
        run.start_fleet()
        run.start_producer()
        run.restart(0, JAVA_AFTER[0])  # a mixed group: one KIP-848 member beside two classic ones
        snapshot = run.settle("before the gateway restart", time.time() * 1000).group
        owned = {slot: m.owned() for slot, m in run.members.items()}
        mark = time.time() * 1000

        gw.stop()  # SIGTERM
        successor = _gateway(kafka3, tmp_path / "successor", state_topic, listen_port=gw.listen_port)
        successor.start(timeout_s=120)
        time.sleep(3.0)  # several heartbeat intervals of both protocols go through the new process
        restarted = run.settle("after the gateway restart", mark).group

        assert_same_membership(snapshot, restarted)
        assert {slot: m.owned() for slot, m in run.members.items()} == owned, "ownership moved"
        assert not _lost(run, mark)

        for slot in range(1, MEMBERS):  # the upgrade goes on through the new process
            run.restart(slot, JAVA_AFTER[slot])
        assert _expired(successor) == 0
        assert_rolling_upgrade(run, run.finish())
    finally:
        run.close()
        if successor is not None:
            successor.stop()
            print(f"--- tail of {successor.log_path}\n{successor.tail(40)}")


def _heartbeat(address: str, group: str, member_id: str, epoch: int, topic: str) -> Any:
    from compat_tests.harness.probe import roundtrip
    from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse

    hb: Any = ConsumerGroupHeartbeatRequest[1]  # type: ignore[misc]
    req = hb(
        group_id=group, member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30000 if epoch == 0 else -1,
        subscribed_topic_names=[topic] if epoch == 0 else None, subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=[] if epoch == 0 else None,
    )
    return roundtrip(address, req, ConsumerGroupHeartbeatResponse, 1)


def _members(address: str, group: str) -> list[str]:
    from compat_tests.harness.probe import roundtrip
    from gateway.wire.protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse

    r = roundtrip(address, ConsumerGroupDescribeRequest[0](group_ids=[group]), ConsumerGroupDescribeResponse, 0)
    (g,) = r.groups
    assert g.error_code == 0, g
    return sorted(m.member_id for m in g.members)


NOT_COORDINATOR = 16


def test_a_paused_gateway_whose_shards_were_taken_over_is_fenced_when_it_resumes(
    kafka3: KafkaCluster, cluster_gateway: tuple[GatewayProcess, str], tmp_path: Path
) -> None:
    import signal

    from compat_tests.upgrade.group_probe import coordinator

    old, state_topic = cluster_gateway
    topic = create_topic(kafka3.bootstrap, unique("zombie-topic"), 2, replication_factor=3)
    group = unique("zombie-group")
    old_coordinator = coordinator(old.bootstrap, group)
    first = _heartbeat(old_coordinator, group, str(uuid.uuid4()), 0, topic)
    assert first.error_code == 0
    m1 = first.member_id

    assert old.pid is not None
    os.kill(old.pid, signal.SIGSTOP)
    new = _gateway(kafka3, tmp_path / "second", state_topic)
    try:
        new.start(timeout_s=120)  # opening the shards fences the paused process's transactional ids
        new_coordinator = coordinator(new.bootstrap, group)
        assert _members(new_coordinator, group) == [m1], "the new owner did not read the group's state"
        second = _heartbeat(new_coordinator, group, str(uuid.uuid4()), 0, topic)
        assert second.error_code == 0
        m2 = second.member_id
        time.sleep(6.0)  # longer than the stall threshold (5 s) of the paused process
    finally:
        os.kill(old.pid, signal.SIGCONT)
    try:
        # The zombie answers nothing from the memory it held before the takeover ...
        assert _heartbeat(old_coordinator, group, m1, first.member_epoch, topic).error_code == NOT_COORDINATOR
        # ... and takes no new member: its writes are fenced.
        assert _heartbeat(old_coordinator, group, str(uuid.uuid4()), 0, topic).error_code == NOT_COORDINATOR
        # Nothing the zombie tried is visible to the owner, which serves on.
        assert _members(new_coordinator, group) == sorted([m1, m2])
        assert _heartbeat(new_coordinator, group, m2, second.member_epoch, topic).error_code == 0
        assert "fenced by a newer owner" in old.tail(200)
    finally:
        new.stop()
