"""The coordinator core's own CPU for one large KIP-848 group to form, without sockets, state writes or a
load generator: what one group costs the core before any I/O.

``--members`` members (10,000 by default, the issue's 1 x 10,000 case) join one group subscribed to one
topic of ``--partitions`` partitions, one ConsumerGroupHeartbeat each, in turn; then every member
heartbeats in turn with what it owns, each round advancing the clock by ``--round-ms``, until the group is
stable (every member at the group's epoch holding its target). Offloaded target computations (a group over
``offload_min_size``) are run inline when a round ends, as the gateway would on a worker thread, and timed
apart. The figures are process CPU seconds (``time.process_time``), which other work on the machine barely
moves, so runs at different commits compare:

  - ``join_cpu_s``: the joins (each one bumps the group epoch and refreshes its subscription);
  - ``settle_cpu_s``: the heartbeats after them until stable, assignment computations excluded;
  - ``assign_cpu_s``: the target computations (inline or offloaded);
  - ``us_per_join``, ``us_per_heartbeat``: the first two divided by their requests.

    .venv/bin/python bench/group_formation.py [--members 10000] [--partitions 1000] [--rounds 60]

The last line is ``key=value`` figures. Compare commits by running this file against each tree
(``PYTHONPATH=<tree>``).
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

from coordinator.config import CoordinatorConfig
from coordinator.messages import ConsumerGroupHeartbeatRequest, TopicPartitions
from coordinator.model import GroupState
from coordinator.service import ConsumerGroupCoordinator

GROUP = "bench-formation"
TOPIC = "bench-formation-topic"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--members", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=1_000)
    ap.add_argument("--round-ms", type=int, default=5_000, help="clock advance per heartbeat round (the interval)")
    ap.add_argument("--rounds", type=int, default=60, help="give up after this many heartbeat rounds")
    args = ap.parse_args()

    coord = ConsumerGroupCoordinator(CoordinatorConfig())
    now = 1_000
    topic_id = uuid.uuid5(uuid.NAMESPACE_DNS, TOPIC)
    coord.on_metadata({TOPIC: (topic_id, args.partitions)}, now)
    ids = [str(uuid.UUID(int=i + 1)) for i in range(args.members)]
    epochs: dict[str, int] = {}
    owned: dict[str, list[int]] = {}
    assign_s = 0.0
    computations = 0

    def run_jobs() -> None:
        nonlocal assign_s, computations
        for job in coord.take_assignment_jobs():
            t0 = time.process_time()
            result = job.run()
            coord.install_assignment(job, result, now)
            assign_s += time.process_time() - t0
            computations += 1

    def heartbeat(mid: str, req: ConsumerGroupHeartbeatRequest) -> None:
        resp = coord.consumer_group_heartbeat(req, now).response
        if resp.error_code:
            raise RuntimeError(f"member {mid}: error {resp.error_code} {resp.error_message}")
        epochs[mid] = resp.member_epoch
        if resp.assignment is not None:
            owned[mid] = sorted(p for tp in resp.assignment for p in tp.partitions)

    t0 = time.process_time()
    for mid in ids:
        heartbeat(mid, ConsumerGroupHeartbeatRequest(
            group_id=GROUP, member_id=mid, member_epoch=0, rebalance_timeout_ms=60_000,
            subscribed_topic_names=[TOPIC], topic_partitions=[],
        ))
        now += 1
    join_s = time.process_time() - t0
    run_jobs()

    settle_s = 0.0
    heartbeats = 0
    rounds = 0
    while rounds < args.rounds:
        group = coord.group(GROUP)
        assert group is not None
        if group.state() is GroupState.STABLE:
            break
        rounds += 1
        now += args.round_ms
        t0 = time.process_time()
        for mid in ids:
            heartbeat(mid, ConsumerGroupHeartbeatRequest(
                group_id=GROUP, member_id=mid, member_epoch=epochs[mid],
                topic_partitions=[TopicPartitions(topic_id, owned.get(mid, []))],
            ))
            heartbeats += 1
        settle_s += time.process_time() - t0
        run_jobs()
    group = coord.group(GROUP)
    assert group is not None
    stable = group.state() is GroupState.STABLE
    print(
        f"members={args.members} partitions={args.partitions} stable={int(stable)} rounds={rounds} "
        f"computations={computations} join_cpu_s={join_s:.2f} settle_cpu_s={settle_s:.2f} assign_cpu_s={assign_s:.2f} "
        f"us_per_join={join_s * 1e6 / args.members:.1f} us_per_heartbeat={settle_s * 1e6 / max(heartbeats, 1):.1f} "
        f"load_average_1m={os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
