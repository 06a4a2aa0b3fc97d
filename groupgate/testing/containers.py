"""groupgate as a testcontainers module: the gateway image in front of a Kafka container (or any bootstrap
the containers' network reaches).

    from groupgate.testing.containers import GroupgateContainer

    with GroupgateContainer() as gw:              # its own apache/kafka container behind it
        Consumer({"bootstrap.servers": gw.get_bootstrap_server(), ...})

``GroupgateContainer`` offers what groupgate.testing.local.LocalGateway offers (the Gateway protocol of
groupgate.testing.base), so a suite can run either way. The image defaults to ``groupgate:<version of
this package>``, the tag ``make image`` builds (docker/Dockerfile). Readiness is the gateway's /readyz
(200 once group state is replayed and topic metadata fetched), not a log line.

Ports: the gateway tells clients its own port numbers (bootstrap P, broker node N on P + 1 + N -
``node_id_base``), so those are published one to one on ports chosen free on the host beforehand, not
on Docker's random ones.
"""

from __future__ import annotations

import contextlib
from typing import Any

from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

import groupgate
from groupgate.testing._net import free_port, free_port_block, wait_ready, wait_tcp
from groupgate.testing.base import state_settings, unique_name
from groupgate.testing.events import Event, parse_events, select
from groupgate.testing.settings import GatewaySettings

KAFKA_IMAGE = "apache/kafka:4.4.0"
DEFAULT_IMAGE = f"groupgate:{groupgate.__version__}"
START_TIMEOUT_S = 120.0
DOCKER_PING_TIMEOUT_S = 3

# Inside the containers' network the broker is reachable as kafka:19092; the host reaches it on a published port.
BROKER_ALIAS = "kafka"
INTERNAL_PORT = 19092
METRICS_PORT = 9644
STATE_DIR = "/var/lib/groupgate/state"
EVENTS_PATH = "/var/lib/groupgate/events/rebalance-events.jsonl"


def docker_unavailable_reason() -> str | None:
    """None when a Docker engine answers a ping within a few seconds, else why it is unusable
    (``no Docker engine (...)``), for ``pytest.skip``."""
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
        first = str(exc).splitlines()[0][:160] if str(exc) else ""
        return f"no Docker engine ({type(exc).__name__}: {first})"
    return None


def kraft_env(host_port: int, host: str = "127.0.0.1", alias: str = BROKER_ALIAS) -> dict[str, str]:
    """apache/kafka turns KAFKA_* variables into server.properties; a KRaft combined node (id 1) on three
    listeners: INTERNAL for other containers, HOST for the test's host, CONTROLLER."""
    from gateway.ops.embedded_kafka import new_cluster_id

    return {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENERS": f"INTERNAL://0.0.0.0:{INTERNAL_PORT},HOST://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"INTERNAL://{alias}:{INTERNAL_PORT},HOST://{host}:{host_port}",
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


def _wait_log(container: DockerContainer, line: str, timeout_s: float) -> None:
    try:
        from testcontainers.core.wait_strategies import LogMessageWaitStrategy
    except ImportError:  # testcontainers before the wait strategies
        from testcontainers.core.waiting_utils import wait_for_logs

        wait_for_logs(container, line, timeout=timeout_s)
    else:
        LogMessageWaitStrategy(line).with_startup_timeout(int(timeout_s)).wait_until_ready(container)


class GroupgateKafkaContainer(DockerContainer):
    """``apache/kafka`` in KRaft combined mode (node id 1) for a gateway container to front: other
    containers reach it as ``kafka:19092`` (``internal_bootstrap``) on ``network`` (a new one when None),
    the host on ``get_bootstrap_server()`` (for the same scenario run directly)."""

    def __init__(self, image: str = KAFKA_IMAGE, network: Network | None = None, alias: str = BROKER_ALIAS, **kwargs: Any):
        super().__init__(image, **kwargs)
        self.alias = alias
        self._own_network = network is None
        self.gg_network = network
        self.host_port = 0

    @property
    def internal_bootstrap(self) -> str:
        return f"{self.alias}:{INTERNAL_PORT}"

    def get_bootstrap_server(self) -> str:
        return f"{self.get_container_host_ip()}:{self.host_port}"

    def start(self, timeout_s: float = START_TIMEOUT_S) -> GroupgateKafkaContainer:  # type: ignore[override]
        if self.gg_network is None:
            self.gg_network = Network().create()
        self.with_network(self.gg_network).with_network_aliases(self.alias)
        self.host_port = self.host_port or free_port()
        for key, value in kraft_env(self.host_port, self.get_container_host_ip(), self.alias).items():
            self.with_env(key, value)
        self.with_bind_ports(9092, self.host_port)
        super().start()
        _wait_log(self, "Kafka Server started", timeout_s)
        wait_tcp(self.get_container_host_ip(), self.host_port, timeout_s)
        return self

    def kill(self) -> None:
        self.get_wrapped_container().kill()

    def stop(self, force: bool = True, delete_volume: bool = True) -> None:
        super().stop(force, delete_volume)
        if self._own_network and self.gg_network is not None:
            with contextlib.suppress(Exception):
                self.gg_network.remove()
            self.gg_network = None


class GroupgateContainer(DockerContainer):
    """The gateway image (``groupgate serve``) in front of ``upstream``:

    - None: a GroupgateKafkaContainer of its own, on a network of its own (started and stopped with it);
    - a GroupgateKafkaContainer: that broker, on its network;
    - a string: any bootstrap the container reaches (on ``network``, if given); ``direct_bootstrap`` is
      the same cluster as the host reaches it, for running a scenario directly (default: the string).

    ``settings``: GatewaySettings (classic groups mode, migration policy, managed groups, timeouts,
    state, rebalance events). ``brokers``: how many broker node ids (from ``node_id_base``) to publish.
    """

    def __init__(
        self,
        image: str | None = None,
        *,
        upstream: str | GroupgateKafkaContainer | None = None,
        network: Network | None = None,
        direct_bootstrap: str | None = None,
        settings: GatewaySettings | None = None,
        brokers: int = 1,
        node_id_base: int = 1,
        start_timeout_s: float = START_TIMEOUT_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(image or DEFAULT_IMAGE, **kwargs)
        self.settings = state_settings(settings or GatewaySettings())
        self._kafka: GroupgateKafkaContainer | None = upstream if isinstance(upstream, GroupgateKafkaContainer) else None
        self._own_kafka = upstream is None
        self._upstream_str = upstream if isinstance(upstream, str) else None
        self._direct = direct_bootstrap
        self.gg_network = network
        self.brokers = brokers
        self.node_id_base = node_id_base
        self.start_timeout_s = start_timeout_s
        self.listen_port = 0
        self.metrics_port = 0
        self._volumes: list[str] = []

    # --- addresses -------------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return f"{self.get_container_host_ip()}:{self.listen_port}"

    def get_bootstrap_server(self) -> str:
        return self.bootstrap

    @property
    def upstream(self) -> str:
        if self._kafka is not None:
            return self._kafka.get_bootstrap_server()
        assert self._upstream_str is not None
        return self._direct or self._upstream_str

    @property
    def readyz_url(self) -> str:
        return f"http://{self.get_container_host_ip()}:{self.metrics_port}/readyz"

    # --- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> GroupgateContainer:  # type: ignore[override]
        if self._own_kafka and self._kafka is None:
            self._kafka = GroupgateKafkaContainer(network=self.gg_network)
        if self._kafka is not None:
            if self._kafka._container is None:
                self._kafka.start()
            self.gg_network = self._kafka.gg_network
        if self.gg_network is not None:
            self.with_network(self.gg_network)
        if not self.listen_port:
            self.listen_port = free_port_block(self.brokers + 1)
            self.metrics_port = free_port()
            for p in range(self.listen_port, self.listen_port + self.brokers + 1):
                self.with_bind_ports(p, p)
            self.with_bind_ports(METRICS_PORT, self.metrics_port)
            for name, path in (("state", STATE_DIR), ("events", EVENTS_PATH.rsplit("/", 1)[0])):
                volume = unique_name(f"groupgate-{name}")
                self._volumes.append(volume)
                self.with_volume_mapping(volume, path, "rw")
        self._configure_gateway()
        try:
            super().start()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _configure_gateway(self) -> None:
        internal = self._kafka.internal_bootstrap if self._kafka is not None else self._upstream_str
        assert internal is not None
        for key in [k for k in self.env if k.startswith("GROUPGATE_COORDINATOR_")]:
            del self.env[key]
        self.with_env("GROUPGATE_ADVERTISED_HOST", self.get_container_host_ip())
        self.with_env("GROUPGATE_METRICS_LISTEN", f"0.0.0.0:{METRICS_PORT}")
        for key, value in self.settings.env().items():
            self.with_env(key, value)
        self.with_command(serve_command(internal, self.listen_port, self.settings, self.node_id_base))

    def _wait_ready(self) -> None:
        def running() -> bool:
            c = self.get_wrapped_container()
            c.reload()
            return c.status in ("created", "running", "restarting")

        try:
            wait_ready(self.readyz_url, self.start_timeout_s, alive=running)
        except (TimeoutError, RuntimeError) as e:
            raise RuntimeError(f"{e}; gateway log:\n{self.logs()[-4000:]}") from e

    def kill(self) -> None:
        """SIGKILL the gateway (the container stays, with its ports and state, for ``restart``)."""
        self.get_wrapped_container().kill()

    def restart(self, *, hard: bool = True) -> GroupgateContainer:
        """Kill (``hard``) or stop (SIGTERM) the gateway and start the same container again: same ports,
        same state volume."""
        c = self.get_wrapped_container()
        c.reload()
        if c.status == "running":
            if hard:
                c.kill()
            else:
                c.stop(timeout=10)
        c.start()
        self._wait_ready()
        return self

    def reconfigure(self, **changes: Any) -> GroupgateContainer:
        """Stop (SIGTERM), change settings, start a new container on the same ports and state volume."""
        c = self.get_wrapped_container()
        c.stop(timeout=10)
        c.remove()
        self.settings = state_settings(self.settings.replace(**changes))
        self._configure_gateway()
        super().start()
        self._wait_ready()
        return self

    def stop(self, force: bool = True, delete_volume: bool = True) -> None:
        if self._container is not None:
            super().stop(force, delete_volume)
            self._container = None
        if self._volumes:
            import docker  # the Docker SDK (a testcontainers dependency)

            # A type checker run from the repository's root takes its docker/ folder for this package.
            client = docker.from_env()  # type: ignore[attr-defined]
            try:
                for volume in self._volumes:
                    with contextlib.suppress(Exception):
                        client.volumes.get(volume).remove(force=True)
            finally:
                client.close()
            self._volumes.clear()
        if self._own_kafka and self._kafka is not None:
            self._kafka.stop()
            self._kafka = None

    # --- what it did -----------------------------------------------------------------------------------

    def events(self, group: str | None = None, event: str | None = None) -> list[Event]:
        code, out = self.get_wrapped_container().exec_run(["cat", EVENTS_PATH])
        if code != 0:
            return []
        return select(parse_events(out.decode(errors="replace").splitlines()), group, event)

    def logs(self) -> str:
        if self._container is None:
            return ""
        out, err = self.get_logs()
        return (out + err).decode(errors="replace")


def serve_command(upstream: str, listen_port: int, settings: GatewaySettings, node_id_base: int = 1) -> list[str]:
    """The arguments after the image's ENTRYPOINT (``groupgate serve``): all interfaces inside the
    container, broker node N on ``listen_port`` + 1 + N - ``node_id_base``; the advertised host and the
    coordinator settings come from the environment."""
    cmd = ["--upstream", upstream, "--listen", f"0.0.0.0:{listen_port}", "--node-id-base", str(node_id_base)]
    if settings.state == "file":
        cmd += ["--state-dir", STATE_DIR]
    elif settings.state == "kafka":
        cmd += ["--state-store", "kafka"]
    else:
        cmd += ["--ephemeral-state"]
    if settings.rebalance_events:
        cmd += ["--rebalance-events", EVENTS_PATH]
    return [*cmd, *settings.args]


def build_image(tag: str = DEFAULT_IMAGE, root: str | None = None) -> str:
    """Build docker/Dockerfile of a groupgate source tree (``root``: this package's own) as ``tag``,
    through the Docker API with a context of only what the Dockerfile copies; returns the tag.
    ``make image`` does the same with the docker CLI."""
    import shutil
    import tempfile
    from pathlib import Path

    from testcontainers.core.image import DockerImage

    src_root = Path(root) if root is not None else Path(groupgate.__file__).resolve().parents[1]
    if not (src_root / "docker" / "Dockerfile").exists():
        raise FileNotFoundError(f"{src_root} is not a groupgate source tree (no docker/Dockerfile)")
    with tempfile.TemporaryDirectory(prefix="groupgate-image-") as tmp:
        for name in IMAGE_CONTEXT:
            src = src_root / name
            if src.is_dir():
                shutil.copytree(src, Path(tmp) / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            elif src.exists():
                shutil.copy2(src, Path(tmp) / name)
        DockerImage(path=tmp, dockerfile_path="docker/Dockerfile", tag=tag, clean_up=False).build()
    return tag


# What docker/Dockerfile COPYs; the build context holds only these (the Docker API's classic builder
# would otherwise upload the whole repository, virtualenv included, as it ignores Dockerfile.dockerignore).
IMAGE_CONTEXT = ("pyproject.toml", "README.md", "gateway", "translate", "coordinator", "rehearsal", "docker")
