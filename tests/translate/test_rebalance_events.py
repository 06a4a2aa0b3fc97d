"""Rebalance events derived from what the group service sees (translate/rebalance_events.py).

The service is driven with real decoded requests (migration_harness.Driver); every derived event is
validated against the rehearsal schema and the log is analysed with the plain-Python oracle."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
import test_online_migration_case_study as case_study
from migration_harness import SESSION, TOPIC, Driver, assignment_bytes, identity

from coordinator.errors import Errors
from coordinator.messages import ConsumerGroupHeartbeatRequest
from rehearsal import oracle
from rehearsal.events import Event, parse_event
from translate.group_messages import OffsetCommitCheck
from translate.group_service import GroupService
from translate.rebalance_events import RebalanceEventDeriver, mix_of_protocol

ALL = list(range(6))


class _Tapped:
    """The service as the Driver sees it, with the group-changing calls going through the deriver."""

    def __init__(self, service: GroupService, deriver: RebalanceEventDeriver) -> None:
        self._service = service
        self.handle = deriver.handle
        self.on_timer = deriver.on_timer
        self.on_metadata = deriver.on_metadata
        self.on_loaded = deriver.on_loaded

    def __getattr__(self, name: str) -> Any:
        return getattr(self._service, name)


@dataclass
class EventDriver(Driver):
    events: list[dict[str, Any]] = field(default_factory=list)
    start: int = 0  # seen() and of() look at the events from here on

    def __post_init__(self) -> None:
        super().__post_init__()
        self.deriver = RebalanceEventDeriver(self.service, self.events.append, run="unit")
        self.service = _Tapped(self.service, self.deriver)  # type: ignore[assignment]

    def validated(self) -> list[Event]:
        return [parse_event(json.dumps(e)) for e in self.events]

    def seen(self, *types: str) -> list[tuple[str, str | None]]:
        return [(e["event"], e.get("member")) for e in self.events[self.start:] if not types or e["event"] in types]

    def owners(self) -> dict[int, set[str]]:
        """Who owns each partition at the end of the log, by the oracle."""
        out: dict[int, set[str]] = {p: set() for p in ALL}
        for row in oracle.compute(self.validated()).ownership_intervals:
            if row["open_at_end"]:
                out[row["partition"]].add(row["member"])
        return out


def parts(*ps: int) -> list[dict[str, Any]]:
    return [{"topic": TOPIC, "partition": p} for p in ps]


def of(d: EventDriver, event: str, member: str | None = None) -> list[dict[str, Any]]:
    return [e for e in d.events[d.start:] if e["event"] == event and (member is None or e.get("member") == member)]


def check_log(d: EventDriver) -> oracle.Metrics:
    """Every line valid, one client_mix per group, strictly increasing seq; the oracle's metrics."""
    events = d.validated()
    assert [e.seq for e in events] == list(range(len(events)))
    assert len({(e.run, e.group, e.client_mix) for e in events}) == len({(e.run, e.group) for e in events})
    metrics = oracle.compute(events)
    assert metrics.double_ownership == []
    return metrics


def test_mix_of_protocol_names() -> None:
    assert mix_of_protocol("cooperative-sticky") == "classic-cooperative"
    assert mix_of_protocol("range") == mix_of_protocol("roundrobin") == mix_of_protocol(None) == "classic-eager"


def test_classic_eager_group_revokes_everything_on_rejoin_and_owns_what_sync_assigns() -> None:
    d = EventDriver()
    (a, b), gen = d.classic_fleet(clients=("a", "b"))
    assert d.seen("member_joined", "partitions_assigned", "group_stable") == [
        ("member_joined", a), ("member_joined", b), ("partitions_assigned", a), ("group_stable", None),
        ("partitions_assigned", b),
    ]  # fmt: skip
    assert of(d, "partitions_assigned", a)[0]["partitions"] == parts(0, 2, 4)
    assert of(d, "group_stable")[0]["partitions"] == parts(*ALL)
    d.start = len(d.events)
    # c joins; a and b rejoin without owned partitions (eager: they revoked everything first).
    c = d.join_response(d.join(client="c")).member_id
    kc = d.join(member_id=c, client="c")
    ka, kb = d.join(member_id=a, client="a"), d.join(member_id=b, client="b")
    gen2 = d.join_response(ka).generation_id
    assert gen2 == gen + 1 and d.join_response(kc).error_code == 0 and d.join_response(kb).error_code == 0
    new = {a: {TOPIC: [0, 3]}, b: {TOPIC: [1, 4]}, c: {TOPIC: [2, 5]}}
    for m in (a, b, c):
        d.sync(m, gen2, {k: assignment_bytes(v) for k, v in new.items()} if m == a else None)
    assert d.seen() == [
        ("rebalance_started", None), ("partitions_revoked", a), ("partitions_revoked", b), ("member_joined", c),
        ("assignment_sent", a), ("partitions_assigned", a), ("group_stable", None),
        ("assignment_sent", b), ("partitions_assigned", b), ("assignment_sent", c), ("partitions_assigned", c),
    ]  # fmt: skip
    assert of(d, "partitions_revoked", a)[0]["partitions"] == parts(0, 2, 4)
    assert of(d, "partitions_assigned", a)[0]["partitions"] == parts(0, 3)
    assert of(d, "assignment_sent", c)[0]["member_epoch"] == gen2
    assert {e["client_mix"] for e in d.events} == {"classic-eager"}
    check_log(d)
    assert d.owners() == {0: {a}, 1: {b}, 2: {c}, 3: {a}, 4: {b}, 5: {c}}
    rebalances = {r["member"]: r["rebalances"] for r in check_log(d).member_rebalances}
    assert rebalances == {a: 3, b: 3, c: 1}  # eager: revoke all, assign again


def test_cooperative_group_revokes_only_what_moves_over_two_rebalances() -> None:
    d = EventDriver()
    coop = {"protocols": ("cooperative-sticky",)}
    (a, b), gen = d.classic_fleet(clients=("a", "b"), **coop)
    d.start = len(d.events)
    c = d.join_response(d.join(client="c", **coop)).member_id
    kc = d.join(member_id=c, client="c", **coop)
    ka = d.join(member_id=a, client="a", owned={TOPIC: [0, 2, 4]}, **coop)
    d.join(member_id=b, client="b", owned={TOPIC: [1, 3, 5]}, **coop)
    gen2 = d.join_response(ka).generation_id
    assert d.join_response(kc).error_code == 0
    # First rebalance: a gives up 4, b gives up 5; c gets nothing until they are revoked.
    first = {a: {TOPIC: [0, 2]}, b: {TOPIC: [1, 3]}, c: {}}
    for m in (a, b, c):
        d.sync(m, gen2, {k: assignment_bytes(v) for k, v in first.items()} if m == a else None)
    assert d.seen("partitions_revoked", "partitions_assigned") == [("partitions_revoked", a), ("partitions_revoked", b)]
    assert of(d, "partitions_revoked", a)[0]["partitions"] == parts(4)
    # Second rebalance: everyone reports what it owns; c gets 4 and 5.
    ka = d.join(member_id=a, client="a", owned={TOPIC: [0, 2]}, **coop)
    d.join(member_id=b, client="b", owned={TOPIC: [1, 3]}, **coop)
    d.join(member_id=c, client="c", **coop)
    gen3 = d.join_response(ka).generation_id
    second = {a: {TOPIC: [0, 2]}, b: {TOPIC: [1, 3]}, c: {TOPIC: [4, 5]}}
    for m in (a, b, c):
        d.sync(m, gen3, {k: assignment_bytes(v) for k, v in second.items()} if m == a else None)
    assert d.seen("partitions_revoked", "partitions_assigned") == [
        ("partitions_revoked", a), ("partitions_revoked", b), ("partitions_assigned", c),
    ]  # fmt: skip
    assert of(d, "partitions_assigned", c)[0]["partitions"] == parts(4, 5)
    assert of(d, "rebalance_started") and len(of(d, "group_stable")) == 2
    assert {e["client_mix"] for e in d.events} == {"classic-cooperative"}
    check_log(d)
    assert d.owners() == {0: {a}, 1: {b}, 2: {a}, 3: {b}, 4: {c}, 5: {c}}


def test_consumer_group_revocation_is_acknowledged_before_the_new_owner_gets_it() -> None:
    d = EventDriver()
    r1 = d.consumer("m1")
    told = sorted(p for tp in r1.assignment or [] for p in tp.partitions)
    assert told == ALL
    d.consumer("m1", r1.member_epoch, owned=ALL)
    r2 = d.consumer("m2")
    assert r2.member_epoch > r1.member_epoch
    r = d.consumer("m1", r1.member_epoch, owned=ALL)
    kept = sorted(p for tp in r.assignment or [] for p in tp.partitions)
    moving = sorted(set(ALL) - set(kept))
    assert moving and kept
    r = d.consumer("m2", r2.member_epoch, owned=[])
    assert not any(tp.partitions for tp in r.assignment or [])  # not released yet
    r = d.consumer("m1", r1.member_epoch, owned=kept)  # acknowledges the revocation
    r = d.consumer("m2", r2.member_epoch, owned=[])
    assert sorted(p for tp in r.assignment or [] for p in tp.partitions) == moving
    d.consumer("m2", r2.member_epoch, owned=moving)
    assert d.seen("member_joined", "partitions_assigned", "partitions_revoked", "group_stable") == [
        ("member_joined", "m1"), ("group_stable", None), ("partitions_assigned", "m1"), ("member_joined", "m2"),
        ("partitions_revoked", "m1"), ("group_stable", None), ("partitions_assigned", "m2"),
    ]  # fmt: skip
    # Stable is the coordinator's view (m2 was told its target); ownership is m2's acknowledgement.
    assert of(d, "partitions_revoked", "m1")[0]["partitions"] == parts(*moving)
    assert [e["partitions"] for e in of(d, "assignment_sent", "m1")][:2] == [parts(*ALL), parts(*kept)]
    assert of(d, "topic_metadata")[0]["num_partitions"] == 6
    assert len(of(d, "rebalance_started")) == 1  # m2's join bumped the epoch (m1's join created it)
    assert {e["client_mix"] for e in d.events} == {"consumer"} and {e["protocol"] for e in d.events} == {"consumer"}
    check_log(d)
    assert d.owners() == {p: {"m1"} if p in kept else {"m2"} for p in ALL}


def test_conversion_both_ways_keeps_the_fleet_variant_of_the_group() -> None:
    d = EventDriver()
    (a, b), _ = d.classic_fleet(clients=("a", "b"), protocols=("cooperative-sticky",))
    r = d.consumer("m1")
    assert r.error_code == 0
    converted = of(d, "group_converted")
    assert [(e["from_type"], e["to_type"], e["protocol"]) for e in converted] == [("classic", "consumer", "consumer")]
    assert d.seen("group_converted", "member_joined")[-2:] == [("group_converted", None), ("member_joined", "m1")]
    # The last consumer-protocol member leaves: the group goes back to classic and rebalances.
    d.consumer("m1", -1)
    tail = d.seen()[-3:]
    assert tail == [("member_left", "m1"), ("group_converted", None), ("rebalance_started", None)]
    assert of(d, "group_converted")[-1]["to_type"] == "classic"
    assert of(d, "member_left", "m1")[0]["reason"] == "leave"
    assert {e["client_mix"] for e in d.events} == {"classic-cooperative"}
    assert {e["protocol"] for e in d.events if e.get("member") in (a, b)} == {"classic"}
    check_log(d)


def test_an_empty_classic_group_replaced_by_a_consumer_group_is_not_a_conversion() -> None:
    d = EventDriver()
    d.send(OffsetCommitCheck("g", "", -1, api_version=8))  # a simple group: Empty, no members
    assert d.service.classic_groups.group("g") is not None and d.events == []
    assert d.consumer("m1").error_code == 0
    assert not of(d, "group_converted") and d.seen("member_joined") == [("member_joined", "m1")]
    check_log(d)


def test_translate_mode_names_the_mix_translate() -> None:
    d = EventDriver(mode="translate")
    d.join_response(d.join(client="a"))
    key = d.join(member_id="a-1", client="a")
    assert d.join_response(key).error_code == 0
    d.sync("a-1", d.join_response(key).generation_id)
    assert d.seen("member_joined", "partitions_assigned") == [("member_joined", "a-1"), ("partitions_assigned", "a-1")]
    assert {e["client_mix"] for e in d.events} == {"translate"}
    assert of(d, "member_joined")[0]["protocol"] == "classic"
    check_log(d)


def test_a_fenced_member_loses_everything_and_the_timer_is_named() -> None:
    d = EventDriver()
    r1 = d.consumer("m1")
    d.consumer("m1", r1.member_epoch, owned=ALL)
    r2 = d.consumer("m2")
    # m2 keeps heartbeating; m1 goes silent: its revocation deadline (or session) passes.
    told: list[int] = []
    for _ in range(12):
        d.advance(5_000)
        r2 = d.consumer("m2", r2.member_epoch, owned=[])
        if r2.assignment is not None:
            told = sorted(p for tp in r2.assignment for p in tp.partitions)
    assert d.seen("timer_expired", "member_fenced") == [("timer_expired", "m1"), ("member_fenced", "m1")]
    kind = of(d, "timer_expired")[0]["kind"]
    assert kind in ("rebalance", "session") and of(d, "member_fenced")[0]["reason"] == kind
    assert told == ALL
    d.consumer("m2", r2.member_epoch, owned=ALL)
    check_log(d)
    assert d.owners() == {p: {"m2"} for p in ALL}
    # A stale epoch is fenced by the answer itself; the member rejoins with epoch 0.
    r = d.consumer("m2", r2.member_epoch + 1, owned=ALL)
    assert r.error_code == Errors.FENCED_MEMBER_EPOCH
    assert d.seen()[-1] == ("member_fenced", "m2") and of(d, "member_fenced", "m2")[0]["reason"] == "fenced member epoch"
    assert d.consumer("m2").error_code == 0
    assert d.seen("member_joined").count(("member_joined", "m2")) == 2
    check_log(d)


def test_a_classic_member_whose_session_expires_is_fenced() -> None:
    d = EventDriver()
    (a, b, c), gen = d.classic_fleet()
    for _ in range(4):
        d.advance(SESSION // 4)
        d.heartbeat(a, gen)
        d.heartbeat(b, gen)
    fenced = of(d, "member_fenced")
    assert [(e["member"], e["reason"]) for e in fenced] == [(c, "classic-heartbeat")]
    assert ("timer_expired", c) in d.seen() and ("rebalance_started", None) in d.seen()
    d.leave(identity(a))
    assert of(d, "member_left", a)[0]["reason"] == "LeaveGroup"
    metrics = check_log(d)
    ended = {(r["member"], r["ended_by"]) for r in metrics.ownership_intervals}
    assert (c, "member_fenced") in ended and (a, "member_left") in ended


@pytest.mark.parametrize("cooperative", [False, True], ids=["eager", "cooperative"])
def test_kip848_online_migration_case_study_has_no_double_ownership(
    cooperative: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The KIP's case study (a classic group restored from its record, upgraded member by member)."""
    drivers: list[EventDriver] = []

    def make(**kwargs: Any) -> EventDriver:
        drivers.append(EventDriver(**kwargs))
        return drivers[-1]

    monkeypatch.setattr(case_study, "Driver", make)
    case_study.test_online_migration_case_study(cooperative)
    (d,) = drivers
    # The restored members own what the record says, without a join of their own.
    restored = [e for e in d.events if e["event"] == "partitions_assigned"][:3]
    assert [(e["member"], e["partitions"]) for e in restored] == [
        ("A", parts(0, 1)), ("B", parts(3, 4)), ("C", parts(2, 5)),
    ]  # fmt: skip
    assert not of(d, "member_joined", "A")
    assert of(d, "group_converted")[0]["to_type"] == "consumer"
    assert of(d, "member_left", "A")[0]["reason"] == "replaced"
    assert {e["client_mix"] for e in d.events} == {"classic-cooperative" if cooperative else "classic-eager"}
    c_revoked = [p["partition"] for e in of(d, "partitions_revoked", "C") for p in e["partitions"]]
    assert (2 in c_revoked and 5 in c_revoked) is not cooperative  # eager C rejoins owning nothing
    check_log(d)
    assert of(d, "group_stable")[-1]["partitions"] == parts(*ALL)


def test_a_failing_sink_never_costs_the_service_result() -> None:
    d = Driver()
    failures: list[Exception] = []

    def broken(event: dict[str, Any]) -> None:
        raise OSError("disk full")

    deriver = RebalanceEventDeriver(d.service, broken, on_error=failures.append)
    d.absorb(deriver.on_metadata({TOPIC: (d.service.coordinator.state.topics[TOPIC].topic_id, 6)}, d.now))
    key = next(d.keys)
    result = deriver.handle(
        ConsumerGroupHeartbeatRequest("g", "m1", 0, rebalance_timeout_ms=1000, subscribed_topic_names=[TOPIC],
                                      topic_partitions=[]),
        key, d.now,
    )
    assert result.response_to(key).error_code == 0 and result.records
    assert [str(e) for e in failures] == ["disk full"] and deriver.failures == 1
    strict = RebalanceEventDeriver(d.service, broken)
    with pytest.raises(OSError, match="disk full"):
        strict.handle(ConsumerGroupHeartbeatRequest("g", "m2", 0, rebalance_timeout_ms=1000,
                                                    subscribed_topic_names=[TOPIC], topic_partitions=[]), 99, d.now)
