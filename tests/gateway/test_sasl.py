"""gateway.security.sasl: the client-side SASL states the gateway enforces, principals, and the SASL settings."""

from __future__ import annotations

import pytest
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from pydantic import ValidationError

from gateway.config.settings import GatewayConfig
from gateway.security import credentials
from gateway.security.sasl import ClientSasl, principal_of
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey

JOIN_GROUP = 11
METADATA = 3
API_VERSIONS = 18


def _req(cls: type, version: int, **fields: object) -> bytes:
    msg = cls[version](**fields)
    msg.with_header(correlation_id=7, client_id="t")
    return bytes(msg.encode(version=version, header=True, framed=False))


def _resp(api_key: int, cls: type, version: int, **fields: object) -> bytes:
    return codec.encode_response(api_key, version, 7, cls[version](**fields))


def handshake(s: ClientSasl, mechanism: str, now: int = 0, version: int = 1) -> bool:
    return s.on_request(ApiKey.SASL_HANDSHAKE, version, _req(SaslHandshakeRequest, version, mechanism=mechanism), now).ok


def handshake_ok(s: ClientSasl, mechanism: str) -> None:
    assert handshake(s, mechanism)
    s.on_response(ApiKey.SASL_HANDSHAKE, 1, _resp(ApiKey.SASL_HANDSHAKE, SaslHandshakeResponse, 1, error_code=0, mechanisms=[mechanism]), 0)


def auth(s: ClientSasl, token: bytes, now: int = 0) -> bool:
    return s.on_request(ApiKey.SASL_AUTHENTICATE, 2, _req(SaslAuthenticateRequest, 2, auth_bytes=token), now).ok


def answer(s: ClientSasl, error: int = 0, token: bytes = b"", lifetime: int = 0, now: int = 0) -> None:
    r = _resp(ApiKey.SASL_AUTHENTICATE, SaslAuthenticateResponse, 2, error_code=error, error_message=None,
              auth_bytes=token, session_lifetime_ms=lifetime)
    s.on_response(ApiKey.SASL_AUTHENTICATE, 2, r, now)


def test_principal_from_plain_and_scram_first_messages() -> None:
    assert principal_of("PLAIN", b"\0alice\0secret") == "User:alice"
    assert principal_of("PLAIN", b"alice\0alice\0secret") == "User:alice"
    assert principal_of("PLAIN", b"alice-secret") is None
    assert principal_of("SCRAM-SHA-256", b"n,,n=alice,r=abc") == "User:alice"
    assert principal_of("SCRAM-SHA-512", b"n,a=x,n=a=2Cb=3Dc,r=abc") == "User:a,b=c"  # RFC 5802 escapes
    assert principal_of("SCRAM-SHA-256", b"garbage") is None
    assert principal_of("GSSAPI", b"\0alice\0x") is None


def test_only_api_versions_and_handshake_before_authentication() -> None:
    s = ClientSasl()
    assert s.on_request(API_VERSIONS, 3, b"", 0).ok
    assert not s.on_request(METADATA, 12, b"", 0).ok
    # Group APIs, which the gateway may answer itself, are refused just the same.
    assert not ClientSasl().on_request(JOIN_GROUP, 9, b"", 0).ok


def test_a_request_during_authentication_is_answered_illegal_sasl_state() -> None:
    """Before authentication the broker closes without an answer; after a SaslHandshake it answers the
    request's error response with ILLEGAL_SASL_STATE, then closes (gateway/net/connection_sasl.py)."""
    from coordinator.errors import Errors
    from gateway.net.connection_sasl import error_answer

    assert ClientSasl().on_request(METADATA, 12, b"", 0).answer_error is None
    s = ClientSasl()
    assert handshake(s, "PLAIN")
    verdict = s.on_request(JOIN_GROUP, 5, b"", 0)
    assert not verdict.ok and verdict.answer_error == Errors.ILLEGAL_SASL_STATE
    jg = codec.REQUESTS[JOIN_GROUP][5](group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                       member_id="", group_instance_id=None, protocol_type="consumer", protocols=[])
    jg.with_header(correlation_id=9, client_id="t")
    frame = bytes(jg.encode(version=5, header=True, framed=True))
    body = codec.decode_response(JOIN_GROUP, 5, error_answer(JOIN_GROUP, 5, frame, 34) or b"")[1]
    assert body.error_code == 34
    mcls = codec.REQUESTS[METADATA]
    md = mcls[12](topics=[mcls.MetadataRequestTopic(topic_id=None, name="t")], allow_auto_topic_creation=False,
                  include_topic_authorized_operations=False)
    md.with_header(correlation_id=9, client_id="t")
    frame = bytes(md.encode(version=12, header=True, framed=True))
    body = codec.decode_response(METADATA, 12, error_answer(METADATA, 12, frame, 34) or b"")[1]
    assert [(t.name, t.error_code, t.partitions) for t in body.topics] == [("t", 34, [])]
    assert error_answer(METADATA, 12, frame[:10], 34) is None  # undecodable: closed unanswered


def test_plain_exchange_authenticates_and_records_the_principal() -> None:
    s = ClientSasl()
    handshake_ok(s, "PLAIN")
    assert not s.on_request(METADATA, 12, b"", 0).ok  # during authentication: only SaslAuthenticate
    s = ClientSasl()
    handshake_ok(s, "PLAIN")
    assert auth(s, b"\0alice\0secret")
    assert not s.on_request(JOIN_GROUP, 9, b"", 0).ok  # pipelined behind an unanswered SaslAuthenticate
    s = ClientSasl()
    handshake_ok(s, "PLAIN")
    assert auth(s, b"\0alice\0secret")
    answer(s)
    assert s.authenticated and s.principal == "User:alice"
    assert s.on_request(JOIN_GROUP, 9, b"", 0).ok


def test_scram_is_authenticated_only_after_the_server_final_message() -> None:
    s = ClientSasl()
    handshake_ok(s, "SCRAM-SHA-256")
    assert auth(s, b"n,,n=alice,r=nonce")
    answer(s, token=b"r=nonceserver,s=c2FsdA==,i=4096")
    assert not s.authenticated
    assert not s.on_request(JOIN_GROUP, 9, b"", 0).ok


def test_scram_second_round_then_data() -> None:
    s = ClientSasl()
    handshake_ok(s, "SCRAM-SHA-512")
    assert auth(s, b"n,,n=bob,r=nonce")
    answer(s, token=b"r=nonceserver,s=c2FsdA==,i=4096")
    assert auth(s, b"c=biws,r=nonceserver,p=proof")
    answer(s, token=b"v=signature")
    assert s.authenticated and s.principal == "User:bob"


def test_refused_authentication_closes_everything_after() -> None:
    s = ClientSasl()
    handshake_ok(s, "PLAIN")
    assert auth(s, b"\0alice\0wrong")
    answer(s, error=58)
    assert s.state == "failed" and s.principal is None
    assert not s.on_request(API_VERSIONS, 3, b"", 0).ok


def test_unknown_mechanisms_and_handshake_v0_are_refused() -> None:
    # The cluster answers a mechanism it does not offer itself (UNSUPPORTED_SASL_MECHANISM, then closes).
    s = ClientSasl()
    assert handshake(s, "FOO")
    s.on_response(ApiKey.SASL_HANDSHAKE, 1, _resp(ApiKey.SASL_HANDSHAKE, SaslHandshakeResponse, 1, error_code=33,
                                           mechanisms=["PLAIN"]), 0)
    assert s.state == "failed"
    # One it offers but the gateway cannot follow: the client's first token closes the connection.
    s = ClientSasl()
    handshake_ok(s, "GSSAPI")
    verdict = s.on_request(ApiKey.SASL_AUTHENTICATE, 2, _req(SaslAuthenticateRequest, 2, auth_bytes=b"x"), 0)
    assert not verdict.ok and "GSSAPI" in verdict.reason
    assert not handshake(ClientSasl(), "PLAIN", version=0)


def test_session_lifetime_and_reauthentication() -> None:
    s = ClientSasl()
    handshake_ok(s, "PLAIN")
    assert auth(s, b"\0alice\0secret", now=1000)
    answer(s, lifetime=5000, now=1000)
    assert s.session_expires_ms == 6000
    assert s.on_request(METADATA, 12, b"", 5999).ok
    # KIP-368: re-authenticating on the same connection renews the session.
    handshake_ok(s, "PLAIN")
    assert s.reauthentications == 1
    assert not s.on_request(METADATA, 12, b"", 5999).ok  # mid re-authentication
    s2 = ClientSasl()
    handshake_ok(s2, "PLAIN")
    assert auth(s2, b"\0alice\0secret", now=1000)
    answer(s2, lifetime=5000, now=1000)
    handshake_ok(s2, "PLAIN")
    assert auth(s2, b"\0alice\0secret", now=5500)
    answer(s2, lifetime=5000, now=5500)
    assert s2.authenticated and s2.session_expires_ms == 10500
    assert s2.on_request(METADATA, 12, b"", 7000).ok
    # Past the session's end without re-authenticating: refused, as the broker closes such a connection.
    assert not s2.on_request(METADATA, 12, b"", 10500).ok


def _cfg(**kw: object) -> GatewayConfig:
    return GatewayConfig.model_validate(kw)


def test_upstream_sasl_settings() -> None:
    c = _cfg(**{"sasl.mechanism": "SCRAM-SHA-256", "upstream_sasl_username": "gw", "upstream_sasl_password": "pw"})
    assert credentials.upstream_sasl(c) == ("SCRAM-SHA-256", "gw", "pw")
    assert "pw" not in repr(c) and "pw" not in str(c.model_dump())
    assert credentials.upstream_sasl(_cfg()) is None
    ssl = _cfg(upstream_security_protocol="SASL_SSL", upstream_sasl_mechanism="PLAIN",
               upstream_sasl_username="gw", upstream_sasl_password="pw")
    assert ssl.upstream_tls


def test_upstream_password_from_a_file(tmp_path: pytest.TempPathFactory) -> None:
    f = tmp_path / "pw"  # type: ignore[operator]
    f.write_text("from-file\n")
    c = _cfg(upstream_sasl_mechanism="PLAIN", upstream_sasl_username="gw", upstream_sasl_password_file=str(f))
    assert credentials.upstream_sasl(c) == ("PLAIN", "gw", "from-file")


@pytest.mark.parametrize(
    "settings",
    [
        {"upstream_sasl_mechanism": "PLAIN", "upstream_sasl_username": "gw"},  # no password
        {"upstream_sasl_mechanism": "PLAIN", "upstream_sasl_password": "pw"},  # no user
        {"upstream_security_protocol": "SASL_PLAINTEXT"},
        {"upstream_security_protocol": "PLAINTEXT", "upstream_sasl_mechanism": "PLAIN",
         "upstream_sasl_username": "gw", "upstream_sasl_password": "pw"},
        {"upstream_sasl_username": "gw", "upstream_sasl_password": "pw"},
        {"upstream_sasl_mechanism": "GSSAPI", "upstream_sasl_username": "gw", "upstream_sasl_password": "pw"},
        {"listener_security_protocol": "SASL_SSL"},  # no listener certificate
    ],
)
def test_inconsistent_sasl_settings_are_refused(settings: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        _cfg(**settings)


def test_an_unreadable_password_file_is_an_upstream_auth_error(tmp_path: pytest.TempPathFactory) -> None:
    from gateway.net.upstream import UpstreamAuthError, upstream_credentials

    f = tmp_path / "pw"  # type: ignore[operator]
    f.write_text("x")
    c = _cfg(upstream_sasl_mechanism="PLAIN", upstream_sasl_username="gw", upstream_sasl_password_file=str(f))
    f.unlink()
    with pytest.raises(UpstreamAuthError, match="upstream_sasl_password_file"):
        upstream_credentials(c)
