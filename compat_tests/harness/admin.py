"""Topic administration for tests, through confluent-kafka's AdminClient (librdkafka)."""

from __future__ import annotations

import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT_S = 30.0


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def create_topic(
    bootstrap: str, name: str, partitions: int = 3, timeout_s: float = TIMEOUT_S, *, replication_factor: int = 1
) -> str:
    """Create ``name`` and wait until every partition has a leader, so the first produce does not race it."""
    client = admin(bootstrap)
    futures = client.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication_factor)]
    )
    futures[name].result(timeout=timeout_s)
    wait_for_leaders(client, name, partitions, timeout_s)
    return name


def wait_for_leaders(client: AdminClient, topic: str, partitions: int, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        try:
            md = client.list_topics(topic, timeout=5)
            t = md.topics.get(topic)
            if t is not None and t.error is None and len(t.partitions) == partitions:
                if all(p.leader >= 0 for p in t.partitions.values()):
                    return
            last = repr(t.error) if t is not None else "missing"
        except KafkaException as exc:
            last = str(exc)
        time.sleep(0.2)
    raise TimeoutError(f"topic {topic} has no leader for all {partitions} partitions: {last}")


def delete_topic(bootstrap: str, name: str, timeout_s: float = TIMEOUT_S) -> None:
    client = admin(bootstrap)  # kept alive until the deletion is answered
    client.delete_topics([name])[name].result(timeout=timeout_s)
