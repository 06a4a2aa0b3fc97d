"""ConnectGroupHeartbeat: request validation, assignor checks, fencing, leaving, sessions and the
revocation cap."""

from __future__ import annotations

import pytest
from connect_helpers import ICA, Driver, G, cat

from coordinator.connect.messages import AssignorSpec, ConnectGroupHeartbeatRequest, ConnectorsAndTasks
from coordinator.connect.model import WorkerState
from coordinator.connect.records import ConnectRecordType
from coordinator.connect.service import ConnectConfig, rebalance_key, session_key
from coordinator.errors import Errors
from coordinator.timers import CancelTimer, ScheduleTimer


def _req(**kw: object) -> ConnectGroupHeartbeatRequest:
    base: dict[str, object] = dict(
        group_id=G, member_id="W1", member_epoch=0, rebalance_timeout_ms=60_000, client_assignors=[ICA],
        worker_url="http://w1:8083", owned=ConnectorsAndTasks(),
    )
    base.update(kw)
    return ConnectGroupHeartbeatRequest(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kw, error, message",
    [
        (dict(group_id=""), Errors.INVALID_REQUEST, "GroupId can't be empty."),
        (dict(member_id=" "), Errors.INVALID_REQUEST, "MemberId can't be empty."),
        (dict(member_epoch=-2), Errors.INVALID_REQUEST, "MemberEpoch must be at least -1."),
        (dict(instance_id=""), Errors.INVALID_REQUEST, "InstanceId can't be empty."),
        (dict(rebalance_timeout_ms=-1), Errors.INVALID_REQUEST, "RebalanceTimeoutMs must be larger than zero when joining."),
        (dict(rebalance_timeout_ms=0), Errors.INVALID_REQUEST, "RebalanceTimeoutMs must be larger than zero when joining."),
        (dict(client_assignors=None), Errors.INVALID_REQUEST, "ClientAssignors must be provided when joining."),
        (dict(worker_url=None), Errors.INVALID_REQUEST, "WorkerUrl must be provided when joining."),
        (dict(worker_url=" "), Errors.INVALID_REQUEST, "WorkerUrl can't be empty."),
        (dict(owned=cat("AC0")), Errors.INVALID_REQUEST, "ConnectorsAndTasks must be empty when joining."),
        (dict(server_assignor="uniform"), Errors.INVALID_REQUEST, "ServerAssignor and ClientAssignors can't be used together."),
        (dict(client_assignors=[]), Errors.INVALID_REQUEST, "ClientAssignors can't be empty."),
        (dict(client_assignors=[AssignorSpec("", 0, 2)]), Errors.INVALID_REQUEST, "Assignor.Name can't be empty."),
        (dict(client_assignors=[ICA, ICA]), Errors.INVALID_REQUEST, "Assignor incremental-cooperative is listed twice."),
        (dict(client_assignors=[AssignorSpec("a", -2, 2)]), Errors.INVALID_REQUEST, "Assignor a: MinimumVersion must be at least -1."),
        (dict(client_assignors=[AssignorSpec("a", -1, -1, version=-1)]), Errors.INVALID_REQUEST,
         "Assignor a: MaximumVersion must be at least 0 and at least MinimumVersion."),
        (dict(client_assignors=[AssignorSpec("a", 2, 1, version=1)]), Errors.INVALID_REQUEST,
         "Assignor a: MaximumVersion must be at least 0 and at least MinimumVersion."),
        (dict(client_assignors=[AssignorSpec("a", 1, 2, version=0)]), Errors.INVALID_REQUEST,
         "Assignor a: Version must be within MinimumVersion..MaximumVersion."),
        (dict(client_assignors=[AssignorSpec("a", 0, 1, version=2)]), Errors.INVALID_REQUEST,
         "Assignor a: Version must be within MinimumVersion..MaximumVersion."),
        (dict(client_assignors=None, server_assignor="uniform"), Errors.UNSUPPORTED_ASSIGNOR,
         "ServerAssignor uniform is not supported by connect groups."),
    ],
)
def test_invalid_requests(kw: dict[str, object], error: Errors, message: str) -> None:
    d = Driver()
    res = d.coord.connect_group_heartbeat(_req(**kw), 0)
    assert (res.response.error_code, res.response.error_message) == (error, message)
    assert not res.records and not res.timers
    assert d.coord.group(G) is None


def test_a_minimum_version_of_minus_one_is_valid() -> None:
    d = Driver()
    r = d.coord.connect_group_heartbeat(_req(client_assignors=[AssignorSpec("a", -1, 0, version=0)]), 0).response
    assert r.error_code == Errors.COMPUTE_ASSIGNMENT  # joined, and asked to compute


def test_join_records_timers_and_stored_worker() -> None:
    d = Driver()
    res = d.join("W1", instance_id="i-1", client_id="worker-1", client_host="/10.0.0.1")
    assert [r.type for r in res.records] == [ConnectRecordType.MEMBER_METADATA, ConnectRecordType.GROUP_METADATA]
    assert ScheduleTimer(session_key(G, "W1"), 10_000) in res.timers
    w = d.group().workers["W1"]
    assert (w.url, w.instance_id, w.client_id, w.client_host, w.rebalance_timeout_ms) == (
        "http://w1:8083", "i-1", "worker-1", "/10.0.0.1", 60_000,
    )
    assert [a.name for a in w.assignors] == ["incremental-cooperative"]
    d.assert_replays()


def test_assignors_that_do_not_overlap_the_groups_are_refused() -> None:
    d = Driver()
    d.join("W1", assignors=[AssignorSpec("eager", 0, 0)])
    epoch = d.group().group_epoch
    # No assignor in common.
    r = d.join("W2", assignors=[ICA]).response
    assert r.error_code == Errors.UNSUPPORTED_ASSIGNOR
    # The same name, version ranges apart.
    r = d.join("W2", assignors=[AssignorSpec("eager", 1, 2, version=1)]).response
    assert r.error_code == Errors.UNSUPPORTED_ASSIGNOR
    assert set(d.group().workers) == {"W1"} and d.group().group_epoch == epoch
    # A member changing its assignors to something the others cannot run is refused as well.
    d.join("W2", assignors=[AssignorSpec("eager", 0, 1)])
    r = d.join("W1", assignors=[AssignorSpec("other", 0, 0)]).response  # still at epoch 0: a join
    assert r.error_code == Errors.UNSUPPORTED_ASSIGNOR
    assert [a.name for a in d.group().workers["W1"].assignors] == ["eager"]


def test_a_join_leaving_no_worker_able_to_run_every_version_is_refused() -> None:
    d = Driver()
    d.join("W1", assignors=[AssignorSpec("ica", 1, 3, version=1)])
    # [1-3] and [2-4] overlap, but neither covers the other: nobody could run the assignor.
    r = d.join("W2", assignors=[AssignorSpec("ica", 2, 4, version=2)]).response
    assert r.error_code == Errors.UNSUPPORTED_ASSIGNOR
    r = d.join("W2", assignors=[AssignorSpec("ica", 2, 3, version=2)]).response
    assert r.error_code in (0, Errors.COMPUTE_ASSIGNMENT)
    assert set(d.group().workers) == {"W1", "W2"}


def test_group_epoch_bumps_on_assignor_changes_but_not_on_unchanged_heartbeats() -> None:
    d = Driver()
    d.join("W1")
    d.compute("W1", {"W1": ["AC0"]})
    d.join("W1")
    g = d.group()
    e = g.group_epoch
    res = d.hb("W1", owned=["AC0"])
    assert not res.records and g.group_epoch == e  # nothing changed: nothing written
    # Metadata of the assignor changed (e.g. the config topic offset moved: a connector was added).
    res = d.hb("W1", owned=["AC0"], client_assignors=[AssignorSpec(ICA.name, 0, 2, version=2, metadata=b"offset=7")])
    assert g.group_epoch == e + 1 and res.response.error_code == Errors.COMPUTE_ASSIGNMENT
    # A new version range or a new assignor bumps it too.
    d.compute("W1", {"W1": ["AC0"]})
    d.hb("W1", owned=["AC0"], client_assignors=[AssignorSpec(ICA.name, 1, 2, version=2, metadata=b"offset=7")])
    assert g.group_epoch == e + 2
    # The URL is stored without a new epoch (it does not feed the assignment's trigger).
    d.hb("W1", owned=["AC0"], worker_url="http://w1-new:8083")
    assert g.group_epoch == e + 2 and g.workers["W1"].url == "http://w1-new:8083"
    d.assert_replays()


def test_unknown_member_and_epoch_fencing() -> None:
    d = Driver()
    assert d.hb("W1", epoch=3, owned=[]).response.error_code == Errors.UNKNOWN_MEMBER_ID
    d.join("W1")
    d.compute("W1", {"W1": ["AC0", "AT1"]})
    d.join("W1")
    assert d.hb("ghost", epoch=1, owned=[]).response.error_code == Errors.UNKNOWN_MEMBER_ID
    g = d.group()
    e = g.group_epoch
    # An epoch ahead of the coordinator's: fenced and removed (the draft's step 3).
    res = d.hb("W1", epoch=5, owned=["AC0"])
    assert res.response.error_code == Errors.FENCED_MEMBER_EPOCH
    assert "W1" not in g.workers and g.group_epoch == e + 1
    assert CancelTimer(session_key(G, "W1")) in res.timers
    # The fenced worker rejoins with the same member id and epoch 0.
    assert d.join("W1").response.error_code in (0, Errors.COMPUTE_ASSIGNMENT)
    d.assert_replays()


def test_a_lost_response_is_tolerated_when_the_worker_runs_a_subset_of_its_assignment() -> None:
    d = Driver()
    d.join("W1")
    d.compute("W1", {"W1": ["AC0", "AT1", "AT2"]})
    d.join("W1")
    d.join("W2")
    d.hb("W1", owned=["AC0", "AT1", "AT2"])
    d.compute("W1", {"W1": ["AC0", "AT1"], "W2": ["AT2"]})
    d.hb("W1", owned=["AC0", "AT1", "AT2"])  # told to revoke AT2
    r = d.hb("W1", owned=["AC0", "AT1"]).response  # acknowledged: epoch 2; suppose this answer is lost
    assert r.member_epoch == 2
    r = d.hb("W1", epoch=1, owned=["AC0", "AT1"]).response
    assert r.error_code == 0 and r.member_epoch == 2
    # The previous epoch while running something not assigned any more is fenced.
    r = d.hb("W1", epoch=1, owned=["AC0", "AT1", "AT2"]).response
    assert r.error_code == Errors.FENCED_MEMBER_EPOCH
    d.assert_replays()


def test_leave() -> None:
    d = Driver()
    assert d.hb("W1", epoch=-1).response.error_code == Errors.GROUP_ID_NOT_FOUND
    d.join("W1")
    assert d.hb("W2", epoch=-1).response.error_code == Errors.UNKNOWN_MEMBER_ID
    g = d.group()
    e = g.group_epoch
    res = d.hb("W1", epoch=-1)
    assert res.response.member_epoch == -1 and res.response.error_code == 0
    assert not g.workers and g.group_epoch == e + 1
    assert CancelTimer(session_key(G, "W1")) in res.timers
    d.assert_replays()


def test_session_expiry_removes_the_worker_and_bumps_the_epoch() -> None:
    d = Driver(ConnectConfig(session_timeout_ms=5000, heartbeat_interval_ms=1000))
    res = d.join("W1")
    assert ScheduleTimer(session_key(G, "W1"), 5000) in res.timers
    assert res.response.heartbeat_interval_ms == 1000
    d.join("W2")
    g = d.group()
    e = g.group_epoch
    d.now = 5000
    d.keep(d.coord.on_timer(session_key(G, "W2"), d.now))
    assert set(g.workers) == {"W1"} and g.group_epoch == e + 1
    # A timer for a worker that is gone does nothing.
    assert not d.coord.on_timer(session_key(G, "W2"), d.now).records
    d.assert_replays()


def test_revocation_is_capped_by_the_rebalance_timeout() -> None:
    d = Driver()
    d.join("W1", rebalance_timeout_ms=30_000)
    d.compute("W1", {"W1": ["AC0", "AT1"]})
    d.join("W1", rebalance_timeout_ms=30_000)
    d.join("W2")
    d.hb("W1", owned=["AC0", "AT1"])
    d.compute("W1", {"W1": ["AC0"], "W2": ["AT1"]})
    d.now = 1000
    res = d.hb("W1", owned=["AC0", "AT1"])
    g = d.group()
    assert g.workers["W1"].state is WorkerState.UNREVOKED
    assert ScheduleTimer(rebalance_key(G, "W1"), 31_000) in res.timers
    # Still running AT1 when the deadline passes: the worker is removed.
    e = g.group_epoch
    d.now = 31_000
    d.keep(d.coord.on_timer(rebalance_key(G, "W1"), d.now))
    assert "W1" not in g.workers and g.group_epoch == e + 1
    d.assert_replays()


def test_an_acknowledged_revocation_disarms_the_cap() -> None:
    d = Driver()
    d.join("W1")
    d.compute("W1", {"W1": ["AC0", "AT1"]})
    d.join("W1")
    d.join("W2")
    d.hb("W1", owned=["AC0", "AT1"])
    d.compute("W1", {"W1": ["AC0"], "W2": ["AT1"]})
    d.hb("W1", owned=["AC0", "AT1"])
    res = d.hb("W1", owned=["AC0"])
    assert CancelTimer(rebalance_key(G, "W1")) in res.timers
    g = d.group()
    assert g.workers["W1"].state is WorkerState.STABLE
    # A late revocation timer finds the worker stable and leaves it alone.
    assert not d.coord.on_timer(rebalance_key(G, "W1"), 10**9).records
    d.assert_replays()


def test_group_size_limit() -> None:
    d = Driver(ConnectConfig(max_group_size=1))
    d.join("W1")
    assert d.join("W2").response.error_code == Errors.GROUP_MAX_SIZE_REACHED
    assert set(d.group().workers) == {"W1"}


def test_on_loaded_arms_sessions_and_revocation_deadlines() -> None:
    d = Driver()
    d.join("W1", rebalance_timeout_ms=20_000)
    d.compute("W1", {"W1": ["AC0", "AT1"]})
    d.join("W1", rebalance_timeout_ms=20_000)
    d.join("W2")
    d.hb("W1", owned=["AC0", "AT1"])
    d.compute("W1", {"W1": ["AC0"], "W2": ["AT1"]})
    d.hb("W1", owned=["AC0", "AT1"])  # revoking
    from coordinator.connect.service import ConnectGroupCoordinator

    fresh = ConnectGroupCoordinator()
    for r in d.records:
        fresh.replay(r)
    assert fresh.snapshot() == d.coord.snapshot()
    timers = fresh.on_loaded(100).timers
    assert set(timers) == {
        ScheduleTimer(session_key(G, "W1"), 10_100), ScheduleTimer(session_key(G, "W2"), 10_100),
        ScheduleTimer(rebalance_key(G, "W1"), 20_100),
    }
