"""A real single-node Apache Kafka broker (KRaft, combined broker+controller) on 127.0.0.1.

This is what ``groupgate dev`` runs behind the gateway, and what the compatibility harness builds on.
The jars come from Maven Central (see kafka_dist); the broker runs as a child JVM with its own data
directory, on free loopback ports, and is stopped cleanly (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gateway.ops import kafka_dist

READY_TIMEOUT_S = 90.0


def free_port(host: str = "127.0.0.1") -> int:
    return free_ports(1, host)[0]


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct ports free right now: all bound at once, so the OS cannot hand one out twice (ports
    taken one at a time, each released before the next is asked for, can repeat)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise RuntimeError("a Java runtime (17+) is needed to run Apache Kafka; install one or set JAVA_HOME")
    return found


# Broker settings that make a single node work (replication factors) and keep tests quick.
BASE_CONFIG: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "inter.broker.listener.name": "PLAINTEXT",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
    "log.flush.interval.messages": "9223372036854775807",
}


@dataclass(frozen=True)
class BrokerTls:
    """An extra SSL listener for the broker, from PEM files (Kafka 2.7+ reads PEM key stores)."""

    # One PEM file: the broker's private key (PKCS#8, unencrypted) followed by its certificate chain.
    keystore: str
    # PEM CA bundle the broker trusts client certificates from; with require_client_cert it demands one.
    truststore: str | None = None
    require_client_cert: bool = False


@dataclass(frozen=True)
class BrokerSasl:
    """An extra SASL_PLAINTEXT listener with PLAIN and SCRAM-SHA-256/512 (and OAUTHBEARER with unsecured
    tokens when ``mechanisms`` names it) and the StandardAuthorizer.

    ``users`` (name -> password) are known to PLAIN (from the listener's JAAS configuration) and to both
    SCRAM mechanisms (credentials written at format time, as KRaft takes them). The PLAINTEXT and
    CONTROLLER listeners stay unauthenticated: their principal is User:ANONYMOUS, which must be a super
    user for the node to talk to its own controller; the PLAINTEXT listener is thereby an administrator's
    back door, which the test harness uses for setup (topics, ACLs) and which tests never hand a client.
    """

    users: Mapping[str, str]
    super_users: tuple[str, ...] = ("admin",)
    # allow.everyone.if.no.acl.found: off, as secured clusters run.
    allow_everyone_if_no_acl_found: bool = False
    mechanisms: tuple[str, ...] = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class EmbeddedKafka:
    """One broker process. Use as a context manager, or call start()/stop()."""

    host: str = "127.0.0.1"
    port: int = 0
    controller_port: int = 0
    data_dir: Path | None = None
    overrides: Mapping[str, str] = field(default_factory=dict)
    heap: str = "512m"
    version: str = kafka_dist.CURRENT_KAFKA
    # An additional SSL listener on ssl_port (0 = a free port), beside the PLAINTEXT one (None = none).
    tls: BrokerTls | None = None
    ssl_port: int = 0
    # The cluster id the storage is formatted with (None: a fresh one); the nodes of one cluster share it.
    cluster_id: str | None = None
    # An additional SASL_PLAINTEXT listener on sasl_port (0 = a free port), with ACLs enforced.
    sasl: BrokerSasl | None = None
    sasl_port: int = 0
    # With both tls and sasl: a SASL_SSL listener too.
    sasl_ssl_port: int = 0
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _own_dir: bool = field(default=False, init=False, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def ssl_bootstrap(self) -> str:
        assert self.tls is not None, "no SSL listener configured"
        return f"{self.host}:{self.ssl_port}"

    @property
    def sasl_bootstrap(self) -> str:
        assert self.sasl is not None, "no SASL listener configured"
        return f"{self.host}:{self.sasl_port}"

    @property
    def sasl_ssl_bootstrap(self) -> str:
        assert self.sasl is not None and self.tls is not None, "no SASL_SSL listener configured"
        return f"{self.host}:{self.sasl_ssl_port}"

    @property
    def log_path(self) -> Path:
        assert self.data_dir is not None
        return self.data_dir / "server.log"

    def setting(self, name: str) -> str | None:
        """The value this broker runs with for a setting given in its configuration (None: Kafka's default)."""
        return self.overrides.get(name, BASE_CONFIG.get(name))

    def _config(self) -> dict[str, str]:
        assert self.data_dir is not None
        cfg = dict(BASE_CONFIG)
        cfg.update(
            {
                "controller.quorum.voters": f"1@{self.host}:{self.controller_port}",
                "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
                "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
                "log.dirs": str(self.data_dir / "logs"),
            }
        )
        if self.tls is not None:
            cfg["listeners"] += f",SSL://{self.host}:{self.ssl_port}"
            cfg["advertised.listeners"] += f",SSL://{self.host}:{self.ssl_port}"
            cfg["listener.security.protocol.map"] += ",SSL:SSL"
            cfg["ssl.keystore.type"] = "PEM"
            cfg["ssl.keystore.location"] = self.tls.keystore
            if self.tls.truststore is not None:
                cfg["ssl.truststore.type"] = "PEM"
                cfg["ssl.truststore.location"] = self.tls.truststore
            cfg["ssl.client.auth"] = "required" if self.tls.require_client_cert else "none"
        if self.sasl is not None:
            sasl = self.sasl
            listeners = [("SASL_PLAINTEXT", self.sasl_port)]
            if self.tls is not None:
                listeners.append(("SASL_SSL", self.sasl_ssl_port))  # with the SSL listener's key material
            users = " ".join(f"user_{name}={_jaas_quote(pw)}" for name, pw in sasl.users.items())
            cfg["sasl.enabled.mechanisms"] = ",".join(sasl.mechanisms)
            for name, port in listeners:
                cfg["listeners"] += f",{name}://{self.host}:{port}"
                cfg["advertised.listeners"] += f",{name}://{self.host}:{port}"
                cfg["listener.security.protocol.map"] += f",{name}:{name}"
                prefix = f"listener.name.{name.lower()}."
                cfg[prefix + "plain.sasl.jaas.config"] = (
                    f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
                )
                for mech in ("scram-sha-256", "scram-sha-512"):
                    cfg[prefix + f"{mech}.sasl.jaas.config"] = (
                        "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                    )
                if "OAUTHBEARER" in sasl.mechanisms:
                    # Without sasl.oauthbearer.jwks.endpoint.url the broker validates tokens with Kafka's
                    # unsecured validator (alg "none", checks exp and the sub claim): tests mint their own.
                    cfg[prefix + "oauthbearer.sasl.jaas.config"] = (
                        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
                    )
            cfg["authorizer.class.name"] = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
            cfg["super.users"] = ";".join(["User:ANONYMOUS", *(f"User:{u}" for u in sasl.super_users)])
            cfg["allow.everyone.if.no.acl.found"] = str(sasl.allow_everyone_if_no_acl_found).lower()
        cfg.update(self.overrides)
        return cfg

    def _scram_args(self) -> list[str]:
        if self.sasl is None:
            return []
        out = []
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            if mech in self.sasl.mechanisms:
                for name, pw in self.sasl.users.items():
                    out += ["--add-scram", f"{mech}=[name={name},password={pw}]"]
        return out

    def start(self, timeout_s: float = READY_TIMEOUT_S, *, wait: bool = True) -> EmbeddedKafka:
        """Start the JVM; with ``wait`` (the default) return once the client listener serves. A node of a
        multi-voter cluster only serves once a quorum is up, so a cluster starts all nodes, then waits."""
        dist = kafka_dist.broker(self.version)
        kafka_dist.fetch(dist)
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="groupgate-kafka-"))
            self._own_dir = True
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # The ports not given, taken together so that no two listeners are handed the same one.
        wanted = ["port", "controller_port"]
        if self.tls is not None:
            wanted.append("ssl_port")
        if self.sasl is not None:
            wanted.append("sasl_port")
            if self.tls is not None:
                wanted.append("sasl_ssl_port")
        missing = [name for name in wanted if not getattr(self, name)]
        taken = {getattr(self, name) for name in wanted} - {0}
        fresh = [p for p in free_ports(len(missing) + len(taken), self.host) if p not in taken]
        for name, port in zip(missing, fresh, strict=False):
            setattr(self, name, port)
        props = self.data_dir / "server.properties"
        props.write_text("".join(f"{k}={v}\n" for k, v in self._config().items()))
        java = java_binary()
        cp = dist.classpath()
        jvm = [
            java,
            f"-Xmx{self.heap}",
            f"-Xms{self.heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-cp",
            cp,
        ]
        meta = self.data_dir / "logs" / "meta.properties"
        if not meta.exists():
            fmt = subprocess.run(
                [*jvm, "kafka.tools.StorageTool", "format", "-c", str(props), "-t", self.cluster_id or new_cluster_id(), "-g", *self._scram_args()],
                capture_output=True,
                text=True,
            )
            if fmt.returncode != 0:
                raise RuntimeError(f"formatting Kafka storage failed: {fmt.stdout}\n{fmt.stderr}")
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child process
        self._proc = subprocess.Popen(
            [*jvm, "kafka.Kafka", str(props)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        if wait:
            self.wait_ready(timeout_s)
        return self

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        # The client listener only accepts connections once the broker is unfenced.
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"Kafka exited with {self._proc.returncode}; see {self.log_path}:\n{self._tail()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=1.0):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"Kafka did not serve on {self.bootstrap} within {timeout_s}s:\n{self._tail()}")

    def _tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, grace_s: float = 20.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL, for tests of an upstream broker that vanishes."""
        if self._proc is not None and self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        self._proc = None

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def new_cluster_id() -> str:
    """A random Kafka Uuid in its 22-character base64url form (never starting with '-', as Kafka requires)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid
