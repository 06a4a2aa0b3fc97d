"""KIP-1263 ``group.consumer.assignor.offload.enable``, the sans-I/O half: a heartbeat that would compute a
large group's target hands an immutable snapshot of the assignor's input to the driver instead
(``take_assignment_jobs``); the driver runs it anywhere and installs the result in the group's turn
(``install_assignment``) as the target of the epoch it was computed from, the group's later changes
applied over it (members that left get nothing, a static member's successor its part, unsubscribed topics
removed), so a group that keeps changing still gets targets.
"""

from __future__ import annotations

from cg_helpers import Driver, config

from coordinator.records import RecordType
from coordinator.target import AssignmentJob

START = 10_000


def driver(offload_min_size: int | None = 1, **kw: object) -> Driver:
    """Offload on with this threshold (None: off)."""
    on = offload_min_size is not None
    d = Driver(config(assignment_interval_ms=0, offload_enable=on, offload_min_size=offload_min_size or 1, **kw))
    d.now = START
    d.topics({"foo": 6})
    return d


def install(d: Driver, job: AssignmentJob) -> bool:
    res = d.keep(d.coord.install_assignment(job, job.run(), d.now))
    return res.response


def two_members_one_job(d: Driver) -> AssignmentJob:
    """m1 holds everything; m2's join hands over the computation of the new target."""
    d.hb("g", "m1", 0)
    assert d.coord.take_assignment_jobs() == []  # the group's first target is computed inline
    d.now += 10
    r2 = d.hb("g", "m2", 0)
    (job,) = d.coord.take_assignment_jobs()
    # The joiner is answered at once with the current target (nothing for it yet), as when the
    # assignment interval holds a computation back; the group is Assigning meanwhile.
    assert (r2.member_epoch, d.resp_parts(r2)) == (1, {})
    g = d.group("g")
    assert (job.group_epoch, g.group_epoch, g.assignment_epoch, g.state().value) == (2, 2, 1, "Assigning")
    assert sorted(job.spec.members) == ["m1", "m2"]
    return job


def test_the_result_is_installed_when_the_group_did_not_change_and_equals_the_inline_one() -> None:
    d = driver()
    job = two_members_one_job(d)
    # One computation in flight per group: heartbeats meanwhile hand over nothing more.
    d.now += 10
    d.hb("g", "m1", 1, {"foo": [0, 1, 2, 3, 4, 5]})
    assert d.coord.take_assignment_jobs() == []
    before = len(d.records)
    d.now += 10
    assert install(d, job)
    types = [r.type for r in d.records[before:]]
    assert types == [RecordType.TARGET_ASSIGNMENT_MEMBER, RecordType.TARGET_ASSIGNMENT_MEMBER, RecordType.TARGET_ASSIGNMENT_METADATA]
    g = d.group("g")
    assert (g.group_epoch, g.assignment_epoch, g.assignment_timestamp_ms) == (2, 2, d.now)
    # The same target as computing inline (the driver without offload), and members reconcile to it.
    inline = driver(offload_min_size=None)
    inline.hb("g", "m1", 0)
    inline.hb("g", "m2", 0)
    assert d.target_view("g") == inline.target_view("g")
    hb = d.hb("g", "m1", 1, {"foo": [0, 1, 2, 3, 4, 5]})
    assert (hb.member_epoch, d.resp_parts(hb)) == (1, d.target_view("g")["m1"])  # revoke first, then epoch 2


def test_a_result_from_an_older_group_epoch_is_installed_for_that_epoch_and_the_group_computes_again() -> None:
    d = driver()
    job = two_members_one_job(d)
    d.now += 10
    d.hb("g", "m3", 0)  # joins while the computation runs: epoch 3
    assert d.coord.take_assignment_jobs() == []  # still one in flight
    assert install(d, job)
    g = d.group("g")
    # Epoch 2's target, m3 (not in the snapshot) without a part yet; the group is still behind.
    assert (g.group_epoch, g.assignment_epoch, g.state().value) == (3, 2, "Assigning")
    view = d.target_view("g")
    assert sorted(view) == ["m1", "m2"] and view["m1"] and view["m2"]
    assert sorted(p for parts in view.values() for p in parts["foo"]) == [0, 1, 2, 3, 4, 5]
    # The next heartbeat computes again, from the current group.
    d.hb("g", "m1", 1, {"foo": [0, 1, 2, 3, 4, 5]})
    (again,) = d.coord.take_assignment_jobs()
    assert (again.group_epoch, sorted(again.spec.members)) == (3, ["m1", "m2", "m3"])
    assert install(d, again)
    assert sorted(d.target_view("g")) == ["m1", "m2", "m3"]
    assert d.group("g").assignment_epoch == 3


def test_a_group_that_changes_during_every_computation_still_gets_its_targets() -> None:
    """A large group forming: a member joins while each computation runs. Every result is installed,
    and once the joins stop the last computation covers everyone."""
    d = driver()
    d.hb("g", "m0", 0)
    epochs = {"m0": 1}
    for i in range(1, 8):
        d.now += 10
        d.hb("g", f"m{i}", 0)
        jobs = d.coord.take_assignment_jobs()
        if not jobs:
            d.hb("g", "m0", epochs["m0"])
            jobs = d.coord.take_assignment_jobs()
        (job,) = jobs
        d.now += 10
        d.hb("g", f"late{i}", 0)  # joins while it runs
        assert install(d, job)
        assert d.group("g").assignment_epoch == job.group_epoch
    d.now += 10
    d.hb("g", "m0", 1)
    (last,) = d.coord.take_assignment_jobs()
    assert install(d, last)
    g = d.group("g")
    assert g.assignment_epoch == g.group_epoch
    view = d.target_view("g")  # 15 members, 6 partitions: 6 members hold one each
    assert set(view) <= set(g.members)
    assert sorted(p for parts in view.values() for p in parts.get("foo", [])) == [0, 1, 2, 3, 4, 5]
    assert sorted(last.spec.members) == sorted(g.members)


def test_a_member_that_left_during_the_computation_gets_nothing_and_its_partitions_wait() -> None:
    d = driver()
    job = two_members_one_job(d)
    d.hb("g", "m2", -1)  # leaves while the computation runs: epoch 3
    assert install(d, job)
    view = d.target_view("g")
    assert sorted(view) == ["m1"]
    assert len(view["m1"]["foo"]) < 6  # what m2 was given waits for the next computation
    d.hb("g", "m1", 1, {"foo": [0, 1, 2, 3, 4, 5]})
    (again,) = d.coord.take_assignment_jobs()
    assert install(d, again)
    assert d.target_view("g")["m1"]["foo"] == [0, 1, 2, 3, 4, 5]


def test_topics_a_member_stopped_subscribing_to_are_left_out_of_an_installed_result() -> None:
    d = driver()
    d.topics({"foo": 6, "bar": 2})
    d.hb("g", "m1", 0, subscribed_topic_names=["foo", "bar"])
    d.now += 10
    d.hb("g", "m2", 0, subscribed_topic_names=["foo", "bar"])
    (job,) = d.coord.take_assignment_jobs()
    d.hb("g", "m2", 1, subscribed_topic_names=["foo"])  # drops bar while the computation runs
    assert install(d, job)
    view = d.target_view("g")
    assert "bar" not in view.get("m2", {})
    assert view["m1"]


def test_a_change_without_an_epoch_bump_also_discards_the_result() -> None:
    # The assignor's input changed (a member's target was replaced meanwhile, here by a computation
    # forced inline, as a classic member's join does): the epoch alone would not show it.
    d = driver()
    job = two_members_one_job(d)
    tx = d.coord.begin()
    assert d.coord.update_target(tx, "g", d.now, force=True)
    d.records.extend(tx.records)
    assert d.group("g").assignment_epoch == 2
    assert not install(d, job)  # superseded: not in flight any more


def test_a_static_members_replacement_meanwhile_gets_its_predecessors_part() -> None:
    # KIP-345 in KIP-848: a static member that left (epoch -2) and rejoined under a new member id takes
    # its old place without an epoch bump; the result computed for the old id goes to the new one.
    d = driver()
    d.hb("g", "m1", 0, instance_id="i1")
    d.now += 10
    d.hb("g", "m2", 0)
    (job,) = d.coord.take_assignment_jobs()
    d.hb("g", "m1", -2, instance_id="i1")
    d.hb("g", "m1b", 0, instance_id="i1")
    assert d.group("g").group_epoch == job.group_epoch
    result = job.run()
    assert install(d, job)
    view = d.target_view("g")
    assert sorted(view) == ["m1b", "m2"]
    assert view["m1b"] == d.parts(result["m1"])
    g = d.group("g")
    assert g.assignment_epoch == g.group_epoch


def test_while_a_computation_is_in_flight_no_other_trusts_the_delta() -> None:
    # The snapshot took the delta (the changes since the installed target). A computation forced inline
    # meanwhile (a classic member's join) must get no incremental hint then, since the current target
    # does not reflect those changes; once the result is installed the hint is trusted again.
    from coordinator.target import build_input

    d = driver()
    job = two_members_one_job(d)
    assert job.delta is not None and job.delta.added == {"m2"}
    cfg = d.coord.state.config
    assert build_input(cfg, d.group("g"))[1] is None
    assert install(d, job)
    assert build_input(cfg, d.group("g"))[1] is not None


def test_an_abandoned_computation_lets_the_next_heartbeat_compute_again() -> None:
    d = driver()
    job = two_members_one_job(d)
    d.coord.abandon_assignment(job)  # e.g. the assignor raised on its thread
    assert not install(d, job)
    d.hb("g", "m1", 1, {"foo": [0, 1, 2, 3, 4, 5]})
    (again,) = d.coord.take_assignment_jobs()
    assert again.group_epoch == 2 and install(d, again)


def test_groups_below_the_size_threshold_compute_inline() -> None:
    d = driver(offload_min_size=2 * 6 + 1)  # members x partitions: 2 x 6 is below it
    d.hb("g", "m1", 0)
    r2 = d.hb("g", "m2", 0)
    assert d.coord.take_assignment_jobs() == []
    assert r2.member_epoch == 2 and d.group("g").assignment_epoch == 2


def test_a_groups_own_config_turns_offload_off_or_on_for_it_alone() -> None:
    # Kafka's per-group consumer.assignor.offload.enable over the broker's group.consumer.assignor.offload.enable.
    on = driver(group_configs={"g": {"consumer.assignor.offload.enable": False}})
    on.hb("g", "m1", 0)
    on.hb("g", "m2", 0)
    assert on.coord.take_assignment_jobs() == [] and on.group("g").assignment_epoch == 2
    off = driver(offload_min_size=None, group_configs={"g": {"consumer.assignor.offload.enable": True}})
    off.hb("g", "m1", 0)
    off.hb("g", "m2", 0)
    (job,) = off.coord.take_assignment_jobs()
    assert job.group_epoch == 2 and off.group("g").assignment_epoch == 1


def test_the_per_group_offload_config_is_a_boolean() -> None:
    from coordinator.config import CoordinatorConfig

    assert CoordinatorConfig().validate_group_config({"consumer.assignor.offload.enable": True}) is None
    assert CoordinatorConfig().validate_group_config({"consumer.assignor.offload.enable": 7}) == (
        "consumer.assignor.offload.enable must be true or false"
    )
