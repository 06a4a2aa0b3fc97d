"""The connect group APIs' JSON schemas (docs/connect.md): encoded and decoded back, nulls kept apart from
empty values, and registered in the gateway's codec."""

from gateway.wire import codec
from gateway.wire.protocol.connect_messages import (
    CONNECT_GROUP_HEARTBEAT,
    CONNECT_GROUP_INSTALL_ASSIGNMENT,
    CONNECT_GROUP_PREPARE_ASSIGNMENT,
    ConnectGroupHeartbeatRequest,
    ConnectGroupHeartbeatResponse,
    ConnectGroupInstallAssignmentRequest,
    ConnectGroupInstallAssignmentResponse,
    ConnectGroupPrepareAssignmentRequest,
    ConnectGroupPrepareAssignmentResponse,
)

Req = ConnectGroupHeartbeatRequest
Resp = ConnectGroupHeartbeatResponse
PrepReq = ConnectGroupPrepareAssignmentRequest
PrepResp = ConnectGroupPrepareAssignmentResponse
InstReq = ConnectGroupInstallAssignmentRequest
InstResp = ConnectGroupInstallAssignmentResponse


def test_request_round_trip_with_every_field() -> None:
    req = Req[0](
        group_id="connect-cluster",
        member_id="w-1",
        member_epoch=0,
        instance_id="worker-a",
        rebalance_timeout_ms=60000,
        server_assignor=None,
        client_assignors=[
            Req.Assignor(name="incremental-cooperative", minimum_version=0, maximum_version=2, reason=1, metadata_version=2,
                         metadata=b"\x00\x02offset"),
            Req.Assignor(name="eager", minimum_version=0, maximum_version=0, reason=0, metadata_version=0, metadata=b""),
        ],
        connectors_and_tasks=Req.ConnectorsAndTasks(
            connectors=["A", "B"], tasks=[Req.ConnectorsAndTasks.ConnectorTaskId(connector="A", task=1)]
        ),
        worker_url="http://w1:8083",
    )
    data = req.encode(version=0)
    back = Req[0].decode(data)
    assert (back.group_id, back.member_id, back.member_epoch, back.instance_id, back.rebalance_timeout_ms) == (
        "connect-cluster", "w-1", 0, "worker-a", 60000,
    )
    assert back.server_assignor is None and back.worker_url == "http://w1:8083"
    assert [(a.name, a.minimum_version, a.maximum_version, a.reason, a.metadata_version, bytes(a.metadata))
            for a in back.client_assignors] == [
        ("incremental-cooperative", 0, 2, 1, 2, b"\x00\x02offset"), ("eager", 0, 0, 0, 0, b""),
    ]
    cat = back.connectors_and_tasks
    assert cat.connectors == ["A", "B"] and [(t.connector, t.task) for t in cat.tasks] == [("A", 1)]


def test_request_nulls_mean_unchanged_and_differ_from_empty() -> None:
    steady = Req[0](group_id="g", member_id="w", member_epoch=4)
    back = Req[0].decode(steady.encode(version=0))
    assert back.client_assignors is None and back.connectors_and_tasks is None and back.worker_url is None
    assert back.instance_id is None and back.rebalance_timeout_ms == -1
    empty = Req[0](group_id="g", member_id="w", member_epoch=4, client_assignors=[],
                   connectors_and_tasks=Req.ConnectorsAndTasks(connectors=[], tasks=[]))
    back = Req[0].decode(empty.encode(version=0))
    assert back.client_assignors == [] and back.connectors_and_tasks is not None
    assert back.connectors_and_tasks.connectors == [] and back.connectors_and_tasks.tasks == []


def test_response_round_trip_with_and_without_assignment() -> None:
    cat = Resp.Assignment.ConnectorsAndTasks(
        connectors=["BC"], tasks=[Resp.Assignment.ConnectorsAndTasks.ConnectorTaskId(connector="B", task=1)]
    )
    resp = Resp[0](
        throttle_time_ms=0, error_code=1000, error_message="compute", member_epoch=7, heartbeat_interval_ms=3000,
        assignment=Resp.Assignment(error=0, connectors_and_tasks=cat, metadata_version=2, metadata=b"m"),
    )
    back = Resp[0].decode(resp.encode(version=0))
    assert (back.error_code, back.error_message, back.member_epoch, back.heartbeat_interval_ms) == (
        1000, "compute", 7, 3000,
    )
    a = back.assignment
    assert (a.error, a.metadata_version, bytes(a.metadata)) == (0, 2, b"m")
    assert a.connectors_and_tasks.connectors == ["BC"]
    assert [(t.connector, t.task) for t in a.connectors_and_tasks.tasks] == [("B", 1)]
    bare = Resp[0](error_code=0, member_epoch=7, heartbeat_interval_ms=3000)
    assert Resp[0].decode(bare.encode(version=0)).assignment is None


def test_in_the_gateways_codec() -> None:
    assert Req.API_KEY == Resp.API_KEY == CONNECT_GROUP_HEARTBEAT
    assert codec.known(CONNECT_GROUP_HEARTBEAT)
    assert codec.REQUESTS[CONNECT_GROUP_HEARTBEAT] is Req and codec.RESPONSES[CONNECT_GROUP_HEARTBEAT] is Resp
    assert codec.REQUESTS[68].__name__ == "ConsumerGroupHeartbeatRequest"


def test_prepare_assignment_round_trip() -> None:
    req = PrepReq[0](group_id="g", member_id="w-1", member_epoch=3)
    back = PrepReq[0].decode(req.encode(version=0))
    assert (back.group_id, back.member_id, back.member_epoch) == ("g", "w-1", 3)
    m = PrepResp.Member
    resp = PrepResp[0](
        error_code=0, group_epoch=5, assignor_name="incremental-cooperative",
        members=[m(
            member_id="w-1", member_epoch=3, instance_id=None, worker_url="http://w1:8083",
            assignor=m.Assignor(metadata_version=2, reason=1, metadata=b"md"),
            owned=m.ConnectorsAndTasks(
                connectors=["A"], tasks=[m.ConnectorsAndTasks.ConnectorTaskId(connector="A", task=1)]
            ),
            target=m.ConnectorsAndTasks(connectors=[], tasks=[]),
        )],
    )
    back = PrepResp[0].decode(resp.encode(version=0))
    assert (back.group_epoch, back.assignor_name) == (5, "incremental-cooperative")
    (w,) = back.members
    assert (w.member_id, w.member_epoch, w.instance_id, w.worker_url) == ("w-1", 3, None, "http://w1:8083")
    assert (w.assignor.metadata_version, w.assignor.reason, bytes(w.assignor.metadata)) == (2, 1, b"md")
    assert w.owned.connectors == ["A"] and [(t.connector, t.task) for t in w.owned.tasks] == [("A", 1)]
    assert w.target.connectors == [] and w.target.tasks == []


def test_install_assignment_round_trip() -> None:
    m = InstReq.Member
    req = InstReq[0](
        group_id="g", member_id="w-1", member_epoch=3, group_epoch=5, error=0,
        members=[
            m(member_id="w-1", assigned=m.ConnectorsAndTasks(
                connectors=["A"], tasks=[m.ConnectorsAndTasks.ConnectorTaskId(connector="A", task=1)]),
              error=0, metadata_version=2, metadata=b""),
            m(member_id="w-2", assigned=m.ConnectorsAndTasks(
                connectors=["B"], tasks=[m.ConnectorsAndTasks.ConnectorTaskId(connector="A", task=2)]),
              error=3, metadata_version=2, metadata=b"x"),
        ],
    )
    back = InstReq[0].decode(req.encode(version=0))
    assert (back.group_epoch, back.error) == (5, 0)
    assert [(x.member_id, x.assigned.connectors, [(t.connector, t.task) for t in x.assigned.tasks], x.error,
             x.metadata_version, bytes(x.metadata)) for x in back.members] == [
        ("w-1", ["A"], [("A", 1)], 0, 2, b""), ("w-2", ["B"], [("A", 2)], 3, 2, b"x"),
    ]
    resp = InstResp[0](error_code=1001, error_message="twice")
    back = InstResp[0].decode(resp.encode(version=0))
    assert (back.error_code, back.error_message) == (1001, "twice")


def test_the_assignment_apis_are_in_the_codec_too() -> None:
    assert PrepReq.API_KEY == PrepResp.API_KEY == CONNECT_GROUP_PREPARE_ASSIGNMENT
    assert InstReq.API_KEY == InstResp.API_KEY == CONNECT_GROUP_INSTALL_ASSIGNMENT
    assert codec.REQUESTS[CONNECT_GROUP_PREPARE_ASSIGNMENT] is PrepReq and codec.RESPONSES[CONNECT_GROUP_PREPARE_ASSIGNMENT] is PrepResp
    assert codec.REQUESTS[CONNECT_GROUP_INSTALL_ASSIGNMENT] is InstReq and codec.RESPONSES[CONNECT_GROUP_INSTALL_ASSIGNMENT] is InstResp
