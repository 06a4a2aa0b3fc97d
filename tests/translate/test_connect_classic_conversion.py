"""Classic Kafka Connect groups converted to connect groups and back, their classic workers translated per
worker (translate/connect_conversion.py, translate/connect_classic_worker.py), driven by simulated workers
(tests/translate/connect_workers_harness.py) that check after every answer that nothing runs twice."""

from __future__ import annotations

import random

from coordinator.connect.messages import AssignorSpec, ConnectGroupHeartbeatRequest, ConnectorsAndTasks
from coordinator.connect.model import ConnectGroupState, WorkerState
from coordinator.connect.records import ConnectRecord, ConnectRecordType
from coordinator.connect.service import CONNECT_SESSION, ConnectConfig
from coordinator.errors import Errors
from coordinator.outcome import ConversionRefused
from coordinator.timers import ScheduleTimer
from tests.translate.connect_workers_harness import (
    ClassicWorker,
    G,
    NewWorker,
    World,
    assignment,
    configured,
    units,
)
from translate.classic_group import ClassicGroupState
from translate.classic_messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    SyncGroupRequest,
)
from translate.classic_rebalance import ClassicGroupConfig
from translate.connect_classic_worker import CONNECT_CLASSIC_SYNC_TIMER
from translate.connect_protocol import (
    WorkerMetadata,
    decode_assignment,
    decode_metadata,
    encode_metadata,
    running,
)
from translate.group_config import GroupServiceConfig
from translate.group_records import GroupMetadataRecord
from translate.group_service import GroupService
from translate.result import JOIN_TIMER

T = ConnectRecordType


def _classic_world(n: int = 2) -> tuple[World, list[ClassicWorker]]:
    world = World(configured(3, 2))
    workers = [ClassicWorker(world, name) for name in "abcdefgh"[:n]]
    world.settle()
    assert world.all_run()
    return world, workers


def _joiner(name: str = "n") -> ConnectGroupHeartbeatRequest:
    url = f"http://{name}:8083"
    return ConnectGroupHeartbeatRequest(
        G, name, 0, rebalance_timeout_ms=60_000, worker_url=url, owned=ConnectorsAndTasks(),
        client_assignors=[AssignorSpec("sessioned", 2, 2, version=2, metadata=encode_metadata(WorkerMetadata(2, url, 7)))],
    )  # fmt: skip


def _types(records: list[object]) -> list[object]:
    return ["classic" if isinstance(r, GroupMetadataRecord) else r.type for r in records if isinstance(r, (GroupMetadataRecord, ConnectRecord))]


def test_upgrade_keeps_the_generation_what_each_worker_runs_and_the_leader_and_writes_the_records_in_order() -> None:
    world, (a, b) = _classic_world()
    classic = world.svc.classic_groups.group(G)
    assert classic is not None and classic.is_in(ClassicGroupState.STABLE)
    generation, leader = classic.generation_id, classic.leader_id
    out = world.svc.handle(_joiner(), "k", world.now)
    assert out.response_to("k").error_code == 0
    kinds = _types(out.records)
    assert kinds[:9] == ["classic", T.MEMBER_METADATA, T.MEMBER_METADATA, T.GROUP_METADATA, T.TARGET_MEMBER,
                         T.TARGET_MEMBER, T.TARGET_METADATA, T.CURRENT_ASSIGNMENT, T.CURRENT_ASSIGNMENT]  # fmt: skip
    assert out.records[0] == GroupMetadataRecord(G, None)
    assert world.svc.classic_groups.group(G) is None
    group = world.svc.connect.group(G)
    assert group is not None
    assert group.assignment_epoch == generation and group.group_epoch == generation + 1  # the joiner bumped it
    assert group.last_computer == leader
    for sim in (a, b):
        w = group.workers[sim.member_id]
        assert (w.member_epoch, w.state) == (generation, WorkerState.STABLE)
        assert w.assigned == sim.runs == group.target[sim.member_id].assignment
        assert w.classic is not None and w.classic.session_timeout_ms == 10_000
        assert [n for n, _ in w.classic.protocols] == ["sessioned", "compatible"]
        assert [(x.name, x.minimum_version, x.maximum_version) for x in w.assignors] == [("sessioned", 2, 2), ("compatible", 1, 1)]
        # The assignor metadata leaves the allocation out: what a worker runs never bumps the epoch.
        assert decode_metadata(w.assignors[0].metadata).allocation is None
    # The classic workers heartbeat on at their generation.
    beat = world.svc.handle(HeartbeatRequest(G, generation, b.member_id), "h", world.now).response_to("h")
    assert beat.error_code == 0


def test_the_classic_leader_computes_through_join_and_sync_and_workers_revoke_before_others_receive() -> None:
    world, (a, b) = _classic_world()
    leader = world.svc.classic_groups.group(G).leader_id  # type: ignore[union-attr]
    before = {a.name: set(a.runs_units()), b.name: set(b.runs_units())}
    n = NewWorker(world, "n")
    history: list[dict[str, frozenset[object]]] = []
    original = world.check

    def check() -> None:
        original()
        history.append(world.running())

    world.check = check  # type: ignore[method-assign]
    world.settle()
    assert world.all_run() and n.runs_units()
    group = world.svc.connect.group(G)
    assert group is not None and group.state() is ConnectGroupState.STABLE
    assert group.last_computer == leader
    for target in group.target.values():
        stored = decode_assignment(target.metadata)
        assert stored is not None and stored.leader == leader and stored.leader_url == group.workers[leader].url
    # What the new worker got was run by a classic worker before, and was given up first.
    taken = n.runs_units() & (before["a"] | before["b"])
    assert taken
    for unit in taken:
        gave_up = [i for i, snap in enumerate(history) if unit not in snap["a"] and unit not in snap["b"]]
        got = [i for i, snap in enumerate(history) if unit in snap.get("n", frozenset())]
        assert gave_up and got and gave_up[0] <= got[0]


def test_the_last_new_protocol_worker_leaving_downgrades_to_a_classic_connect_group() -> None:
    world, (a, b) = _classic_world()
    n = NewWorker(world, "n")
    world.settle()
    group = world.svc.connect.group(G)
    assert group is not None
    leader = group.last_computer
    targets = {mid: t.assignment for mid, t in group.target.items()}
    start = len(world.records)
    n.leave()
    new = world.records[start:]
    assert isinstance(new[-1], GroupMetadataRecord) and new[-1].value is not None
    assert all(isinstance(r, ConnectRecord) for r in new[:-1])
    assert [r.type for r in new[-3:-1]] == [T.TARGET_METADATA, T.GROUP_METADATA] and new[-2].value is None
    assert world.svc.connect.group(G) is None
    classic = world.svc.classic_groups.group(G)
    assert classic is not None
    assert classic.protocol_type == "connect" and classic.protocol_name == "sessioned" and classic.leader_id == leader
    assert classic.generation_id == new[-1].value.generation
    assert classic.is_in(ClassicGroupState.PREPARING_REBALANCE)
    for sim in (a, b):
        m = classic.members[sim.member_id]
        given = decode_assignment(m.assignment)
        assert given is not None and given.leader == leader and given.version == 2
        assert given.assigned == targets[sim.member_id]
        assert running(decode_metadata(m.metadata("sessioned")).allocation) == sim.runs
    world.settle()
    assert world.all_run()
    assert world.svc.classic_groups.group(G).is_in(ClassicGroupState.STABLE)  # type: ignore[union-attr]


def test_records_replay_to_the_same_group_and_classic_workers_rejoin_after_a_restart() -> None:
    world, _ = _classic_world(3)
    n = NewWorker(world, "n")
    world.settle()
    fresh = GroupService(world.svc.config)
    for key, value in world.log:
        assert fresh.replay_bytes(key, value)
    assert fresh.connect.snapshot() == world.svc.connect.snapshot()
    group = fresh.connect.group(G)
    assert group is not None and sum(w.classic is not None for w in group.workers.values()) == 3
    classic = next(w for w in world.workers.values() if isinstance(w, ClassicWorker))
    beat = fresh.handle(HeartbeatRequest(G, classic.generation, classic.member_id), "h", world.now).response_to("h")
    assert beat.error_code == Errors.REBALANCE_IN_PROGRESS
    sync = fresh.handle(SyncGroupRequest(G, classic.generation, classic.member_id), "s", world.now).response_to("s")
    assert sync.error_code == Errors.REBALANCE_IN_PROGRESS
    # The workers go on against the restarted gateway: they rejoin and nothing runs twice.
    moved = World(world.wanted, fresh)
    moved.now = world.now
    moved.deliver(fresh.on_loaded(world.now))
    for w in world.workers.values():
        w.world = moved
        moved.workers[w.name] = w
    moved.settle()
    assert moved.all_run() and n.runs_units()


def test_refusals_eager_workers_a_rebalancing_group_and_an_empty_group_deleted() -> None:
    # Eager workers (protocol "default") only.
    svc = GroupService()
    meta = encode_metadata(WorkerMetadata(0, "http://e:8083", 3))
    join = JoinGroupRequest(G, 10_000, protocol_type="connect", protocols=[JoinGroupRequestProtocol("default", meta)], client_id="e")
    mid = svc.handle(join, "j", 0).response_to("j").member_id
    join.member_id = mid
    svc.handle(join, "j", 0)
    for key, value in list(svc.classic_groups.rebalancer.deadlines.items()):
        if key[0] == JOIN_TIMER:  # the initial rebalance delay ends
            svc.on_timer(key, value)
    joined = svc.classic_groups.group(G)
    assert joined is not None
    svc.handle(SyncGroupRequest(G, joined.generation_id, mid, assignments=[]), "s", 0)
    assert joined.is_in(ClassicGroupState.STABLE) and joined.protocol_name == "default"
    out = svc.handle(_joiner(), "k", 0)
    refused = out.response_to("k")
    assert refused.error_code == Errors.GROUP_ID_NOT_FOUND and "eager" in (refused.error_message or "")
    assert out.changes == [ConversionRefused(G, "classic", "connect", "protocol_type")] and not out.records
    assert svc.connect.group(G) is None and svc.classic_groups.group(G) is joined

    # A group in the middle of a rebalance: retriable.
    world, _ = _classic_world()
    late = ClassicWorker(world, "z")
    late.step()  # MEMBER_ID_REQUIRED
    late.step()  # its JoinGroup puts the group into PreparingRebalance
    assert world.svc.classic_groups.group(G).is_in(ClassicGroupState.PREPARING_REBALANCE)  # type: ignore[union-attr]
    refused = world.svc.handle(_joiner(), "k", world.now).response_to("k")
    assert refused.error_code == Errors.COORDINATOR_LOAD_IN_PROGRESS
    assert world.svc.connect.group(G) is None

    # An empty classic group is deleted and the joiner makes a fresh connect group.
    world, workers = _classic_world(1)
    workers[0].leave()
    assert not world.svc.classic_groups.group(G).members  # type: ignore[union-attr]
    out = world.svc.handle(_joiner(), "k", world.now)
    assert out.response_to("k").error_code == Errors.COMPUTE_ASSIGNMENT  # alone, it computes the first target
    assert out.records[0] == GroupMetadataRecord(G, None)
    group = world.svc.connect.group(G)
    assert group is not None and list(group.workers) == ["n"] and group.group_epoch == 1


def test_an_unsolicited_rejoin_asks_for_a_new_computation_and_a_classic_join_carries_its_allocation() -> None:
    world, (a, b) = _classic_world()
    NewWorker(world, "n")
    world.settle()
    group = world.svc.connect.group(G)
    assert group is not None
    epoch = group.group_epoch
    # b rejoins on its own (a config change, say): the group epoch moves so the leader computes again.
    b.need_join = True
    b.step()
    assert group.group_epoch == epoch + 1
    assert all(x.reason == 0 for x in group.workers[b.member_id].assignors)  # back to NONE at once
    world.settle()
    assert world.all_run() and group.assignment_epoch >= epoch + 1
    assert units(group.workers[b.member_id].assigned) == b.runs_units()
    assert assignment(b.runs_units()) == b.runs


def test_no_connector_or_task_ever_runs_twice_across_random_joins_leaves_and_crashes_of_both_kinds() -> None:
    for seed in range(3):
        rng = random.Random(seed)
        world, _ = _classic_world(2)
        names = iter(f"w{i}" for i in range(100))
        for _ in range(12):
            live = list(world.workers.values())
            op = rng.random()
            if op < 0.35 or len(live) <= 1:
                NewWorker(world, next(names))
            elif op < 0.6:
                ClassicWorker(world, next(names))
            elif op < 0.85:
                rng.choice(live).leave()
            else:
                world.crash(rng.choice(live))  # its session runs out at the gateway
            world.settle()  # checks after every answer that nothing runs twice
            assert world.all_run(), (seed, world.running())
            classic = sum(isinstance(w, ClassicWorker) for w in world.workers.values())
            kind = world.svc.group_kind(G)
            if classic == len(world.workers):
                # Only classic workers left: a classic group again (or one never converted).
                assert kind in ("classic", "connect") and (kind == "classic" or not world.workers)


def test_a_classic_workers_session_is_its_own_and_one_that_never_syncs_is_removed() -> None:
    world, (a, b) = _classic_world()
    n = NewWorker(world, "n")
    world.settle()
    session = (CONNECT_SESSION, G, b.member_id)
    world.send(b, HeartbeatRequest(G, b.generation, b.member_id))
    assert world.timers[session] == world.now + 10_000  # its JoinGroup's, not the group's default
    fresh = GroupService(world.svc.config)
    for key, value in world.log:
        fresh.replay_bytes(key, value)
    loaded = fresh.on_loaded(50)
    armed = [t for t in loaded.timers if isinstance(t, ScheduleTimer) and t.key == session]
    assert armed[-1].deadline_ms == 50 + 10_000
    # b joins and never sends SyncGroup: its sync timer removes it from the group.
    b.need_join = True
    b.step()
    sync = (CONNECT_CLASSIC_SYNC_TIMER, G, b.member_id)
    assert world.timers[sync] == world.now + 60_000
    del world.workers[b.name]
    out = world.svc.on_timer(sync, world.timers[sync])
    world.deliver(out)
    group = world.svc.connect.group(G)
    assert group is not None and b.member_id not in group.workers
    assert any(isinstance(r, ConnectRecord) and r.sub_key == b.member_id and r.value is None for r in out.records)
    world.settle()
    assert world.all_run() and n.runs_units()


def test_the_rebalance_event_deriver_follows_an_upgrade_and_a_downgrade_without_failing() -> None:
    from translate.rebalance_events import RebalanceEventDeriver

    world = World(configured(2, 2))
    events: list[object] = []
    deriver = RebalanceEventDeriver(world.svc, events.append, run="unit")  # re-raises any failure
    world.calls = deriver
    ClassicWorker(world, "a")
    ClassicWorker(world, "b")
    world.settle()
    n = NewWorker(world, "n")
    world.settle()
    n.leave()
    world.settle()
    assert deriver.failures == 0 and world.all_run() and world.svc.group_kind(G) == "classic"


def test_a_join_that_would_be_refused_after_the_conversion_leaves_the_classic_group_as_it_was() -> None:
    world, _ = _classic_world()
    classic = world.svc.classic_groups.group(G)
    odd = _joiner()
    odd.client_assignors = [AssignorSpec("custom", 0, 3, version=1)]
    out = world.svc.handle(odd, "k", world.now)
    assert out.response_to("k").error_code == Errors.UNSUPPORTED_ASSIGNOR
    assert not out.records and world.svc.classic_groups.group(G) is classic and world.svc.connect.group(G) is None
    invalid = _joiner()
    invalid.worker_url = None
    out = world.svc.handle(invalid, "k", world.now)
    assert out.response_to("k").error_code == Errors.INVALID_REQUEST and not out.records
    assert world.svc.classic_groups.group(G) is classic

    full = World(configured(1, 1), GroupService(
        GroupServiceConfig(classic=ClassicGroupConfig(initial_rebalance_delay_ms=0)), connect_config=ConnectConfig(max_group_size=2),
    ))  # fmt: skip
    ClassicWorker(full, "a")
    ClassicWorker(full, "b")
    full.settle()
    out = full.svc.handle(_joiner(), "k", full.now)
    assert out.response_to("k").error_code == Errors.GROUP_MAX_SIZE_REACHED
    assert out.changes == [ConversionRefused(G, "classic", "connect", "group_max_size")] and not out.records


def test_classic_workers_join_a_connect_group_made_by_a_new_protocol_worker() -> None:
    world = World(configured(2, 3))
    ClassicWorker(world, "a")  # joins and leaves: an empty classic group holds the id
    world.settle()
    world.workers["a"].leave()
    n = NewWorker(world, "n")
    n.step()  # the group is made, n is asked to compute its first target
    b = ClassicWorker(world, "b")
    b.step()  # MEMBER_ID_REQUIRED
    b.step()  # joins before any target exists: member epoch 0, generation 0
    assert b.generation == 0 and not b.need_join
    b.step()  # SyncGroup
    assert b.last_code == 0 and b.idle()
    b.step()  # Heartbeat at epoch 0 (a join for the core, from the worker's stored description)
    assert b.last_code in (0, Errors.REBALANCE_IN_PROGRESS)
    assert world.svc.connect.group(G).workers[b.member_id].member_epoch == 0  # type: ignore[union-attr]
    ClassicWorker(world, "c")
    world.settle()
    group = world.svc.connect.group(G)
    assert group is not None and world.all_run()
    assert sorted(w.classic is not None for w in group.workers.values()) == [False, True, True]
    assert group.workers[group.last_computer].classic is not None  # a classic worker computes once it can
    world.workers["n"].leave()
    world.settle()
    assert world.svc.group_kind(G) == "classic" and world.all_run()


def test_a_group_on_the_compatible_protocol_converts_and_comes_back_on_it() -> None:
    world = World(configured(2, 2))
    ClassicWorker(world, "a", ("compatible",))
    ClassicWorker(world, "b", ("compatible",))
    world.settle()
    assert world.svc.classic_groups.group(G).protocol_name == "compatible"  # type: ignore[union-attr]
    n = NewWorker(world, "n")
    world.settle()
    group = world.svc.connect.group(G)
    assert group is not None and world.all_run() and n.runs_units()
    assert group.assignor == "compatible"  # the one assignor every worker offers
    stored = [decode_assignment(t.metadata) for t in group.target.values()]
    assert all(x is not None and x.version == 1 for x in stored)
    n.leave()
    world.settle()
    assert world.svc.classic_groups.group(G).protocol_name == "compatible" and world.all_run()  # type: ignore[union-attr]
