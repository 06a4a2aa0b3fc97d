"""Fixtures of the gateway tests: one real broker for the session and a gateway in front of it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from gateway.config.settings import GatewayConfig
from gateway.ops.embedded_kafka import EmbeddedKafka
from gateway.ops.runner import GatewayThread


def _no_java_reason() -> str | None:
    if shutil.which("java") is None:
        return "no Java runtime: the embedded Kafka broker cannot run"
    return None


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[EmbeddedKafka]:
    reason = _no_java_reason()
    if reason:
        pytest.skip(reason)
    with EmbeddedKafka() as k:
        yield k


@pytest.fixture(scope="module")
def gateway(kafka_broker: EmbeddedKafka) -> Iterator[GatewayThread]:
    config = GatewayConfig(upstream=kafka_broker.bootstrap, listen_port=0, log_level="warning")
    with GatewayThread(config) as gw:
        yield gw
