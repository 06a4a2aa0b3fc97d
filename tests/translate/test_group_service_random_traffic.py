"""Seeded random traffic of classic and new-protocol clients sharing one group, through upgrades
and downgrades: the service never fails, a group is never both types, no partition has two
owners, and replaying the records rebuilds the consumer groups exactly."""

from __future__ import annotations

import random

import pytest
from migration_harness import TOPIC, TOPIC_ID, Driver, identity, partitions_of

from coordinator.messages import ConsumerGroupHeartbeatResponse
from translate.classic_group import ClassicGroupState
from translate.classic_messages import JoinGroupResponse, SyncGroupResponse
from translate.group_config import GroupServiceConfig
from translate.group_service import GroupService


class Classic:
    def __init__(self, name: str) -> None:
        self.name, self.member_id, self.generation, self.owned = name, "", -1, list[int]()


class Modern:
    def __init__(self, name: str) -> None:
        self.name, self.epoch, self.owned, self.joined = name, 0, list[int](), False


def step(d: Driver, rnd: random.Random, classics: list[Classic], moderns: list[Modern]) -> None:
    roll = rnd.random()
    if roll < 0.5:
        c = rnd.choice(classics)
        action = rnd.choice(["join", "sync", "heartbeat", "heartbeat", "leave"])
        if action == "join":
            key = d.join(member_id=c.member_id, client=c.name, owned={TOPIC: c.owned} if rnd.random() < 0.5 else None)
            body = d.responses.get(key)
            if isinstance(body, JoinGroupResponse) and body.member_id:
                c.member_id = body.member_id
                if body.error_code == 0:
                    c.generation = body.generation_id
        elif action == "sync" and c.member_id:
            key = d.sync(c.member_id, c.generation)
            body = d.responses.get(key)
            if isinstance(body, SyncGroupResponse) and body.error_code == 0:
                c.owned = partitions_of(body.assignment).get(TOPIC, [])
        elif action == "heartbeat" and c.member_id:
            d.heartbeat(c.member_id, c.generation)
        elif action == "leave" and c.member_id:
            d.leave(identity(c.member_id))
            c.member_id, c.generation, c.owned = "", -1, []
    elif roll < 0.85:
        m = rnd.choice(moderns)
        if not m.joined or rnd.random() < 0.05:
            body = d.consumer(m.name)
            m.joined = body.error_code == 0
            m.epoch = body.member_epoch
            m.owned = []
        elif rnd.random() < 0.25:
            d.consumer(m.name, epoch=-1, full=False)
            m.joined = False
        else:
            body = d.consumer(m.name, epoch=m.epoch, owned=m.owned)
            assert isinstance(body, ConsumerGroupHeartbeatResponse)
            if body.error_code:
                m.joined = False
            else:
                m.epoch = body.member_epoch
                if body.assignment is not None:
                    m.owned = sorted(p for tp in body.assignment for p in tp.partitions if tp.topic_id == TOPIC_ID)
    else:
        d.advance(rnd.choice([100, 1_000, 5_000, 12_000]))


def check(d: Driver) -> None:
    svc = d.service
    assert svc.classic_groups.group("g") is None or svc.coordinator.group("g") is None
    group = svc.coordinator.group("g")
    if group is not None:
        seen: dict[int, str] = {}
        for m in group.members.values():
            for p in (*m.assigned_partitions.get(TOPIC_ID, ()), *m.partitions_pending_revocation.get(TOPIC_ID, ())):
                assert p not in seen, f"partition {p} owned by {seen[p]} and {m.member_id}"
                seen[p] = m.member_id


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("mode", ["native", "translate"])
def test_random_mixed_traffic_keeps_the_service_consistent(seed: int, mode: str) -> None:
    rnd = random.Random(seed)
    d = Driver(mode=mode)
    classics = [Classic(n) for n in ("a", "b", "c")]
    moderns = [Modern(n) for n in ("m1", "m2")]
    for _ in range(250):
        step(d, rnd, classics, moderns)
        check(d)
    replayed = GroupService(GroupServiceConfig(classic_groups=mode))
    for record in d.records:
        replayed.replay(record)
    assert replayed.coordinator.snapshot() == d.service.coordinator.snapshot()
    live, back = d.service.classic_groups.group("g"), replayed.classic_groups.group("g")
    if live is not None and live.is_in(ClassicGroupState.STABLE):
        assert back is not None and back.generation_id == live.generation_id
        assert [(m.member_id, m.assignment) for m in back.members.values()] == [
            (m.member_id, m.assignment) for m in live.members.values()
        ]
