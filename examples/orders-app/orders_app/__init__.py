"""The application under test: publishes orders and reads them back in a consumer group, committing as
it goes. Nothing here knows about groupgate: it only gets a bootstrap address."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, topic: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept referenced until the result is in
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(30)


def publish_orders(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=f"order-{i}".encode())
    if producer.flush(30) != 0:
        raise RuntimeError("orders not delivered")


def read_orders(
    bootstrap: str, topic: str, group: str, count: int, *, protocol: str = "classic", timeout_s: float = 60.0
) -> list[str]:
    """Read ``count`` orders in group ``group`` (``protocol``: ``classic`` or ``consumer``, KIP-848)."""
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if protocol == "classic":
        config["session.timeout.ms"] = 10000
    consumer = Consumer(config)
    consumer.subscribe([topic])
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(seen) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            seen.append(msg.value().decode())
            consumer.commit(msg, asynchronous=False)
    finally:
        consumer.close()
    return sorted(seen, key=lambda v: int(v.split("-")[1]))
