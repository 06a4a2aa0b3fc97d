"""SASL in front of a secured cluster: the same outcome directly on the broker and through the gateway.

The broker (``sasl_kafka``) has a SASL_PLAINTEXT listener with PLAIN and SCRAM-SHA-256/512, the
StandardAuthorizer, super.users=User:admin, no access without an ACL, and a session lifetime
(connections.max.reauth.ms, KIP-368) short enough that clients re-authenticate during a test. The gateway
runs with SASL_PLAINTEXT client listeners (each client's exchange passes through to the cluster) and
authenticates its own connections as User:admin with SCRAM-SHA-512.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from compat_tests.harness import sasl
from compat_tests.harness.admin import create_topic
from compat_tests.harness.brokers import free_port_block
from compat_tests.harness.gateway_proc import GatewayProcess, groupgate_binary
from compat_tests.harness.sasl import (
    ADMIN,
    ALICE,
    BOB,
    SASL_SESSION_MS,
    WAIT_S,
    acls_applied,
    admin_client,
    closed,
    confluent_conf,
    frame,
    grant,
    grant_alice,
    java_props,
    java_round_trip,
    plain_authenticate,
    plain_exchange,
    produce_consume,
    read_response,
)
from compat_tests.harness.tls_certs import Pki, make_pki, openssl_missing_reason
from gateway.ops.embedded_kafka import EmbeddedKafka
from gateway.security.sasl_server import add_user
from gateway.wire import codec
from translate import authorizer as az

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


@pytest.fixture(scope="module")
def sasl_gateway(sasl_kafka: EmbeddedKafka, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with sasl.sasl_gateway(sasl_kafka, tmp_path_factory.mktemp("sasl-gateway"), extra_args=("--log-level", "debug")) as gw:
        yield gw


@pytest.fixture
def targets(sasl_kafka: EmbeddedKafka, sasl_gateway: GatewayProcess) -> dict[str, str]:
    return sasl.targets(sasl_kafka, sasl_gateway)


@pytest.fixture
def secured_topic(sasl_kafka: EmbeddedKafka, names: Callable[[str], str]) -> str:
    return create_topic(sasl_kafka.bootstrap, names("topic"), 2)


# --- clients move data under their own identity ------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_client_produces_and_consumes(
    mechanism: str, targets: dict[str, str], sasl_kafka: EmbeddedKafka, secured_topic: str, names: Callable[[str], str]
) -> None:
    results = {}
    for name, bootstrap in targets.items():
        group = names(f"group-{name}")
        grant_alice(sasl_kafka, secured_topic, group)
        values = [f"{name}-{mechanism}-{i}".encode() for i in range(20)]
        got = produce_consume(confluent_conf(bootstrap, mechanism, ALICE), secured_topic, group, values)
        # Both targets' records are on the topic; each consumer read from the beginning.
        results[name] = sorted(v for v in got if v.startswith(name.encode()))
        assert results[name] == sorted(values), name
    assert len(results["direct"]) == len(results["gateway"])


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_java_clients_through_the_gateway(
    mechanism: str,
    sasl_gateway: GatewayProcess,
    sasl_kafka: EmbeddedKafka,
    secured_topic: str,
    names: Callable[[str], str],
    java_logs: Path,
) -> None:
    group = names("group")
    grant_alice(sasl_kafka, secured_topic, group)
    java_round_trip(sasl_gateway.bootstrap, java_props(mechanism, ALICE), secured_topic, group, java_logs, n=200)


def test_sasl_ssl_listener(
    sasl_kafka: EmbeddedKafka, secured_topic: str, names: Callable[[str], str], tmp_path: Path
) -> None:
    """SASL_SSL on the client side: TLS terminates at the gateway, the SASL exchange passes through."""
    reason = openssl_missing_reason()
    if reason:
        pytest.skip(reason)
    pki = make_pki(tmp_path / "pki")
    pw = tmp_path / "pw"
    pw.write_text(ADMIN[1])
    gw = GatewayProcess(
        upstream=sasl_kafka.sasl_bootstrap, listen_port=free_port_block(3), log_dir=tmp_path,
        extra_args=["--tls-cert", pki.server_cert, "--tls-key", pki.server_key,
                    "--listener-security-protocol", "SASL_SSL", "--upstream-sasl-mechanism", "PLAIN",
                    "--upstream-sasl-username", ADMIN[0], "--upstream-sasl-password-file", str(pw)],
    ).start()
    try:
        group = names("group")
        grant_alice(sasl_kafka, secured_topic, group)
        tls = {"security.protocol": "SASL_SSL", "ssl.ca.location": pki.ca}
        values = [f"tls-{i}".encode() for i in range(10)]
        p = Producer({**confluent_conf(gw.bootstrap, "SCRAM-SHA-256", ALICE), **tls})
        for v in values:
            p.produce(secured_topic, v)
        assert p.flush(WAIT_S) == 0
        c = Consumer({**confluent_conf(gw.bootstrap, "SCRAM-SHA-256", ALICE), **tls, "group.id": group,
                      "auto.offset.reset": "earliest"})
        got: list[bytes] = []
        try:
            c.subscribe([secured_topic])
            deadline = time.monotonic() + WAIT_S
            while len(got) < len(values) and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None:
                    assert m.error() is None, m.error()
                    got.append(m.value())
        finally:
            c.close()
        assert sorted(got) == sorted(values)
        # A client that skips SASL on that listener gets nothing but a closed connection.
        errors: list[KafkaError] = []
        a = AdminClient({"bootstrap.servers": gw.bootstrap, **tls, "security.protocol": "SSL",
                         "error_cb": errors.append})
        with pytest.raises(KafkaException):
            a.list_topics(timeout=3)
    finally:
        gw.stop()


# --- refusals are the cluster's, the same either way ---------------------------------------------------


def _metadata_ok(s: socket.socket, corr: int) -> bool:
    s.sendall(frame(MetadataRequest[12](topics=[]), 12, corr))
    try:
        return read_response(s) is not None
    except (ConnectionResetError, TimeoutError):
        return False


def test_reauthentication_kip368_alike(targets: dict[str, str]) -> None:
    """The session lifetime passes through; re-authenticating on the same connection extends the session;
    a request after the session's end without re-authentication closes the connection."""
    for name, b in targets.items():
        host, port = b.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as s:
            r = plain_authenticate(s, 1)
            assert (r.error_code, r.session_lifetime_ms) == (0, SASL_SESSION_MS), name
            assert _metadata_ok(s, 3), name
            time.sleep(SASL_SESSION_MS * 0.6 / 1000)
            r = plain_authenticate(s, 4)  # KIP-368 re-authentication, same connection
            assert r.error_code == 0 and 0 < r.session_lifetime_ms <= SASL_SESSION_MS, name
            time.sleep(SASL_SESSION_MS * 0.6 / 1000)
            # Past the first session's end, within the second's.
            assert _metadata_ok(s, 6), name
            time.sleep(SASL_SESSION_MS * 0.5 / 1000)
            # Past the second session's end.
            assert not _metadata_ok(s, 7), name


def test_wrong_password_is_refused_alike(targets: dict[str, str]) -> None:
    outcomes = {name: plain_exchange(b, ALICE[0], "not-the-password") for name, b in targets.items()}
    assert outcomes["direct"][0] == 58  # SASL_AUTHENTICATION_FAILED
    assert outcomes["direct"][2], "the broker closes a connection after a failed authentication"
    assert outcomes["gateway"] == outcomes["direct"]
    # And the right password succeeds on both, with the connection usable afterwards.
    right = {name: plain_exchange(b, *ALICE) for name, b in targets.items()}
    assert right["direct"][0] == 0 and not right["direct"][2]
    assert right["gateway"] == right["direct"]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN"])
def test_wrong_password_fails_librdkafka_alike(mechanism: str, targets: dict[str, str]) -> None:
    seen = {}
    for name, b in targets.items():
        errors: list[KafkaError] = []
        a = AdminClient(confluent_conf(b, mechanism, (BOB[0], "wrong"), error_cb=errors.append))
        with pytest.raises(KafkaException):
            a.list_topics(timeout=2)
        a.poll(1)  # serves the error callbacks
        auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        assert auth, (name, errors)
        # librdkafka's text names the broker address; the cluster's reason is what must match.
        seen[name] = auth[0].str().split(": ", 2)[-1].split(" (after")[0]
    assert seen["gateway"] == seen["direct"]


def test_unknown_mechanism_is_answered_alike(targets: dict[str, str]) -> None:
    seen = {}
    for name, b in targets.items():
        host, port = b.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(frame(SaslHandshakeRequest[1](mechanism="NOT-A-MECHANISM"), 1, 1))
            hs = codec.decode_response(17, 1, read_response(s) or b"")[1]
            seen[name] = (hs.error_code, sorted(hs.mechanisms))
    assert seen["direct"][0] == 33  # UNSUPPORTED_SASL_MECHANISM, with what the cluster offers
    assert seen["gateway"] == seen["direct"]


def test_malformed_token_is_refused_alike(targets: dict[str, str]) -> None:
    """A PLAIN token without its NUL separators: the cluster's refusal, the same way."""
    seen = {}
    for name, b in targets.items():
        host, port = b.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(frame(SaslHandshakeRequest[1](mechanism="PLAIN"), 1, 1))
            assert codec.decode_response(17, 1, read_response(s) or b"")[1].error_code == 0
            s.sendall(frame(SaslAuthenticateRequest[2](auth_bytes=b"no-separators-here"), 2, 2))
            r = codec.decode_response(36, 2, read_response(s) or b"")[1]
            s.sendall(frame(MetadataRequest[12](topics=[]), 12, 3))
            seen[name] = (r.error_code, r.error_message, closed(s))
    assert seen["direct"][0] != 0 and seen["direct"][2]
    assert seen["gateway"] == seen["direct"]


def test_requests_before_authentication_close_the_connection_alike(targets: dict[str, str]) -> None:
    for name, b in targets.items():
        host, port = b.rsplit(":", 1)
        # Metadata (passed through), JoinGroup (which the gateway answers itself for its groups), and
        # SaslAuthenticate before any SaslHandshake (out of order).
        for request in (
            frame(SaslAuthenticateRequest[2](auth_bytes=b"\0alice\0alice-secret"), 2, 1),
            frame(MetadataRequest[12](topics=[]), 12, 1),
            frame(codec.REQUESTS[11][5](group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                         member_id="", group_instance_id=None, protocol_type="consumer",
                                         protocols=[]), 5, 1),
        ):
            with socket.create_connection((host, int(port)), timeout=10) as s:
                s.sendall(request)
                assert closed(s), name


def _during_authentication(bootstrap: str, request: bytes) -> tuple[bytes | None, bool]:
    """After a SaslHandshake (PLAIN), ``request`` instead of SaslAuthenticate: the answer's bytes (None:
    none) and whether the connection closed afterwards."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(frame(SaslHandshakeRequest[1](mechanism="PLAIN"), 1, 1))
        assert codec.decode_response(17, 1, read_response(s) or b"")[1].error_code == 0
        s.sendall(request)
        try:
            answer = read_response(s)
        except (ConnectionResetError, TimeoutError):
            answer = None
        return answer, answer is None or closed(s)


def test_request_during_authentication_is_answered_illegal_sasl_state_alike(
    sasl_kafka: EmbeddedKafka, targets: dict[str, str], tmp_path: Path
) -> None:
    """Kafka's SaslServerAuthenticator answers a request other than SaslAuthenticate after a SaslHandshake
    with that request's error response, ILLEGAL_SASL_STATE (34), then closes: passthrough and termination
    answer the same bytes."""
    mcls = codec.REQUESTS[3]
    requests = {
        # Metadata naming a topic: the error on that topic (no top-level error code in the response).
        "metadata": (3, 12, frame(mcls[12](topics=[mcls.MetadataRequestTopic(topic_id=None, name="t")],
                                           allow_auto_topic_creation=False,
                                           include_topic_authorized_operations=False), 12, 2)),
        # JoinGroup, which the gateway answers itself for its groups: the top-level error code.
        "join_group": (11, 5, frame(codec.REQUESTS[11][5](
            group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
            group_instance_id=None, protocol_type="consumer", protocols=[]), 5, 2)),
    }
    creds = tmp_path / "users.json"
    add_user(creds, *ALICE)
    terminate = {"listener_sasl_mode": "terminate", "listener_sasl_credentials_file": str(creds),
                 "super.users": "User:admin"}
    with sasl.sasl_gateway(sasl_kafka, tmp_path, terminate, extra_args=("--ephemeral-state",)) as term:
        where = {**targets, "terminate": term.bootstrap}
        seen = {(name, what): _during_authentication(b, req) for name, b in where.items()
                for what, (_k, _v, req) in requests.items()}
    for what, (api_key, version, _req) in requests.items():
        answer, was_closed = seen["direct", what]
        assert answer is not None and was_closed, what
        body = codec.decode_response(api_key, version, answer)[1]
        codes = {t.error_code for t in body.topics} if api_key == 3 else {body.error_code}
        assert codes == {34}, (what, body)  # ILLEGAL_SASL_STATE
        assert seen["gateway", what] == seen["direct", what], what
        assert seen["terminate", what] == seen["direct", what], what


def test_topic_without_read_is_refused_alike(
    targets: dict[str, str], sasl_kafka: EmbeddedKafka, secured_topic: str, names: Callable[[str], str]
) -> None:
    # Bob may see the topic (DESCRIBE) but not read it; his group he may use.
    group = names("group")
    grant(
        sasl_kafka,
        (ResourceType.TOPIC, secured_topic, "User:bob", AclOperation.DESCRIBE),
        (ResourceType.GROUP, group, "User:bob", AclOperation.READ),
    )
    seen = {}
    for name, b in targets.items():
        c = Consumer(confluent_conf(b, "SCRAM-SHA-256", BOB, **{"group.id": group, "enable.auto.commit": False}))
        try:
            c.assign([TopicPartition(secured_topic, 0, 0)])
            deadline = time.monotonic() + WAIT_S
            code = None
            while code is None and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and m.error() is not None:
                    code = m.error().code()
            seen[name] = code
        finally:
            c.close()
    assert seen["direct"] == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert seen["gateway"] == seen["direct"]


# --- the gateway's own credentials --------------------------------------------------------------------


def _serve(upstream: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [groupgate_binary(), "serve", "--upstream", upstream, "--listen", "127.0.0.1:0", "--ephemeral-state", *args],
        capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})},
    )


def test_gateway_without_upstream_credentials_fails_with_a_clear_message(sasl_kafka: EmbeddedKafka) -> None:
    r = _serve(sasl_kafka.sasl_bootstrap)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("groupgate:")]
    assert len(lines) == 1 and "requires SASL authentication" in lines[0], r.stderr
    assert "upstream_sasl_mechanism" in lines[0]


def test_gateway_with_a_wrong_upstream_password_fails_at_once(sasl_kafka: EmbeddedKafka) -> None:
    started = time.monotonic()
    r = _serve(
        sasl_kafka.sasl_bootstrap, "--upstream-sasl-mechanism", "SCRAM-SHA-256", "--upstream-sasl-username", "admin",
        env={"GROUPGATE_UPSTREAM_SASL_PASSWORD": "a-wrong-password"},
    )
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("groupgate:")]
    assert len(lines) == 1 and "refused" in lines[0] and "'admin'" in lines[0], r.stderr
    assert "a-wrong-password" not in r.stderr + r.stdout
    # Not the retry loop of an unreachable upstream (upstream_connect_timeout_s, 10 s by default).
    assert time.monotonic() - started < 10


# --- the authorizer decides as the broker does -----------------------------------------------------------


def test_group_authorized_operations_match_the_broker(
    sasl_kafka: EmbeddedKafka, names: Callable[[str], str]
) -> None:
    """The broker's authorized operations for a group (DescribeGroups, KIP-430) equal what
    translate.authorizer computes from the ACLs DescribeAcls reports."""
    group = names("group")
    admin = admin_client(sasl_kafka)
    prefix = group[: len(group) // 2]
    bindings = [
        AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                   AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, prefix, ResourcePatternType.PREFIXED, "User:*", "*", AclOperation.ALTER_CONFIGS,
                   AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, prefix, ResourcePatternType.PREFIXED, "User:alice", "*", AclOperation.DELETE,
                   AclPermissionType.ALLOW),
        AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.DELETE,
                   AclPermissionType.DENY),
        AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:bob", "10.9.9.9", AclOperation.ALL,
                   AclPermissionType.ALLOW),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(timeout=WAIT_S)
    acls_applied(admin, bindings)
    listed = admin.describe_acls(
        AclBindingFilter(ResourceType.GROUP, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                         AclPermissionType.ANY)
    ).result(timeout=WAIT_S)
    snapshot = az.AclSnapshot.of(
        (
            az.AclBinding(
                az.ResourceType(int(b.restype.value)), b.name, az.PatternType(int(b.resource_pattern_type.value)),
                b.principal, b.host, az.Operation(int(b.operation.value)), az.Permission(int(b.permission_type.value)),
            )
            for b in listed
        ),
        super_users={"User:ANONYMOUS", "User:admin"},
    )
    for user in (ALICE, BOB, ADMIN):
        client = AdminClient(confluent_conf(sasl_kafka.sasl_bootstrap, "SCRAM-SHA-256", user))
        try:
            described = client.describe_consumer_groups([group], include_authorized_operations=True)[group].result(
                timeout=WAIT_S
            )
            broker_bits = sum(1 << int(op.value) for op in described.authorized_operations or [])
        except KafkaException as e:
            assert e.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED, e
            broker_bits = None
        ours = snapshot.group_authorized_operations(f"User:{user[0]}", "127.0.0.1", group)
        if broker_bits is None:
            # The broker refuses the whole describe without DESCRIBE on the group.
            assert not snapshot.authorize(f"User:{user[0]}", "127.0.0.1", az.Operation.DESCRIBE, az.ResourceType.GROUP,
                                          group), user
        else:
            assert ours == broker_bits, (user, ours, broker_bits)


def test_gateway_authenticates_over_sasl_ssl(
    sasl_kafka: EmbeddedKafka, sasl_pki: Pki | None, tmp_path: Path, names: Callable[[str], str]
) -> None:
    """security.protocol=SASL_SSL upstream: TLS to the brokers (CA checked) and SCRAM inside it, for the
    gateway's own connections and for the clients' exchanges it passes through."""
    if sasl_pki is None:
        pytest.skip(openssl_missing_reason() or "no certificates")
    topic = create_topic(sasl_kafka.bootstrap, names("topic"), 1)
    group = names("group")
    grant_alice(sasl_kafka, topic, group)
    pw = tmp_path / "pw"
    pw.write_text(ADMIN[1])
    gw = GatewayProcess(
        upstream=sasl_kafka.sasl_ssl_bootstrap, listen_port=free_port_block(3), log_dir=tmp_path,
        extra_args=["--listener-security-protocol", "SASL_PLAINTEXT", "--upstream-security-protocol", "SASL_SSL",
                    "--upstream-tls-ca", sasl_pki.ca, "--upstream-sasl-mechanism", "SCRAM-SHA-256",
                    "--upstream-sasl-username", ADMIN[0], "--upstream-sasl-password-file", str(pw)],
    ).start()
    try:
        values = [f"sasl-ssl-{i}".encode() for i in range(10)]
        got = produce_consume(confluent_conf(gw.bootstrap, "SCRAM-SHA-512", ALICE), topic, group, values)
        assert sorted(got) == sorted(values)
    finally:
        gw.stop()


def test_the_gateway_reads_the_clusters_acls(sasl_kafka: EmbeddedKafka, names: Callable[[str], str]) -> None:
    """gateway/authz/acls.py under the gateway's own SASL principal: the ACLs the broker enforces; a principal
    without DESCRIBE on the cluster is refused with the cluster's error."""
    import asyncio

    from gateway.authz.acls import AclReadError, read_snapshot
    from gateway.config.settings import GatewayConfig
    from gateway.net.upstream import BrokerDirectory
    from gateway.net.upstream_client import UpstreamClient

    group = names("group")
    grant(sasl_kafka, (ResourceType.GROUP, group, "User:alice", AclOperation.READ))

    async def read(user: tuple[str, str]) -> az.AclSnapshot:
        config = GatewayConfig.model_validate({
            "upstream": sasl_kafka.sasl_bootstrap, "upstream_sasl_mechanism": "SCRAM-SHA-256",
            "upstream_sasl_username": user[0], "upstream_sasl_password": user[1],
        })
        directory = BrokerDirectory(config)
        await directory.refresh()
        client = UpstreamClient(directory, lambda: 10.0)
        try:
            return await read_snapshot(client, frozenset({"User:admin"}))
        finally:
            client.close()

    snap = asyncio.run(read(ADMIN))
    assert az.AclBinding(az.ResourceType.GROUP, group, az.PatternType.LITERAL, "User:alice", "*", az.Operation.READ,
                         az.Permission.ALLOW) in snap.bindings
    assert snap.authorize("User:alice", "127.0.0.1", az.Operation.READ, az.ResourceType.GROUP, group)
    assert not snap.authorize("User:bob", "127.0.0.1", az.Operation.READ, az.ResourceType.GROUP, group)
    with pytest.raises(AclReadError) as refused:
        asyncio.run(read(ALICE))
    assert refused.value.error_code == 31  # CLUSTER_AUTHORIZATION_FAILED: DescribeAcls needs DESCRIBE on the cluster
