"""KIP-1263 assignment batching: a consumer group computes a new target assignment at most once per
``group.consumer.assignment.interval.ms`` (per group: ``consumer.assignment.interval.ms``).

As Kafka 4.3's ``canComputeNextTargetAssignment``: the first computation of a group (no assignment
timestamp yet) and an interval of 0 run at once; otherwise the epoch bump waits until the interval
since the last computation passed, and the first heartbeat after it computes (Kafka 4.3.1 arms
nothing for the end of the interval: measured, its ConsumerGroupDescribe stays ``Assigning`` until a
member heartbeats). Meanwhile members reconcile toward the current target: a member that joins gets
the current assignment epoch and nothing assigned. The computation time is persisted (tagged field of
the target assignment metadata record) so a restart does not cut the interval short.
"""

from __future__ import annotations

import pytest
from cg_helpers import Driver, config

from coordinator.config import CoordinatorConfig
from coordinator.records import RecordType, TargetAssignmentMetadataValue
from coordinator.records.codec import decode, encode
from coordinator.service import ConsumerGroupCoordinator

START = 10_000  # a clock that is not 0: a timestamp of 0 means "never computed"


def driver(**kw: object) -> Driver:
    d = Driver(config(**kw))
    d.now = START
    d.topics({"foo": 6})
    return d


def target_epochs(d: Driver, group: str = "g") -> list[tuple[int, int]]:
    """(assignment epoch, timestamp) of every target assignment computation the coordinator wrote."""
    out = []
    for r in d.records:
        if r.type is RecordType.TARGET_ASSIGNMENT_METADATA and r.group_id == group and r.value is not None:
            assert isinstance(r.value, TargetAssignmentMetadataValue)
            out.append((r.value.assignment_epoch, r.value.assignment_timestamp_ms))
    return out


def settle(d: Driver, members: list[str], group: str = "g", rounds: int = 6) -> None:
    """Heartbeat every member, owning what it was last told, until nothing changes."""
    for _ in range(rounds):
        for mid in members:
            m = d.group(group).members[mid]
            d.hb(group, mid, m.member_epoch, d.parts(m.assigned_partitions))


def test_joins_within_the_interval_share_one_target_computation() -> None:
    d = driver()  # Kafka's default interval: 1000 ms
    first = d.hb("g", "m1", 0)
    # The first assignment of a new group is not held back.
    assert (first.member_epoch, d.resp_parts(first)) == (1, {"foo": [0, 1, 2, 3, 4, 5]})
    assert target_epochs(d) == [(1, START)]

    d.now = START + 100
    r2 = d.hb_result("g", "m2", 0)
    d.now = START + 200
    r3 = d.hb_result("g", "m3", 0)
    # Both joins bumped the group epoch, neither computed a target: the joiners are told the current
    # assignment epoch and get nothing yet; the computation is due when the interval ends.
    g = d.group("g")
    assert (g.group_epoch, g.assignment_epoch, g.state().value) == (3, 1, "Assigning")
    assert [(r.response.member_epoch, d.resp_parts(r.response)) for r in (r2, r3)] == [(1, {}), (1, {})]
    assert d.coord.assignment_due_ms("g") == START + 1_000
    assert target_epochs(d) == [(1, START)]
    # m1 keeps everything meanwhile; a heartbeat just before the end of the interval changes nothing.
    d.now = START + 999
    hb = d.hb("g", "m1", 1, {"foo": [0, 1, 2, 3, 4, 5]})
    assert (hb.member_epoch, hb.assignment) == (1, None)
    # Nothing fires at the end of the interval: the coordinator returned no timer for it.
    assert {r.timers[0].key[0] for r in (r2, r3)} == {"session"} and all(len(r.timers) == 1 for r in (r2, r3))

    d.now = START + 1_000
    hb = d.hb("g", "m1", 1, {"foo": [0, 1, 2, 3, 4, 5]})
    # One computation for both joins, at the epoch of the last bump; m1 is asked to revoke 4 of 6.
    assert target_epochs(d) == [(1, START), (3, START + 1_000)]
    assert sorted(d.target_view("g")) == ["m1", "m2", "m3"]
    assert (hb.member_epoch, d.resp_parts(hb)) == (1, {"foo": [0, 1]})
    settle(d, ["m1", "m2", "m3"])
    views = [d.member_view("g", m) for m in ("m1", "m2", "m3")]
    assert [v[0] for v in views] == [3, 3, 3]
    owned = sorted(p for v in views for p in v[1].get("foo", []))
    assert owned == [0, 1, 2, 3, 4, 5] and all(len(v[1]["foo"]) == 2 for v in views)
    assert d.group("g").state().value == "Stable"


def test_interval_zero_computes_on_every_epoch_bump() -> None:
    d = driver(assignment_interval_ms=0)
    d.hb("g", "m1", 0)
    d.now += 100
    r2 = d.hb_result("g", "m2", 0)
    d.now += 100
    d.hb("g", "m3", 0)
    assert [e for e, _ in target_epochs(d)] == [1, 2, 3]
    assert r2.response.member_epoch == 2
    assert d.coord.assignment_due_ms("g") == 0


def test_without_a_heartbeat_the_held_back_target_waits() -> None:
    d = driver()
    d.hb("g", "m1", 0)
    d.now = START + 10
    d.hb("g", "m2", 0)
    # Long after the interval, with nobody heartbeating, the group is still assigning (as Kafka 4.3.1).
    d.now = START + 60_000
    assert d.coord.describe(["g"])[0].assignment_epoch == 1
    assert d.group("g").state().value == "Assigning"
    r = d.hb("g", "m2", 1, {})
    assert r.member_epoch == 2 and target_epochs(d) == [(1, START), (2, START + 60_000)]


def test_the_next_interval_runs_from_the_last_computation() -> None:
    d = driver(assignment_interval_ms=500)
    d.hb("g", "m1", 0)
    d.now = START + 2_000  # long after: computed at once
    d.hb("g", "m2", 0)
    d.now = START + 2_100  # within 500 ms of the previous computation
    d.hb("g", "m3", 0)
    assert [e for e, _ in target_epochs(d)] == [1, 2]
    assert d.coord.assignment_due_ms("g") == START + 2_500


def test_the_assignment_timestamp_survives_a_restart() -> None:
    d = driver()
    d.hb("g", "m1", 0)
    d.now = START + 100
    d.hb("g", "m2", 0)
    # Kafka's layout: tagged field 0 (int64) of ConsumerGroupTargetAssignmentMetadataValue.
    rec = next(r for r in d.records if r.type is RecordType.TARGET_ASSIGNMENT_METADATA)
    key, value = encode(rec)
    assert value == bytes.fromhex("0000" "00000001" "01" "00" "08") + START.to_bytes(8, "big")
    assert decode(key, value) == rec

    restarted = ConsumerGroupCoordinator(config())
    for r in d.records:
        restarted.replay_bytes(*encode(r))
    assert restarted.snapshot() == d.coord.snapshot()
    assert restarted.group("g").assignment_timestamp_ms == START  # type: ignore[union-attr]
    restarted.on_loaded(START + 200)
    d.coord = restarted
    d.now = START + 200
    d.hb("g", "m2", 1, {})
    # Still held back by the interval of the computation made before the restart.
    assert restarted.assignment_due_ms("g") == START + 1_000
    assert target_epochs(d) == [(1, START)]
    d.now = START + 1_000
    assert d.hb("g", "m2", 1, {}).member_epoch == 2


def test_update_target_for_callers_of_the_lower_level_api() -> None:
    d = driver()
    d.hb("g", "m1", 0)
    d.now = START + 10
    d.hb("g", "m2", 0)
    tx = d.coord.begin()
    assert d.coord.update_target(tx, "g", d.now) is False
    assert d.coord.assignment_due_ms("g") == START + 1_000
    assert d.coord.update_target(tx, "g", d.now, force=True) is True
    assert d.group("g").assignment_epoch == 2
    assert d.coord.assignment_interval_ms("g") == 1_000


# -- bounds and per-group configs -----------------------------------------------------------------


@pytest.mark.parametrize(
    "kw",
    [
        {"assignment_interval_ms": -1, "min_assignment_interval_ms": -1},
        {"assignment_interval_ms": 15_001},  # above Kafka's default max (15000)
        {"assignment_interval_ms": 100, "min_assignment_interval_ms": 200},
        {"min_assignment_interval_ms": 500, "max_assignment_interval_ms": 400},
        {"session_timeout_ms": 10_000, "min_session_timeout_ms": 45_000},
        {"heartbeat_interval_ms": 20_000, "session_timeout_ms": 45_000, "max_heartbeat_interval_ms": 15_000},
    ],
)
def test_broker_level_settings_are_checked_against_their_bounds(kw: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        config(**kw)


def test_interval_zero_is_a_valid_broker_setting() -> None:
    assert config(assignment_interval_ms=0).assignment_interval_for("any") == 0


def bounded(**kw: object) -> CoordinatorConfig:
    return config(
        min_session_timeout_ms=45_000, max_session_timeout_ms=60_000,
        min_heartbeat_interval_ms=5_000, max_heartbeat_interval_ms=15_000, **kw,
    )


@pytest.mark.parametrize(
    ("configs", "reason"),
    [
        ({"consumer.assignment.interval.ms": 15_001}, "consumer.assignment.interval.ms must be in the range 0 to 15000"),
        ({"consumer.assignment.interval.ms": -1}, "at least 0"),
        ({"consumer.session.timeout.ms": 44_999}, "consumer.session.timeout.ms must be in the range 45000 to 60000"),
        ({"consumer.heartbeat.interval.ms": 15_001}, "consumer.heartbeat.interval.ms must be in the range 5000 to 15000"),
        ({"consumer.unknown.ms": 1}, "Unknown group config name"),
    ],
)
def test_a_group_value_outside_the_broker_bounds_is_refused(configs: dict[str, int], reason: str) -> None:
    cfg = bounded()
    err = cfg.validate_group_config(configs)
    assert err is not None and reason in err
    with pytest.raises(ValueError, match="group 'g'"):
        bounded(group_configs={"g": configs})


def test_session_timeout_must_exceed_the_heartbeat_interval_per_group() -> None:
    cfg = config(min_session_timeout_ms=1_000, min_heartbeat_interval_ms=1_000)
    assert cfg.validate_group_config({"consumer.session.timeout.ms": 5_000}) is not None  # broker hb 5000
    assert cfg.validate_group_config({"consumer.session.timeout.ms": 5_001}) is None


def test_bounds_narrowed_later_clamp_the_group_value() -> None:
    cfg = bounded(group_configs={"g": {"consumer.assignment.interval.ms": 10_000, "consumer.session.timeout.ms": 60_000}})
    assert (cfg.assignment_interval_for("g"), cfg.session_timeout_for("g")) == (10_000, 60_000)
    cfg.max_assignment_interval_ms = 3_000
    cfg.max_session_timeout_ms = 50_000
    # Kafka's GroupConfig.evaluate: the effective value is capped, the stored one kept.
    assert (cfg.assignment_interval_for("g"), cfg.session_timeout_for("g")) == (3_000, 50_000)
    assert cfg.assignment_interval_for("other") == 1_000


def test_group_configs_reach_the_coordinator() -> None:
    d = driver(
        group_configs={
            "fast": {"consumer.assignment.interval.ms": 0},
            "slow": {
                "consumer.assignment.interval.ms": 5_000,
                "consumer.session.timeout.ms": 20_000,
                "consumer.heartbeat.interval.ms": 2_000,
            },
        }
    )
    for g in ("fast", "slow"):
        d.now = START
        d.hb(g, "m1", 0)
        d.now = START + 100
        r = d.hb_result(g, "m2", 0)
        if g == "fast":
            assert r.response.member_epoch == 2 and d.coord.assignment_due_ms(g) == 0
            assert r.response.heartbeat_interval_ms == 5_000
        else:
            assert r.response.member_epoch == 1 and d.coord.assignment_due_ms(g) == START + 5_000
            assert r.response.heartbeat_interval_ms == 2_000
            assert [(t.key, t.deadline_ms) for t in r.timers] == [(("session", g, "m2"), START + 100 + 20_000)]


def test_a_group_emptied_and_rejoined_within_the_interval_waits_too() -> None:
    # Measured on Kafka 4.3.1 (group interval 10 s): join, leave, another join: the joiner is at the
    # old assignment epoch with nothing, the group Assigning.
    d = driver(assignment_interval_ms=10_000)
    d.hb("g", "m1", 0)
    d.now = START + 10
    d.hb("g", "m1", -1)
    assert d.group("g").state().value == "Empty"
    d.now = START + 20
    r = d.hb("g", "m2", 0)
    assert (r.member_epoch, d.resp_parts(r)) == (1, {})
    g = d.group("g")
    assert (g.group_epoch, g.assignment_epoch, g.state().value) == (3, 1, "Assigning")
