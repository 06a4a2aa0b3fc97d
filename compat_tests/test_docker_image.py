"""The gateway image (docker/Dockerfile) in front of the official apache/kafka image, via testcontainers.

Skipped with "no Docker engine" where none answers; CI without Docker runs the same scenarios against the
process backend in test_passthrough_clients.py.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from compat_tests.harness import probe
from compat_tests.harness.admin import create_topic
from compat_tests.harness.brokers import ContainerBackend, build_gateway_image, docker_unavailable_reason
from compat_tests.harness.clients import ConfluentConsumer, produce_confluent, values
from compat_tests.harness.events import EventLog
from compat_tests.harness.invariants import assert_clean_run

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def gateway_image() -> str:
    reason = docker_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return build_gateway_image()


def test_produce_and_consume_through_the_gateway_container(
    kafka_container: ContainerBackend, gateway_image: str, names: Callable[[str], str]
) -> None:
    bootstrap = kafka_container.start_gateway(gateway_image)
    topic = create_topic(kafka_container.bootstrap, names("topic"), partitions=3)

    for e in probe.metadata_endpoints(bootstrap):
        assert e.address != kafka_container.bootstrap, f"{e.source} leaked the broker's address {e.address}"
        assert e.host == "127.0.0.1", f"{e.source} advertises {e.address}, not the published gateway port"

    produced = produce_confluent(bootstrap, topic, values(topic, 100))
    log = EventLog()
    with ConfluentConsumer(name="docker-0", log=log, bootstrap=bootstrap, group_id=names("group"), topics=[topic]):
        log.wait_until(lambda lg: lg.covers(produced), 60, "every record consumed through the container")
    assert_clean_run(produced, log)
