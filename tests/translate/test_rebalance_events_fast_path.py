"""The steady-heartbeat fast path of the rebalance event deriver writes exactly what the general path does.

The fast path (a consumer group member's heartbeat that wrote no record) skips the O(members) snapshot
comparisons. Two services are driven in lockstep by the same seeded KIP-848 traffic (joins, acknowledged
and late reconciliations, steady heartbeats, leaves, stale epochs, session timers): one deriver as built,
one whose snapshot memory is switched off so that every call takes the general path. The event lines
must be identical, and the fast path must actually have been taken."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from coordinator.messages import ConsumerGroupHeartbeatRequest, TopicPartitions
from translate.group_service import GroupService
from translate.rebalance_events import RebalanceEventDeriver

TOPIC_ID = uuid.UUID(int=7)
TOPICS = {"orders": (TOPIC_ID, 12)}


class _GeneralOnly(RebalanceEventDeriver):
    def _remember_after(self, gids: Any, afters: Any) -> None:  # never a remembered "before": no fast path
        self._last.clear()


class _Counting(RebalanceEventDeriver):
    fast = 0

    def _steady_heartbeat(self, request: Any, response: Any, result: Any) -> None:
        self.fast += 1
        super()._steady_heartbeat(request, response, result)


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
def test_fast_path_writes_what_the_general_path_writes(seed: int) -> None:
    script = _traffic(seed, 400)
    fast_events, (fast_responses, fast) = _run(_Counting, script)
    slow_events, (slow_responses, _) = _run(_GeneralOnly, script)
    assert fast_responses == slow_responses
    assert fast_events == slow_events
    assert isinstance(fast, _Counting) and fast.fast > 20  # the fast path was exercised
    kinds = {e["event"] for e in fast_events}
    assert {
        "member_joined", "partitions_assigned", "partitions_revoked", "assignment_sent", "member_left",
        "member_fenced", "group_stable", "rebalance_started",
    } <= kinds  # fmt: skip
