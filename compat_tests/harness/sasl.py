"""The SASL-secured broker of the compat suites: its users, and client settings for them.

The broker (``sasl_kafka`` fixture) has a SASL_PLAINTEXT listener with PLAIN and SCRAM-SHA-256/512, the
StandardAuthorizer, ``super.users`` = User:admin and ``allow.everyone.if.no.acl.found=false``. Its
PLAINTEXT listener is the harness's administrative channel (User:ANONYMOUS is a super user there, see
gateway.embedded_kafka.BrokerSasl); tests create topics and ACLs through it and hand clients only the
SASL listener (directly) or the gateway in front of it.
"""

from __future__ import annotations

from typing import Any

ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")
BOB = ("bob", "bob-secret")
USERS = dict([ADMIN, ALICE, BOB])
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
