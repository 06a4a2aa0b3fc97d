"""Rebalance events of a simulated run, in the schema of rehearsal/events.py.

The simulation calls the emitter only when a sink was given, so runs without one build no pydantic
objects. Ownership events are what clients acknowledge (partitions_assigned / partitions_revoked);
assignment_sent is what the coordinator told them. ``seq`` numbers events in emission order, which
is the order the simulation processed them at equal virtual times.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rehearsal import events as ev

EventSink = Callable[[Any], None]


def _tps(partitions: Iterable[tuple[str, int]]) -> list[ev.TopicPartition]:
    return [ev.TopicPartition(topic=t, partition=p) for t, p in sorted(partitions)]


class SimEventEmitter:
    def __init__(self, sink: EventSink, run: str, group: str, client_mix: str) -> None:
        self.sink = sink
        self.run = run
        self.group = group
        self.client_mix = client_mix
        self.count = 0

    def _emit(self, event: Any) -> None:
        self.sink(event.model_copy(update={"seq": self.count}))
        self.count += 1

    def _common(self, ts: int, protocol: str) -> dict[str, Any]:
        return {"ts_ms": ts, "run": self.run, "group": self.group, "protocol": protocol, "client_mix": self.client_mix}

    def member_event(self, ts: int, name: str, client: Any, **fields: Any) -> None:
        member = client.member_id or client.name
        common = self._common(ts, client.protocol)
        if name == "member_joined":
            self._emit(ev.MemberJoined(member=member, **common))
        elif name == "member_left":
            self._emit(ev.MemberLeft(member=member, reason=fields.get("reason"), **common))
        elif name == "member_fenced":
            self._emit(ev.MemberFenced(member=member, reason=fields.get("reason"), **common))
        elif name == "partitions_assigned":
            self._emit(ev.PartitionsAssigned(member=member, partitions=_tps(fields["partitions"]), **common))
        elif name == "partitions_revoked":
            self._emit(ev.PartitionsRevoked(member=member, partitions=_tps(fields["partitions"]), **common))
        else:
            raise ValueError(f"unknown member event {name}")

    def assignment_sent(self, ts: int, client: Any, member: str, epoch: int, told: Iterable[tuple[str, int]]) -> None:
        self._emit(
            ev.AssignmentSent(member=member or client.name, member_epoch=epoch, partitions=_tps(told),
                              **self._common(ts, client.protocol))
        )

    def group_converted(self, ts: int, from_type: str, to_type: str) -> None:
        types: dict[str, Any] = {"from_type": from_type, "to_type": to_type}
        self._emit(ev.GroupConverted(**types, **self._common(ts, to_type)))

    def group_stable(self, ts: int, partitions: Iterable[tuple[str, int]]) -> None:
        self._emit(ev.GroupStable(partitions=_tps(partitions), **self._common(ts, "consumer")))

    def topic_metadata(self, ts: int, topic: str, num_partitions: int) -> None:
        self._emit(ev.TopicMetadata(topic=topic, num_partitions=num_partitions, **self._common(ts, "consumer")))

    def disturbance(self, ts: int, kind: str) -> None:
        self._emit(ev.Disturbance(kind=kind, **self._common(ts, "consumer")))
