"""The connect group type on the wire (docs/connect.md): ConnectGroupHeartbeat, PrepareAssignment and
InstallAssignment answered by the group layer with real encoded requests, kept in the shard's state log
across a restart, listed typed "connect", and advertised in ApiVersions only where the gateway
coordinates groups."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer.group import JoinGroupRequest

from coordinator.errors import Errors
from gateway.config.coordinator import CoordinatorSettings
from gateway.groups.layer import GroupLayer
from gateway.net import rewrite
from gateway.net.upstream import BrokerDirectory
from gateway.wire import codec, frames
from gateway.wire.api_keys import ApiKey
from gateway.wire.protocol.connect_messages import (
    ConnectGroupHeartbeatRequest,
    ConnectGroupInstallAssignmentRequest,
    ConnectGroupPrepareAssignmentRequest,
)
from translate.authorizer import AclBinding, AclSnapshot, Operation, PatternType, Permission, ResourceType

from ._groups_support import StubConnection, StubGateway, call, layer_on, request_payload

G = "connect-cluster"
HB, PREP, INST = ApiKey.CONNECT_GROUP_HEARTBEAT, ApiKey.CONNECT_GROUP_PREPARE_ASSIGNMENT, ApiKey.CONNECT_GROUP_INSTALL_ASSIGNMENT
SESSIONED = 2


def settings(**kw: Any) -> CoordinatorSettings:
    return CoordinatorSettings.model_validate({"initial_rebalance_delay_ms": 0, "upstream_check_s": 0, **kw})


async def started(**kw: Any) -> GroupLayer:
    layer = layer_on(StubGateway(), settings(**kw))
    await layer.start()
    return layer


def join(worker: str, group: str = G) -> Any:
    a = ConnectGroupHeartbeatRequest.Assignor
    return ConnectGroupHeartbeatRequest[0](
        group_id=group, member_id=worker, member_epoch=0, instance_id=None, rebalance_timeout_ms=60_000,
        server_assignor=None,
        client_assignors=[a(name="sessioned", minimum_version=0, maximum_version=SESSIONED, reason=0,
                            metadata_version=SESSIONED, metadata=b"offset=5")],
        connectors_and_tasks=ConnectGroupHeartbeatRequest.ConnectorsAndTasks(connectors=[], tasks=[]),
        worker_url=f"http://{worker}:8083",
    )


def heartbeat(worker: str, epoch: int, connectors: list[str], tasks: list[tuple[str, int]]) -> Any:
    cat = ConnectGroupHeartbeatRequest.ConnectorsAndTasks
    return ConnectGroupHeartbeatRequest[0](
        group_id=G, member_id=worker, member_epoch=epoch, instance_id=None, rebalance_timeout_ms=-1,
        server_assignor=None, client_assignors=None, worker_url=None,
        connectors_and_tasks=cat(connectors=connectors, tasks=[cat.ConnectorTaskId(connector=c, task=t) for c, t in tasks]),
    )


def units(a: Any) -> tuple[list[str], list[tuple[str, int]]]:
    return list(a.connectors), [(t.connector, t.task) for t in a.tasks]


async def _assigned(layer: GroupLayer, conn: Any = None) -> Any:
    """w1 joins, is asked to compute, prepares and installs connector A with its task 0, and joins
    again to get them: the answer of that last heartbeat."""
    first = await call(layer, HB, 0, join("w1"), conn)
    assert (first.error_code, first.member_epoch) == (Errors.COMPUTE_ASSIGNMENT, 0)
    prepared = await call(layer, PREP, 0, ConnectGroupPrepareAssignmentRequest[0](group_id=G, member_id="w1", member_epoch=0), conn)
    assert prepared.error_code == 0 and prepared.assignor_name == "sessioned" and prepared.group_epoch == 1
    (member,) = prepared.members
    assert (member.member_id, member.worker_url, bytes(member.assignor.metadata)) == ("w1", "http://w1:8083", b"offset=5")
    m = ConnectGroupInstallAssignmentRequest.Member
    cat = m.ConnectorsAndTasks
    installed = await call(layer, INST, 0, ConnectGroupInstallAssignmentRequest[0](
        group_id=G, member_id="w1", member_epoch=0, group_epoch=1, error=0,
        members=[m(member_id="w1", assigned=cat(connectors=["A"], tasks=[cat.ConnectorTaskId(connector="A", task=0)]),
                   error=0, metadata_version=SESSIONED, metadata=b"")],
    ), conn)  # fmt: skip
    assert installed.error_code == 0
    return await call(layer, HB, 0, join("w1"), conn)


async def test_a_worker_joins_installs_an_assignment_heartbeats_to_it_and_a_restart_replays_the_group(tmp_path: Path) -> None:
    layer = await started(state_dir=str(tmp_path / "state"))
    try:
        got = await _assigned(layer)
        assert (got.error_code, got.member_epoch) == (0, 1)
        assert units(got.assignment.connectors_and_tasks) == (["A"], [("A", 0)])
        steady = await call(layer, HB, 0, heartbeat("w1", 1, ["A"], [("A", 0)]))
        assert (steady.error_code, steady.member_epoch, steady.heartbeat_interval_ms) == (0, 1, 3000)
        listed = await call(layer, ApiKey.LIST_GROUPS, 5, ListGroupsRequest[5](states_filter=[], types_filter=["connect"]))
        assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed.groups] == [
            (G, "connect", "connect", "Stable")
        ]
        none = await call(layer, ApiKey.LIST_GROUPS, 5, ListGroupsRequest[5](states_filter=[], types_filter=["consumer"]))
        assert none.groups == []
        d = await call(layer, ApiKey.DESCRIBE_GROUPS, 6, DescribeGroupsRequest[6](groups=[G], include_authorized_operations=False))
        assert (d.groups[0].error_code, d.groups[0].error_message) == (Errors.GROUP_ID_NOT_FOUND, f"Group {G} is not a classic group.")
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="sessioned", metadata=b"")]
        classic = await call(layer, ApiKey.JOIN_GROUP, 5, JoinGroupRequest[5](
            group_id=G, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="", group_instance_id=None,
            protocol_type="connect", protocols=protocols,
        ))  # fmt: skip
        assert classic.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    finally:
        await layer.stop()

    again = await started(state_dir=str(tmp_path / "state"))
    try:
        assert again.runtime.group_kind(G) == "connect"
        steady = await call(again, HB, 0, heartbeat("w1", 1, ["A"], [("A", 0)]))
        assert (steady.error_code, steady.member_epoch) == (0, 1)
        stale = await call(again, HB, 0, heartbeat("w1", 7, ["A"], [("A", 0)]))
        assert stale.error_code == Errors.FENCED_MEMBER_EPOCH
        listed = await call(again, ApiKey.LIST_GROUPS, 5, ListGroupsRequest[5](states_filter=[], types_filter=[]))
        assert [(g.group_id, g.group_type) for g in listed.groups] == [(G, "connect")]
    finally:
        await again.stop()


async def test_a_silent_worker_is_removed_by_its_session_timer_and_the_removal_is_written(tmp_path: Path) -> None:
    layer = await started(state_dir=str(tmp_path / "state"))
    try:
        await call(layer, HB, 0, join("w1"))
        shard = layer.runtime.shard_for(G)
        shard.service.connect.state.config.session_timeout_ms = 50
        await call(layer, HB, 0, join("w1"))  # re-arms the session timer at the shorter timeout
        deadline = time.monotonic() + 5
        while layer.stats.expired["connect"] == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert layer.stats.expired["connect"] == 1
        assert layer.stats.rebalances["connect"] == 2  # the join, the removal
    finally:
        await layer.stop()
    again = await started(state_dir=str(tmp_path / "state"))
    try:
        group = again.runtime.shard_for(G).service.connect.group(G)
        assert group is not None and not group.workers and group.group_epoch == 2
    finally:
        await again.stop()


async def test_the_keys_are_advertised_only_where_the_gateway_coordinates() -> None:
    gw = StubGateway()
    layer_on(gw, settings(), install=True)
    upstream = {18: (0, 4), 68: (0, 1)}
    coordinating = rewrite.gateway_api_ranges(upstream, gw.directory.local_api)
    assert all(coordinating[k] == (0, 0) for k in (HB, PREP, INST))
    passthrough = BrokerDirectory(gw.config)  # no group layer: nothing local
    assert not {HB, PREP, INST} & set(rewrite.gateway_api_ranges(upstream, passthrough.local_api))
    # The ApiVersions answer a client gets, rewritten from the cluster's as the connection does.
    from .test_rewrite import _api_versions_payload

    for version in (0, 3):
        for local, offered in ((gw.directory.local_api, True), (passthrough.local_api, False)):
            out = rewrite.rewrite_api_versions(_api_versions_payload(version, upstream), version, local)
            _, msg = codec.decode_response(ApiKey.API_VERSIONS, version, out.payload)
            got = {a.api_key: (a.min_version, a.max_version) for a in msg.api_keys}
            assert all((got.get(k) == (0, 0)) is offered for k in (HB, PREP, INST)), (version, got)


async def test_a_group_the_gateway_does_not_manage_is_refused_not_passed_through() -> None:
    layer = await started(managed_groups="app-.*")
    try:
        payload = request_payload(join("w1", group="other"), 0)
        assert layer.claims(frames.encode_size(len(payload)) + payload, HB, 0)
        r = await call(layer, HB, 0, join("w1", group="other"))
        assert r.error_code == Errors.UNSUPPORTED_VERSION and "does not coordinate" in r.error_message
    finally:
        await layer.stop()


async def test_a_group_whose_shard_is_not_served_is_not_coordinator() -> None:
    layer = await started()
    try:
        layer.runtime.shard_for(G).unload(RuntimeError("state log lost"))
        r = await call(layer, HB, 0, join("w1"))
        assert r.error_code == Errors.NOT_COORDINATOR
    finally:
        await layer.stop()


def _acl(name: str, principal: str, op: Operation) -> AclBinding:
    return AclBinding(ResourceType.GROUP, name, PatternType.LITERAL, principal, "*", op, Permission.ALLOW)


async def test_the_apis_need_read_on_the_group_when_authorization_is_on() -> None:
    gw = StubGateway()
    gw.config = gw.config.model_copy(update={"authorization": "on", "super_users": ["User:admin"]})
    layer = layer_on(gw, settings())

    class _NoAcls:
        async def describe_acls(self, *a: Any, **kw: Any) -> Any:
            raise RuntimeError("no cluster")

    layer.acls.client = _NoAcls()  # type: ignore[assignment]
    await layer.start()
    try:
        layer.acls.snapshot = AclSnapshot.of(
            [_acl(G, "User:bob", Operation.READ), _acl(G, "User:eve", Operation.DESCRIBE)], super_users={"User:admin"}
        )
        layer.acls.read_at = time.monotonic()
        eve = StubConnection(principal="User:eve")
        refused = await call(layer, HB, 0, join("w1"), eve)
        assert refused.error_code == Errors.GROUP_AUTHORIZATION_FAILED
        prep = await call(layer, PREP, 0, ConnectGroupPrepareAssignmentRequest[0](group_id=G, member_id="w1", member_epoch=0), eve)
        assert prep.error_code == Errors.GROUP_AUTHORIZATION_FAILED
        got = await _assigned(layer, StubConnection(principal="User:bob"))
        assert (got.error_code, got.member_epoch) == (0, 1)
    finally:
        await layer.stop()


def test_the_codec_knows_the_three_keys() -> None:
    for key in (HB, PREP, INST):
        assert codec.known(key) and codec.codec_max_version(key) == 0


async def test_a_share_group_of_the_cluster_keeps_its_id() -> None:
    layer = await started()
    try:
        layer.cluster.foreign["shared"] = "share"
        r = await call(layer, HB, 0, join("w1", group="shared"))
        assert (r.error_code, r.error_message) == (Errors.GROUP_ID_NOT_FOUND, "Group shared is not a connect group.")
        assert layer.runtime.group_kind("shared") is None
    finally:
        await layer.stop()
