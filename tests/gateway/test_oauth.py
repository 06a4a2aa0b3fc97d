"""OAUTHBEARER: the principal of a client's token (passthrough), the exchange's states, and the gateway's
own tokens (a file, or a token endpoint with the client credentials grant)."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import parse_qs

import jwt
import pytest
from pydantic import ValidationError

from gateway.config.settings import GatewayConfig
from gateway.security import credentials
from gateway.security.oauth import TokenSource, TokenUnavailable, client_first_message, oauthbearer_token
from gateway.security.sasl import ClientSasl, principal_of
from tests.gateway.test_sasl import answer, auth, handshake_ok

METADATA = 3


def unsecured(**claims: object) -> str:
    return jwt.encode(dict(claims), key=None, algorithm="none")


def test_principal_from_the_token_sub_or_a_configured_claim() -> None:
    msg = client_first_message(unsecured(sub="alice", azp="svc-1"))
    assert principal_of("OAUTHBEARER", msg) == "User:alice"
    assert principal_of("OAUTHBEARER", msg, "azp") == "User:svc-1"
    assert principal_of("OAUTHBEARER", msg, "missing") is None
    # Not a JWT, no auth=, another scheme, no GS2 header: nobody.
    assert principal_of("OAUTHBEARER", b"n,,\x01auth=Bearer not-a-jwt\x01\x01") is None
    assert principal_of("OAUTHBEARER", b"n,,\x01host=x\x01\x01") is None
    assert oauthbearer_token(b"n,,\x01auth=Basic abc\x01\x01") is None
    assert oauthbearer_token(b"auth=Bearer abc\x01\x01") is None
    # An authzid in the GS2 header and other key-value pairs (KIP-342 extensions) are skipped.
    assert oauthbearer_token(b"n,a=bob,\x01ext=1\x01auth=Bearer abc\x01\x01") == "abc"


def test_oauthbearer_success_takes_the_principal() -> None:
    s = ClientSasl()
    handshake_ok(s, "OAUTHBEARER")
    assert auth(s, client_first_message(unsecured(sub="alice")))
    assert not s.authenticated
    answer(s, token=b"", lifetime=5000, now=100)
    assert s.authenticated and s.principal == "User:alice"
    assert s.session_expires_ms == 5100


def test_oauthbearer_error_challenge_then_failure() -> None:
    s = ClientSasl()
    handshake_ok(s, "OAUTHBEARER")
    assert auth(s, client_first_message(unsecured(sub="mallory")))
    # RFC 7628: the server's error JSON with error code 0; not authenticated, nothing but the 0x01 reply.
    answer(s, token=b'{"status":"invalid_token"}')
    assert not s.authenticated and s.principal is None
    assert not s.on_request(METADATA, 12, b"", 0).ok
    s = ClientSasl()
    handshake_ok(s, "OAUTHBEARER")
    assert auth(s, client_first_message(unsecured(sub="mallory")))
    answer(s, token=b'{"status":"invalid_token"}')
    assert auth(s, b"\x01")
    answer(s, error=58)
    assert s.state == "failed" and s.principal is None


def test_token_file_is_read_at_each_authentication(tmp_path: Path) -> None:
    import asyncio

    f = tmp_path / "token"
    src = TokenSource(token_file=str(f))
    with pytest.raises(TokenUnavailable, match="token file"):
        asyncio.run(src.token())
    f.write_text("first\n")
    assert asyncio.run(src.token()) == "first"
    f.write_text("second")
    assert asyncio.run(src.token()) == "second"


class _Endpoint(BaseHTTPRequestHandler):
    seen: list[dict[str, object]] = []
    status = 200

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        user, _, secret = base64.b64decode(self.headers["Authorization"].split()[1]).decode().partition(":")
        type(self).seen.append({"form": parse_qs(body), "user": user, "secret": secret})
        if secret != "s3cret":
            out, code = {"error": "invalid_client", "error_description": "bad secret"}, 401
        else:
            out, code = {"access_token": unsecured(sub=user), "token_type": "Bearer", "expires_in": 3600}, 200
        data = json.dumps(out).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def endpoint() -> Iterator[str]:
    _Endpoint.seen = []
    srv = HTTPServer(("127.0.0.1", 0), _Endpoint)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/token"
    finally:
        srv.shutdown()
        srv.server_close()


async def test_client_credentials_grant_and_token_reuse(endpoint: str) -> None:
    clock = [1000.0]
    src = TokenSource(endpoint=endpoint, client_id="gw", client_secret=lambda: "s3cret", scope="kafka",
                      clock=lambda: clock[0])
    t1 = await src.token()
    assert jwt.decode(t1, options={"verify_signature": False})["sub"] == "gw"
    assert _Endpoint.seen[0]["form"] == {"grant_type": ["client_credentials"], "scope": ["kafka"]}
    assert (_Endpoint.seen[0]["user"], _Endpoint.seen[0]["secret"]) == ("gw", "s3cret")
    clock[0] += 3600 * 0.5
    assert await src.token() == t1 and src.fetches == 1  # reused within the refresh window
    clock[0] += 3600 * 0.35
    await src.token()
    assert src.fetches == 2  # past 80% of its lifetime: fetched again


async def test_endpoint_refusal_names_the_oauth_error_not_the_secret(endpoint: str) -> None:
    src = TokenSource(endpoint=endpoint, client_id="gw", client_secret=lambda: "wrong-secret")
    with pytest.raises(TokenUnavailable) as e:
        await src.token()
    assert "401" in str(e.value) and "invalid_client (bad secret)" in str(e.value)
    assert "wrong-secret" not in str(e.value)


def _cfg(**kw: object) -> GatewayConfig:
    return GatewayConfig.model_validate(kw)


def test_upstream_oauthbearer_settings(tmp_path: Path) -> None:
    c = _cfg(**{"sasl.mechanism": "OAUTHBEARER", "security.protocol": "SASL_PLAINTEXT",
                "sasl.oauthbearer.token.endpoint.url": "https://idp/token",
                "sasl.oauthbearer.client.credentials.client.id": "gw",
                "sasl.oauthbearer.client.credentials.client.secret": "x"})
    src = credentials.upstream_sasl(c)
    assert isinstance(src, TokenSource) and src.endpoint == "https://idp/token"
    assert credentials.upstream_sasl(c) is src  # one source, so tokens are shared by every connection
    with pytest.raises(ValidationError, match="token_endpoint_url"):
        _cfg(upstream_sasl_mechanism="OAUTHBEARER")
    with pytest.raises(ValidationError, match="client_id"):
        _cfg(upstream_sasl_mechanism="OAUTHBEARER", upstream_sasl_oauthbearer_token_endpoint_url="https://idp/t")
    with pytest.raises(ValidationError, match="is not OAUTHBEARER"):
        _cfg(upstream_sasl_mechanism="PLAIN", upstream_sasl_username="u", upstream_sasl_password="p",
             upstream_sasl_oauthbearer_token_file=str(tmp_path / "t"))


def test_termination_settings_are_refused_unless_complete() -> None:
    base = {"listener_security_protocol": "SASL_PLAINTEXT", "listener_sasl_mode": "terminate",
            "listener_sasl_terminate_grants_gateway_rights": True}
    with pytest.raises(ValidationError, match="needs listener_sasl_credentials_file"):
        _cfg(**base)
    with pytest.raises(ValidationError, match="jwks"):
        _cfg(**base, listener_sasl_credentials_file="/x", **{"sasl.enabled.mechanisms": "SCRAM-SHA-256,OAUTHBEARER"})
    with pytest.raises(ValidationError, match="cannot terminate GSSAPI"):
        _cfg(**base, listener_sasl_credentials_file="/x", listener_sasl_enabled_mechanisms=["GSSAPI"])
    # The trust model: with authorization off, termination does not start without the explicit acceptance.
    with pytest.raises(ValidationError, match="gateway's rights"):
        _cfg(**{**base, "listener_sasl_terminate_grants_gateway_rights": False}, listener_sasl_credentials_file="/x",
             authorization="off")
    _cfg(**{**base, "listener_sasl_terminate_grants_gateway_rights": False}, listener_sasl_credentials_file="/x")
    with pytest.raises(ValidationError, match="SASL_PLAINTEXT or SASL_SSL"):
        _cfg(**{**base, "listener_security_protocol": None}, listener_sasl_credentials_file="/x")
    c = _cfg(**base, listener_sasl_credentials_file="/x", sasl_oauthbearer_jwks_endpoint_url="file:///j")
    assert c.terminated_mechanisms() == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
