"""What KIP-1263's assignor offload buys the gateway's event loop: the longest gap between the ticks of a
1 ms asyncio ticker (what every other group's heartbeat waits at most) while one large target
assignment is computed inline on the loop, and while it is computed on a worker thread
(``run_in_executor``, as gateway/groups/runtime.py does with ``group.consumer.assignor.offload.enable``).

The group: MEMBERS members, each subscribed to 5 of 200 topics of 100 partitions (heterogeneous, the
uniform assignor's slow path), every member new (a full computation).

    .venv/bin/python bench/assignor_offload.py [MEMBERS ...]      # default 2000 4000

Nothing here asserts: the numbers depend on the machine and its load. The assignors are pure Python, so
the thread and the loop share the GIL: the loop gets it back every ``sys.getswitchinterval()`` (5 ms)
when the OS runs it, and the computation is not faster, only no longer in one piece on the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import sys
import time
import uuid

from coordinator.assignors.api import GroupSpec, MemberSpec, SubscriptionType, TopicMetadata
from coordinator.assignors.uniform import UniformAssignor


def spec(members: int, seed: int = 1) -> GroupSpec:
    rnd = random.Random(seed)
    ids = [uuid.UUID(int=rnd.getrandbits(128)) for _ in range(200)]
    topics = {t: TopicMetadata(t, str(t), 100) for t in ids}
    ms = {f"m{i}": MemberSpec(f"m{i}", None, None, frozenset(rnd.sample(ids, 5)), {}) for i in range(members)}
    return GroupSpec(ms, topics, SubscriptionType.HETEROGENEOUS)


async def measure(group: GroupSpec, offload: bool, pool: concurrent.futures.Executor) -> tuple[float, float, float]:
    """(compute ms, longest loop gap ms, median loop gap ms)."""
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    def run() -> float:
        start = time.perf_counter()
        UniformAssignor().assign(group)
        return time.perf_counter() - start

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.05)
    took = await asyncio.get_running_loop().run_in_executor(pool, run) if offload else run()
    await asyncio.sleep(0.05)
    stop.set()
    await task
    gaps.sort()
    return took * 1000, gaps[-1] * 1000, gaps[len(gaps) // 2] * 1000


async def main(sizes: list[int]) -> None:
    pool = concurrent.futures.ThreadPoolExecutor(1)
    for members in sizes:
        group = spec(members)
        for offload in (False, True, False, True):
            took, longest, median = await measure(group, offload, pool)
            print(
                f"members={members} partitions=20000 mode={'thread' if offload else 'inline'} "
                f"compute_ms={took:.0f} loop_longest_gap_ms={longest:.1f} loop_median_gap_ms={median:.1f}"
            )
    pool.shutdown()


if __name__ == "__main__":
    asyncio.run(main([int(a) for a in sys.argv[1:]] or [2000, 4000]))
