"""A consumer group member's heartbeat that wrote no record costs the rebalance event deriver its
acknowledgement alone: no group state is read for it.

Seeded KIP-848 traffic (joins, acknowledged and late reconciliations, steady heartbeats, leaves, stale
epochs, session timers) through a deriver that counts its reads of a group's state (the O(members)
Stable check and the per-group change derivation); every call whose outcome holds no record and no
change must have made none, and the traffic must still derive every kind of event it implies."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from migration_harness import Driver

from coordinator.messages import ConsumerGroupHeartbeatRequest, TopicPartitions
from translate.classic_messages import HeartbeatRequest
from translate.group_service import GroupService
from translate.rebalance_events import RebalanceEventDeriver

TOPIC_ID = uuid.UUID(int=7)
TOPICS = {"orders": (TOPIC_ID, 12)}


class _Counting(RebalanceEventDeriver):
    reads = 0
    quiet_calls = 0

    def _group_changes(self, *args: Any) -> None:
        self.reads += 1
        super()._group_changes(*args)

    def _is_stable(self, gid: str) -> bool:
        self.reads += 1
        return super()._is_stable(gid)

    def handle(self, request: object, request_key: Any, now_ms: int) -> Any:
        before = self.reads
        result = super().handle(request, request_key, now_ms)
        if not result.records and not result.changes:
            assert self.reads == before, request  # a call that changed nothing read no group state
            self.quiet_calls += 1
        return result


def _owned(assignment: Any) -> list[TopicPartitions]:
    return [TopicPartitions(tp.topic_id, list(tp.partitions)) for tp in assignment]


def _traffic(seed: int, steps: int) -> list[tuple[str, Any]]:
    """A script of calls; requests refer to members by name, epochs are filled in from the responses."""
    rng = random.Random(seed)
    script: list[tuple[str, Any]] = []
    names = [f"m{i}" for i in range(6)]
    for _ in range(steps):
        r = rng.random()
        name = rng.choice(names)
        if r < 0.12:
            script.append(("join", name))
        elif r < 0.17:
            script.append(("leave", name))
        elif r < 0.20:
            script.append(("stale", name))
        elif r < 0.23:
            script.append(("timer", name))
        elif r < 0.55:
            script.append(("ack", name))
        else:
            script.append(("steady", name))
    return script


def _run(deriver_type: type[RebalanceEventDeriver], script: list[tuple[str, Any]]) -> tuple[list[dict[str, Any]], Any]:
    service = GroupService()
    events: list[dict[str, Any]] = []
    deriver = deriver_type(service, events.append, run="fast")
    deriver.on_metadata(TOPICS, 0)
    epochs: dict[str, int] = {}
    told: dict[str, list[TopicPartitions]] = {}
    responses = []
    for i, (what, name) in enumerate(script, start=1):
        now = i * 100
        if what == "timer":
            if name in epochs:
                deriver.on_timer(("session", "g", name), now)
            continue
        if what == "join":
            if name in epochs:
                continue
            req = ConsumerGroupHeartbeatRequest("g", name, 0, rebalance_timeout_ms=30_000,
                                                subscribed_topic_names=["orders"], topic_partitions=[])
        elif name not in epochs:
            continue
        elif what == "leave":
            req = ConsumerGroupHeartbeatRequest("g", name, -1)
        elif what == "stale":
            req = ConsumerGroupHeartbeatRequest("g", name, max(1, epochs[name] - 1), topic_partitions=None)
        elif what == "ack":
            req = ConsumerGroupHeartbeatRequest("g", name, epochs[name], topic_partitions=told.get(name, []))
        else:
            req = ConsumerGroupHeartbeatRequest("g", name, epochs[name])
        res = deriver.handle(req, i, now).response_to(i)
        responses.append(res)
        if what == "leave" or res.error_code != 0:
            epochs.pop(name, None)
            told.pop(name, None)
            continue
        epochs[name] = res.member_epoch
        if res.assignment is not None:
            told[name] = _owned(res.assignment)
    return events, (responses, deriver)


@pytest.mark.parametrize("seed", range(8))
def test_a_heartbeat_that_wrote_no_record_reads_no_group_state(seed: int) -> None:
    events, (_, deriver) = _run(_Counting, _traffic(seed, 400))
    assert isinstance(deriver, _Counting) and deriver.quiet_calls > 20 and deriver.reads > 0
    kinds = {e["event"] for e in events}
    assert {
        "member_joined", "partitions_assigned", "partitions_revoked", "assignment_sent", "member_left",
        "member_fenced", "group_stable", "rebalance_started",
    } <= kinds  # fmt: skip


def test_a_classic_groups_heartbeat_costs_nothing() -> None:
    class Spy(RebalanceEventDeriver):
        begun = 0

        def _begin(self, now_ms: int) -> None:
            self.begun += 1
            super()._begin(now_ms)

    d = Driver()
    (a, b), generation = d.classic_fleet(clients=("a", "b"))
    events: list[dict[str, Any]] = []
    spy = Spy(d.service, events.append)
    for member_id in (a, b, a):
        key = next(d.keys)
        result = spy.handle(HeartbeatRequest("g", generation, member_id), key, d.now)
        assert result.response_to(key).error_code == 0
    assert spy.begun == 0 and events == []  # not even an event batch was opened
