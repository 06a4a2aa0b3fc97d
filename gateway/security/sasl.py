"""SASL on both sides of the gateway (docs/gateway.md, "SASL").

Upstream: every connection the gateway opens for itself (metadata, group write-through, forwarding)
authenticates first with the configured credentials: SaslHandshake v1, then SaslAuthenticate rounds driven
by kafka-python's PLAIN and SCRAM mechanisms. A refusal is an ``AuthenticationFailed`` with the cluster's
own message; the password never appears in it.

Client side (passthrough with inspection): a client's SaslHandshake / SaslAuthenticate go to the cluster
unchanged on the client's own upstream connection, and the cluster decides. ``ClientSasl`` follows the
exchange to learn the principal (the PLAIN / SCRAM user name from the client's first message) and the
outcome, and says which requests the connection may send in its current state, as Kafka's server-side
authenticator does: before authentication only ApiVersions and SaslHandshake, then only SaslAuthenticate;
anything else closes the connection. This matters because the gateway answers some requests itself
(the group APIs of the groups it coordinates): without the gate, those would be served unauthenticated.
KIP-368 re-authentication: SaslAuthenticate's session lifetime is passed through untouched and recorded;
a new SaslHandshake on an authenticated connection starts re-authentication; a request other than those
after the session expired closes the connection, as the broker does.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass
from typing import Any

from kafka.net.sasl.abc import SaslMechanism as _Mechanism
from kafka.net.sasl.plain import SaslMechanismPlain
from kafka.net.sasl.scram import SaslMechanismScram
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from coordinator.errors import Errors
from gateway.security.oauth import (
    TokenSource,
    TokenUnavailable,
    client_first_message,
    jwt_claim,
    oauthbearer_token,
)
from gateway.wire import codec, frames
from gateway.wire.api_keys import ApiKey

SASL_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
# Versions of the gateway's own exchange: handshake v1 (SaslAuthenticate framing, Kafka 1.0+) and
# authenticate v1 (session lifetime, Kafka 2.2+); both are in every Kafka the gateway supports.
_HANDSHAKE_V = 1
_AUTHENTICATE_V = 1
_CLIENT_ID = "groupgate"
_SIZE = struct.Struct(">i")


class AuthenticationFailed(Exception):
    """The cluster refused the gateway's credentials (or offers no matching mechanism)."""


# The gateway's own credentials: (mechanism, username, password) for PLAIN / SCRAM, or where its
# OAUTHBEARER tokens come from.
Credentials = tuple[str, str, str] | TokenSource


# --- the gateway's own connections --------------------------------------------------------------------


def _mechanism(mechanism: str, username: str, password: str) -> _Mechanism:
    conf = {"sasl_mechanism": mechanism, "sasl_plain_username": username, "sasl_plain_password": password}
    if mechanism == "PLAIN":
        return SaslMechanismPlain(**conf)
    return SaslMechanismScram(**conf)


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, api_key: int, version: int, msg: Any, corr: int
) -> Any:
    msg.with_header(correlation_id=corr, client_id=_CLIENT_ID)
    writer.write(bytes(msg.encode(version=version, header=True, framed=True)))
    await writer.drain()
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    payload = await reader.readexactly(size)
    if frames.response_correlation_id(payload) != corr:
        raise AuthenticationFailed("the broker answered the SASL exchange with a foreign correlation id")
    return codec.decode_response(api_key, version, payload)[1]


async def _handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, mechanism: str) -> None:
    hs = await _exchange(
        reader, writer, ApiKey.SASL_HANDSHAKE, _HANDSHAKE_V, SaslHandshakeRequest[_HANDSHAKE_V](mechanism=mechanism), 1
    )
    if hs.error_code == Errors.UNSUPPORTED_SASL_MECHANISM:
        raise AuthenticationFailed(
            f"the cluster does not offer sasl.mechanism {mechanism} (it offers {', '.join(hs.mechanisms) or 'none'})"
        )
    if hs.error_code == Errors.ILLEGAL_SASL_STATE:
        raise AuthenticationFailed("the broker's listener does not take SASL: check the upstream security.protocol")
    if hs.error_code != 0:
        raise AuthenticationFailed(f"SaslHandshake failed with error {hs.error_code}")


async def _sasl_authenticate(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, token: bytes, corr: int
) -> Any:
    return await _exchange(
        reader, writer, ApiKey.SASL_AUTHENTICATE, _AUTHENTICATE_V, SaslAuthenticateRequest[_AUTHENTICATE_V](auth_bytes=token),
        corr,
    )


async def authenticate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, credentials: Credentials) -> int:
    """Authenticate a fresh connection (nothing else sent on it yet); returns the session lifetime the
    broker grants (KIP-368, connections.max.reauth.ms; 0 = unlimited). Raises AuthenticationFailed; a lost
    connection raises what the stream raises (OSError, IncompleteReadError)."""
    if isinstance(credentials, TokenSource):
        return await _authenticate_oauthbearer(reader, writer, credentials)
    mechanism, username, password = credentials
    await _handshake(reader, writer, mechanism)
    mech = _mechanism(mechanism, username, password)
    corr = 2
    lifetime_ms = 0
    while not mech.is_done():
        try:
            token = mech.auth_bytes()
        except ValueError as e:
            raise AuthenticationFailed(f"{mechanism}: {e}") from None
        r = await _sasl_authenticate(reader, writer, token, corr)
        corr += 1
        lifetime_ms = r.session_lifetime_ms
        if r.error_code != 0:
            raise AuthenticationFailed(
                f"{mechanism} authentication of {username!r} refused: {r.error_message or f'error {r.error_code}'}"
            )
        try:
            mech.receive(r.auth_bytes)
        except (ValueError, KeyError) as e:
            # A SCRAM server whose proof does not check out is not the cluster we hold credentials for.
            raise AuthenticationFailed(f"{mechanism}: the broker's answer does not verify: {e}") from None
    if not mech.is_authenticated():
        raise AuthenticationFailed(f"{mechanism} authentication of {username!r} did not complete")
    return int(lifetime_ms or 0)


async def _authenticate_oauthbearer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, source: TokenSource
) -> int:
    try:
        token = await source.token()
    except TokenUnavailable as e:
        raise AuthenticationFailed(f"OAUTHBEARER: no token: {e}") from None
    await _handshake(reader, writer, "OAUTHBEARER")
    r = await _sasl_authenticate(reader, writer, client_first_message(token), 2)
    if r.error_code == 0 and not r.auth_bytes:
        return int(r.session_lifetime_ms or 0)
    challenge = bytes(r.auth_bytes or b"").decode("utf-8", "replace")
    if r.error_code == 0:
        # RFC 7628 section 3.2.2: the server's error JSON; the client acknowledges it with 0x01 and the
        # server ends the exchange with a failure whose message says why.
        r = await _sasl_authenticate(reader, writer, b"\x01", 3)
    reason = r.error_message or f"error {r.error_code}"
    raise AuthenticationFailed(
        f"OAUTHBEARER authentication of sub {jwt_claim(token, 'sub')!r} refused: {reason}"
        + (f" {challenge}" if challenge else "")
    )


async def offered_mechanisms(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> list[str] | None:
    """The mechanisms a listener offers, or None when it does not take SASL (asked with an empty
    mechanism name, which every SASL listener refuses with the list)."""
    hs = await _exchange(reader, writer, ApiKey.SASL_HANDSHAKE, _HANDSHAKE_V, SaslHandshakeRequest[_HANDSHAKE_V](mechanism=""), 1)
    if hs.error_code == Errors.UNSUPPORTED_SASL_MECHANISM:
        return list(hs.mechanisms)
    return None


# --- client connections: passthrough with inspection ---------------------------------------------------


def principal_of(mechanism: str | None, first_message: bytes, sub_claim: str = "sub") -> str | None:
    """``User:<name>`` from a client's first SaslAuthenticate token, or None when it names nobody the
    gateway can read (an unknown mechanism, a malformed token). OAUTHBEARER: the token's ``sub_claim``
    (sasl.oauthbearer.sub.claim.name), read without checking the signature: in passthrough the cluster
    checks the token, and the name is only believed once the cluster accepted it."""
    if mechanism == "OAUTHBEARER":
        token = oauthbearer_token(first_message)
        name = None if token is None else jwt_claim(token, sub_claim)
        return f"User:{name}" if isinstance(name, str) and name else None
    try:
        text = first_message.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if mechanism == "PLAIN":
        # RFC 4616: [authzid] NUL authcid NUL passwd; Kafka's principal is the authcid.
        parts = text.split("\0")
        return f"User:{parts[1]}" if len(parts) == 3 and parts[1] else None
    if mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        # RFC 5802 client-first: gs2-header "n,[a=authzid]," then "n=<saslname>,r=<nonce>[,extensions]".
        _gs2, sep, bare = text.partition(",")
        _authzid, sep2, bare = bare.partition(",")
        if not sep or not sep2:
            return None
        for attr in bare.split(","):
            if attr.startswith("n="):
                name = attr[2:].replace("=2C", ",").replace("=3D", "=")
                return f"User:{name}" if name else None
        return None
    return None


@dataclass
class Verdict:
    ok: bool
    reason: str = ""
    # An error code the broker answers the refused request with (in that API's response) before it closes
    # the connection; None: it closes without an answer.
    answer_error: int | None = None


_OK = Verdict(True)
# Mechanisms whose completion the gateway can tell from the exchange (the others are refused: it could not
# know when a connection is authenticated, and would have to guess).
KNOWN_MECHANISMS = frozenset({"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"})


class ClientSasl:
    """The SASL state of one client connection. Time is passed in (``now_ms``), never read."""

    def __init__(self, sub_claim: str = "sub") -> None:
        self.sub_claim = sub_claim  # sasl.oauthbearer.sub.claim.name
        # handshake: ApiVersions / SaslHandshake only; authenticate: SaslAuthenticate only;
        # authenticated: anything; failed: nothing.
        self.state = "handshake"
        self.mechanism: str | None = None
        self.principal: str | None = None  # User:<name> once authenticated
        self._claimed: str | None = None  # from the first token of the exchange under way
        self._round = 0
        self._in_flight = False
        self.session_expires_ms: int | None = None  # KIP-368; None = no lifetime
        self.reauthentications = 0
        self.failure = "request after failed SASL authentication"

    @property
    def authenticated(self) -> bool:
        return self.state == "authenticated"

    def on_request(self, api_key: int, version: int, payload: bytes, now_ms: int) -> Verdict:
        """Whether the connection may send this request now; records what the request says. ``payload``
        is the request without its size prefix."""
        if self.state == "failed":
            return Verdict(False, self.failure)
        if self.state == "authenticated":
            if api_key == ApiKey.SASL_HANDSHAKE:
                return self._handshake(version, payload)
            if self.session_expires_ms is not None and now_ms >= self.session_expires_ms:
                return Verdict(False, "request after the SASL session expired (KIP-368) without re-authentication")
            return _OK
        if self._in_flight:
            return Verdict(False, "request while a SaslAuthenticate is unanswered")
        if self.state == "handshake":
            if api_key == ApiKey.API_VERSIONS:
                return _OK
            if api_key == ApiKey.SASL_HANDSHAKE:
                return self._handshake(version, payload)
            return Verdict(False, f"api key {api_key} before SASL authentication")
        # authenticate
        if api_key != ApiKey.SASL_AUTHENTICATE:
            # Kafka's SaslServerAuthenticator parses it and answers with the request's error response
            # (IllegalSaslStateException: ILLEGAL_SASL_STATE), then closes.
            return Verdict(False, f"api key {api_key} during SASL authentication", Errors.ILLEGAL_SASL_STATE)
        try:
            _, msg = codec.decode_request(ApiKey.SASL_AUTHENTICATE, version, payload)
        except Exception:  # noqa: BLE001 - an unreadable token: the connection closes, as the broker's would
            return Verdict(False, "unreadable SaslAuthenticate request")
        if self._round == 0:
            self._claimed = principal_of(self.mechanism, bytes(msg.auth_bytes), self.sub_claim)
        self._in_flight = True
        return _OK

    def _handshake(self, version: int, payload: bytes) -> Verdict:
        if version == 0:
            # v0 sends the tokens as bare frames without a request header, which the gateway cannot frame.
            return Verdict(False, "SaslHandshake v0 (tokens without Kafka headers) is not supported")
        try:
            _, msg = codec.decode_request(ApiKey.SASL_HANDSHAKE, version, payload)
        except Exception:  # noqa: BLE001
            return Verdict(False, "unreadable SaslHandshake request")
        if self.state == "authenticated":
            self.reauthentications += 1
        self.mechanism = msg.mechanism
        self.state = "authenticate"
        self._round = 0
        self._claimed = None
        return _OK

    def on_response(self, api_key: int, version: int, payload: bytes, now_ms: int) -> None:
        """The cluster's answer to a SaslHandshake / SaslAuthenticate of this connection."""
        try:
            _, msg = codec.decode_response(api_key, version, payload)
        except Exception:  # noqa: BLE001 - an answer we cannot read cannot authenticate anyone
            self.state = "failed"
            return
        if api_key == ApiKey.SASL_HANDSHAKE:
            if msg.error_code != 0:
                self.state = "failed"  # the broker closes the connection after this answer
            elif self.mechanism not in KNOWN_MECHANISMS:
                # The cluster takes a mechanism whose exchange the gateway cannot follow (it could not tell
                # when the client is authenticated): the connection closes at the client's first token.
                # An unknown one the cluster itself refuses (above) gets the cluster's own answer.
                self.state = "failed"
                self.failure = f"SASL mechanism {self.mechanism} cannot be inspected by the gateway"
            return
        if self.state != "authenticate":
            return  # e.g. ILLEGAL_SASL_STATE for a SaslAuthenticate after authentication: nothing changes
        self._in_flight = False
        if msg.error_code != 0:
            self.state = "failed"
            self.principal = None
            return
        self._round += 1
        if self._complete(bytes(msg.auth_bytes or b"")):
            self.state = "authenticated"
            self.principal = self._claimed
            lifetime = getattr(msg, "session_lifetime_ms", 0) or 0
            self.session_expires_ms = now_ms + lifetime if lifetime > 0 else None

    def _complete(self, server_token: bytes) -> bool:
        if self.mechanism == "PLAIN":
            return True
        if self.mechanism == "OAUTHBEARER":
            # RFC 7628: success is an empty server message. A non-empty one is the error JSON (status,
            # scope); the client answers it with a lone 0x01 and the server then fails the exchange.
            return self._round == 1 and not server_token
        # SCRAM: the server-first message ("r=...") asks for a second round; server-final ("v=...") ends it.
        return self._round >= 2 and server_token.startswith(b"v=")
