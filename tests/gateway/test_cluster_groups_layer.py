"""Groups the cluster holds: the group layer's merge of ListGroups / DescribeGroups with the cluster's,
and its routing of share (KIP-932) and streams (KIP-1071) group requests to the cluster's coordinator.

The upstream is a recording stand-in for the layer's UpstreamClient (the real broker is in
compat_tests/test_cluster_groups.py); everything else is the real layer.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import OffsetCommitRequest
from kafka.protocol.consumer.group import JoinGroupRequest, LeaveGroupRequest

from gateway.net.upstream import UpstreamError
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey
from gateway.wire.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
)

from ._groups_support import StubConnection, call
from .test_groups_layer import started

GROUP_ID_NOT_FOUND = 69
NOT_COORDINATOR = 16
INCONSISTENT_GROUP_PROTOCOL = 23


def _listed(group_id: str, protocol_type: str, state: str, group_type: str) -> Any:
    cls = codec.RESPONSES[ApiKey.LIST_GROUPS][5]
    return cls.ListedGroup(group_id=group_id, protocol_type=protocol_type, group_state=state, group_type=group_type)


class Cluster:
    """The layer's client towards a cluster holding ``groups`` (ListGroups v5 entries)."""

    def __init__(self, groups: list[Any]) -> None:
        self.groups = groups
        self.sent: list[tuple[str, int, Any]] = []
        self.moved_once: set[str] = set()

    def install(self, layer: Any) -> None:
        for client in (layer.client, layer.forward):  # the gateway's own links and the clients' forwards
            client.version = lambda api_key, wanted: wanted
            client.supports = lambda api_key: True
            client.send_any = self.send_any
            client.to_coordinator = self.to_coordinator

    async def send_any(self, api_key: int, version: int, msg: Any, node_id: int | None = None) -> Any:
        if api_key != ApiKey.LIST_GROUPS:
            raise UpstreamError("only ListGroups is answered here")  # e.g. topic metadata: not needed
        types = set(msg.types_filter) if version >= 5 else set()
        groups = [g for g in self.groups if not types or g.group_type in types]
        return codec.RESPONSES[api_key][version](throttle_time_ms=0, error_code=0, groups=groups)

    async def to_coordinator(
        self, group_id: str, api_key: int, version: int, msg: Any, error_of: Any, **_: Any
    ) -> Any:
        self.sent.append((group_id, api_key, msg))
        if api_key == ApiKey.LIST_GROUPS:
            return await self.send_any(api_key, version, msg)
        if api_key == ApiKey.DESCRIBE_GROUPS:
            cls = codec.RESPONSES[api_key][version]
            known = {g.group_id: g for g in self.groups}
            out = []
            member = cls.DescribedGroup.DescribedGroupMember
            for gid in msg.groups:
                g = known.get(gid)
                state, ptype = ("Dead", "") if g is None else (g.group_state, g.protocol_type)
                members = [] if state in ("Dead", "Empty") else [member(
                    member_id="left-behind", group_instance_id=None, client_id="c", client_host="/h",
                    member_metadata=b"", member_assignment=b"",
                )]  # fmt: skip
                out.append(cls.DescribedGroup(
                    error_code=0, group_id=gid, group_state=state, protocol_type=ptype, protocol_data="range",
                    members=members,
                ))  # fmt: skip
            return cls(throttle_time_ms=0, groups=out)
        if api_key == ApiKey.SHARE_GROUP_DESCRIBE:
            cls = codec.RESPONSES[api_key][version]
            (gid,) = msg.group_ids
            return cls(groups=[cls.Groups(group_id=gid, error_code=0, group_state="Stable", group_epoch=len(gid))])
        if api_key == ApiKey.SHARE_GROUP_HEARTBEAT:
            # Forwarded as the client's bytes; answered as the upstream's bytes under the link's id.
            assert isinstance(msg, bytes)
            cls = codec.RESPONSES[api_key][version]
            answer = cls(error_code=0, member_id="m-1", member_epoch=1, heartbeat_interval_ms=5000, assignment=None)
            return codec.encode_response(api_key, version, 99, answer)
        if api_key == ApiKey.STREAMS_GROUP_HEARTBEAT:
            assert isinstance(msg, bytes)
            answer = codec.RESPONSES[api_key][version](error_code=0, member_id="s-1", member_epoch=1)
            return codec.encode_response(api_key, version, 99, answer)
        if api_key == ApiKey.OFFSET_COMMIT and isinstance(msg, bytes):
            cls = codec.RESPONSES[api_key][version]
            part = cls.OffsetCommitResponseTopic.OffsetCommitResponsePartition(partition_index=0, error_code=0)
            answer = cls(topics=[cls.OffsetCommitResponseTopic(name="in", partitions=[part])])
            return codec.encode_response(api_key, version, 99, answer)
        raise UpstreamError(f"unexpected api {api_key}")


async def test_list_groups_merges_the_clusters_groups_the_gateway_does_not_hold() -> None:
    layer = await started()
    cluster = Cluster(
        [
            _listed("offsets-only", "", "Empty", "classic"),  # made by simple commits alone
            _listed("stopped-app", "consumer", "Empty", "classic"),
            _listed("orders-share", "share", "Stable", "share"),
            _listed("orders-app", "streams", "Empty", "streams"),
            _listed("live", "", "Empty", "classic"),  # the gateway holds this one: its view wins
        ]
    )
    cluster.install(layer)
    try:
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
        await call(layer, ApiKey.JOIN_GROUP, 3, JoinGroupRequest[3](
            group_id="live", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            protocol_type="consumer", protocols=protocols,
        ))  # fmt: skip
        got = await call(layer, ApiKey.LIST_GROUPS, 5, ListGroupsRequest[5](states_filter=[], types_filter=[]))
        rows = sorted((g.group_id, g.protocol_type, g.group_state, g.group_type) for g in got.groups)
        assert rows == [
            ("live", "consumer", "CompletingRebalance", "classic"),
            ("offsets-only", "consumer", "Empty", "classic"),
            ("orders-app", "streams", "Empty", "streams"),
            ("orders-share", "share", "Stable", "share"),
            ("stopped-app", "consumer", "Empty", "classic"),
        ]
        # The v5 types filter reaches the cluster: only its share groups come back.
        only_share = await call(layer, ApiKey.LIST_GROUPS, 5, ListGroupsRequest[5](states_filter=[], types_filter=["share"]))
        assert [g.group_id for g in only_share.groups] == ["orders-share"]
        # Another listener lists the cluster's groups of that broker, never the gateway's own twice.
        other = await call(layer, ApiKey.LIST_GROUPS, 5, ListGroupsRequest[5](states_filter=[], types_filter=[]), StubConnection(2))
        assert "live" not in {g.group_id for g in other.groups}
        assert layer.foreign == {"orders-share": "share", "orders-app": "streams"}
    finally:
        await layer.stop()


async def test_a_managed_id_without_gateway_state_is_described_by_the_cluster() -> None:
    layer = await started()
    Cluster(
        [
            _listed("offsets-only", "", "Empty", "classic"),
            _listed("being-adopted", "consumer", "Stable", "classic"),  # members left on the cluster
        ]
    ).install(layer)
    try:
        got = await call(layer, ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest[5](
            groups=["offsets-only", "never-existed", "being-adopted"], include_authorized_operations=False,
        ))  # fmt: skip
        by_id = {g.group_id: (g.error_code, g.group_state, g.protocol_type, len(g.members)) for g in got.groups}
        # Empty with protocol type "consumer", as Kafka shows a consumer group whose members all left (the
        # cluster's members of a managed id are not the group's); an id the cluster does not know either
        # is Dead, as Kafka answers DescribeGroups v5.
        assert by_id == {
            "offsets-only": (0, "Empty", "consumer", 0),
            "never-existed": (0, "Dead", "", 0),
            "being-adopted": (0, "Empty", "consumer", 0),
        }
        listed = await call(layer, ApiKey.LIST_GROUPS, 5, ListGroupsRequest[5](states_filter=[], types_filter=[]))
        assert sorted((g.group_id, g.group_state) for g in listed.groups) == [
            ("being-adopted", "Empty"),
            ("offsets-only", "Empty"),
        ]
    finally:
        await layer.stop()


async def test_share_heartbeat_goes_to_the_clusters_coordinator_and_claims_the_id() -> None:
    layer = await started()
    cluster = Cluster([])
    cluster.install(layer)
    try:
        hb = ShareGroupHeartbeatRequest[1](
            group_id="orders-share", member_id="m-1", member_epoch=0, rack_id=None, subscribed_topic_names=["t"]
        )
        got = await call(layer, ApiKey.SHARE_GROUP_HEARTBEAT, 1, hb)  # asserts the client's correlation id
        assert (got.error_code, got.member_id, got.member_epoch) == (0, "m-1", 1)
        assert [(g, k) for g, k, _ in cluster.sent] == [("orders-share", ApiKey.SHARE_GROUP_HEARTBEAT)]
        assert layer.foreign["orders-share"] == "share"
        assert not layer.has_state("orders-share")
        # A consumer-protocol member joining under the share group's id: Kafka's GROUP_ID_NOT_FOUND.
        join = ConsumerGroupHeartbeatRequest[1](
            group_id="orders-share", member_id="c-1", member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30000, subscribed_topic_names=["t"], subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=[],
        )  # fmt: skip
        refused = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, join)
        assert refused.error_code == GROUP_ID_NOT_FOUND
        # A classic member: INCONSISTENT_GROUP_PROTOCOL, as Kafka 4.3.1 answers.
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
        classic = await call(layer, ApiKey.JOIN_GROUP, 5, JoinGroupRequest[5](
            group_id="orders-share", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            group_instance_id=None, protocol_type="consumer", protocols=protocols,
        ))  # fmt: skip
        assert classic.error_code == INCONSISTENT_GROUP_PROTOCOL
        assert not layer.has_state("orders-share")
    finally:
        await layer.stop()


async def test_share_group_describe_is_split_per_group_and_merged_in_order() -> None:
    layer = await started()
    cluster = Cluster([])
    cluster.install(layer)
    try:
        req = ShareGroupDescribeRequest[1](group_ids=["bb", "a", "ccc"], include_authorized_operations=False)
        got = await call(layer, ApiKey.SHARE_GROUP_DESCRIBE, 1, req)
        assert [(g.group_id, g.group_epoch) for g in got.groups] == [("bb", 2), ("a", 1), ("ccc", 3)]
        assert [list(m.group_ids) for _, _, m in cluster.sent] == [["bb"], ["a"], ["ccc"]]
    finally:
        await layer.stop()


async def test_a_streams_members_commit_goes_to_the_clusters_coordinator_even_before_its_heartbeat() -> None:
    # A gateway that just restarted: the streams application's commit arrives before its next heartbeat.
    layer = await started()
    cluster = Cluster([_listed("orders-app", "streams", "Stable", "streams")])
    cluster.install(layer)
    try:
        t = OffsetCommitRequest[9].OffsetCommitRequestTopic
        commit = OffsetCommitRequest[9](
            group_id="orders-app", generation_id_or_member_epoch=7, member_id="streams-member",
            group_instance_id=None, topics=[t(name="in", partitions=[t.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=20, committed_leader_epoch=-1, committed_metadata="",
            )])],
        )  # fmt: skip
        got = await call(layer, ApiKey.OFFSET_COMMIT, 9, commit)
        assert [p.error_code for p in got.topics[0].partitions] == [0]
        # Looked up once (ListGroups with the share/streams filter), then forwarded as the client sent it.
        assert [k for _, k, _ in cluster.sent] == [ApiKey.LIST_GROUPS, ApiKey.OFFSET_COMMIT]
        assert isinstance(cluster.sent[1][2], bytes)
        assert layer.foreign["orders-app"] == "streams" and not layer.has_state("orders-app")
    finally:
        await layer.stop()


async def test_a_streams_groups_id_is_refused_while_it_has_members_and_given_up_when_empty() -> None:
    layer = await started()
    cluster = Cluster([_listed("orders-app", "streams", "Stable", "streams")])
    cluster.install(layer)
    join = ConsumerGroupHeartbeatRequest[1](
        group_id="orders-app", member_id="c-1", member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30000, subscribed_topic_names=["t"], subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=[],
    )  # fmt: skip
    try:
        refused = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, join)
        assert (refused.error_code, refused.error_message) == (
            GROUP_ID_NOT_FOUND,
            "Group orders-app is not a consumer group.",
        )
        # The application stopped: Kafka 4.3.1 lets a consumer group take the Empty streams group's id.
        cluster.groups = [_listed("orders-app", "streams", "Empty", "streams")]
        joined = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, join)
        assert joined.error_code == 0 and joined.member_epoch > 0
        assert layer.has_state("orders-app") and "orders-app" not in layer.foreign
    finally:
        await layer.stop()


class TwoCoordinators(Cluster):
    """A cluster whose groups are coordinated by two brokers (by the id's first letter); the layer's
    client finds them with ``coordinator`` and asks each with ``send``."""

    def __init__(self, groups: list[Any]) -> None:
        super().__init__(groups)
        self.batches: list[tuple[tuple[str, int], list[str]]] = []
        self.moved: set[str] = set()  # answered NOT_COORDINATOR in a batch (then asked alone)

    def install(self, layer: Any) -> None:
        super().install(layer)
        for client in (layer.client, layer.forward):
            client.coordinator = self.coordinator
            client.send = self.send

    async def coordinator(self, group_id: str) -> tuple[str, int]:
        return ("broker-a", 1) if group_id < "m" else ("broker-b", 2)

    async def send(self, addr: tuple[str, int], api_key: int, version: int, msg: Any, idempotent: bool = True) -> Any:
        if api_key == ApiKey.SHARE_GROUP_DESCRIBE:
            self.batches.append((addr, list(msg.group_ids)))
            cls = codec.RESPONSES[api_key][version]
            return cls(groups=[
                cls.Groups(group_id=g, error_code=NOT_COORDINATOR if g in self.moved else 0, group_state="Stable",
                           group_epoch=len(g))
                for g in msg.group_ids
            ])  # fmt: skip
        assert api_key == ApiKey.DESCRIBE_GROUPS
        self.batches.append((addr, list(msg.groups)))
        r = await Cluster.to_coordinator(self, "", api_key, version, msg, None)
        self.sent.pop()  # ``sent`` keeps the requests asked one group at a time
        for g in r.groups:
            if g.group_id in self.moved:
                g.error_code = NOT_COORDINATOR
        return r


async def test_groups_only_the_cluster_holds_are_described_in_one_request_per_coordinator() -> None:
    layer = await started()
    ids = ["apples", "bananas", "cherries", "mangoes", "plums"]
    cluster = TwoCoordinators([_listed(g, "consumer", "Empty", "classic") for g in ids])
    cluster.moved = {"plums"}
    cluster.install(layer)
    try:
        got = await call(layer, ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest[5](
            groups=ids, include_authorized_operations=False,
        ))  # fmt: skip
        # Every id answered, in the order asked, as the cluster describes it.
        assert [(g.group_id, g.error_code, g.group_state) for g in got.groups] == [(g, 0, "Empty") for g in ids]
        # One DescribeGroups per coordinator for all its ids, not one per id ...
        assert sorted(cluster.batches) == [
            (("broker-a", 1), ["apples", "bananas", "cherries"]),
            (("broker-b", 2), ["mangoes", "plums"]),
        ]
        # ... and only the id whose coordinator moved is asked again alone (looked up afresh).
        assert [(gid, api) for gid, api, _ in cluster.sent] == [("plums", ApiKey.DESCRIBE_GROUPS)]
    finally:
        await layer.stop()


async def test_share_groups_are_described_in_one_request_per_coordinator_and_merged_in_order() -> None:
    layer = await started()
    cluster = TwoCoordinators([])
    cluster.moved = {"zz"}
    cluster.install(layer)
    try:
        req = ShareGroupDescribeRequest[1](group_ids=["x", "bb", "a", "zz"], include_authorized_operations=False)
        got = await call(layer, ApiKey.SHARE_GROUP_DESCRIBE, 1, req)
        assert [(g.group_id, g.error_code, g.group_epoch) for g in got.groups] == [
            ("x", 0, 1), ("bb", 0, 2), ("a", 0, 1), ("zz", 0, 2),
        ]
        assert sorted(cluster.batches) == [(("broker-a", 1), ["bb", "a"]), (("broker-b", 2), ["x", "zz"])]
        # The moved one alone, looked up again.
        assert [(gid, list(m.group_ids)) for gid, _, m in cluster.sent] == [("zz", ["zz"])]
    finally:
        await layer.stop()


def _streams_join(group_id: str) -> Any:
    cls = codec.REQUESTS[ApiKey.STREAMS_GROUP_HEARTBEAT][0]
    topology = cls.Topology(epoch=0, subtopologies=[cls.Topology.Subtopologies(
        subtopology_id="0", source_topics=["in"], source_topic_regex=[], state_changelog_topics=[],
        repartition_sink_topics=[], repartition_source_topics=[], copartition_groups=[],
    )])  # fmt: skip
    return cls(
        group_id=group_id, member_id="s-1", member_epoch=0, rebalance_timeout_ms=30000, topology=topology,
        active_tasks=[], standby_tasks=[], warmup_tasks=[], process_id="p-1", client_tags=[],
    )  # fmt: skip


async def test_a_streams_member_takes_over_an_empty_classic_group_and_is_refused_one_with_members() -> None:
    """KIP-1071's offline migration as Kafka 4.3.1 decides it (getOrCreateStreamsGroup): the gateway's
    classic group gives its id up once Empty; with a member, or as a consumer group, it keeps it."""
    layer = await started()
    cluster = Cluster([])
    cluster.install(layer)
    not_streams = (GROUP_ID_NOT_FOUND, "Group orders-app is not a streams group.")
    try:
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
        join = {"group_id": "orders-app", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
                "member_id": "", "group_instance_id": None, "protocol_type": "consumer", "protocols": protocols}  # fmt: skip
        r = await call(layer, ApiKey.JOIN_GROUP, 5, JoinGroupRequest[5](**join))
        r = await call(layer, ApiKey.JOIN_GROUP, 5, JoinGroupRequest[5](**{**join, "member_id": r.member_id}))
        assert r.error_code == 0
        cluster.sent.clear()  # the join's look-up of a share/streams group of that id
        refused = await call(layer, ApiKey.STREAMS_GROUP_HEARTBEAT, 0, _streams_join("orders-app"))
        assert (refused.error_code, refused.error_message) == not_streams
        assert layer.has_state("orders-app") and not cluster.sent  # decided here, nothing forwarded
        leave = LeaveGroupRequest[3](group_id="orders-app", members=[LeaveGroupRequest.MemberIdentity(member_id=r.member_id)])
        assert (await call(layer, ApiKey.LEAVE_GROUP, 3, leave)).error_code == 0
        joined = await call(layer, ApiKey.STREAMS_GROUP_HEARTBEAT, 0, _streams_join("orders-app"))
        assert (joined.error_code, joined.member_epoch) == (0, 1)
        assert [(g, k) for g, k, _ in cluster.sent] == [("orders-app", ApiKey.STREAMS_GROUP_HEARTBEAT)]
        assert not layer.has_state("orders-app") and layer.foreign["orders-app"] == "streams"
        # A consumer group keeps its id even when Empty (Kafka converts only an empty classic group).
        hb = ConsumerGroupHeartbeatRequest[1](
            group_id="orders-848", member_id="c-1", member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30000, subscribed_topic_names=["t"], subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=[],
        )  # fmt: skip
        assert (await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, hb)).error_code == 0
        refused = await call(layer, ApiKey.STREAMS_GROUP_HEARTBEAT, 0, _streams_join("orders-848"))
        assert refused.error_code == GROUP_ID_NOT_FOUND and layer.has_state("orders-848")
    finally:
        await layer.stop()


async def test_in_a_fleet_each_node_lists_the_groups_it_coordinates() -> None:
    """Several instances (gateway/groups/handlers.py list_groups): the coordinator node (the bootstrap
    listener) lists the managed groups of the shards held here, offsets-only ones from every broker too;
    a broker's node lists that broker's groups except the managed ids."""
    layer = await started(managed_groups="app-.*", **{"state.topic.num.partitions": 1})
    per_node = {
        1: [_listed("app-offsets-only", "", "Empty", "classic"), _listed("plain-1", "consumer", "Empty", "classic")],
        2: [_listed("plain-2", "consumer", "Stable", "classic"), _listed("app-live", "", "Empty", "classic")],
    }

    async def send_any(api_key: int, version: int, msg: Any, node_id: int | None = None) -> Any:
        assert api_key == ApiKey.LIST_GROUPS and node_id in per_node
        return codec.RESPONSES[api_key][version](throttle_time_ms=0, error_code=0, groups=per_node[node_id])

    for client in (layer.client, layer.forward):
        client.version = lambda api_key, wanted: wanted  # type: ignore[method-assign]
        client.send_any = send_any  # type: ignore[method-assign]
    layer.forward.directory.brokers = dict.fromkeys(per_node)  # type: ignore[assignment]
    layer.fleet = layer.handlers.fleet = object()  # type: ignore[assignment]
    try:
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
        await call(layer, ApiKey.JOIN_GROUP, 3, JoinGroupRequest[3](
            group_id="app-live", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            protocol_type="consumer", protocols=protocols,
        ))  # fmt: skip
        request = ListGroupsRequest[5](states_filter=[], types_filter=[])
        mine = await call(layer, ApiKey.LIST_GROUPS, 5, request, StubConnection(None))
        assert sorted(g.group_id for g in mine.groups) == ["app-live", "app-offsets-only"]
        for node, plain in ((1, "plain-1"), (2, "plain-2")):
            r = await call(layer, ApiKey.LIST_GROUPS, 5, request, StubConnection(node))
            assert [g.group_id for g in r.groups] == [plain]
        # A shard this instance does not hold: its managed ids are another instance's to list.
        await layer.runtime.release([0], timeout_s=1.0)
        mine = await call(layer, ApiKey.LIST_GROUPS, 5, request, StubConnection(None))
        assert [g.group_id for g in mine.groups] == []
    finally:
        layer.fleet = layer.handlers.fleet = None
        await layer.stop()
