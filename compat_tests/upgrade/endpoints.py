"""The coordinators a rolling upgrade runs against, all with short group timings so a run is quick:

- the anchor: an Apache Kafka 4.4.0 broker whose own coordinator migrates groups natively;
- the gateway: ``groupgate serve`` in front of such a broker, coordinating the groups itself, its state
  in local shard logs (``--state-dir``);
- the cluster gateway: ``groupgate serve`` in front of the 3-broker cluster (compat_tests/harness/cluster.py,
  whose brokers run the same timings), its state in a state topic of its own replicated three times.

All get the same timings (KIP-848 session 20 s, long enough for a static member's JVM to restart on a
busy machine; KIP-848 heartbeat interval 500 ms; classic minimum session 2 s), written with Kafka's own
setting names: broker overrides for the brokers, the ``[coordinator]`` table of the
gateway's TOML configuration for the gateways.
"""

from __future__ import annotations

from pathlib import Path

from compat_tests.harness.brokers import ProcessBackend, free_port_block
from compat_tests.harness.cluster import KafkaCluster
from compat_tests.harness.gateway_proc import GatewayProcess

# Kafka refuses values below the min.* settings, so those come down too (running-kafka-from-maven.md).
FAST_GROUP_SETTINGS: dict[str, int] = {
    "group.consumer.min.session.timeout.ms": 2000,
    "group.consumer.session.timeout.ms": 20000,
    "group.consumer.min.heartbeat.interval.ms": 200,
    "group.consumer.heartbeat.interval.ms": 500,
    "group.min.session.timeout.ms": 2000,
}

# A broker without KIP-848: its coordinator only runs classic groups (ConsumerGroupHeartbeat unsupported).
CLASSIC_ONLY = {"group.coordinator.rebalance.protocols": "classic"}


def broker(extra: dict[str, str] | None = None) -> ProcessBackend:
    overrides = {k: str(v) for k, v in FAST_GROUP_SETTINGS.items()}
    overrides.update(extra or {})
    return ProcessBackend(overrides=overrides)


def gateway_config(path: Path, extra: dict[str, int] | None = None, *, state_topic: str | None = None) -> Path:
    """A gateway TOML file whose coordinator uses FAST_GROUP_SETTINGS (and ``extra``); with ``state_topic``,
    group state goes to that topic (STATE_TOPIC_SHARDS partitions, transactional ids named after it)."""
    settings = {**FAST_GROUP_SETTINGS, **(extra or {})}
    lines = ["[coordinator]"] + [f'"{k}" = {v}' for k, v in settings.items()]
    if state_topic is not None:
        lines += [
            f'"state.topic.num.partitions" = {STATE_TOPIC_SHARDS}',
            f'state_topic = "{state_topic}"',
            f'state_transactional_id_prefix = "{state_topic}-"',
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


# A small state topic: the 3-broker cluster is shared by the session's tests.
STATE_TOPIC_SHARDS = 6
# Opening the state topic's shards (creating the topic, fencing older producers) takes a while on a
# loaded 2-core machine.
CLUSTER_GATEWAY_START_S = 120.0


def gateway(
    upstream: str,
    work_dir: Path,
    *,
    state_dir: Path | None = None,
    first_node_id: int | None = None,
    extra: dict[str, int] | None = None,
) -> GatewayProcess:
    """A gateway process (not started) with a fixed port block, so a restart comes back on the same ports.

    ``first_node_id``: the upstream's lowest broker id when it is not 0 or 1 (Tansu's is 111), so that
    node is served on the port right after the bootstrap one.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    state = state_dir if state_dir is not None else work_dir / "state"
    port = free_port_block(3)
    args = ["--config", str(gateway_config(work_dir / "gateway.toml", extra)), "--state-dir", str(state)]
    if first_node_id is not None:
        args += ["--node-id-base", str(first_node_id), "--broker-port-base", str(port + 1)]
    return GatewayProcess(upstream=upstream, extra_args=args, listen_port=port, log_dir=work_dir)


def cluster_gateway(
    cluster: KafkaCluster, work_dir: Path, state_topic: str, *, extra: dict[str, int] | None = None
) -> GatewayProcess:
    """A gateway process (not started; start it with ``timeout_s=CLUSTER_GATEWAY_START_S``) in front of
    ``cluster``, keeping group state in ``state_topic`` (created with replication factor 3 by the
    gateway) and nothing on its disk, on a fixed port block: a restart comes back on the same ports and
    reads the same topic."""
    work_dir.mkdir(parents=True, exist_ok=True)
    config = gateway_config(work_dir / "gateway.toml", extra, state_topic=state_topic)
    # Node ids 1..N are served on bootstrap + 1 + id (the default node_id_base is 0).
    port = free_port_block(2 + max(cluster.brokers))
    args = ["--config", str(config), "--state-store", "kafka"]
    return GatewayProcess(upstream=cluster.bootstrap, extra_args=args, listen_port=port, log_dir=work_dir)
