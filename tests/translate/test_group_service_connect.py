"""Connect groups held by the group service beside classic and consumer groups: their records go to
the same log as every group's and replay from it, their timers route through the service, an id
belongs to one group type, and the views list and describe them."""

from __future__ import annotations

from typing import Any

from coordinator.connect.messages import (
    AssignorSpec,
    ConnectGroupHeartbeatRequest,
    ConnectGroupInstallAssignmentRequest,
    ConnectGroupPrepareAssignmentRequest,
    ConnectorsAndTasks,
    InstalledWorker,
)
from coordinator.connect.model import SESSIONED
from coordinator.connect.service import CONNECT_SESSION
from coordinator.errors import Errors
from coordinator.messages import ConsumerGroupHeartbeatRequest
from coordinator.timers import ScheduleTimer
from translate.classic_messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    LeaveGroupRequest,
    MemberIdentity,
    SyncGroupRequest,
)
from translate.group_config import encode_any_record
from translate.group_messages import (
    ConsumerGroupDescribeRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    OffsetCommitCheck,
)
from translate.group_service import GroupService

ICA = AssignorSpec("sessioned", 0, SESSIONED, version=SESSIONED)
G = "connect-cluster"


class Svc:
    """A group service whose every record is kept as the bytes a shard log holds."""

    def __init__(self) -> None:
        self.svc = GroupService()
        self.log: list[tuple[bytes, bytes | None]] = []
        self.now = 0
        self.timers: dict[Any, int] = {}
        self.calls: Any = self.svc  # what requests go through

    def send(self, request: object) -> Any:
        out = self.calls.handle(request, "k", self.now)
        self.log.extend(encode_any_record(r) for r in out.records)
        for t in out.timers:
            if isinstance(t, ScheduleTimer):
                self.timers[t.key] = t.deadline_ms
        return out.response_to("k")

    def join(self, member: str, group: str = G) -> Any:
        return self.send(ConnectGroupHeartbeatRequest(
            group, member, 0, rebalance_timeout_ms=60_000, client_assignors=[ICA],
            worker_url=f"http://{member}:8083", owned=ConnectorsAndTasks(),
        ))  # fmt: skip

    def replayed(self) -> GroupService:
        fresh = GroupService()
        for key, value in self.log:
            assert fresh.replay_bytes(key, value)
        return fresh


def _installed(s: Svc, worker: str, connectors: list[str], tasks: list[tuple[str, int]]) -> None:
    prepared = s.send(ConnectGroupPrepareAssignmentRequest(G, worker, 0))
    assert prepared.error_code == 0 and [m.member_id for m in prepared.members] == [worker]
    installed = s.send(ConnectGroupInstallAssignmentRequest(
        G, worker, 0, prepared.group_epoch,
        members=[InstalledWorker(worker, ConnectorsAndTasks(connectors, tasks), version=SESSIONED)],
    ))  # fmt: skip
    assert installed.error_code == 0


def test_a_worker_joins_computes_installs_and_gets_its_target_and_the_log_replays_to_the_same_group() -> None:
    s = Svc()
    first = s.join("w1")
    assert first.error_code == Errors.COMPUTE_ASSIGNMENT and first.member_epoch == 0
    _installed(s, "w1", ["A"], [("A", 0)])
    answer = s.join("w1")  # at member epoch 0 until the first target, its heartbeats are joins
    assert answer.error_code == 0 and answer.member_epoch == 1
    assert answer.assignment is not None
    assert list(answer.assignment.assigned.connectors) == ["A"] and list(answer.assignment.assigned.tasks) == [("A", 0)]
    assert s.svc.group_kind(G) == "connect" and s.svc.member_count(G) == (1, "connect") and G in s.svc.group_ids()
    fresh = s.replayed()
    assert fresh.connect.snapshot() == s.svc.connect.snapshot()
    assert fresh.group_kind(G) == "connect"
    loaded = fresh.on_loaded(5)
    assert ScheduleTimer((CONNECT_SESSION, G, "w1"), 5 + fresh.connect.state.config.session_timeout_ms) in loaded.timers


def test_the_session_timer_fires_through_the_service_and_removes_the_worker() -> None:
    s = Svc()
    s.join("w1")
    key = (CONNECT_SESSION, G, "w1")
    assert key in s.timers
    out = s.svc.on_timer(key, s.timers[key])
    assert out.records and "w1" not in s.svc.connect.group(G).workers  # type: ignore[union-attr]


def test_a_group_id_belongs_to_one_group_type() -> None:
    s = Svc()
    s.join("w1")
    join = s.send(JoinGroupRequest(G, 10_000, protocol_type="connect", protocols=[JoinGroupRequestProtocol("sessioned", b"")]))
    assert join.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    consumer = s.send(ConsumerGroupHeartbeatRequest(G, "m", 0, rebalance_timeout_ms=1000, subscribed_topic_names=["t"]))
    assert consumer.error_code == Errors.GROUP_ID_NOT_FOUND and "not a consumer group" in (consumer.error_message or "")
    sync = s.send(SyncGroupRequest(G, 1, "w1"))
    beat = s.send(HeartbeatRequest(G, 1, "w1"))
    leave = s.send(LeaveGroupRequest(G, [MemberIdentity("w1")]))
    assert sync.error_code == beat.error_code == Errors.UNKNOWN_MEMBER_ID
    # The classic requests reach the translation of classic workers, which knows no classic worker w1.
    assert [m.error_code for m in leave.members] == [Errors.UNKNOWN_MEMBER_ID]
    described = s.send(ConsumerGroupDescribeRequest([G])).groups[0]
    assert described.error_code == Errors.GROUP_ID_NOT_FOUND and described.error_message == f"Group {G} is not a consumer group."
    assert s.svc.classic_groups.group(G) is None and s.svc.coordinator.group(G) is None
    assert s.svc.connect.group(G).workers.keys() == {"w1"}  # type: ignore[union-attr]

    s.send(ConsumerGroupHeartbeatRequest("cg", "m", 0, rebalance_timeout_ms=1000, subscribed_topic_names=["t"], topic_partitions=[]))
    assert s.svc.group_kind("cg") == "consumer"
    refused = s.join("w1", group="cg")
    assert refused.error_code == Errors.GROUP_ID_NOT_FOUND and "not a connect group" in (refused.error_message or "")
    assert s.svc.connect.group("cg") is None
    prepare = s.send(ConnectGroupPrepareAssignmentRequest("cg", "m", 0))
    assert prepare.error_code == Errors.GROUP_ID_NOT_FOUND


def test_list_shows_connect_groups_typed_connect_and_classic_describe_answers_as_for_another_type() -> None:
    s = Svc()
    s.join("w1")
    listed = s.send(ListGroupsRequest())
    assert [(g.group_id, g.group_type, g.protocol_type) for g in listed.groups] == [(G, "connect", "connect")]
    assert s.send(ListGroupsRequest(types_filter=["Connect"])).groups[0].group_id == G
    assert s.send(ListGroupsRequest(types_filter=["consumer", "classic"])).groups == []
    v6 = s.send(DescribeGroupsRequest([G], api_version=6)).groups[0]
    assert v6.error_code == Errors.GROUP_ID_NOT_FOUND and v6.error_message == f"Group {G} is not a classic group."
    v5 = s.send(DescribeGroupsRequest([G], api_version=5)).groups[0]
    assert v5.error_code == 0 and v5.group_state == "Dead"
    described = s.svc.describe_connect_groups([G, "nope"])
    assert described[0].group_epoch == 1 and [w.member_id for w in described[0].workers] == ["w1"]
    assert described[1].error_code == Errors.GROUP_ID_NOT_FOUND


def test_delete_refuses_a_connect_group_with_workers_and_tombstones_an_empty_one() -> None:
    s = Svc()
    s.join("w1")
    assert s.send(DeleteGroupsRequest([G])).results[0].error_code == Errors.NON_EMPTY_GROUP
    s.send(ConnectGroupHeartbeatRequest(G, "w1", -1))
    assert s.send(DeleteGroupsRequest([G])).results[0].error_code == 0
    assert s.svc.group_kind(G) is None
    assert s.replayed().connect.group(G) is None


def test_offset_commits_to_a_connect_group_id_never_make_a_classic_group() -> None:
    s = Svc()
    s.join("w1")
    simple = s.send(OffsetCommitCheck(G, "", -1))
    assert simple.error_code == Errors.UNKNOWN_MEMBER_ID
    assert s.send(OffsetCommitCheck(G, "w1", 3)).error_code == Errors.STALE_MEMBER_EPOCH
    assert s.send(OffsetCommitCheck(G, "w1", 0)).error_code == Errors.NONE
    assert s.svc.classic_groups.group(G) is None


def test_the_rebalance_event_deriver_passes_connect_groups_through_without_events() -> None:
    from translate.rebalance_events import RebalanceEventDeriver

    s = Svc()
    events: list[Any] = []
    deriver = RebalanceEventDeriver(s.svc, events.append, run="unit")  # re-raises any failure
    s.calls = deriver
    s.join("w1")
    _installed(s, "w1", ["A"], [])
    s.join("w1")
    deriver.on_timer((CONNECT_SESSION, G, "w1"), s.timers[(CONNECT_SESSION, G, "w1")])
    assert s.send(DeleteGroupsRequest([G])).results[0].error_code == 0
    deriver.on_loaded(0)
    assert events == [] and deriver.failures == 0
