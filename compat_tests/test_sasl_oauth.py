"""OAUTHBEARER and SASL termination in front of the secured broker (``sasl_kafka``).

- Passthrough OAUTHBEARER: clients present tokens that the broker checks (Kafka's unsecured validator);
  the gateway learns the principal from the token once the broker accepted it. The gateway itself also
  authenticates with OAUTHBEARER (a token file naming User:admin), on its metadata connections and on the
  state topic's aiokafka clients (``--state-store kafka``): the group's offsets and state go through them.
- Termination: the gateway authenticates clients with SCRAM/PLAIN from its credentials file (and
  OAUTHBEARER over a local JWKS) and talks to the broker as User:admin with SCRAM-SHA-512.

Where the broker can run the same scenario, it runs directly and through the gateway with the same outcome.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from cryptography.hazmat.primitives.asymmetric import rsa
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from compat_tests.harness.admin import create_topic
from compat_tests.harness.gateway_proc import GatewayProcess, groupgate_binary
from compat_tests.harness.sasl import (
    ADMIN,
    ALICE,
    BOB,
    SASL_SESSION_MS,
    closed,
    confluent_conf,
    confluent_oauth_conf,
    frame,
    grant_alice,
    java_oauth_props,
    java_produce,
    java_props,
    java_round_trip,
    plain_authenticate,
    plain_exchange,
    produce_consume,
    read_response,
    sasl_gateway,
    unsecured_token,
)
from gateway.net.upstream import UpstreamAuthError, request_once
from gateway.ops.embedded_kafka import EmbeddedKafka
from gateway.security.oauth import TokenSource, client_first_message
from gateway.security.sasl_server import add_user
from gateway.wire import codec

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]



@pytest.fixture(scope="module")
def oauth_gateway(
    sasl_kafka: EmbeddedKafka, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    """Passthrough; the gateway's own connections (metadata, state topic) use OAUTHBEARER as User:admin."""
    d = tmp_path_factory.mktemp("oauth-gateway")
    token = d / "token"
    token.write_text(unsecured_token(ADMIN[0]) + "\n")
    settings = {
        "upstream_security_protocol": "SASL_PLAINTEXT",
        "upstream_sasl_mechanism": "OAUTHBEARER",
        "upstream_sasl_oauthbearer_token_file": str(token),
    }
    coordinator = {"state_topic": f"oauth-gw-state-{os.getpid()}",
                   # A few shards: each is a transactional producer to start.
                   "state_topic_num_partitions": 2}
    with sasl_gateway(sasl_kafka, d, settings, coordinator, as_admin=False,
                      extra_args=("--state-store", "kafka", "--log-level", "debug")) as gw:
        yield gw


@pytest.fixture(scope="module")
def jwks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid="gw-test", use="sig", alg="RS256")
    path = tmp_path_factory.mktemp("jwks") / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk]}))
    return key, path


@pytest.fixture(scope="module")
def term_gateway(
    sasl_kafka: EmbeddedKafka, tmp_path_factory: pytest.TempPathFactory, jwks: tuple[Any, Path]
) -> Iterator[GatewayProcess]:
    """Termination: clients authenticate with the gateway; the gateway is User:admin to the broker."""
    d = tmp_path_factory.mktemp("term-gateway")
    creds = d / "users.json"
    for user, password in (ALICE, BOB):
        add_user(creds, user, password)
    settings = {
        "listener_sasl_mode": "terminate",
        "listener_sasl_credentials_file": str(creds),
        # The deliberate opt-out: no authorization of data requests, the gateway's rights for everyone
        # (compat_tests/test_termination_authz.py runs termination with authorization on).
        "authorization": "off",
        "listener_sasl_terminate_grants_gateway_rights": True,
        "sasl.oauthbearer.jwks.endpoint.url": jwks[1].as_uri(),
        "sasl.oauthbearer.expected.audience": "kafka",
    }
    with sasl_gateway(sasl_kafka, d, settings, extra_args=("--log-level", "debug")) as gw:
        yield gw


@pytest.fixture
def secured_topic(sasl_kafka: EmbeddedKafka, names: Callable[[str], str]) -> str:
    return create_topic(sasl_kafka.bootstrap, names("topic"), 2)


def _gateway_log(gw: GatewayProcess) -> str:
    return gw.log_path.read_text()


# --- passthrough OAUTHBEARER ---------------------------------------------------------------------------


def test_oauthbearer_clients_alike_and_the_gateway_learns_the_principal(
    sasl_kafka: EmbeddedKafka, oauth_gateway: GatewayProcess, secured_topic: str, names: Callable[[str], str]
) -> None:
    for name, bootstrap in {"direct": sasl_kafka.sasl_bootstrap, "gateway": oauth_gateway.bootstrap}.items():
        group = names(f"group-{name}")
        grant_alice(sasl_kafka, secured_topic, group)
        values = [f"{name}-{i}".encode() for i in range(10)]
        got = produce_consume(confluent_oauth_conf(bootstrap, ALICE[0]), secured_topic, group, values)
        assert set(values) <= set(got), name
    # The principal the gateway took from the token, only after the broker accepted it.
    assert "principal=User:alice" in _gateway_log(oauth_gateway)


def test_java_oauthbearer_through_the_gateway(
    sasl_kafka: EmbeddedKafka, oauth_gateway: GatewayProcess, secured_topic: str, names: Callable[[str], str],
    java_logs: Path,
) -> None:
    group = names("group")
    grant_alice(sasl_kafka, secured_topic, group)
    java_round_trip(oauth_gateway.bootstrap, java_oauth_props(ALICE[0]), secured_topic, group, java_logs)


def _oauth_exchange(bootstrap: str, token: str) -> tuple[Any, ...]:
    """(first answer's error and bytes, the answer to the client's 0x01, closed afterwards)."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(frame(SaslHandshakeRequest[1](mechanism="OAUTHBEARER"), 1, 1))
        assert codec.decode_response(17, 1, read_response(s) or b"")[1].error_code == 0
        s.sendall(frame(SaslAuthenticateRequest[2](auth_bytes=client_first_message(token)), 2, 2))
        r1 = codec.decode_response(36, 2, read_response(s) or b"")[1]
        if r1.error_code != 0 or not r1.auth_bytes:
            s.sendall(frame(MetadataRequest[12](topics=[]), 12, 3))
            return (r1.error_code, bytes(r1.auth_bytes), None, None, closed(s) if r1.error_code else read_response(s) is None)
        s.sendall(frame(SaslAuthenticateRequest[2](auth_bytes=b"\x01"), 2, 3))
        r2 = codec.decode_response(36, 2, read_response(s) or b"")[1]
        s.sendall(frame(MetadataRequest[12](topics=[]), 12, 4))
        return (r1.error_code, bytes(r1.auth_bytes), r2.error_code, r2.error_message, closed(s))


@pytest.mark.parametrize("token", ["expired", "garbage", "no-sub"])
def test_bad_token_is_refused_alike(token: str, sasl_kafka: EmbeddedKafka, oauth_gateway: GatewayProcess) -> None:
    tok = {
        "expired": unsecured_token(ALICE[0], lifetime_s=-600),
        "garbage": "not.a.token",
        "no-sub": jwt.encode({"exp": int(time.time()) + 600, "iat": int(time.time())}, None, algorithm="none"),
    }[token]
    seen = {name: _oauth_exchange(b, tok) for name, b in
            {"direct": sasl_kafka.sasl_bootstrap, "gateway": oauth_gateway.bootstrap}.items()}
    assert seen["direct"][2] == 58 and seen["direct"][4], seen  # refused, then the connection closes
    assert seen["gateway"] == seen["direct"]


def test_bad_token_fails_librdkafka_alike(sasl_kafka: EmbeddedKafka, oauth_gateway: GatewayProcess) -> None:
    seen = {}
    for name, b in {"direct": sasl_kafka.sasl_bootstrap, "gateway": oauth_gateway.bootstrap}.items():
        errors: list[KafkaError] = []
        expired = unsecured_token(ALICE[0], lifetime_s=-600)
        conf = {
            "bootstrap.servers": b, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
            # The application's token (past its exp, which librdkafka does not check) instead of its own.
            "oauth_cb": lambda _cfg, t=expired: (t, time.time() + 600, ALICE[0]),
            "error_cb": errors.append,
        }
        a = AdminClient(conf)
        with pytest.raises(KafkaException):
            a.list_topics(timeout=2)
        a.poll(1)
        auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        assert auth, (name, errors)
        seen[name] = auth[0].str().split(": ", 2)[-1].split(" (after")[0]
    assert seen["gateway"] == seen["direct"]


# --- termination ---------------------------------------------------------------------------------------


def test_termination_scram_produces_and_consumes_as_the_gateway(
    term_gateway: GatewayProcess, secured_topic: str, names: Callable[[str], str]
) -> None:
    """alice has no ACL at all on this topic: through a terminating gateway the broker sees User:admin
    (the trust model in docs/gateway.md, "SASL termination")."""
    values = [f"term-{i}".encode() for i in range(10)]
    got = produce_consume(confluent_conf(term_gateway.bootstrap, "SCRAM-SHA-256", ALICE), secured_topic,
                           names("group"), values)
    assert set(values) <= set(got)
    assert "principal=User:alice" in _gateway_log(term_gateway)


def test_termination_java_scram(term_gateway: GatewayProcess, secured_topic: str, java_logs: Path) -> None:
    """Kafka's own SCRAM client against the gateway's SCRAM server (librdkafka consumes above)."""
    java_produce(term_gateway.bootstrap, java_props("SCRAM-SHA-512", BOB), secured_topic, java_logs)


def test_termination_wrong_password_fails_as_on_the_broker(
    sasl_kafka: EmbeddedKafka, term_gateway: GatewayProcess
) -> None:
    seen = {}
    for name, b in {"direct": sasl_kafka.sasl_bootstrap, "gateway": term_gateway.bootstrap}.items():
        errors: list[KafkaError] = []
        a = AdminClient(confluent_conf(b, "SCRAM-SHA-256", (ALICE[0], "wrong"), error_cb=errors.append))
        with pytest.raises(KafkaException):
            a.list_topics(timeout=2)
        a.poll(1)
        auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        assert auth, (name, errors)
        seen[name] = auth[0].str().split(": ", 2)[-1].split(" (after")[0]
    assert seen["gateway"] == seen["direct"]


def test_termination_plain_exchanges_read_as_the_brokers(
    sasl_kafka: EmbeddedKafka, term_gateway: GatewayProcess
) -> None:
    for user, password in ((ALICE[0], "wrong"), ("nobody", "x"), ALICE):
        direct = plain_exchange(sasl_kafka.sasl_bootstrap, user, password)
        assert plain_exchange(term_gateway.bootstrap, user, password) == direct, (user, password)


def test_termination_oauthbearer_over_a_jwks(term_gateway: GatewayProcess, jwks: tuple[Any, Path]) -> None:
    key, _ = jwks
    now = int(time.time())
    good = jwt.encode({"sub": "carol", "aud": "kafka", "iat": now, "exp": now + 300}, key, algorithm="RS256",
                      headers={"kid": "gw-test"})
    assert _oauth_exchange(term_gateway.bootstrap, good) == (0, b"", None, None, False)
    # An unsecured token (what the broker's test listener takes) is no token for a JWKS-checking gateway.
    refused = _oauth_exchange(term_gateway.bootstrap, unsecured_token("carol", aud="kafka"))
    assert refused == (0, b'{"status":"invalid_token"}', 58, '{"status":"invalid_token"}', True)


def test_termination_without_authorization_does_not_start_without_accepting_the_trust_model(tmp_path: Path) -> None:
    add_user(tmp_path / "users.json", *ALICE)
    r = subprocess.run(
        [groupgate_binary(), "serve", "--upstream", "127.0.0.1:1", "--listener-security-protocol", "SASL_PLAINTEXT",
         "--listener-sasl-mode", "terminate", "--listener-sasl-credentials-file", str(tmp_path / "users.json"),
         "--authorization", "off"],
        capture_output=True, text=True, timeout=60,
    )
    assert r.returncode == 2
    assert "listener_sasl_terminate_grants_gateway_rights" in r.stderr


def test_termination_outlives_the_gateways_upstream_session(
    term_gateway: GatewayProcess, secured_topic: str
) -> None:
    """The broker gives the gateway's sessions SASL_SESSION_MS (KIP-368) and closes a link used after
    that; a client of the terminating gateway keeps its connection across it, on a new link."""
    host, port = term_gateway.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        r = plain_authenticate(s, 1)
        assert (r.error_code, r.session_lifetime_ms) == (0, 0)  # no lifetime for the client's own session
        s.sendall(frame(MetadataRequest[12](topics=[]), 12, 3))
        assert read_response(s) is not None
        time.sleep(SASL_SESSION_MS * 1.2 / 1000)
        # A request never asked before (no remembered answer could stand in for the broker's).
        s.sendall(frame(MetadataRequest[12](topics=[MetadataRequest[12].MetadataRequestTopic(topic_id=None, name=secured_topic)]), 12, 4))
        payload = read_response(s)
        assert payload is not None, "the client connection was closed"
        md = codec.decode_response(3, 12, payload)[1]
        assert [(t.name, t.error_code) for t in md.topics] == [(secured_topic, 0)]


class _TokenEndpoint(BaseHTTPRequestHandler):
    """An OAuth token endpoint (client credentials grant) handing out tokens the broker's unsecured
    validator accepts, for the client id it was asked by."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        user, _, secret = base64.b64decode(self.headers["Authorization"].split()[1]).decode().partition(":")
        if secret == "s3cret":
            code, body = 200, {"access_token": unsecured_token(user), "token_type": "Bearer", "expires_in": 3600}
        else:
            code, body = 401, {"error": "invalid_client"}
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


async def test_the_gateways_tokens_from_a_client_credentials_endpoint(sasl_kafka: EmbeddedKafka) -> None:
    srv = HTTPServer(("127.0.0.1", 0), _TokenEndpoint)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/token"
    host, port = sasl_kafka.sasl_bootstrap.rsplit(":", 1)
    try:
        good = TokenSource(endpoint=url, client_id=ADMIN[0], client_secret=lambda: "s3cret")
        md = await request_once(host, int(port), 3, 12, MetadataRequest[12](topics=None), 10, credentials=good)
        assert md.brokers  # authenticated as User:admin, who may describe the cluster
        bad = TokenSource(endpoint=url, client_id=ADMIN[0], client_secret=lambda: "wrong")
        with pytest.raises(UpstreamAuthError, match="401: invalid_client") as e:
            await request_once(host, int(port), 3, 12, MetadataRequest[12](topics=None), 10, credentials=bad)
        assert "wrong" not in str(e.value)
    finally:
        srv.shutdown()
        srv.server_close()
