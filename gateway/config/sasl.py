"""Settings of OAUTHBEARER and of SASL termination (docs/gateway.md, "OAUTHBEARER", "SASL termination").

Part of ``GatewayConfig`` (which extends this model); each setting also accepts its Kafka name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, Field, SecretStr, field_validator, model_validator

TERMINATED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


def _alias(name: str, kafka: str) -> Any:
    return AliasChoices(name, kafka)


class SaslSettings(BaseModel):
    # --- the gateway's own connections with sasl.mechanism=OAUTHBEARER (KIP-768 client credentials) ---
    upstream_sasl_oauthbearer_token_endpoint_url: str | None = Field(
        default=None,
        validation_alias=_alias("upstream_sasl_oauthbearer_token_endpoint_url", "sasl.oauthbearer.token.endpoint.url"),
    )
    upstream_sasl_oauthbearer_client_id: str | None = Field(
        default=None,
        validation_alias=_alias(
            "upstream_sasl_oauthbearer_client_id", "sasl.oauthbearer.client.credentials.client.id"
        ),
    )
    upstream_sasl_oauthbearer_client_secret: SecretStr | None = Field(
        default=None,
        validation_alias=_alias(
            "upstream_sasl_oauthbearer_client_secret", "sasl.oauthbearer.client.credentials.client.secret"
        ),
    )
    # The secret from a file instead (its content without a trailing newline), read at each token fetch.
    upstream_sasl_oauthbearer_client_secret_file: str | None = None
    upstream_sasl_oauthbearer_scope: str | None = Field(
        default=None, validation_alias=_alias("upstream_sasl_oauthbearer_scope", "sasl.oauthbearer.scope")
    )
    # Instead of an endpoint: a file holding the access token, read at each authentication (a token that
    # another process renews, or a fixed unsecured token against a test cluster).
    upstream_sasl_oauthbearer_token_file: str | None = None

    # --- client listeners ---
    # Where a client's OAUTHBEARER principal name comes from (Kafka's sasl.oauthbearer.sub.claim.name).
    sasl_oauthbearer_sub_claim_name: str = Field(
        default="sub", validation_alias=_alias("sasl_oauthbearer_sub_claim_name", "sasl.oauthbearer.sub.claim.name")
    )
    # passthrough: clients authenticate with the cluster through the gateway (the default);
    # terminate: the gateway authenticates clients itself and talks to the cluster as itself.
    listener_sasl_mode: Literal["passthrough", "terminate"] = "passthrough"
    # terminate: the mechanisms offered (Kafka's sasl.enabled.mechanisms); None = those the settings
    # below make possible (PLAIN and SCRAM with a credentials file, OAUTHBEARER with a JWKS).
    listener_sasl_enabled_mechanisms: list[str] | None = Field(
        default=None, validation_alias=_alias("listener_sasl_enabled_mechanisms", "sasl.enabled.mechanisms")
    )
    # terminate: the users' salted SCRAM credentials (``groupgate sasl-credentials`` writes entries).
    listener_sasl_credentials_file: str | None = None
    # terminate, OAUTHBEARER: where token signing keys come from (https://..., or file:///path for a local
    # JWKS file) and the claims every token must carry.
    sasl_oauthbearer_jwks_endpoint_url: str | None = Field(
        default=None, validation_alias=_alias("sasl_oauthbearer_jwks_endpoint_url", "sasl.oauthbearer.jwks.endpoint.url")
    )
    sasl_oauthbearer_expected_issuer: str | None = Field(
        default=None, validation_alias=_alias("sasl_oauthbearer_expected_issuer", "sasl.oauthbearer.expected.issuer")
    )
    sasl_oauthbearer_expected_audience: list[str] | None = Field(
        default=None,
        validation_alias=_alias("sasl_oauthbearer_expected_audience", "sasl.oauthbearer.expected.audience"),
    )
    sasl_oauthbearer_clock_skew_seconds: int = Field(
        default=30,
        ge=0,
        validation_alias=_alias("sasl_oauthbearer_clock_skew_seconds", "sasl.oauthbearer.clock.skew.seconds"),
    )
    # terminate with authorization=off: the cluster sees only the gateway's identity and nothing authorizes
    # the clients' data requests (Produce, Fetch, Metadata, ...): every authenticated client gets the
    # gateway's own rights on the cluster. Termination refuses to start so unless this says the operator
    # accepts that. With authorization on (the default) the gateway enforces the cluster's ACLs itself.
    listener_sasl_terminate_grants_gateway_rights: bool = False

    @field_validator("listener_sasl_enabled_mechanisms", "sasl_oauthbearer_expected_audience", mode="before")
    @classmethod
    def _comma_list(cls, v: Any) -> Any:
        # Kafka's list settings are comma-separated strings (and so are environment variables).
        if isinstance(v, str):
            return [x.strip() for x in v.split(",") if x.strip()]
        return v

    @model_validator(mode="after")
    def _check_sasl_extras(self) -> SaslSettings:
        endpoint = self.upstream_sasl_oauthbearer_token_endpoint_url
        token_file = self.upstream_sasl_oauthbearer_token_file
        if self.upstream_sasl_oauthbearer_client_secret is not None and self.upstream_sasl_oauthbearer_client_secret_file:
            raise ValueError("upstream_sasl_oauthbearer_client_secret and ..._client_secret_file: set one, not both")
        if endpoint is not None and token_file is not None:
            raise ValueError("upstream_sasl_oauthbearer_token_endpoint_url and ..._token_file: set one, not both")
        if endpoint is not None:
            missing = []
            if self.upstream_sasl_oauthbearer_client_id is None:
                missing.append("upstream_sasl_oauthbearer_client_id")
            if self.upstream_sasl_oauthbearer_client_secret is None and self.upstream_sasl_oauthbearer_client_secret_file is None:
                missing.append("upstream_sasl_oauthbearer_client_secret (or ..._client_secret_file)")
            if missing:
                raise ValueError(f"the OAUTHBEARER token endpoint needs {', '.join(missing)}")
        if self.listener_sasl_mode == "terminate":
            mechs = self.listener_sasl_enabled_mechanisms
            unknown = [m for m in mechs or [] if m not in TERMINATED_MECHANISMS]
            if unknown:
                raise ValueError(f"listener_sasl_enabled_mechanisms: the gateway cannot terminate {', '.join(unknown)}")
            for m in self.terminated_mechanisms():
                if m == "OAUTHBEARER" and self.sasl_oauthbearer_jwks_endpoint_url is None:
                    raise ValueError("terminating OAUTHBEARER needs sasl_oauthbearer_jwks_endpoint_url")
                if m != "OAUTHBEARER" and self.listener_sasl_credentials_file is None:
                    raise ValueError(f"terminating {m} needs listener_sasl_credentials_file")
            if not self.terminated_mechanisms():
                raise ValueError(
                    "listener_sasl_mode=terminate needs listener_sasl_credentials_file and/or "
                    "sasl_oauthbearer_jwks_endpoint_url"
                )
        return self

    def terminated_mechanisms(self) -> list[str]:
        """What a terminating listener offers, in Kafka's order of sasl.enabled.mechanisms."""
        if self.listener_sasl_enabled_mechanisms is not None:
            return list(self.listener_sasl_enabled_mechanisms)
        out = []
        if self.listener_sasl_credentials_file is not None:
            out += ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        if self.sasl_oauthbearer_jwks_endpoint_url is not None:
            out.append("OAUTHBEARER")
        return out

    def upstream_oauthbearer_secret(self) -> str:
        if self.upstream_sasl_oauthbearer_client_secret_file is not None:
            path = self.upstream_sasl_oauthbearer_client_secret_file
            try:
                return Path(path).read_text().rstrip("\r\n")
            except OSError as e:
                raise ValueError(f"upstream_sasl_oauthbearer_client_secret_file={path}: {e.strerror or e}") from e
        assert self.upstream_sasl_oauthbearer_client_secret is not None
        return self.upstream_sasl_oauthbearer_client_secret.get_secret_value()
