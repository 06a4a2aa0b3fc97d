"""SASL termination: the gateway authenticates clients itself (docs/gateway.md, "SASL termination").

With ``listener_sasl_mode = "terminate"`` a client's SaslHandshake / SaslAuthenticate never reach the
cluster: ``TerminatingSasl`` answers them, and the client's upstream connection is authenticated with the
gateway's own credentials instead (gateway/net/connection_sasl.py). Mechanisms:

- SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802 / 7677) by the ``scramp`` library's server, over salted
  credentials (salt, StoredKey, ServerKey, iterations) from a credentials file: no password is stored;
- PLAIN (RFC 4616), checked against the same SCRAM entry: the password is salted and hashed with the
  entry's salt and iteration count and must give its StoredKey;
- OAUTHBEARER (RFC 7628) with JWTs whose signature is checked against a JWKS (PyJWT's PyJWKClient; an
  https URL or a local ``file://`` one), and whose exp, iss and aud are checked as Kafka's
  sasl.oauthbearer.expected.* settings say.

Refusals carry the texts a Kafka 4.3 broker sends for the same failure, so clients report them alike.

The states the connection goes through (what it may send when) are ``ClientSasl``'s: the gateway's own
answers are fed to ``ClientSasl.on_response`` as the cluster's would be in passthrough.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import json
import os
import tempfile
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jwt
import scramp
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from coordinator.errors import Errors
from gateway.logging import get_logger
from gateway.security.oauth import oauthbearer_token
from gateway.security.sasl import (
    ClientSasl,
)
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey

if TYPE_CHECKING:
    from gateway.config.settings import GatewayConfig

log = get_logger("gateway.security.sasl_server")

SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# Kafka's minimum (and default) SCRAM iteration count.
DEFAULT_ITERATIONS = 4096
# Signature algorithms a token may use: asymmetric only (a JWKS publishes public keys; "none" and HMAC
# would let anyone who knows the key material, or nobody, mint tokens).
JWT_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"]
# What Kafka 4.3 answers for each failure.
_SCRAM_REFUSED = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"
_PLAIN_REFUSED = "Authentication failed: Invalid username or password"
_AUTHZID_REFUSED = "Authentication failed: Client requested an authorization id that is different from username"
_OAUTH_INVALID = b'{"status":"invalid_token"}'


# --- the credentials file ------------------------------------------------------------------------------


def scram_entry(password: str, mechanism: str, iterations: int = DEFAULT_ITERATIONS) -> dict[str, Any]:
    """The salted form of ``password`` for ``mechanism``, as the credentials file keeps it."""
    salt, stored_key, server_key, i = scramp.ScramMechanism(mechanism).make_auth_info(password, iterations)
    b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731
    return {"salt": b64(salt), "stored_key": b64(stored_key), "server_key": b64(server_key), "iterations": i}


def add_user(path: str | Path, user: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> None:
    """Add or replace ``user`` in the credentials file (created when missing), written atomically."""
    p = Path(path)
    data: dict[str, Any] = json.loads(p.read_text()) if p.exists() else {}
    users = data.setdefault("users", {})
    users[user] = {m: scram_entry(password, m, iterations) for m in SCRAM_MECHANISMS}
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, p)


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


class CredentialStore:
    """The users of a terminating listener, from a JSON file::

        {"users": {"alice": {"SCRAM-SHA-256": {"salt": b64, "stored_key": b64, "server_key": b64,
                                               "iterations": 4096},
                             "SCRAM-SHA-512": {...}}}}

    Read again when the file changes (an added user can log in without a restart); a file that stops
    reading keeps the last good contents, logged."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._users: dict[str, dict[str, ScramCredential]] = {}
        self.load()  # at start-up a bad file is a configuration error (raises)

    def load(self) -> None:
        st = os.stat(self.path)
        users: dict[str, dict[str, ScramCredential]] = {}
        try:
            raw = json.loads(Path(self.path).read_text())
            for name, mechs in raw.get("users", {}).items():
                users[name] = {
                    m: ScramCredential(
                        base64.b64decode(e["salt"]), base64.b64decode(e["stored_key"]),
                        base64.b64decode(e["server_key"]), int(e["iterations"]),
                    )
                    for m, e in mechs.items()
                    if m in SCRAM_MECHANISMS
                }
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"SASL credentials file {self.path}: not in the expected form ({e!r})") from None
        except ValueError as e:
            raise ValueError(f"SASL credentials file {self.path}: {e}") from None
        self._users = users
        self._stamp = (st.st_mtime_ns, st.st_size)

    def _fresh(self) -> None:
        try:
            st = os.stat(self.path)
            if (st.st_mtime_ns, st.st_size) != self._stamp:
                self.load()
        except (OSError, ValueError) as e:
            log.warning("SASL credentials file unreadable; keeping the users read before", path=self.path, error=str(e))

    def scram(self, mechanism: str, user: str) -> ScramCredential | None:
        self._fresh()
        return self._users.get(user, {}).get(mechanism)

    def check_password(self, user: str, password: str) -> bool:
        """PLAIN: the password against the user's SCRAM entry (the strongest one the file has)."""
        self._fresh()
        entries = self._users.get(user, {})
        for mech in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            c = entries.get(mech)
            if c is not None:
                _, stored_key, _, _ = scramp.ScramMechanism(mech).make_auth_info(password, c.iterations, c.salt)
                return hmac.compare_digest(stored_key, c.stored_key)
        return False


# --- OAUTHBEARER tokens --------------------------------------------------------------------------------


class InvalidToken(Exception):
    pass


class JwtValidator:
    """Checks a token's signature against the JWKS at ``jwks_url`` and its claims (Kafka's
    sasl.oauthbearer.expected.issuer / expected.audience / clock.skew.seconds; exp is required)."""

    def __init__(
        self,
        jwks_url: str,
        *,
        issuer: str | None = None,
        audience: list[str] | None = None,
        clock_skew_s: int = 30,
        sub_claim: str = "sub",
    ) -> None:
        self.jwks_url = jwks_url
        # file: a local JWKS, read again when it changes (PyJWKClient fetches http(s) only).
        self._file = urllib.request.url2pathname(urllib.parse.urlparse(jwks_url).path) if jwks_url.startswith("file:") else None
        self._file_keys: tuple[tuple[int, int], jwt.PyJWKSet] | None = None
        self.jwks = None if self._file is not None else jwt.PyJWKClient(jwks_url, cache_keys=True, lifespan=3600, timeout=10)
        self.issuer = issuer
        self.audience = audience
        self.clock_skew_s = clock_skew_s
        self.sub_claim = sub_claim

    def validate(self, token: str) -> dict[str, Any]:
        """The token's claims; InvalidToken says why not. Blocking (may fetch the JWKS): run in a thread."""
        try:
            key = self._key(token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key,
                algorithms=JWT_ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.clock_skew_s,
                options={"require": ["exp"], "verify_aud": self.audience is not None},
            )
        except jwt.PyJWTError as e:
            raise InvalidToken(str(e)) from None
        name = claims.get(self.sub_claim)
        if not isinstance(name, str) or not name:
            raise InvalidToken(f"no {self.sub_claim!r} claim naming the principal")
        return claims


    def _key(self, token: str) -> jwt.PyJWK:
        if self.jwks is not None:
            return self.jwks.get_signing_key_from_jwt(token)
        assert self._file is not None
        try:
            st = os.stat(self._file)
            stamp = (st.st_mtime_ns, st.st_size)
            if self._file_keys is None or self._file_keys[0] != stamp:
                self._file_keys = (stamp, jwt.PyJWKSet.from_json(Path(self._file).read_text()))
        except (OSError, jwt.PyJWTError) as e:
            if self._file_keys is None:
                raise InvalidToken(f"JWKS {self.jwks_url}: {e}") from None
            log.warning("JWKS file unreadable; keeping the keys read before", path=self._file, error=str(e))
        keys = self._file_keys[1].keys
        kid = jwt.get_unverified_header(token).get("kid")
        for k in keys:
            if k.key_id == kid or (kid is None and len(keys) == 1):
                return k
        raise InvalidToken(f"no key {kid!r} in the JWKS")


# --- one connection ------------------------------------------------------------------------------------


class TerminatingSasl(ClientSasl):
    """A client's SASL exchange, answered by the gateway. ``on_request`` (inherited) gates requests as in
    passthrough; ``answer`` computes the response to an admitted SaslHandshake / SaslAuthenticate and
    records it through ``on_response``."""

    def __init__(
        self,
        mechanisms: list[str],
        credentials: CredentialStore | None,
        validator: JwtValidator | None,
        sub_claim: str = "sub",
    ) -> None:
        super().__init__(sub_claim)
        self.offered = mechanisms
        self.credentials = credentials
        self.validator = validator
        self._scram: Any = None  # scramp's ScramServer of the exchange under way
        self.refusal: str | None = None  # why the last exchange failed (for the gateway's log)
        self._challenged = False  # OAUTHBEARER: the error JSON was sent, the client's 0x01 is next

    async def answer(self, api_key: int, version: int, payload: bytes, now_ms: int) -> bytes:
        """The response (header included) to an admitted SASL request ``payload`` (without size)."""
        header, msg = codec.decode_request(api_key, version, payload)
        corr = header.correlation_id
        if api_key == ApiKey.SASL_HANDSHAKE:
            ok = msg.mechanism in self.offered
            resp: Any = SaslHandshakeResponse[version](
                error_code=0 if ok else Errors.UNSUPPORTED_SASL_MECHANISM, mechanisms=list(self.offered)
            )
            self._scram = None
            self._challenged = False
        else:
            assert api_key == ApiKey.SASL_AUTHENTICATE
            error: int
            message: str | None
            token: bytes
            if self.state != "authenticate":
                # After the exchange completed (a broker's request handler answers so too).
                error, token = Errors.ILLEGAL_SASL_STATE, b""
                message = "SaslAuthenticate request received after successful authentication"
            else:
                error, message, token = await self._authenticate(bytes(msg.auth_bytes or b""))
            # A success carries an empty message, not a null one, as Kafka's does.
            fields: dict[str, Any] = {"error_code": error, "error_message": message or "", "auth_bytes": token}
            if version >= 1:
                fields["session_lifetime_ms"] = 0
            resp = SaslAuthenticateResponse[version](**fields)
        out = codec.encode_response(api_key, version, corr, resp)
        self.on_response(api_key, version, out, now_ms)
        return out

    async def _authenticate(self, token: bytes) -> tuple[int, str | None, bytes]:
        mech = self.mechanism
        try:
            if mech == "PLAIN":
                # Salting and hashing the password (thousands of HMAC rounds) off the event loop.
                return await asyncio.to_thread(self._plain, token)
            if mech in SCRAM_MECHANISMS:
                return self._scram_round(mech, token)
            if mech == "OAUTHBEARER":
                return await self._oauthbearer(token)
        except Exception as e:  # noqa: BLE001 - whatever a malformed token breaks is a refusal, not a crash
            log.debug("SASL exchange failed", mechanism=mech, error=repr(e))
            return self._refuse(mech or "", f"unreadable {mech} message")
        return self._refuse(mech or "", f"mechanism {mech} not terminated")

    def _refuse(self, mech: str, why: str, message: str | None = None) -> tuple[int, str | None, bytes]:
        self.refusal = why
        if message is None:
            message = _PLAIN_REFUSED if mech == "PLAIN" else _SCRAM_REFUSED.format(mech)
        return Errors.SASL_AUTHENTICATION_FAILED, message, b""

    def _plain(self, token: bytes) -> tuple[int, str | None, bytes]:
        parts = token.decode("utf-8").split("\0")
        if len(parts) != 3:
            return self._refuse("PLAIN", "malformed", f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            return self._refuse("PLAIN", "no user", "Authentication failed: username not specified")
        if not password:
            return self._refuse("PLAIN", "no password", "Authentication failed: password not specified")
        assert self.credentials is not None
        if not self.credentials.check_password(user, password):
            return self._refuse("PLAIN", f"wrong password or unknown user {user!r}")
        if authzid and authzid != user:
            return self._refuse("PLAIN", "authzid", _AUTHZID_REFUSED)
        return 0, None, b""

    def _scram_round(self, mech: str, token: bytes) -> tuple[int, str | None, bytes]:
        text = token.decode("utf-8")
        assert self.credentials is not None
        store = self.credentials
        if self._scram is None:
            gs2, _, rest = text.partition(",")
            authzid, _, _bare = rest.partition(",")
            if gs2 not in ("n", "y"):
                # "p": channel binding, which Kafka does not offer either.
                return self._refuse(mech, "channel binding requested")
            found: dict[str, ScramCredential] = {}

            def auth_fn(user: str) -> tuple[bytes, bytes, bytes, int]:
                c = store.scram(mech, user)
                if c is None:
                    raise scramp.ScramException("unknown user")
                found["c"] = c
                return c.salt, c.stored_key, c.server_key, c.iterations

            server = scramp.ScramMechanism(mech).make_server(auth_fn)
            try:
                server.set_client_first(text)
            except scramp.ScramException as e:
                return self._refuse(mech, str(e))
            if authzid and authzid[2:] != self._claimed_name():
                return self._refuse(mech, "authzid", _AUTHZID_REFUSED)
            self._scram = server
            return 0, None, server.get_server_first().encode("utf-8")
        server, self._scram = self._scram, None
        try:
            server.set_client_final(text)
            return 0, None, server.get_server_final().encode("utf-8")
        except scramp.ScramException as e:
            return self._refuse(mech, str(e))

    def _claimed_name(self) -> str | None:
        c = self._claimed
        return c[len("User:"):] if c is not None else None

    async def _oauthbearer(self, token: bytes) -> tuple[int, str | None, bytes]:
        if self._challenged:
            # RFC 7628 section 3.2.3: the client's 0x01 after the error JSON; the exchange fails with it.
            return Errors.SASL_AUTHENTICATION_FAILED, _OAUTH_INVALID.decode(), b""
        bearer = oauthbearer_token(token)
        assert self.validator is not None
        try:
            if bearer is None:
                raise InvalidToken("no bearer token in the client's message")
            claims = await asyncio.to_thread(self.validator.validate, bearer)
        except InvalidToken as e:
            self.refusal = f"invalid token: {e}"
            self._challenged = True
            return 0, None, _OAUTH_INVALID
        self._claimed = f"User:{claims[self.validator.sub_claim]}"
        return 0, None, b""


class Terminator:
    """What a terminating listener checks against, shared by its connections."""

    def __init__(
        self,
        mechanisms: list[str],
        credentials: CredentialStore | None,
        validator: JwtValidator | None,
        sub_claim: str = "sub",
    ) -> None:
        self.mechanisms = mechanisms
        self.credentials = credentials
        self.validator = validator
        self.sub_claim = sub_claim

    @classmethod
    def from_config(cls, config: GatewayConfig) -> Terminator | None:
        """None in passthrough. A credentials file that does not read raises (a configuration error)."""
        if config.listener_sasl_mode != "terminate":
            return None
        mechanisms = config.terminated_mechanisms()
        path = config.listener_sasl_credentials_file
        credentials = CredentialStore(path) if path is not None and any(m != "OAUTHBEARER" for m in mechanisms) else None
        url = config.sasl_oauthbearer_jwks_endpoint_url
        validator = (
            JwtValidator(
                url,
                issuer=config.sasl_oauthbearer_expected_issuer,
                audience=config.sasl_oauthbearer_expected_audience,
                clock_skew_s=config.sasl_oauthbearer_clock_skew_seconds,
                sub_claim=config.sasl_oauthbearer_sub_claim_name,
            )
            if url is not None and "OAUTHBEARER" in mechanisms
            else None
        )
        return cls(mechanisms, credentials, validator, config.sasl_oauthbearer_sub_claim_name)

    def connection(self) -> TerminatingSasl:
        return TerminatingSasl(self.mechanisms, self.credentials, self.validator, self.sub_claim)
