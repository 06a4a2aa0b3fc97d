"""Steady-state ConsumerGroupHeartbeat throughput through the coordinator core (no I/O).

A 1,000-member group over 2,000 partitions is brought to STABLE, then every member heartbeats
round-robin with nothing to change (the hot path). Prints ``heartbeats_per_s=N`` last.
Run: .venv/bin/python bench/heartbeat.py [seconds]
"""

from __future__ import annotations

import sys
import time
import uuid

from coordinator.config import CoordinatorConfig
from coordinator.messages import ConsumerGroupHeartbeatRequest, TopicPartitions
from coordinator.model import GroupState
from coordinator.service import ConsumerGroupCoordinator

MEMBERS = 1_000
GROUP = "bench"


def stable_group() -> tuple[ConsumerGroupCoordinator, list[ConsumerGroupHeartbeatRequest]]:
    coord = ConsumerGroupCoordinator(CoordinatorConfig())
    topics = {f"topic-{i}": (uuid.UUID(int=i + 1), 100) for i in range(20)}
    coord.on_metadata(topics, 0)
    ids = [f"member-{i:04d}" for i in range(MEMBERS)]
    epochs: dict[str, int] = {}
    owned: dict[str, list[TopicPartitions]] = {}
    for mid in ids:
        r = coord.consumer_group_heartbeat(
            ConsumerGroupHeartbeatRequest(GROUP, mid, 0, rebalance_timeout_ms=30_000,
                                          subscribed_topic_names=list(topics), topic_partitions=[]), 0).response
        epochs[mid] = r.member_epoch
        owned[mid] = r.assignment or []
    group = coord.group(GROUP)
    assert group is not None
    while group.state() is not GroupState.STABLE:
        for mid in ids:
            r = coord.consumer_group_heartbeat(
                ConsumerGroupHeartbeatRequest(GROUP, mid, epochs[mid], topic_partitions=owned[mid]), 0).response
            epochs[mid] = r.member_epoch
            if r.assignment is not None:
                owned[mid] = r.assignment
    # What a Java consumer sends once stable: ids and epoch only.
    return coord, [ConsumerGroupHeartbeatRequest(GROUP, mid, epochs[mid]) for mid in ids]


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    coord, reqs = stable_group()
    hb = coord.consumer_group_heartbeat
    n = 0
    now = 1
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for req in reqs:
            res = hb(req, now)
        n += len(reqs)
        now += 1
        if time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - start
    assert res.response.error_code == 0 and not res.records
    print(f"members={MEMBERS} heartbeats={n} seconds={elapsed:.2f}")
    print(f"heartbeats_per_s={int(n / elapsed)}")


if __name__ == "__main__":
    main()
