"""KIP-1263 ``group.consumer.assignor.offload.enable`` in the runtime: a large group's target is computed on
a worker thread while the event loop serves every other group, then installed in the group's turn (its
records appended to the shard's log like any change) unless the group changed meanwhile.

The assignor is a real one (uniform) behind a gate the test opens: the order of events is asserted,
never a duration.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from coordinator.assignors.api import AssignmentDelta, GroupSpec
from coordinator.assignors.uniform import UniformAssignor
from coordinator.config import CoordinatorConfig
from coordinator.messages import ConsumerGroupHeartbeatRequest
from coordinator.model import Assignment
from gateway.groups.runtime import CoordinatorRuntime
from gateway.state.file_store import FileStateStore
from gateway.state.store import shard_of
from translate.group_service import GroupService

TOPIC = ("t", uuid.UUID(int=7), 6)
SHARDS = 4


class GatedAssignor:
    """uniform, but while ``hold`` is set a call waits for ``release`` (on whatever thread runs it)."""

    name = "gated"

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.hold = threading.Event()
        self.started = threading.Event()
        self.release = threading.Event()
        self.inner = UniformAssignor()

    def assign(self, spec: GroupSpec, delta: AssignmentDelta | None = None) -> dict[str, Assignment]:
        if self.hold.is_set():
            self.events.append(f"computing {sorted(spec.members)} on {threading.current_thread().name}")
            self.started.set()
            assert self.release.wait(30), "the test never released the assignor"
            self.events.append("computed")
        return self.inner.assign(spec, delta)


def join(group: str, member: str, assignor: str | None = None) -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=0, rebalance_timeout_ms=30000,
        subscribed_topic_names=[TOPIC[0]], topic_partitions=[], server_assignor=assignor,
    )


def heartbeat(group: str, member: str, epoch: int, owned: dict[uuid.UUID, list[int]]) -> ConsumerGroupHeartbeatRequest:
    from coordinator.messages import TopicPartitions

    return ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch,
        topic_partitions=[TopicPartitions(t, ps) for t, ps in owned.items()],
    )


async def until(cond: Callable[[], bool]) -> None:
    for _ in range(3000):  # bounded: 30 s at most, usually a few steps
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never held")


def groups_in_distinct_shards(n: int) -> list[str]:
    out: dict[int, str] = {}
    i = 0
    while len(out) < n:
        out.setdefault(shard_of(f"grp-{i}", SHARDS), f"grp-{i}")
        i += 1
    return list(out.values())


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[tuple[CoordinatorRuntime, GatedAssignor, list[str], Path]]:
    events: list[str] = []
    gated = GatedAssignor(events)
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="assignor")

    def service() -> GroupService:
        return GroupService(None, CoordinatorConfig(
            assignors={"uniform": UniformAssignor(), "gated": gated}, assignment_interval_ms=0, offload_enable=True, offload_min_size=1,
        ))  # fmt: skip

    runtime = CoordinatorRuntime(SHARDS, new_service=service, store=FileStateStore(tmp_path, SHARDS), offload_executor=pool)
    await runtime.load()
    runtime.start()
    runtime.on_metadata({TOPIC[0]: (TOPIC[1], TOPIC[2])})
    try:
        yield runtime, gated, events, tmp_path
    finally:
        gated.release.set()
        await runtime.stop()
        pool.shutdown(wait=True)


def group_state(runtime: CoordinatorRuntime, gid: str) -> Any:
    g = runtime.shard_for(gid).service.coordinator.group(gid)
    assert g is not None
    return g


async def test_the_loop_serves_another_group_while_a_large_assignment_computes(setup: Any) -> None:
    runtime, gated, events, _ = setup
    big, other = groups_in_distinct_shards(2)
    r1 = await runtime.call(big, join(big, "m1", "gated"))  # the group's first target: inline
    assert r1.member_epoch == 1
    gated.hold.set()
    r2 = await runtime.call(big, join(big, "m2", "gated"))
    # Answered at once with the current target, as Kafka answers while an assignment is pending.
    assert (r2.member_epoch, r2.assignment) == (1, [])
    await until(gated.started.is_set)
    # The computation holds its thread; the loop answers another group's join and heartbeats meanwhile,
    # and a describe of the big group shows it Assigning.
    b = await runtime.call(other, join(other, "x1"))
    events.append(f"{other} joined at epoch {b.member_epoch}")
    owned = {TOPIC[1]: sorted(b.assignment[0].partitions)}
    hb = await runtime.call(other, heartbeat(other, "x1", b.member_epoch, owned))
    events.append(f"{other} heartbeat answered: {hb.error_code}")
    g = group_state(runtime, big)
    assert (g.group_epoch, g.assignment_epoch, g.state().value) == (2, 1, "Assigning")
    gated.release.set()
    await until(lambda: runtime.counters["assignments_installed"] == 1)
    assert events == [
        "computing ['m1', 'm2'] on assignor_0",
        f"{other} joined at epoch 1",
        f"{other} heartbeat answered: 0",
        "computed",
    ]
    assert (g.group_epoch, g.assignment_epoch) == (2, 2)
    assert sorted(len(p) for a in g.target_assignment.values() for p in a.values()) == [3, 3]
    # The install was written to the shard's log: replaying that log rebuilds the same target.
    await runtime.shard_for(big).durable()
    replayed = GroupService()
    shard = runtime.shard_for(big)
    assert shard.log is not None
    for rec in shard.log.replay():
        replayed.replay_bytes(rec.key, rec.value)
    copy = replayed.coordinator.group(big)
    assert copy is not None and (copy.assignment_epoch, copy.target_assignment) == (2, g.target_assignment)
    # The members learn it on their next heartbeat: m1 is asked to give up half.
    r = await runtime.call(big, heartbeat(big, "m1", 1, {TOPIC[1]: list(range(6))}))
    assert r.assignment is not None and len(r.assignment[0].partitions) == 3


async def test_a_result_computed_from_an_older_epoch_is_installed_for_it_and_the_group_computes_again(setup: Any) -> None:
    runtime, gated, events, _ = setup
    (big,) = groups_in_distinct_shards(1)
    await runtime.call(big, join(big, "m1", "gated"))
    gated.hold.set()
    await runtime.call(big, join(big, "m2", "gated"))
    await until(gated.started.is_set)
    # A third member joins while the computation runs: the group epoch moves past the snapshot's.
    r3 = await runtime.call(big, join(big, "m3", "gated"))
    assert r3.member_epoch == 1
    gated.hold.clear()
    gated.release.set()
    await until(lambda: runtime.counters["assignments_installed"] == 1)
    assert runtime.counters["assignments_discarded"] == 0
    g = group_state(runtime, big)
    # Epoch 2's target (m1 and m2, the snapshot's members); m3 waits for the next computation.
    assert (g.group_epoch, g.assignment_epoch, sorted(g.target_assignment)) == (3, 2, ["m1", "m2"])
    # The next heartbeat computes again from the current group, and that result is installed.
    await runtime.call(big, heartbeat(big, "m1", 1, {TOPIC[1]: list(range(6))}))
    await until(lambda: runtime.counters["assignments_installed"] == 2)
    assert (g.assignment_epoch, sorted(g.target_assignment)) == (3, ["m1", "m2", "m3"])
    assert runtime.counters["assignments_offloaded"] == 2
