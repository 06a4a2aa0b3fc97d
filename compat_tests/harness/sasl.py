"""The SASL-secured broker of the compat suites: its users, and client settings for them.

The broker (``sasl_kafka`` fixture) has a SASL_PLAINTEXT listener with PLAIN, SCRAM-SHA-256/512 and
OAUTHBEARER (Kafka's unsecured token validator: tokens with alg "none", checked for exp and sub), the
StandardAuthorizer, ``super.users`` = User:admin and ``allow.everyone.if.no.acl.found=false``. Its
PLAINTEXT listener is the harness's administrative channel (User:ANONYMOUS is a super user there, see
gateway.embedded_kafka.BrokerSasl); tests create topics and ACLs through it and hand clients only the
SASL listener (directly) or the gateway in front of it.
"""

from __future__ import annotations

import time
from typing import Any

import jwt

ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")
BOB = ("bob", "bob-secret")
USERS = dict([ADMIN, ALICE, BOB])
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# The broker's connections.max.reauth.ms.
SASL_SESSION_MS = 4000


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
