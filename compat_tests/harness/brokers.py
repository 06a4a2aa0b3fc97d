"""Where the real Kafka broker under test comes from: a local JVM process, or Docker containers.

Two backends share one small interface (``KafkaBackend``):

- ``process``: gateway.ops.embedded_kafka.EmbeddedKafka, a single-node KRaft broker run from the Maven Central
  jars on 127.0.0.1. Needs only Java; this is what CI runs.
- ``testcontainers``: the official ``apache/kafka`` image in KRaft combined mode, plus (on request) the
  gateway image built from docker/Dockerfile on the same Docker network. Needs a reachable Docker engine;
  ``docker_unavailable_reason()`` says why not when there is none, so tests can skip with that reason.
"""

from __future__ import annotations

import random
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gateway.ops.embedded_kafka import EmbeddedKafka, free_port, new_cluster_id

KAFKA_IMAGE = "apache/kafka:4.4.0"
GATEWAY_IMAGE_TAG = "groupgate:compat"
REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKER_PING_TIMEOUT_S = 3

# Inside the Docker network the broker is reachable as kafka:19092; the host reaches it on a published port.
BROKER_ALIAS = "kafka"
INTERNAL_PORT = 19092
# Bootstrap port, an unused port for node 0, and node 1 of the single-node broker.
GATEWAY_PORT_SPAN = 3


class KafkaBackend(Protocol):
    """A running broker the tests (or the gateway) can reach at ``bootstrap``."""

    name: str

    @property
    def bootstrap(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def kill(self) -> None: ...


@dataclass
class ProcessBackend:
    """A single-node KRaft broker as a child JVM (see gateway.ops.embedded_kafka)."""

    overrides: dict[str, str] = field(default_factory=dict)
    name: str = "process"
    broker: EmbeddedKafka | None = None

    @property
    def bootstrap(self) -> str:
        assert self.broker is not None, "backend not started"
        return self.broker.bootstrap

    @property
    def port(self) -> int:
        assert self.broker is not None
        return self.broker.port

    def start(self) -> None:
        if self.broker is None:
            self.broker = EmbeddedKafka(overrides=self.overrides)
        self.broker.start()

    def stop(self) -> None:
        if self.broker is not None:
            self.broker.cleanup()

    def kill(self) -> None:
        if self.broker is not None:
            self.broker.kill()


def docker_unavailable_reason() -> str | None:
    """None when a Docker engine answers a ping within a few seconds, else why it is unusable."""
    try:
        import docker
    except ImportError:
        return "no Docker engine (the docker Python package is not installed)"
    try:
        client = docker.from_env(timeout=DOCKER_PING_TIMEOUT_S)  # type: ignore[attr-defined]
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # any failure to reach the engine means the same thing to a test
        return f"no Docker engine ({type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''})"
    return None


def _kraft_env(host_port: int) -> dict[str, str]:
    """apache/kafka turns KAFKA_* variables into server.properties; a KRaft combined node on three listeners."""
    return {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENERS": f"INTERNAL://0.0.0.0:{INTERNAL_PORT},HOST://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"INTERNAL://{BROKER_ALIAS}:{INTERNAL_PORT},HOST://127.0.0.1:{host_port}",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "INTERNAL:PLAINTEXT,HOST:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "INTERNAL",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_LOG_DIRS": "/tmp/kraft-combined-logs",
        "CLUSTER_ID": new_cluster_id(),
    }


def _wait_tcp(host: str, port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"nothing served on {host}:{port} within {timeout_s}s")


@dataclass
class ContainerBackend:
    """``apache/kafka`` in KRaft mode on its own Docker network; optionally the gateway image beside it.

    The broker's host listener is published on a port chosen beforehand, because Kafka must advertise the
    address clients will dial and Docker's random port is only known after the container starts.
    """

    image: str = KAFKA_IMAGE
    name: str = "testcontainers"
    host_port: int = 0
    _network: Any = None
    _kafka: Any = None
    _gateways: list[Any] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.host_port}"

    @property
    def internal_bootstrap(self) -> str:
        """The broker's address as seen from other containers on the network (the gateway's upstream)."""
        return f"{BROKER_ALIAS}:{INTERNAL_PORT}"

    def start(self, timeout_s: float = 120.0) -> None:
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.network import Network
        from testcontainers.core.wait_strategies import LogMessageWaitStrategy

        self._network = Network().create()
        self.host_port = self.host_port or free_port()
        kafka = DockerContainer(self.image).with_network(self._network).with_network_aliases(BROKER_ALIAS)
        for key, value in _kraft_env(self.host_port).items():
            kafka.with_env(key, value)
        kafka.with_bind_ports(9092, self.host_port)
        kafka.waiting_for(LogMessageWaitStrategy("Kafka Server started").with_startup_timeout(int(timeout_s)))
        self._kafka = kafka.start()
        _wait_tcp("127.0.0.1", self.host_port, timeout_s)

    def start_gateway(self, image_tag: str = GATEWAY_IMAGE_TAG, timeout_s: float = 60.0) -> str:
        """Run the gateway image against this broker; returns the bootstrap clients on the host use.

        The gateway serves its bootstrap port P and broker node N on P + 1 + N (gateway.config.settings), and tells
        clients those very ports; so the container publishes P..P+GATEWAY_PORT_SPAN-1 one to one on the host.
        """
        from testcontainers.core.container import DockerContainer

        port = free_port_block(GATEWAY_PORT_SPAN)
        gw = DockerContainer(image_tag).with_network(self._network)
        for p in range(port, port + GATEWAY_PORT_SPAN):
            gw.with_bind_ports(p, p)
        gw.with_env("GROUPGATE_ADVERTISED_HOST", "127.0.0.1")
        gw.with_command(gateway_container_args(self.internal_bootstrap, port))
        self._gateways.append(gw.start())
        _wait_tcp("127.0.0.1", port, timeout_s)
        return f"127.0.0.1:{port}"

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
        if self._network is not None:
            self._network.remove()
            self._network = None

    def kill(self) -> None:
        if self._kafka is not None:
            self._kafka.get_wrapped_container().kill()


def gateway_container_args(upstream: str, port: int) -> str:
    """Arguments after the image's ENTRYPOINT (``groupgate serve``): all interfaces inside the container;
    the advertised host comes from GROUPGATE_ADVERTISED_HOST."""
    return f"--upstream {upstream} --listen 0.0.0.0:{port}"


def free_port_block(n: int, host: str = "127.0.0.1", attempts: int = 200) -> int:
    """A port P with P..P+n-1 all free right now (ports are only reserved by binding, so this can race)."""
    rng = random.Random()
    for _ in range(attempts):
        base = rng.randrange(20000, 60000)
        socks: list[socket.socket] = []
        try:
            for p in range(base, base + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind((host, p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no block of {n} free ports found")


# What docker/Dockerfile COPYs; the build context holds only these (the Docker API's classic builder
# would otherwise upload the whole repository, virtualenv included, as it ignores Dockerfile.dockerignore).
IMAGE_CONTEXT = ("pyproject.toml", "README.md", "gateway", "translate", "coordinator", "rehearsal", "docker")


def build_gateway_image(tag: str = GATEWAY_IMAGE_TAG) -> str:
    """Build docker/Dockerfile from a minimal copy of the repository; returns the tag."""
    from testcontainers.core.image import DockerImage

    with tempfile.TemporaryDirectory(prefix="groupgate-image-") as tmp:
        for name in IMAGE_CONTEXT:
            src = REPO_ROOT / name
            if src.is_dir():
                shutil.copytree(src, Path(tmp) / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif src.exists():
                shutil.copy2(src, Path(tmp) / name)
        DockerImage(path=tmp, dockerfile_path="docker/Dockerfile", tag=tag, clean_up=False).build()
    return tag
