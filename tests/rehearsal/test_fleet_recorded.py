"""Recorded client events (a real rolling upgrade's callbacks) converted to rehearsal events: the
mapping, the order, and the metrics the oracle computes from them, checked by hand."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from rehearsal import events as E
from rehearsal import oracle
from rehearsal.recorded import convert


@dataclass(frozen=True)
class Rec:
    consumer: str
    kind: str
    partitions: tuple[tuple[str, int], ...]
    at_ms: float


@dataclass(frozen=True)
class Step:
    what: str
    started_ms: float
    settled_ms: float


T0 = 1_700_000_000_000.0

# Two classic members own t-0 and t-1; c0 is replaced by a new-protocol member c0.2.
RECORDING = [
    Rec("c0", "assigned", (("t", 0),), T0 + 10),
    Rec("c1", "assigned", (("t", 1),), T0 + 12.7),
    Rec("c0", "revoked", (("t", 0),), T0 + 1_000),
    Rec("c0", "stopped", (), T0 + 1_005),
    Rec("c0.2", "assigned", (("t", 0),), T0 + 1_400),
    Rec("c1", "lost", (("t", 1),), T0 + 2_000),
    Rec("c1", "assigned", (("t", 1),), T0 + 2_100),
]
STEPS = [Step("fleet started", T0, T0 + 20), Step("slot 0: classic -> consumer", T0 + 990, T0 + 2_200)]
PROTOCOLS = {"c0": "classic", "c1": "classic", "c0.2": "consumer"}


def events() -> list[E.Event]:
    return convert(RECORDING, run="rec", group="g", client_mix="classic-cooperative", protocols=PROTOCOLS,
                   topics={"t": 2}, steps=STEPS)


def test_mapping_and_order() -> None:
    evs = events()
    assert [e.seq for e in evs] == list(range(len(evs)))
    assert [e.ts_ms for e in evs] == sorted(e.ts_ms for e in evs)
    kinds = [(e.event, getattr(e, "member", None)) for e in evs]
    assert kinds == [
        ("topic_metadata", None),
        ("member_joined", "c0"), ("partitions_assigned", "c0"),
        ("member_joined", "c1"), ("partitions_assigned", "c1"),
        ("group_stable", None),
        ("disturbance", None),
        ("partitions_revoked", "c0"), ("member_left", "c0"),
        ("member_joined", "c0.2"), ("partitions_assigned", "c0.2"),
        ("partitions_revoked", "c1"), ("partitions_assigned", "c1"),
        ("group_stable", None),
    ]  # fmt: skip
    assert {e.protocol for e in evs if getattr(e, "member", None) == "c0.2"} == {"consumer"}
    assert all(e.client_mix == "classic-cooperative" and e.run == "rec" for e in evs)
    # Valid lines of the schema, through the writer's JSON.
    assert [E.parse_event(E.event_to_json(e)) for e in evs] == evs


def test_metrics_of_the_recording() -> None:
    m = oracle.compute(events())
    by_tp = {r["partition"]: r for r in m.partition_unavailability}
    # Window [T0, T0+2200]: t-0 ownerless [T0, +10) and [+1000, +1400); t-1 [T0, +12) and [+2000, +2100).
    assert by_tp[0]["unavailable_ms"] == 10 + 400 and by_tp[0]["gaps"] == 2
    assert by_tp[1]["unavailable_ms"] == 12 + 100 and by_tp[1]["longest_gap_ms"] == 100
    assert m.summary["double_ownership_violations"] == 0
    (group,) = m.group_summary
    assert group["first_disturbance_ms"] == int(T0) + 990 and group["time_to_stable_ms"] == 2_100 - 990
    assert group["stable_at_end"]


def test_overlapping_callbacks_are_double_ownership() -> None:
    overlapping = [*RECORDING[:2], Rec("c0.2", "assigned", (("t", 0),), T0 + 500), *RECORDING[2:4]]
    m = oracle.compute(convert(overlapping, run="rec", group="g", client_mix="translate", protocols=PROTOCOLS,
                               topics={"t": 2}))
    (violation,) = m.double_ownership
    assert violation["overlap_ms"] == 500 and {violation["member_a"], violation["member_b"]} == {"c0", "c0.2"}


def test_unknown_consumer_or_kind_is_an_error() -> None:
    with pytest.raises(ValueError, match="no protocol"):
        convert([Rec("x", "assigned", (), T0)], run="r", group="g", client_mix="consumer", protocols={}, topics={})
    with pytest.raises(ValueError, match="unknown recorded"):
        convert([Rec("x", "moved", (), T0)], run="r", group="g", client_mix="consumer", protocols={"x": "consumer"},
                topics={})
