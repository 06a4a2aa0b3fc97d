"""KIP-848 "Online Migration" case study, step by step, with the per-member translation of the
classic members that are not upgraded yet - once with eager members, once with cooperative ones.

The classic group at generation 22 is rebuilt from its GroupMetadata record (as after a failover);
A is a static member whose restart with the new protocol takes its own place back, which is how A
keeps foo-0 and foo-1 in the KIP's tables."""

from __future__ import annotations

import pytest
from migration_harness import (
    REBALANCE,
    SESSION,
    TOPIC,
    TOPIC_ID,
    Driver,
    assignment_bytes,
    identity,
    metadata,
    partitions_of,
)

from coordinator.errors import Errors
from coordinator.model import MemberState
from translate.group_records import GroupMetadataMember, GroupMetadataRecord, GroupMetadataValue

A, B, C = "A", "B", "C"
A2, B2 = "A-consumer", "B-consumer"


def generation_22(protocol: str) -> Driver:
    d = Driver(mode="native")
    members = [
        GroupMetadataMember(mid, iid, f"client-{mid}", "/10.0.0.1", REBALANCE, SESSION, metadata(), assignment_bytes({TOPIC: parts}))
        for mid, iid, parts in ((A, "instance-a", [0, 1]), (B, None, [3, 4]), (C, None, [2, 5]))
    ]
    d.service.replay(GroupMetadataRecord("g", GroupMetadataValue("consumer", 22, protocol, A, 0, members)))
    d.absorb(d.service.on_loaded(d.now))
    return d


def state(d: Driver) -> tuple[int, int, dict[str, tuple[int, list[int], list[int]]], dict[str, list[int]]]:
    g = d.cgroup()
    members = {
        mid: (m.member_epoch, sorted(m.assigned_partitions.get(TOPIC_ID, ())), sorted(m.partitions_pending_revocation.get(TOPIC_ID, ())))
        for mid, m in g.members.items()
    }
    return g.group_epoch, g.assignment_epoch, members, {mid: sorted(a.get(TOPIC_ID, ())) for mid, a in g.target_assignment.items()}


def upgrade_a_then_b_leaves(d: Driver) -> None:
    # A restarts with the new protocol (same instance id, no server assignor): the group converts.
    response = d.consumer(A2, instance_id="instance-a", full=True, assignor=None)
    assert response.error_code == 0
    # The KIP's assignor choice for A is the group's default; no subscription change: no bump.
    assert state(d) == (
        22, 22,
        {A2: (22, [0, 1], []), B: (22, [3, 4], []), C: (22, [2, 5], [])},
        {A2: [0, 1], B: [3, 4], C: [2, 5]},
    )
    assert not d.cgroup().members[A2].uses_classic_protocol
    assert d.cgroup().members[B].uses_classic_protocol and d.cgroup().members[C].uses_classic_protocol
    # B leaves: removed, group epoch bumped; the target is computed on the next call.
    assert d.leave(identity(B)).members[0].error_code == Errors.NONE
    epoch, assignment_epoch, members, _ = state(d)
    assert (epoch, assignment_epoch, members) == (23, 22, {A2: (22, [0, 1], []), C: (22, [2, 5], [])})
    # C's heartbeat tells it to rebalance.
    assert d.heartbeat(C, 22) == Errors.REBALANCE_IN_PROGRESS


@pytest.mark.parametrize("cooperative", [False, True], ids=["eager", "cooperative"])
def test_online_migration_case_study(cooperative: bool) -> None:
    protocol = "cooperative-sticky" if cooperative else "range"
    d = generation_22(protocol)
    upgrade_a_then_b_leaves(d)

    # C rejoins: eager C owns nothing any more; cooperative C still owns foo-2 and foo-5.
    key = d.join(member_id=C, client="client-C", protocols=(protocol,), owned={TOPIC: [2, 5]} if cooperative else None)
    join = d.join_response(key)
    epoch, assignment_epoch, members, target = state(d)
    assert (epoch, assignment_epoch) == (23, 23)
    assert target[A2][:2] == [0, 1] and target[C][:1] == [2] and 5 in target[C]
    assert sorted(target[A2] + target[C]) == list(range(6)) and len(target[A2]) == len(target[C]) == 3
    gained_by_a = [p for p in target[A2] if p not in (0, 1)]
    gained_by_c = [p for p in target[C] if p not in (2, 5)]
    assert sorted(gained_by_a + gained_by_c) == [3, 4]
    # The new epoch is C's new generation; all its partitions are free.
    assert join.error_code == 0 and join.generation_id == 23
    assert members[C] == (23, target[C], [])
    assert members[A2] == (22, [0, 1], [])

    # A heartbeats and moves to epoch 23 as well.
    response = d.consumer(A2, epoch=22, owned=[0, 1])
    assert response.member_epoch == 23
    assert state(d)[2] == {A2: (23, target[A2], []), C: (23, target[C], [])}

    # C collects its assignment with SyncGroup and is Stable.
    sync = d.sync_response(d.sync(C, 23))
    assert sync.error_code == 0 and partitions_of(sync.assignment) == {TOPIC: target[C]}
    assert d.heartbeat(C, 23) == Errors.NONE
    assert d.cgroup().state().value == "Stable"

    # B comes back with the new protocol: epoch 24 and a new target (2 partitions each).
    response = d.consumer(B2)
    assert response.error_code == 0
    epoch, assignment_epoch, members, target24 = state(d)
    assert (epoch, assignment_epoch) == (24, 24)
    assert sorted(sum(target24.values(), [])) == list(range(6)) and all(len(p) == 2 for p in target24.values())
    # Sticky: A and C each keep two of their partitions, B gets the two they give up.
    c_kept = target24[C]
    c_gives = sorted(set(target[C]) - set(c_kept))
    a_gives = sorted(set(target[A2]) - set(target24[A2]))
    assert set(c_kept) < set(target[C]) and set(target24[A2]) < set(target[A2])
    assert target24[B2] == sorted(a_gives + c_gives) and len(c_gives) == len(a_gives) == 1
    # B is at epoch 24 but gets nothing yet: its partitions are not free.
    assert members[B2] == (24, [], [])
    assert d.cgroup().members[B2].state is MemberState.UNRELEASED_PARTITIONS

    # A heartbeats and is told to revoke what B gets.
    response = d.consumer(A2, epoch=23, owned=target[A2])
    assert response.member_epoch == 23
    assert state(d)[2][A2] == (23, target24[A2], a_gives)
    # C heartbeats and is told to rebalance.
    assert d.heartbeat(C, 23) == Errors.REBALANCE_IN_PROGRESS
    key = d.join(member_id=C, client="client-C", protocols=(protocol,), owned={TOPIC: target[C]} if cooperative else None)
    join = d.join_response(key)
    if cooperative:
        # It still owns what it must give up: it stays at epoch 23 and gets its kept partitions.
        assert join.generation_id == 23
        assert state(d)[2][C] == (23, c_kept, c_gives)
        sync = d.sync_response(d.sync(C, 23))
        assert partitions_of(sync.assignment) == {TOPIC: c_kept}
        key = d.join(member_id=C, client="client-C", protocols=(protocol,), owned={TOPIC: c_kept})
        join = d.join_response(key)
    assert join.generation_id == 24
    assert state(d)[2][C] == (24, c_kept, [])
    # The partition C released goes to B on its next heartbeat.
    response = d.consumer(B2, epoch=24, owned=[])
    assert state(d)[2][B2] == (24, c_gives, [])
    sync = d.sync_response(d.sync(C, 24))
    assert sync.error_code == 0 and partitions_of(sync.assignment) == {TOPIC: c_kept}

    # A confirms the revocation and moves to epoch 24; what it released goes to B.
    response = d.consumer(A2, epoch=23, owned=target24[A2])
    assert response.member_epoch == 24
    assert state(d)[2][A2] == (24, target24[A2], [])
    response = d.consumer(B2, epoch=24, owned=c_gives)
    assert state(d) == (
        24, 24,
        {A2: (24, target24[A2], []), B2: (24, target24[B2], []), C: (24, c_kept, [])},
        target24,
    )
    assert d.cgroup().state().value == "Stable"
