"""OAUTHBEARER tokens for the gateway's own connections to the cluster (docs/gateway.md, "OAUTHBEARER").

A ``TokenSource`` hands out the access token the gateway presents upstream (KIP-255 / KIP-768): either
fetched from a token endpoint with the OAuth 2 client credentials grant (RFC 6749 section 4.4; Kafka's
sasl.oauthbearer.token.endpoint.url, sasl.oauthbearer.client.credentials.client.id/secret,
sasl.oauthbearer.scope), or read from a file (a token another process keeps fresh, or a static unsecured
token in tests). One source serves every connection of the gateway: a fetched token is reused until 80%
of its lifetime has passed (Kafka's sasl.login.refresh.window.factor default), so reconnecting does not
mean asking the endpoint again.

``AiokafkaTokenProvider`` hands the same tokens to aiokafka (the state topic's clients).
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
from aiokafka.abc import AbstractTokenProvider

# Kafka's sasl.login.refresh.window.factor default: a token is renewed once this share of its life passed.
REFRESH_WINDOW_FACTOR = 0.8
# A token that says nothing of its lifetime is asked for again after this long.
_UNKNOWN_LIFETIME_S = 300.0


class TokenUnavailable(Exception):
    """No token could be had (endpoint refused or unreachable, file unreadable). The message never holds
    the client secret."""


class TokenSource:
    """The gateway's own OAUTHBEARER token. Either ``token_file`` or ``endpoint`` with ``client_id`` and
    ``client_secret`` (a callable, so a secret file is read when a token is fetched)."""

    def __init__(
        self,
        *,
        token_file: str | None = None,
        endpoint: str | None = None,
        client_id: str | None = None,
        client_secret: Callable[[], str] | None = None,
        scope: str | None = None,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if (token_file is None) == (endpoint is None):
            raise ValueError("a token source needs either a token file or a token endpoint")
        if endpoint is not None and (client_id is None or client_secret is None):
            raise ValueError("a token endpoint needs a client id and a client secret")
        self.token_file = token_file
        self.endpoint = endpoint
        self.client_id = client_id
        self._secret = client_secret
        self.scope = scope
        self.timeout_s = timeout_s
        self._clock = clock
        self._token: str | None = None
        self._renew_at = 0.0
        # A thread lock, not an asyncio one: the cluster state store's clients ask for tokens from an
        # event loop of their own (gateway/state/topic.py), the gateway's links from its main loop.
        self._lock = threading.Lock()
        self.fetches = 0  # requests made to the endpoint (for tests and operators)

    async def token(self) -> str:
        if self.token_file is not None:
            # Read at every authentication: whoever writes the file renews the token.
            try:
                text = Path(self.token_file).read_text().strip()
            except OSError as e:
                raise TokenUnavailable(f"sasl.oauthbearer token file {self.token_file}: {e.strerror or e}") from None
            if not text:
                raise TokenUnavailable(f"sasl.oauthbearer token file {self.token_file} is empty")
            return text
        token = self._token
        if token is not None and self._clock() < self._renew_at:
            return token
        return await asyncio.to_thread(self._renewed)

    def _renewed(self) -> str:
        """The cached token, or one fetched now; one fetch at a time, whichever loop or thread asks."""
        with self._lock:
            if self._token is not None and self._clock() < self._renew_at:
                return self._token
            now = self._clock()
            token, lifetime_s = self._fetch()
            self.fetches += 1
            self._token = token
            self._renew_at = now + lifetime_s * REFRESH_WINDOW_FACTOR
            return token

    def _fetch(self) -> tuple[str, float]:
        assert self.endpoint is not None and self.client_id is not None and self._secret is not None
        try:
            secret = self._secret()
        except (OSError, ValueError) as e:
            raise TokenUnavailable(f"client secret: {e}") from None
        form = {"grant_type": "client_credentials"}
        if self.scope:
            form["scope"] = self.scope
        # RFC 6749 section 2.3.1: the client authenticates with HTTP Basic.
        basic = base64.b64encode(f"{self.client_id}:{secret}".encode()).decode("ascii")
        req = urllib.request.Request(
            self.endpoint,
            data=urllib.parse.urlencode(form).encode("ascii"),
            headers={
                "Authorization": f"Basic {basic}",
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
            },
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 - operator's URL
                body = json.loads(resp.read())
        except urllib.error.HTTPError as e:
            detail = _oauth_error(e)
            raise TokenUnavailable(f"token endpoint {self.endpoint} answered {e.code}{detail}") from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise TokenUnavailable(f"token endpoint {self.endpoint}: {getattr(e, 'reason', e)}") from None
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise TokenUnavailable(f"token endpoint {self.endpoint} answered without an access_token")
        lifetime = body.get("expires_in")
        if not isinstance(lifetime, int | float) or lifetime <= 0:
            exp = jwt_claim(token, "exp")
            lifetime = exp - self._clock() if isinstance(exp, int | float) else _UNKNOWN_LIFETIME_S
        return token, max(float(lifetime), 1.0)


def _oauth_error(e: urllib.error.HTTPError) -> str:
    """RFC 6749 section 5.2's error and error_description, when the endpoint sent them."""
    try:
        body = json.loads(e.read())
    except (ValueError, OSError):
        return ""
    if not isinstance(body, dict) or "error" not in body:
        return ""
    desc = body.get("error_description")
    return f": {body['error']}" + (f" ({desc})" if desc else "")


def oauthbearer_token(first_message: bytes) -> str | None:
    """The bearer token of an OAUTHBEARER client-first message (RFC 7628 section 3.1: a GS2 header, then
    key=value pairs separated by 0x01, one of them ``auth=Bearer <token>``), or None."""
    try:
        text = first_message.decode("ascii")
    except UnicodeDecodeError:
        return None
    gs2, sep, rest = text.partition("\x01")
    if not sep or not gs2.endswith(","):
        return None
    for kv in rest.split("\x01"):
        if kv.startswith("auth="):
            scheme, _, token = kv[5:].partition(" ")
            return (token.strip() or None) if scheme.lower() == "bearer" else None
    return None


def jwt_claim(token: str, claim: str) -> Any:
    """One claim of a compact JWT's payload, unverified; None when the token does not read as a JWT."""
    try:
        return jwt.decode(token, options={"verify_signature": False, "verify_exp": False}).get(claim)
    except jwt.PyJWTError:
        return None


class AiokafkaTokenProvider(AbstractTokenProvider):
    """aiokafka's OAUTHBEARER hook over a ``TokenSource``."""

    def __init__(self, source: TokenSource) -> None:
        self.source = source

    async def token(self) -> str:
        return await self.source.token()


def client_first_message(token: str) -> bytes:
    """RFC 7628 section 3.1's initial client response: GS2 header without authzid, then auth=Bearer."""
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode("ascii")
