"""gateway.security.sasl_server: the gateway authenticating clients itself (SCRAM, PLAIN, OAUTHBEARER over a JWKS)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from kafka.net.sasl.scram import SaslMechanismScram
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from gateway.security.oauth import client_first_message
from gateway.security.sasl_server import CredentialStore, JwtValidator, TerminatingSasl, add_user
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey

METADATA = 3


def _req(cls: type, version: int, **fields: object) -> bytes:
    msg = cls[version](**fields)
    msg.with_header(correlation_id=9, client_id="t")
    return bytes(msg.encode(version=version, header=True, framed=False))


async def _send(s: TerminatingSasl, api_key: int, payload: bytes) -> Any:
    version = 1 if api_key == ApiKey.SASL_HANDSHAKE else 2
    assert s.on_request(api_key, version, payload, 0).ok
    out = await s.answer(api_key, version, payload, 0)
    return codec.decode_response(api_key, version, out)[1]


async def handshake(s: TerminatingSasl, mechanism: str) -> Any:
    return await _send(s, ApiKey.SASL_HANDSHAKE, _req(SaslHandshakeRequest, 1, mechanism=mechanism))


async def authenticate(s: TerminatingSasl, token: bytes) -> Any:
    return await _send(s, ApiKey.SASL_AUTHENTICATE, _req(SaslAuthenticateRequest, 2, auth_bytes=token))


@pytest.fixture
def store(tmp_path: Path) -> CredentialStore:
    path = tmp_path / "users.json"
    add_user(path, "alice", "alice-secret")
    add_user(path, "bob", "bob-secret")
    return CredentialStore(str(path))


def term(store: CredentialStore | None = None, validator: JwtValidator | None = None) -> TerminatingSasl:
    return TerminatingSasl(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"], store, validator)


def test_the_file_keeps_no_password(tmp_path: Path, store: CredentialStore) -> None:
    text = (tmp_path / "users.json").read_text()
    assert "alice-secret" not in text
    assert oct((tmp_path / "users.json").stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_scram_with_kafka_pythons_client(mechanism: str, store: CredentialStore) -> None:
    s = term(store)
    assert (await handshake(s, mechanism)).error_code == 0
    client = SaslMechanismScram(sasl_mechanism=mechanism, sasl_plain_username="alice",
                                sasl_plain_password="alice-secret")
    while not client.is_done():
        r = await authenticate(s, client.auth_bytes())
        assert r.error_code == 0, r.error_message
        client.receive(r.auth_bytes)  # the client checks the server's signature
    assert client.is_authenticated()
    assert s.authenticated and s.principal == "User:alice"
    assert s.on_request(METADATA, 12, b"", 0).ok


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("nobody", "x")])
async def test_scram_refusals_read_as_kafkas(user: str, password: str, store: CredentialStore) -> None:
    s = term(store)
    await handshake(s, "SCRAM-SHA-256")
    client = SaslMechanismScram(sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=user,
                                sasl_plain_password=password)
    r = await authenticate(s, client.auth_bytes())
    if r.error_code == 0:  # a known user: refused at the proof
        client.receive(r.auth_bytes)
        r = await authenticate(s, client.auth_bytes())
    assert r.error_code == 58
    assert r.error_message == (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
    )
    assert s.state == "failed" and s.principal is None
    assert not s.on_request(METADATA, 12, b"", 0).ok


async def test_plain_checks_against_the_salted_entry(store: CredentialStore) -> None:
    cases = {
        b"\0alice\0alice-secret": (0, None),
        b"alice\0alice\0alice-secret": (0, None),
        b"\0alice\0wrong": (58, "Authentication failed: Invalid username or password"),
        b"\0nobody\0x": (58, "Authentication failed: Invalid username or password"),
        b"bob\0alice\0alice-secret": (
            58, "Authentication failed: Client requested an authorization id that is different from username"),
        b"nosep": (58, "Invalid SASL/PLAIN response: expected 3 tokens, got 1"),
        b"\0\0": (58, "Authentication failed: username not specified"),
    }
    for token, (code, message) in cases.items():
        s = term(store)
        await handshake(s, "PLAIN")
        r = await authenticate(s, token)
        assert (r.error_code, r.error_message or None) == (code, message), token
        assert s.authenticated == (code == 0)
    s = term(store)
    await handshake(s, "PLAIN")
    await authenticate(s, b"\0alice\0alice-secret")
    assert s.principal == "User:alice"


async def test_unoffered_mechanism_is_answered_with_the_list(store: CredentialStore) -> None:
    s = TerminatingSasl(["SCRAM-SHA-512"], store, None)
    r = await handshake(s, "PLAIN")
    assert (r.error_code, r.mechanisms) == (33, ["SCRAM-SHA-512"])
    assert s.state == "failed"


async def test_users_added_to_the_file_are_picked_up(tmp_path: Path, store: CredentialStore) -> None:
    add_user(tmp_path / "users.json", "carol", "carol-secret")
    s = term(store)
    await handshake(s, "PLAIN")
    assert (await authenticate(s, b"\0carol\0carol-secret")).error_code == 0


def test_a_malformed_credentials_file_is_a_clear_error(tmp_path: Path) -> None:
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"users": {"alice": {"SCRAM-SHA-256": {"salt": "AA=="}}}}))
    with pytest.raises(ValueError, match="not in the expected form"):
        CredentialStore(str(p))


# --- OAUTHBEARER over a JWKS ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid="k1", use="sig", alg="RS256")
    path = tmp_path_factory.mktemp("jwks") / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk]}))
    return key, path.as_uri()


def signed(key: Any, kid: str = "k1", **claims: Any) -> str:
    now = int(time.time())
    body = {"sub": "alice", "iss": "https://idp", "aud": "kafka", "iat": now, "exp": now + 300, **claims}
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key, algorithm="RS256", headers={"kid": kid})


async def test_oauthbearer_token_checked_against_the_jwks(keys: tuple[Any, str]) -> None:
    key, url = keys
    validator = JwtValidator(url, issuer="https://idp", audience=["kafka"])
    s = term(validator=validator)
    await handshake(s, "OAUTHBEARER")
    r = await authenticate(s, client_first_message(signed(key)))
    assert (r.error_code, r.auth_bytes) == (0, b"")
    assert s.authenticated and s.principal == "User:alice"


@pytest.mark.parametrize(
    "claims",
    [
        {"exp": int(time.time()) - 3600},  # expired (beyond the clock skew)
        {"iss": "https://elsewhere"},
        {"aud": "not-kafka"},
        {"exp": None},  # exp is required
        {"sub": None},  # nobody named
        {"kid": "unknown"},  # a key the JWKS does not have
        {"key": "other"},  # signed by another key
        {"alg": "none"},  # unsigned
    ],
    ids=["expired", "issuer", "audience", "no-exp", "no-sub", "unknown-kid", "other-key", "unsigned"],
)
async def test_oauthbearer_refusals(claims: dict[str, Any], keys: tuple[Any, str]) -> None:
    key, url = keys
    claims = dict(claims)
    kid = claims.pop("kid", "k1")
    if claims.pop("key", None):
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if claims.pop("alg", None):
        token = jwt.encode({"sub": "alice", "exp": int(time.time()) + 300, "aud": "kafka", "iss": "https://idp"},
                           None, algorithm="none")
    else:
        token = signed(key, kid=kid, **claims)
    s = term(validator=JwtValidator(url, issuer="https://idp", audience=["kafka"]))
    await handshake(s, "OAUTHBEARER")
    r = await authenticate(s, client_first_message(token))
    # RFC 7628: the error JSON first, then the failure after the client's 0x01, as Kafka answers.
    assert (r.error_code, r.auth_bytes) == (0, b'{"status":"invalid_token"}')
    assert not s.authenticated
    r = await authenticate(s, b"\x01")
    assert (r.error_code, r.error_message) == (58, '{"status":"invalid_token"}')
    assert s.state == "failed" and s.principal is None


async def test_sasl_authenticate_after_success_is_an_illegal_state(store: CredentialStore) -> None:
    s = term(store)
    await handshake(s, "PLAIN")
    await authenticate(s, b"\0alice\0alice-secret")
    r = await authenticate(s, b"\0bob\0bob-secret")
    assert r.error_code == 34  # ILLEGAL_SASL_STATE
    assert s.authenticated and s.principal == "User:alice"  # nothing changed
