"""Where the real Kafka broker under test comes from: a local JVM process, or Docker containers.

Both are the public testing package's (groupgate.testing), so that every compat run exercises it:

- ``process``: groupgate.testing.local.LocalKafka, a single-node KRaft broker run from the Maven Central
  jars on 127.0.0.1. Needs only Java; this is what CI runs.
- ``testcontainers``: groupgate.testing.containers, the official ``apache/kafka`` image in KRaft combined
  mode, plus (on request) the gateway image built from docker/Dockerfile on the same Docker network. Needs
  a reachable Docker engine; ``docker_unavailable_reason()`` says why not when there is none, so tests can
  skip with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from groupgate.testing._net import free_port_block, wait_tcp
from groupgate.testing.local import LocalKafka

__all__ = [
    "ContainerBackend",
    "KafkaBackend",
    "ProcessBackend",
    "build_gateway_image",
    "docker_unavailable_reason",
    "free_port_block",
    "wait_tcp",
]

KAFKA_IMAGE = "apache/kafka:4.4.0"

# The single-node broker of either backend: a LocalKafka.
ProcessBackend = LocalKafka


class KafkaBackend(Protocol):
    """A running broker the tests (or the gateway) can reach at ``bootstrap``."""

    name: str

    @property
    def bootstrap(self) -> str: ...

    def start(self) -> Any: ...

    def stop(self) -> None: ...

    def kill(self) -> None: ...


def docker_unavailable_reason() -> str | None:
    from groupgate.testing.containers import docker_unavailable_reason as reason

    return reason()


def build_gateway_image() -> str:
    """Build docker/Dockerfile of this tree as the package version's tag (what ``make image`` builds)."""
    from groupgate.testing.containers import build_image

    return build_image()


@dataclass
class ContainerBackend:
    """``apache/kafka`` in KRaft mode on its own Docker network; gateway containers beside it on request."""

    image: str = KAFKA_IMAGE
    name: str = "testcontainers"
    _kafka: Any = None
    _gateways: list[Any] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return str(self._kafka.get_bootstrap_server())

    @property
    def internal_bootstrap(self) -> str:
        """The broker's address as seen from other containers on the network (the gateway's upstream)."""
        return str(self._kafka.internal_bootstrap)

    def start(self) -> None:
        from groupgate.testing.containers import GroupgateKafkaContainer

        self._kafka = GroupgateKafkaContainer(self.image).start()

    def start_gateway(self, image_tag: str | None = None, **kwargs: Any) -> str:
        """Run the gateway image in front of this broker, ready (/readyz); returns the host's bootstrap."""
        from groupgate.testing.containers import GroupgateContainer

        gw = GroupgateContainer(image_tag, upstream=self._kafka, **kwargs)
        self._gateways.append(gw)
        gw.start()
        return gw.bootstrap

    def logs(self) -> str:
        if self._kafka is None:
            return ""
        out, err = self._kafka.get_logs()
        return (out + err).decode(errors="replace")

    def stop(self) -> None:
        for gw in self._gateways:
            gw.stop()
        self._gateways.clear()
        if self._kafka is not None:
            self._kafka.stop()
            self._kafka = None

    def kill(self) -> None:
        if self._kafka is not None:
            self._kafka.kill()
