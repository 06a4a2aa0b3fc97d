"""The SASL-secured broker of the compat suites: its users, and client settings for them.

The broker (``sasl_kafka`` fixture) has a SASL_PLAINTEXT listener with PLAIN, SCRAM-SHA-256/512 and
OAUTHBEARER (Kafka's unsecured token validator: tokens with alg "none", checked for exp and sub), the
StandardAuthorizer, ``super.users`` = User:admin and ``allow.everyone.if.no.acl.found=false``. Its
PLAINTEXT listener is the harness's administrative channel (User:ANONYMOUS is a super user there, see
gateway.ops.embedded_kafka.BrokerSasl); tests create topics and ACLs through it and hand clients only the
SASL listener (directly) or the gateway in front of it.

Also what the SASL suites share: the gateway in front of that broker, ACLs granted and revoked (waiting
until the broker's authorizer applies them), raw SASL exchanges on a socket, and a round trip of records
with librdkafka or Kafka's Java tools.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jwt
from confluent_kafka import Consumer, Producer
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

from compat_tests.harness.gateway_proc import GatewayProcess
from compat_tests.harness.java import (
    OffsetsCommitted,
    ProducerSendSuccess,
    RecordsConsumed,
    verifiable_consumer,
    verifiable_producer,
)
from gateway.wire import codec

if TYPE_CHECKING:
    from gateway.ops.embedded_kafka import EmbeddedKafka

ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")
BOB = ("bob", "bob-secret")
USERS = dict([ADMIN, ALICE, BOB])
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# The broker's connections.max.reauth.ms.
SASL_SESSION_MS = 4000
WAIT_S = 30.0


def confluent_conf(bootstrap: str, mechanism: str, user: tuple[str, str], **extra: Any) -> dict[str, Any]:
    """librdkafka settings for ``user`` (name, password) over SASL_PLAINTEXT."""
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user[0],
        "sasl.password": user[1],
        **extra,
    }


def java_props(mechanism: str, user: tuple[str, str]) -> dict[str, str]:
    """Java client settings for ``user`` over SASL_PLAINTEXT."""
    module = (
        "org.apache.kafka.common.security.plain.PlainLoginModule"
        if mechanism == "PLAIN"
        else "org.apache.kafka.common.security.scram.ScramLoginModule"
    )
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.jaas.config": f'{module} required username="{user[0]}" password="{user[1]}";',
    }


def unsecured_token(sub: str, lifetime_s: int = 3600, **claims: Any) -> str:
    """A token Kafka's unsecured validator accepts (while unexpired): alg "none", sub, iat, exp."""
    now = int(time.time())
    return jwt.encode({"sub": sub, "iat": now, "exp": now + lifetime_s, **claims}, None, algorithm="none")


def confluent_oauth_conf(bootstrap: str, sub: str, **extra: Any) -> dict[str, Any]:
    """librdkafka settings for OAUTHBEARER with its own unsecured token naming ``sub``."""
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": f"principal={sub}",
        **extra,
    }


def java_oauth_props(sub: str) -> dict[str, str]:
    """Java client settings for OAUTHBEARER with Kafka's unsecured login (a token naming ``sub``)."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            f'unsecuredLoginStringClaim_sub="{sub}";'
        ),
    }


class SaslSession:
    """One SASL_PLAINTEXT connection authenticated with PLAIN as ``user``, for exact requests and answers
    (the error codes a client would see, without a client library's retries in between)."""

    def __init__(self, bootstrap: str, user: tuple[str, str], client_id: str = "authz-probe") -> None:
        import socket

        from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=15)
        self.client_id = client_id
        self.corr = 0
        hs = self.call(17, 1, SaslHandshakeRequest[1](mechanism="PLAIN"))
        assert hs.error_code == 0, hs
        auth = self.call(36, 2, SaslAuthenticateRequest[2](auth_bytes=f"\0{user[0]}\0{user[1]}".encode()))
        assert auth.error_code == 0, auth

    def call(self, api_key: int, version: int, msg: Any) -> Any:
        from gateway.wire import codec

        self.corr += 1
        msg.with_header(correlation_id=self.corr, client_id=self.client_id)
        self.sock.sendall(bytes(msg.encode(version=version, header=True, framed=True)))
        size = int.from_bytes(self._read(4), "big")
        return codec.decode_response(api_key, version, self._read(size))[1]

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("connection closed")
            data += chunk
        return data

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> SaslSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- the gateway in front of the SASL broker -----------------------------------------------------------


def write_toml(path: Path, settings: dict[str, Any], coordinator: dict[str, Any] | None = None) -> Path:
    # JSON strings and booleans read as TOML; quoted keys keep Kafka's dotted names whole.
    lines = [f"{json.dumps(k)} = {json.dumps(v)}" for k, v in settings.items()]
    if coordinator:
        lines += ["[coordinator]", *(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in coordinator.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


@contextmanager
def sasl_gateway(
    sasl_kafka: EmbeddedKafka,
    log_dir: Path,
    settings: dict[str, Any] | None = None,
    coordinator: dict[str, Any] | None = None,
    *,
    as_admin: bool = True,
    extra_args: tuple[str, ...] = (),
) -> Iterator[GatewayProcess]:
    """A gateway in front of the broker's SASL listener, with SASL_PLAINTEXT client listeners, stopped on
    exit. ``as_admin``: its own connections authenticate as User:admin with SCRAM-SHA-512 (a password
    file in ``log_dir``). ``settings`` / ``coordinator``: a configuration file of further settings."""
    args = ["--listener-security-protocol", "SASL_PLAINTEXT"]
    if as_admin:
        pw = log_dir / "upstream-password"
        pw.write_text(ADMIN[1] + "\n")
        args += ["--upstream-sasl-mechanism", "SCRAM-SHA-512", "--upstream-sasl-username", ADMIN[0],
                 "--upstream-sasl-password-file", str(pw)]
    if settings or coordinator:
        args += ["--config", str(write_toml(log_dir / "gateway.toml", settings or {}, coordinator))]
    gw = GatewayProcess(upstream=sasl_kafka.sasl_bootstrap, log_dir=log_dir, extra_args=[*args, *extra_args])
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()


def targets(sasl_kafka: EmbeddedKafka, gw: GatewayProcess) -> dict[str, str]:
    """Where a client connects: the broker's SASL listener itself, and the gateway in front of it."""
    return {"direct": sasl_kafka.sasl_bootstrap, "gateway": gw.bootstrap}


# --- ACLs, through the broker's administrative PLAINTEXT listener ----------------------------------------


def admin_client(sasl_kafka: EmbeddedKafka) -> AdminClient:
    # The harness's administrative channel (not a client path under test).
    return AdminClient({"bootstrap.servers": sasl_kafka.bootstrap, "socket.timeout.ms": 10000})


_EVERYTHING = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                               AclPermissionType.ANY)

Acl = tuple[ResourceType, str, str, AclOperation]


def allow(rt: ResourceType, name: str, principal: str, op: AclOperation) -> AclBinding:
    """ALLOW, literal, from any host."""
    return AclBinding(rt, name, ResourcePatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW)


def acls_applied(admin: AdminClient, bindings: list[AclBinding], present: bool = True) -> None:
    """Until the broker's authorizer lists (or no longer lists) them: CreateAcls returns once the controller
    committed them, and the broker applies that metadata a moment later (DescribeAcls reads the broker's
    authorizer)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        listed = set(admin.describe_acls(_EVERYTHING).result(timeout=WAIT_S))
        if all((b in listed) == present for b in bindings):
            return
        assert time.monotonic() < deadline, f"ACL change not applied within {WAIT_S}s: {bindings}"
        time.sleep(0.05)


def grant(sasl_kafka: EmbeddedKafka, *acls: AclBinding | Acl) -> None:
    """Create the bindings ((resource type, name, principal, operation): ``allow``) and wait for them."""
    bindings = [a if isinstance(a, AclBinding) else allow(*a) for a in acls]
    admin = admin_client(sasl_kafka)  # kept alive until the results are in
    for f in admin.create_acls(bindings).values():
        f.result(timeout=WAIT_S)
    acls_applied(admin, bindings)


def revoke(sasl_kafka: EmbeddedKafka, *bindings: AclBinding) -> None:
    admin = admin_client(sasl_kafka)
    filters = [
        AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type)
        for b in bindings
    ]
    for f in admin.delete_acls(filters).values():
        f.result(timeout=WAIT_S)
    acls_applied(admin, list(bindings), False)


def grant_alice(sasl_kafka: EmbeddedKafka, topic: str, group: str) -> None:
    """What alice needs to produce to and consume ``topic`` in ``group``."""
    grant(
        sasl_kafka,
        (ResourceType.TOPIC, topic, "User:alice", AclOperation.WRITE),
        (ResourceType.TOPIC, topic, "User:alice", AclOperation.READ),
        (ResourceType.GROUP, group, "User:alice", AclOperation.READ),
    )


# --- raw exchanges: exactly what a client is told ---------------------------------------------------------


def frame(msg: Any, version: int, corr: int) -> bytes:
    msg.with_header(correlation_id=corr, client_id="sasl-probe")
    return bytes(msg.encode(version=version, header=True, framed=True))


def read_response(sock: socket.socket) -> bytes | None:
    """One response payload, or None when the peer closed the connection."""
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">i", head)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def closed(sock: socket.socket) -> bool:
    try:
        return read_response(sock) is None
    except (ConnectionResetError, TimeoutError):
        return True


def plain_authenticate(s: socket.socket, corr: int, user: tuple[str, str] = ALICE) -> Any:
    """SaslHandshake (PLAIN, which must be offered) then SaslAuthenticate as ``user``: the latter's answer."""
    s.sendall(frame(SaslHandshakeRequest[1](mechanism="PLAIN"), 1, corr))
    assert codec.decode_response(17, 1, read_response(s) or b"")[1].error_code == 0
    s.sendall(frame(SaslAuthenticateRequest[2](auth_bytes=f"\0{user[0]}\0{user[1]}".encode()), 2, corr + 1))
    return codec.decode_response(36, 2, read_response(s) or b"")[1]


def plain_exchange(bootstrap: str, user: str, password: str) -> tuple[int, str | None, bool]:
    """(error code, error message, closed afterwards) of a PLAIN SaslAuthenticate on a fresh connection."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        r = plain_authenticate(s, 1, (user, password))
        s.sendall(frame(MetadataRequest[12](topics=[]), 12, 3))
        return r.error_code, r.error_message, closed(s)


# --- records both ways -------------------------------------------------------------------------------------


def produce_consume(conf: dict[str, Any], topic: str, group: str, values: list[bytes]) -> list[bytes]:
    """Produce ``values`` with librdkafka (``conf``: a client's settings), then consume ``topic`` from the
    beginning in ``group`` until they are all read (or WAIT_S), committing; what was read."""
    p = Producer({**conf, "acks": "all"})
    errors: list[Any] = []
    for v in values:
        p.produce(topic, v, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(WAIT_S) == 0 and not errors, errors
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while not set(values) <= set(got) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


def java_produce(bootstrap: str, props: dict[str, str], topic: str, java_logs: Path, n: int = 100) -> Path:
    """``n`` records with Kafka's VerifiableProducer (``props``: its client settings); the properties file."""
    path = java_logs / "client.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    producer = verifiable_producer("4.4.0", bootstrap, topic, n, log_dir=java_logs)
    producer.args += ["--command-config", str(path)]
    with producer:
        assert producer.wait(60) == 0, producer.tail()
    assert len(producer.of_type(ProducerSendSuccess)) == n, producer.tail()
    return path


def java_round_trip(
    bootstrap: str, props: dict[str, str], topic: str, group: str, java_logs: Path, n: int = 100
) -> None:
    """``n`` records produced and consumed by Kafka's Java tools, every offset commit successful."""
    path = java_produce(bootstrap, props, topic, java_logs, n)
    consumer = verifiable_consumer("4.4.0", bootstrap, topic, group, max_messages=n, log_dir=java_logs)
    consumer.args += ["--command-config", str(path)]
    with consumer:
        assert consumer.wait(60) == 0, consumer.tail()
    assert sum(e.count for e in consumer.of_type(RecordsConsumed)) == n, consumer.tail()
    commits = consumer.of_type(OffsetsCommitted)
    assert commits and all(e.success for e in commits), consumer.tail()
