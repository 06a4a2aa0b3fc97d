"""The gateway's own SASL credentials towards the cluster, from its configuration: a username and password
(read from the password file each time, so a rotated secret is picked up on the next connection), or for
OAUTHBEARER the token source every connection of the process shares (tokens are reused until they near
their expiry)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from gateway.security.oauth import TokenSource

if TYPE_CHECKING:
    from gateway.config.settings import GatewayConfig

# One token source per configuration object, dropped with it.
_SOURCES: dict[int, TokenSource] = {}


def upstream_sasl(config: GatewayConfig) -> tuple[str, str, str] | TokenSource | None:
    """(mechanism, username, password) of the gateway's own connections, or for OAUTHBEARER where its
    tokens come from; None without SASL. A password file that cannot be read is a ValueError."""
    if config.upstream_sasl_mechanism != "OAUTHBEARER":
        return config.upstream_password_credentials()
    source = _SOURCES.get(id(config))
    if source is None:
        source = _SOURCES[id(config)] = TokenSource(
            token_file=config.upstream_sasl_oauthbearer_token_file,
            endpoint=config.upstream_sasl_oauthbearer_token_endpoint_url,
            client_id=config.upstream_sasl_oauthbearer_client_id,
            client_secret=config.upstream_oauthbearer_secret,
            scope=config.upstream_sasl_oauthbearer_scope,
            timeout_s=config.upstream_connect_timeout_s,
        )
        weakref.finalize(config, _SOURCES.pop, id(config), None)
    return source
