import pytest
from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.metadata import ApiVersionsResponse, FindCoordinatorResponse, MetadataResponse

from coordinator.errors import Errors
from gateway.net import rewrite
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey

UPSTREAM_HOST = "10.9.8.7"
GATEWAY = {1: ("gw.example", 19001), 2: ("gw.example", 19002)}


def addr_of(node_id):
    return GATEWAY.get(node_id)


def _metadata(version, nodes=(1, 2, 3)):
    B = MetadataResponse.MetadataResponseBroker
    T = MetadataResponse.MetadataResponseTopic
    P = T.MetadataResponsePartition
    topics = [
        T(
            error_code=0,
            name="t",
            is_internal=False,
            partitions=[P(error_code=0, partition_index=0, leader_id=1, replica_nodes=[1], isr_nodes=[1])],
        )
    ]
    return MetadataResponse[version](
        brokers=[B(node_id=n, host=UPSTREAM_HOST, port=9092 + n, rack="r1") for n in nodes],
        cluster_id="cid",
        controller_id=1,
        topics=topics,
    )


@pytest.mark.parametrize("version", [0, 1, 4, 7, 8, 9, 10, 12, 13])
def test_metadata_brokers_get_gateway_addresses(version):
    payload = codec.encode_response(ApiKey.METADATA, version, 77, _metadata(version))
    out = rewrite.rewrite_metadata(payload, version, addr_of)
    assert out.payload[:4] == payload[:4]  # correlation id kept
    _, msg = codec.decode_response(ApiKey.METADATA, version, out.payload)
    assert [(b.node_id, b.host, b.port) for b in msg.brokers] == [
        (1, "gw.example", 19001),
        (2, "gw.example", 19002),
    ]
    assert UPSTREAM_HOST.encode() not in out.payload
    # the upstream view is reported for the metadata cache, unmapped node 3 included
    assert [(b.node_id, b.host, b.port) for b in out.brokers] == [
        (n, UPSTREAM_HOST, 9092 + n) for n in (1, 2, 3)
    ]
    # everything else survives the round trip
    assert msg.topics[0].name == "t" and msg.topics[0].partitions[0].leader_id == 1


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_find_coordinator_single(version):
    resp = FindCoordinatorResponse[version](error_code=0, node_id=2, host=UPSTREAM_HOST, port=9094)
    out = rewrite.rewrite_find_coordinator(
        codec.encode_response(ApiKey.FIND_COORDINATOR, version, 5, resp), version, addr_of
    )
    _, msg = codec.decode_response(ApiKey.FIND_COORDINATOR, version, out.payload)
    assert (msg.error_code, msg.node_id, msg.host, msg.port) == (0, 2, "gw.example", 19002)


@pytest.mark.parametrize("version", [4, 5, 6])
def test_find_coordinator_batched(version):
    C = FindCoordinatorResponse.Coordinator
    resp = FindCoordinatorResponse[version](
        coordinators=[
            C(key="g1", node_id=1, host=UPSTREAM_HOST, port=9093, error_code=0, error_message=None),
            C(key="g2", node_id=3, host=UPSTREAM_HOST, port=9095, error_code=0, error_message=None),
            C(key="g3", node_id=-1, host="", port=-1, error_code=15, error_message="loading"),
        ]
    )
    out = rewrite.rewrite_find_coordinator(
        codec.encode_response(ApiKey.FIND_COORDINATOR, version, 5, resp), version, addr_of
    )
    _, msg = codec.decode_response(ApiKey.FIND_COORDINATOR, version, out.payload)
    got = {c.key: (c.error_code, c.node_id, c.host, c.port) for c in msg.coordinators}
    assert got["g1"] == (0, 1, "gw.example", 19001)
    assert got["g2"] == (Errors.COORDINATOR_NOT_AVAILABLE, -1, "", -1)  # node the gateway cannot serve
    assert got["g3"] == (15, -1, "", -1)
    assert UPSTREAM_HOST.encode() not in out.payload


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_cluster(version):
    B = DescribeClusterResponse.DescribeClusterBroker
    kwargs = {"endpoint_type": 1} if version >= 1 else {}
    resp = DescribeClusterResponse[version](
        error_code=0,
        cluster_id="c",
        controller_id=1,
        brokers=[B(broker_id=n, host=UPSTREAM_HOST, port=9092, rack=None) for n in (1, 3)],
        **kwargs,
    )
    out = rewrite.rewrite_describe_cluster(
        codec.encode_response(ApiKey.DESCRIBE_CLUSTER, version, 5, resp), version, addr_of
    )
    _, msg = codec.decode_response(ApiKey.DESCRIBE_CLUSTER, version, out.payload)
    assert [(b.broker_id, b.host, b.port) for b in msg.brokers] == [(1, "gw.example", 19001)]


def test_describe_cluster_controllers_are_not_revealed():
    B = DescribeClusterResponse.DescribeClusterBroker
    resp = DescribeClusterResponse[1](
        error_code=0,
        endpoint_type=2,
        cluster_id="c",
        controller_id=1,
        brokers=[B(broker_id=1, host=UPSTREAM_HOST, port=9999, rack=None)],
    )
    out = rewrite.rewrite_describe_cluster(
        codec.encode_response(ApiKey.DESCRIBE_CLUSTER, 1, 5, resp), 1, addr_of
    )
    _, msg = codec.decode_response(ApiKey.DESCRIBE_CLUSTER, 1, out.payload)
    assert msg.brokers == [] and msg.error_code != 0
    assert UPSTREAM_HOST.encode() not in out.payload


def _api_versions_payload(version, ranges, error=0):
    AV = ApiVersionsResponse.ApiVersion
    msg = ApiVersionsResponse[version](
        error_code=error,
        api_keys=[AV(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in ranges.items()],
    )
    return codec.encode_response(ApiKey.API_VERSIONS, version, 9, msg)


UPSTREAM_RANGES = {
    0: (3, 13),
    1: (4, 18),
    3: (0, 13),
    10: (0, 6),
    18: (0, 4),
    55: (0, 2),
    68: (0, 1),
    78: (0, 1),
    9999: (0, 3),
}


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_are_capped(version):
    out = rewrite.rewrite_api_versions(_api_versions_payload(version, UPSTREAM_RANGES), version, {})
    _, msg = codec.decode_response(ApiKey.API_VERSIONS, version, out.payload)
    got = {a.api_key: (a.min_version, a.max_version) for a in msg.api_keys}
    # Produce and Fetch up to the versions whose leader endpoints (KIP-951) the gateway rewrites
    assert got[0] == (3, 13)
    assert got[1] == (4, 18)
    assert got[55] == (0, 1)  # DescribeQuorum v2+ carries controller endpoints
    assert got[3] == (0, 13) and got[10] == (0, 6) and got[68] == (0, 1)
    assert got[78] == (1, 1)  # ShareFetch: v0 was 4.0's early access, not decoded (KIP-932)
    assert 9999 not in got  # APIs the codec cannot see into are not offered
    assert out.api_ranges == got


def _features_payload(ranges: dict[int, tuple[int, int]]) -> bytes:
    AV = ApiVersionsResponse.ApiVersion
    cls = ApiVersionsResponse[3]
    names = ("share.version", "streams.version", "group.version")
    msg = cls(
        error_code=0,
        api_keys=[AV(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in ranges.items()],
        supported_features=[cls.SupportedFeatureKey(name=n, min_version=0, max_version=1) for n in names],
        finalized_features_epoch=5,
        finalized_features=[
            cls.FinalizedFeatureKey(name=n, min_version_level=1, max_version_level=1) for n in names
        ],
    )
    return codec.encode_response(ApiKey.API_VERSIONS, 3, 9, msg)


SHARE_AND_STREAMS = {76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2), 88: (0, 0), 89: (0, 0), 90: (0, 1)}


def test_share_and_streams_apis_and_their_features_pass_through():
    out = rewrite.rewrite_api_versions(_features_payload({18: (0, 4), 68: (0, 1), **SHARE_AND_STREAMS}), 3, {})
    _, msg = codec.decode_response(ApiKey.API_VERSIONS, 3, out.payload)
    got = {a.api_key: (a.min_version, a.max_version) for a in msg.api_keys}
    assert all(got[k] == r for k, r in SHARE_AND_STREAMS.items())
    assert {f.name for f in msg.finalized_features} == {"share.version", "streams.version", "group.version"}


def test_features_whose_apis_are_not_offered_are_not_advertised():
    # A 4.0 cluster: share APIs only at the early-access v0, no streams APIs at all.
    ranges = {18: (0, 4), 68: (0, 1), 76: (0, 0), 77: (0, 0), 78: (0, 0), 79: (0, 0)}
    out = rewrite.rewrite_api_versions(_features_payload(ranges), 3, {})
    _, msg = codec.decode_response(ApiKey.API_VERSIONS, 3, out.payload)
    assert {a.api_key for a in msg.api_keys} == {18, 68}
    assert {f.name for f in msg.finalized_features} == {"group.version"}
    assert {f.name for f in msg.supported_features} == {"group.version"}


@pytest.mark.parametrize(("api_key", "version"), [(78, 1), (78, 2), (79, 1), (79, 2)])
def test_share_fetch_and_acknowledge_node_endpoints_are_rewritten(api_key, version):
    cls = codec.RESPONSES[api_key][version]
    ep = cls.NodeEndpoints
    msg = cls(
        error_code=0,
        responses=[],
        node_endpoints=[
            ep(node_id=1, host="broker-1.internal", port=9092, rack="r1"),
            ep(node_id=7, host="broker-7.internal", port=9092, rack=None),
        ],
    )
    payload = codec.encode_response(api_key, version, 5, msg)
    out = rewrite.REWRITERS[api_key](payload, version, lambda n: ("127.0.0.1", 19001) if n == 1 else None)
    _, got = codec.decode_response(api_key, version, out.payload)
    # The served leader at the gateway's address; one the gateway does not serve is left out.
    assert [(n.node_id, n.host, n.port, n.rack) for n in got.node_endpoints] == [(1, "127.0.0.1", 19001, "r1")]
    assert b"internal" not in out.payload


def test_api_versions_local_apis_override_upstream():
    out = rewrite.rewrite_api_versions(_api_versions_payload(3, {18: (0, 4)}), 3, {68: (0, 1), 69: (0, 1)})
    _, msg = codec.decode_response(ApiKey.API_VERSIONS, 3, out.payload)
    assert {a.api_key for a in msg.api_keys} == {18, 68, 69}


def test_api_versions_upstream_error_keeps_v0_shape():
    out = rewrite.rewrite_api_versions(_api_versions_payload(0, {18: (0, 2)}, error=35), 3, {})
    _, msg = codec.decode_response(ApiKey.API_VERSIONS, 0, out.payload)
    assert msg.error_code == 35 and [(a.api_key, a.max_version) for a in msg.api_keys] == [(18, 2)]


def test_api_versions_unsupported_fallback_is_v0():
    raw = rewrite.api_versions_unsupported(41, 4)
    assert raw[:4] == (41).to_bytes(4, "big")
    msg = ApiVersionsResponse[0].decode(raw[4:])
    assert msg.error_code == Errors.UNSUPPORTED_VERSION
    assert [(a.api_key, a.min_version, a.max_version) for a in msg.api_keys] == [(18, 0, 4)]


def _with_features(version, ranges, finalized, supported=()):
    R = ApiVersionsResponse
    AV = R.ApiVersion
    msg = R[version](
        error_code=0,
        api_keys=[AV(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in ranges.items()],
        finalized_features_epoch=14,
        finalized_features=[
            R.FinalizedFeatureKey(name=n, min_version_level=lo, max_version_level=hi) for n, (lo, hi) in finalized.items()
        ],
        supported_features=[R.SupportedFeatureKey(name=n, min_version=lo, max_version=hi) for n, (lo, hi) in supported],
    )
    return codec.encode_response(ApiKey.API_VERSIONS, version, 9, msg)


# Kafka 4.3.1's defaults (transaction.version 2 is finalized on a new cluster).
CLUSTER_FEATURES = {
    "metadata.version": (30, 30),
    "transaction.version": (2, 2),
    "group.version": (1, 1),
    "streams.version": (1, 1),
    "share.version": (1, 1),
    "eligible.leader.replicas.version": (1, 1),
}
TXN_APIS = {0: (3, 13), 1: (4, 18), 18: (0, 4), 22: (0, 5), 24: (0, 5), 25: (0, 4), 26: (0, 5), 28: (0, 5), 68: (0, 1)}


def _features(payload, version):
    _, msg = codec.decode_response(ApiKey.API_VERSIONS, version, payload)
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in msg.finalized_features or []}
    supported = {f.name: (f.min_version, f.max_version) for f in msg.supported_features or []}
    return msg, finalized, supported


@pytest.mark.parametrize("version", [3, 4])
def test_finalized_features_are_kept_when_the_gateway_carries_their_apis(version):
    out = rewrite.rewrite_api_versions(_with_features(version, TXN_APIS, CLUSTER_FEATURES), version, {})
    msg, finalized, _ = _features(out.payload, version)
    assert finalized["transaction.version"] == (2, 2)  # KIP-890: Produce v12+, TxnOffsetCommit v5+, EndTxn v5+
    assert finalized["group.version"] == (1, 1) and finalized["metadata.version"] == (30, 30)
    assert msg.finalized_features_epoch == 14
    # no StreamsGroupHeartbeat / ShareGroupHeartbeat through the gateway: their features are withheld
    assert "streams.version" not in finalized and "share.version" not in finalized
    kinds = dict(out.narrowed)
    assert "feature streams.version" in kinds and "feature transaction.version" not in kinds


@pytest.mark.parametrize(
    ("capped", "why"),
    [({0: (3, 11)}, "api 0 v12+"), ({26: (0, 4)}, "api 26 v5+"), ({28: (0, 4)}, "api 28 v5+")],
)
def test_transaction_version_2_is_lowered_when_an_api_it_needs_is_capped(capped, why):
    out = rewrite.rewrite_api_versions(_with_features(3, {**TXN_APIS, **capped}, CLUSTER_FEATURES), 3, {})
    _, finalized, _ = _features(out.payload, 3)
    # transaction.version 1: clients add partitions with AddPartitionsToTxn, which passes through
    assert finalized["transaction.version"] == (1, 1)
    assert why in dict(out.narrowed)["feature transaction.version"]


def test_a_local_range_below_a_features_needs_lowers_it_too():
    # The group layer answers TxnOffsetCommit itself: its range is what clients get.
    out = rewrite.rewrite_api_versions(_with_features(3, TXN_APIS, CLUSTER_FEATURES), 3, {28: (0, 4)})
    _, finalized, _ = _features(out.payload, 3)
    assert finalized["transaction.version"] == (1, 1)


def test_unknown_features_and_levels_are_withheld():
    features = {"transaction.version": (3, 3), "future.version": (1, 1), "metadata.version": (31, 31)}
    out = rewrite.rewrite_api_versions(_with_features(3, TXN_APIS, features), 3, {})
    _, finalized, _ = _features(out.payload, 3)
    assert finalized == {"transaction.version": (2, 2), "metadata.version": (31, 31)}


def test_supported_features_are_capped_the_same_way():
    supported = [("transaction.version", (0, 2)), ("streams.version", (0, 1)), ("metadata.version", (7, 30))]
    out = rewrite.rewrite_api_versions(
        _with_features(4, {**TXN_APIS, 0: (3, 9)}, CLUSTER_FEATURES, supported), 4, {}
    )
    _, finalized, got = _features(out.payload, 4)
    assert got == {"transaction.version": (0, 1), "metadata.version": (7, 30)}
    assert finalized["transaction.version"] == (1, 1)


def test_the_narrowing_names_capped_and_withheld_apis():
    out = rewrite.rewrite_api_versions(_api_versions_payload(3, UPSTREAM_RANGES), 3, {68: (0, 1)})
    kinds = dict(out.narrowed)
    assert "api 55" in kinds and "broker endpoints" in kinds["api 55"]
    assert "9999" in kinds["apis withheld"]  # (78, ShareFetch, is offered from v1: KIP-932)
    assert "api 0" not in kinds and "api 1" not in kinds and "api 68" not in kinds


def test_each_narrowing_is_logged_once_with_its_reason():
    from structlog.testing import capture_logs

    from gateway.config.settings import GatewayConfig
    from gateway.net.upstream import BrokerDirectory

    directory = BrokerDirectory(GatewayConfig(upstream="127.0.0.1:1", listen_port=0))
    out = rewrite.rewrite_api_versions(_with_features(3, {**TXN_APIS, 0: (3, 11)}, CLUSTER_FEATURES), 3, {})
    with capture_logs() as logs:
        for _ in range(3):  # every client's ApiVersions is narrowed the same way
            directory.note_narrowed(out.narrowed)
    lines = [(e["kind"], e["reason"]) for e in logs if e["event"] == "advertising less than the cluster offers"]
    assert lines == out.narrowed and len({k for k, _ in lines}) == len(lines)
    assert any(k == "feature transaction.version" and "api 0 v12+" in r for k, r in lines)


# What Kafka 4.3.1 answers an ApiVersions v3 request whose ClientSoftwareName is not valid ("!!"): INVALID_REQUEST
# in the request's own (flexible) version, not the v0 fallback of KIP-511. Correlation id 77.
_INVALID_REQUEST_V3 = bytes.fromhex("0000004d002a010000000000")


def test_api_versions_invalid_request_keeps_the_request_version():
    out = rewrite.rewrite_api_versions(_INVALID_REQUEST_V3, 3, {68: (0, 1)})
    assert out.payload == _INVALID_REQUEST_V3  # nothing to cap: passed on in the same shape
    assert out.api_ranges is None


def test_api_versions_error_in_v0_shape_still_read_for_a_v3_request():
    out = rewrite.rewrite_api_versions(_api_versions_payload(0, {18: (0, 2), 9999: (0, 1)}, error=42), 3, {})
    _, msg = codec.decode_response(ApiKey.API_VERSIONS, 0, out.payload)
    assert msg.error_code == 42 and [(a.api_key, a.max_version) for a in msg.api_keys] == [(18, 2)]
