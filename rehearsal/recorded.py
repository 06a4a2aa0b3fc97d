"""Rehearsal events from a RECORDED run: what real clients acknowledged, in the rehearsal schema.

A recorded run (e.g. the compatibility suite's rolling upgrade through the gateway, with real Java and
librdkafka consumers) logs, per consumer incarnation, the partitions its rebalance callbacks reported:
``assigned`` (onPartitionsAssigned), ``revoked`` (onPartitionsRevoked), ``lost`` (onPartitionsLost:
ownership ended without a clean revocation) and ``stopped`` (the process ended; it owns nothing). Those
are exactly the acknowledged ownership changes the rehearsal metrics are defined on
(docs/rehearsal-events.md, "Ownership semantics"), so they convert one to one:

| recorded | rehearsal event |
| --- | --- |
| first record of a consumer | ``member_joined`` |
| ``assigned`` | ``partitions_assigned`` |
| ``revoked``, ``lost`` | ``partitions_revoked`` |
| ``stopped`` | ``member_left`` (reason ``stopped``) |
| a step of the run starts / settles | ``disturbance`` / ``group_stable`` (declaring the partitions) |

The input is duck-typed (objects with ``consumer``, ``kind``, ``partitions``, ``at_ms``; steps with
``what``, ``started_ms``, ``settled_ms``) so this module does not depend on any test harness. Times are
the recording's wall-clock milliseconds (integers after conversion); events are ordered by time, a
stable sort keeping the recording's order at equal times.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from rehearsal import events as ev


class RecordedOwnership(Protocol):
    consumer: str
    kind: str
    partitions: tuple[tuple[str, int], ...]
    at_ms: float


class RecordedStep(Protocol):
    what: str
    started_ms: float
    settled_ms: float


def _tps(partitions: Iterable[tuple[str, int]]) -> list[ev.TopicPartition]:
    return [ev.TopicPartition(topic=t, partition=p) for t, p in sorted(partitions)]


def convert(
    ownership: Iterable[Any],
    *,
    run: str,
    group: str,
    client_mix: str,
    protocols: Mapping[str, str],
    topics: Mapping[str, int],
    steps: Iterable[Any] = (),
    disturbance_kind: str = "rolling-upgrade",
) -> list[ev.Event]:
    """Rehearsal events (``seq`` numbered in order) of one recorded group.

    ``protocols``: consumer name -> ``classic`` | ``consumer`` (the protocol that incarnation spoke).
    ``topics``: the subscribed topics' partition counts (declared with ``topic_metadata``).
    ``steps``: each step's start writes a ``disturbance`` (``disturbance_kind``, except the first step,
    which started the fleet) and its settling a ``group_stable``."""
    # (time, order of recording, fields): sorted by time, then numbered.
    timeline: list[tuple[int, int, dict[str, Any]]] = []
    order = 0

    def add(at_ms: float, fields: dict[str, Any]) -> None:
        nonlocal order
        timeline.append((max(int(at_ms), 0), order, fields))
        order += 1

    recorded = list(ownership)
    declared = [(t, p) for t, n in sorted(topics.items()) for p in range(n)]
    start = min((e.at_ms for e in recorded), default=0.0)
    step_list = sorted(steps, key=lambda s: s.started_ms)
    if step_list:
        start = min(start, step_list[0].started_ms)
    for topic, n in sorted(topics.items()):
        add(start, {"event": "topic_metadata", "topic": topic, "num_partitions": n, "protocol": "consumer"})
    for i, step in enumerate(step_list):
        if i > 0:
            add(step.started_ms, {"event": "disturbance", "kind": disturbance_kind, "protocol": "consumer"})
        add(step.settled_ms, {"event": "group_stable", "partitions": _tps(declared), "protocol": "consumer"})
    seen: set[str] = set()
    for e in recorded:
        if e.consumer not in protocols:
            raise ValueError(f"no protocol known for consumer {e.consumer!r}")
        member = {"member": e.consumer, "protocol": protocols[e.consumer]}
        if e.consumer not in seen:
            seen.add(e.consumer)
            add(e.at_ms, {"event": "member_joined", **member})
        if e.kind == "assigned":
            add(e.at_ms, {"event": "partitions_assigned", "partitions": _tps(e.partitions), **member})
        elif e.kind in ("revoked", "lost"):
            add(e.at_ms, {"event": "partitions_revoked", "partitions": _tps(e.partitions), **member})
        elif e.kind == "stopped":
            add(e.at_ms, {"event": "member_left", "reason": "stopped", **member})
        else:
            raise ValueError(f"unknown recorded ownership kind {e.kind!r}")
    timeline.sort(key=lambda item: (item[0], item[1]))
    return [
        _EVENT_CLASSES[fields["event"]].model_validate(
            {"ts_ms": ts, "seq": seq, "run": run, "group": group, "client_mix": client_mix, **fields}
        )
        for seq, (ts, _, fields) in enumerate(timeline)
    ]


_EVENT_CLASSES: dict[str, Any] = {
    "topic_metadata": ev.TopicMetadata,
    "disturbance": ev.Disturbance,
    "group_stable": ev.GroupStable,
    "member_joined": ev.MemberJoined,
    "partitions_assigned": ev.PartitionsAssigned,
    "partitions_revoked": ev.PartitionsRevoked,
    "member_left": ev.MemberLeft,
}
