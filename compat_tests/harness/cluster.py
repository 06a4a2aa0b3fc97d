"""A 3-node Apache Kafka cluster on loopback: three combined broker+controller KRaft nodes, three voters.

Each node is a gateway.ops.embedded_kafka.EmbeddedKafka (the Maven Central jars, a child JVM) with its own
data directory and fixed ports, all formatted with one cluster id, so a node can be SIGKILLed and started
again on the same addresses and storage. Internal topics are replicated 3 ways with min.insync.replicas 2,
as a production cluster would be; the failure-detection timeouts are shortened so that leadership moves
within seconds of a kill.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kafka import KafkaAdminClient

from gateway.ops.embedded_kafka import READY_TIMEOUT_S, EmbeddedKafka, free_ports, new_cluster_id

NODES = 3
HEAP = "384m"

# Settings every node of the cluster shares (beside the per-node ids, ports and quorum voters).
CLUSTER_CONFIG: dict[str, str] = {
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "6",  # Kafka: 50; created on the first FindCoordinator
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    # Fewer internal partitions than Kafka's 50: quicker to create on a 2-core CI machine.
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    # A killed broker is noticed by the controller after broker.session.timeout.ms (Kafka: 9 s).
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "replica.lag.time.max.ms": "5000",
    "unclean.leader.election.enable": "false",
    # The group timings of compat_tests/upgrade/endpoints.py (FAST_GROUP_SETTINGS), so that a rolling
    # upgrade against Kafka's own coordinator settles as quickly as through the gateway.
    "group.consumer.min.session.timeout.ms": "2000",
    "group.consumer.session.timeout.ms": "20000",
    "group.consumer.min.heartbeat.interval.ms": "200",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.min.session.timeout.ms": "2000",
}


@dataclass
class KafkaCluster:
    """Three KRaft voters on 127.0.0.1. ``start()`` brings all of them up; ``kill(n)``/``restart(n)`` one."""

    nodes: int = NODES
    heap: str = HEAP
    overrides: dict[str, str] = field(default_factory=dict)
    brokers: dict[int, EmbeddedKafka] = field(default_factory=dict)
    base_dir: Path | None = None

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> KafkaCluster:
        self.base_dir = Path(tempfile.mkdtemp(prefix="groupgate-kafka3-"))
        cluster_id = new_cluster_id()
        ids = list(range(1, self.nodes + 1))
        # Every node's client and controller ports, distinct (a node refuses two listeners on one port).
        ports = free_ports(2 * len(ids))
        controller_ports = {n: ports[2 * i] for i, n in enumerate(ids)}
        client_ports = {n: ports[2 * i + 1] for i, n in enumerate(ids)}
        voters = ",".join(f"{n}@127.0.0.1:{controller_ports[n]}" for n in ids)
        for n in ids:
            cfg = dict(CLUSTER_CONFIG)
            cfg.update(self.overrides)
            cfg.update({"node.id": str(n), "controller.quorum.voters": voters})
            self.brokers[n] = EmbeddedKafka(
                port=client_ports[n],
                controller_port=controller_ports[n],
                data_dir=self.base_dir / f"node-{n}",
                overrides=cfg,
                heap=self.heap,
                cluster_id=cluster_id,
            )
        try:
            # A node serves clients only once the quorum has a leader: start all, then wait for each.
            for b in self.brokers.values():
                b.start(wait=False)
            deadline = time.monotonic() + timeout_s
            for n, b in self.brokers.items():
                try:
                    b.wait_ready(max(1.0, deadline - time.monotonic()))
                except (RuntimeError, TimeoutError) as exc:
                    raise RuntimeError(
                        f"the 3-node Kafka cluster did not come up within {timeout_s:.0f}s (node {n} of "
                        f"{self.nodes}; logs under {self.base_dir}): {exc}"
                    ) from exc
            self.wait_brokers(self.nodes, timeout_s=max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self

    def _admin(self) -> KafkaAdminClient:
        alive = [b.bootstrap for b in self.brokers.values() if b.alive()]
        return KafkaAdminClient(bootstrap_servers=alive, request_timeout_ms=10_000, client_id="kafka3-harness")

    def _metadata(self, topic: str | None = None, timeout_s: float = 15.0) -> dict:  # type: ignore[type-arg]
        """Cluster (or one topic's) metadata from a live node; a node just killed can still be picked by
        the client for a request, so failures are retried for a while."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                admin = self._admin()
                try:
                    if topic is None:
                        return admin.describe_cluster()  # type: ignore[no-any-return]
                    return admin.describe_topics([topic])[0]  # type: ignore[no-any-return]
                finally:
                    admin.close()
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def wait_brokers(self, count: int, timeout_s: float = 60.0) -> None:
        """Wait until ``count`` brokers are registered and unfenced (listed in Metadata)."""
        deadline = time.monotonic() + timeout_s
        seen: object = None
        while time.monotonic() < deadline:
            try:
                seen = [b["broker_id"] for b in self._metadata()["brokers"] if not b.get("is_fenced")]
                if len(seen) >= count:  # type: ignore[arg-type]
                    return
            except Exception as exc:  # noqa: BLE001 - a node still starting refuses in many ways
                seen = exc
            time.sleep(0.3)
        raise TimeoutError(f"{count} brokers not registered within {timeout_s}s (last: {seen!r})")

    def leader(self, topic: str, partition: int) -> int:
        """The node id leading ``topic``/``partition`` now (-1: none)."""
        for p in self._metadata(topic)["partitions"]:
            if p["partition_index"] == partition:
                return int(p["leader_id"])
        raise KeyError(f"{topic} has no partition {partition}")

    def isr(self, topic: str, partition: int) -> list[int]:
        for p in self._metadata(topic)["partitions"]:
            if p["partition_index"] == partition:
                return list(p["isr_nodes"])
        raise KeyError(f"{topic} has no partition {partition}")

    def wait_leader(self, topic: str, partition: int, *, not_on: int | None = None, timeout_s: float = 30.0) -> int:
        """Wait for a live leader of ``topic``/``partition`` (other than ``not_on``); returns its node id."""
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            try:
                last = self.leader(topic, partition)
                if last in self.brokers and last != not_on and self.brokers[last].alive():  # type: ignore[comparison-overlap]
                    return int(last)  # type: ignore[call-overload]
            except Exception as exc:  # noqa: BLE001 - metadata from a cluster mid-failover
                last = exc
            time.sleep(0.2)
        raise TimeoutError(f"no leader for {topic}-{partition} (not node {not_on}) within {timeout_s}s: {last!r}")

    def kill(self, node: int) -> None:
        """SIGKILL one node (its storage and ports are kept for ``restart``)."""
        self.brokers[node].kill()

    def restart(self, node: int, timeout_s: float = READY_TIMEOUT_S) -> None:
        self.brokers[node].start(timeout_s)
        self.wait_brokers(self.nodes, timeout_s)

    def stop(self) -> None:
        # All at once: stopped one by one, the last voters wait out their grace period for a quorum.
        threads = [threading.Thread(target=b.stop, kwargs={"grace_s": 10.0}) for b in self.brokers.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
