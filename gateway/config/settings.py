"""Gateway configuration: defaults < TOML file < GROUPGATE_* environment variables < command-line flags.

Broker listeners are mapped deterministically: node id N is served on
``broker_port_base + (N - node_id_base)`` unless ``broker_ports`` names its port explicitly, so a restarted
gateway hands clients the same addresses it handed them before (clients cache broker addresses).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, ConfigDict, Field, SecretStr, field_validator, model_validator

from gateway.config import ports
from gateway.config.coordinator import CoordinatorSettings
from gateway.config.sasl import SaslSettings

ENV_PREFIX = "GROUPGATE_"
SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
WILDCARD_HOSTS = ("", "0.0.0.0", "::")


class PortMappingError(ValueError):
    """A node id that the configured port range cannot serve."""


def parse_host_port(value: str) -> tuple[str, int]:
    """'host:port' (or '[v6]:port') -> (host, port)."""
    value = value.strip()
    if value.startswith("["):
        host, _, rest = value[1:].partition("]")
        port = rest.lstrip(":")
    else:
        host, sep, port = value.rpartition(":")
        if not sep:
            raise ValueError(f"expected HOST:PORT, got {value!r}")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"bad port in {value!r}")
    return host, int(port)


class GatewayConfig(SaslSettings):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # Comma-separated HOST:PORT list of the upstream Kafka cluster (any reachable broker will do).
    upstream: str = "127.0.0.1:9093"
    listen_host: str = "127.0.0.1"
    # 0 = an ephemeral bootstrap port chosen by the OS.
    listen_port: int = Field(default=9092, ge=0, le=65535)
    # The host clients are told to connect to; defaults to listen_host (or 127.0.0.1 when that is a wildcard).
    advertised_host: str | None = None
    # First broker listener port; None = listen_port + 1 (or OS-chosen ports when listen_port is 0).
    broker_port_base: int | None = Field(default=None, ge=1, le=65535)
    node_id_base: int = Field(default=0, ge=0)
    # How many consecutive node ids (from node_id_base) the port range serves.
    max_brokers: int = Field(default=64, ge=1, le=4096)
    # Explicit node id -> port entries, taking precedence over the range.
    broker_ports: dict[int, int] = Field(default_factory=dict)
    # Kafka's socket.request.max.bytes default (100 MiB).
    max_frame_bytes: int = Field(default=104_857_600, ge=1024)
    # Connection limits (docs/gateway.md, "Connection limits"); each also accepts its Kafka name.
    # Request bytes held by all client connections together; -1 = unbounded (Kafka's default, where the
    # JVM heap is the bound; the gateway has no such cap, hence a budget by default).
    queued_max_request_bytes: int = Field(
        default=268_435_456,
        ge=-1,
        validation_alias=AliasChoices("queued_max_request_bytes", "queued.max.request.bytes"),
    )
    # Client connections at once; also lowered to what RLIMIT_NOFILE can serve (two descriptors each).
    max_connections: int = Field(
        default=2_147_483_647, ge=1, validation_alias=AliasChoices("max_connections", "max.connections")
    )
    # Connections the kernel completes and queues for each listener before the gateway accepts them
    # (listen(2) backlog; the kernel caps it at net.core.somaxconn). The gateway accepts on the same
    # event loop that answers requests, so while it is busy a fleet reconnecting at once waits in this
    # queue; past it the kernel drops their connection attempts and clients retry seconds later.
    # Kafka's socket.listen.backlog.size defaults to 50 (a broker accepts on its own thread); here
    # 4096, the kernel's usual cap.
    socket_listen_backlog_size: int = Field(
        default=4096,
        ge=1,
        validation_alias=AliasChoices("socket_listen_backlog_size", "socket.listen.backlog.size"),
    )
    # Close a client connection with no traffic and nothing outstanding for this long; -1 = never.
    connections_max_idle_ms: int = Field(
        default=600_000,
        ge=-1,
        validation_alias=AliasChoices("connections_max_idle_ms", "connections.max.idle.ms"),
    )
    # Close a client connection whose request frame stays incomplete this long (slowloris); -1 = never.
    # Kafka has no such setting (its idle timer is reset by every byte).
    partial_request_timeout_ms: int = Field(default=60_000, ge=-1)
    upstream_connect_timeout_s: float = Field(default=10.0, gt=0)
    upstream_request_timeout_s: float = Field(default=30.0, gt=0)
    metadata_refresh_s: float = Field(default=30.0, gt=0)
    # A broker missing from metadata keeps its listener this long (rolling restarts drop it briefly).
    broker_absent_grace_s: float = Field(default=120.0, ge=0)
    # asyncio (the default): asyncio's own loop. auto: uvloop (a dependency of the package) when it can be
    # imported, else asyncio's loop. uvloop: uvloop or refuse to start. uvloop takes 5-14 % less CPU per
    # request where the core has room; on a full core it runs the loop's ready callbacks (every task step,
    # hence every write-through and state write) only between long bursts of I/O, and new clients were
    # answered later than on asyncio's loop even with the gateway accepting them itself (gateway/net/
    # acceptor.py; docs/performance.md, "Accepting connections in the gateway").
    event_loop: Literal["auto", "asyncio", "uvloop"] = "asyncio"
    # The interpreter's thread switch interval (sys.setswitchinterval; Python's default is 5 ms): how long
    # a thread that needs the interpreter waits, at most, while another runs Python. The cluster store's
    # clients (a loop on a thread of their own) share it with the gateway's loop: with that loop busy,
    # every step of a transaction waited up to this long (docs/performance.md, "The interpreter's switch
    # interval"). Offloaded assignments share it the other way round.
    switch_interval_ms: float = Field(default=1.0, gt=0, le=1000)
    # The cyclic garbage collector's first threshold (gc.set_threshold; Python's default is 700): how many
    # more container objects than were freed start a collection. At 700 a busy gateway collected its
    # youngest objects hundreds of times a second and all of them (80 ms each, the loop stopped) about
    # once a second, a tenth of its CPU (docs/performance.md, "The garbage collector"). The older
    # generations keep Python's ratios (10, 10).
    gc_threshold: int = Field(default=50_000, ge=100, le=10_000_000)
    # Move every object alive at start (modules, classes, the codec's tables, the configuration) out of
    # the collector's sight (gc.freeze) so that its full collections walk only what the gateway made since.
    gc_freeze: bool = True
    log_format: Literal["json", "console"] = "console"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # HOST:PORT of the operators' HTTP endpoint (/metrics, /healthz, /readyz); None = off, port 0 = ephemeral.
    metrics_listen: str | None = None
    # Who may open the live groups page there (/groups, docs/operations.md): HTTP Basic credentials checked
    # against this file (the form of listener_sasl_credentials_file, `groupgate sasl-credentials` writes
    # both); when unset and the listeners terminate SASL, against listener_sasl_credentials_file.
    # admin_users, when set, narrows who of that file's users may look. /metrics and the probes stay open.
    admin_credentials_file: str | None = None
    admin_users: list[str] | None = None
    # TLS on every client listener (docs/gateway.md, "TLS"): PEM certificate chain and private key. A CA
    # bundle in listener_tls_client_ca makes client certificates mandatory (mutual TLS).
    listener_tls_cert: str | None = None
    listener_tls_key: str | None = None
    listener_tls_client_ca: str | None = None
    # TLS to the upstream brokers: CA bundle (None = the system trust store), optional client certificate.
    upstream_tls: bool = False
    upstream_tls_ca: str | None = None
    upstream_tls_cert: str | None = None
    upstream_tls_key: str | None = None
    upstream_tls_check_hostname: bool = True
    # SASL on the client listeners (docs/gateway.md, "SASL"): SASL_PLAINTEXT / SASL_SSL pass each client's
    # SaslHandshake/SaslAuthenticate through to the cluster on its own upstream connection and refuse
    # everything else before authentication succeeds. None: PLAINTEXT, or SSL when listener_tls_cert is set.
    listener_security_protocol: SecurityProtocol | None = Field(
        default=None,
        validation_alias=AliasChoices("listener_security_protocol", "listener.security.protocol"),
    )
    # The gateway's own connections to the cluster (metadata, group write-through, forwarding) with
    # Kafka's client names: security.protocol, sasl.mechanism; the JAAS username/password as settings of
    # their own. The password may come from a file instead (its content, without a trailing newline).
    upstream_security_protocol: SecurityProtocol | None = Field(
        default=None,
        validation_alias=AliasChoices("upstream_security_protocol", "security.protocol"),
    )
    upstream_sasl_mechanism: SaslMechanism | None = Field(
        default=None, validation_alias=AliasChoices("upstream_sasl_mechanism", "sasl.mechanism")
    )
    upstream_sasl_username: str | None = None
    upstream_sasl_password: SecretStr | None = None
    upstream_sasl_password_file: str | None = None
    # Authorization of what the gateway answers itself (docs/gateway.md, "Authorization"): the cluster's ACLs,
    # read with DescribeAcls and decided as Kafka's StandardAuthorizer decides. "auto": on when the client
    # listeners speak SASL (passthrough or termination), off otherwise; "on": also there (every client of a
    # PLAINTEXT/SSL listener is
    # User:ANONYMOUS then); "strict": on, and refusing where the gateway's decision could differ from the
    # cluster's (an authorizer other than Kafka's own on the brokers, ACLs not read for too long).
    authorization: Literal["auto", "on", "strict", "off"] = "auto"
    # The brokers' authorizer settings, which the cluster does not disclose: set them as the brokers have them.
    super_users: list[str] = Field(
        default_factory=list, validation_alias=AliasChoices("super_users", "super.users")
    )
    allow_everyone_if_no_acl_found: bool = Field(
        default=False,
        validation_alias=AliasChoices("allow_everyone_if_no_acl_found", "allow.everyone.if.no.acl.found"),
    )
    # How often the cluster's ACLs are read again: an ACL removed takes effect within this time.
    acl_refresh_interval_ms: int = Field(default=10_000, ge=100)
    # The group coordinator the gateway runs (docs/gateway.md, "The group coordinator").
    coordinator: CoordinatorSettings = Field(default_factory=CoordinatorSettings)

    @field_validator("upstream")
    @classmethod
    def _check_upstream(cls, v: str) -> str:
        for item in v.split(","):
            parse_host_port(item)
        return v

    @field_validator("super_users", mode="before")
    @classmethod
    def _split_super_users(cls, v: Any) -> Any:
        # Kafka's form: "User:admin;User:gw" (one string, semicolons between principals).
        if isinstance(v, str):
            return [p.strip() for p in v.split(";") if p.strip()]
        return v

    @field_validator("super_users")
    @classmethod
    def _check_super_users(cls, v: list[str]) -> list[str]:
        for p in v:
            kind, sep, name = p.partition(":")
            if not sep or not kind or not name:
                raise ValueError(f"super.users: {p!r} is not a principal such as User:admin")
        return v

    @field_validator("metrics_listen")
    @classmethod
    def _check_metrics_listen(cls, v: str | None) -> str | None:
        if v is not None:
            parse_host_port(v)
        return v

    @field_validator("broker_ports")
    @classmethod
    def _check_ports(cls, v: dict[int, int]) -> dict[int, int]:
        seen: dict[int, int] = {}
        for node, port in v.items():
            if not 1 <= port <= 65535:
                raise ValueError(f"broker_ports[{node}]={port} is not a TCP port")
            if port in seen:
                raise ValueError(f"broker_ports: nodes {seen[port]} and {node} both map to port {port}")
            seen[port] = node
        return v

    @model_validator(mode="after")
    def _check_tls(self) -> GatewayConfig:
        # Only the shape here; the files themselves are loaded by tls.check() when the gateway starts.
        for cert, key in (
            ("listener_tls_cert", "listener_tls_key"),
            ("upstream_tls_cert", "upstream_tls_key"),
        ):
            if (getattr(self, cert) is None) != (getattr(self, key) is None):
                raise ValueError(f"{cert} and {key} go together: set both or neither")
        if self.listener_tls_client_ca is not None and self.listener_tls_cert is None:
            raise ValueError("listener_tls_client_ca needs listener_tls_cert and listener_tls_key")
        if not self.upstream_tls:
            extra = [n for n in ("upstream_tls_ca", "upstream_tls_cert") if getattr(self, n) is not None]
            if extra:
                raise ValueError(f"{', '.join(extra)} set but upstream_tls is off")
        return self

    @model_validator(mode="before")
    @classmethod
    def _security_protocol_implies_tls(cls, data: Any) -> Any:
        # security.protocol=SSL / SASL_SSL switches TLS to the upstream on, as it does in a Kafka client.
        if isinstance(data, dict):
            proto = data.get("upstream_security_protocol", data.get("security.protocol"))
            if isinstance(proto, str) and proto.endswith("SSL") and data.get("upstream_tls") is None:
                data = {**data, "upstream_tls": True}
        return data

    @model_validator(mode="after")
    def _check_sasl(self) -> GatewayConfig:
        proto = self.upstream_security_protocol
        if proto is not None and proto.endswith("SSL") != self.upstream_tls:
            raise ValueError(f"upstream_security_protocol={proto} contradicts upstream_tls={self.upstream_tls}")
        sasl = proto is not None and proto.startswith("SASL_")
        if sasl or self.upstream_sasl_mechanism is not None:
            if proto is not None and not sasl:
                raise ValueError(f"upstream_sasl_mechanism is set but upstream_security_protocol is {proto}")
            if self.upstream_sasl_mechanism == "OAUTHBEARER":
                # The token comes from an endpoint or a file (gateway/config/sasl.py), not a password.
                if (
                    self.upstream_sasl_oauthbearer_token_endpoint_url is None
                    and self.upstream_sasl_oauthbearer_token_file is None
                ):
                    raise ValueError(
                        "upstream OAUTHBEARER needs upstream_sasl_oauthbearer_token_endpoint_url (with client id "
                        "and secret) or upstream_sasl_oauthbearer_token_file"
                    )
                if self.upstream_sasl_password is not None or self.upstream_sasl_password_file is not None:
                    raise ValueError("upstream_sasl_mechanism=OAUTHBEARER takes no upstream_sasl_password")
            else:
                missing = [
                    n for n in ("upstream_sasl_mechanism", "upstream_sasl_username") if getattr(self, n) is None
                ]
                if self.upstream_sasl_password is None and self.upstream_sasl_password_file is None:
                    missing.append("upstream_sasl_password (or upstream_sasl_password_file)")
                if missing:
                    raise ValueError(f"upstream SASL needs {', '.join(missing)}")
        elif self.upstream_sasl_username is not None or self.upstream_sasl_password is not None:
            raise ValueError("upstream_sasl_username/password set but upstream_sasl_mechanism is not")
        if self.upstream_sasl_mechanism != "OAUTHBEARER" and (
            self.upstream_sasl_oauthbearer_token_endpoint_url is not None
            or self.upstream_sasl_oauthbearer_token_file is not None
        ):
            raise ValueError("upstream_sasl_oauthbearer_* set but upstream_sasl_mechanism is not OAUTHBEARER")
        if self.listener_sasl_mode == "terminate" and self.listener_security_protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
            raise ValueError("listener_sasl_mode=terminate needs listener_security_protocol SASL_PLAINTEXT or SASL_SSL")
        if (
            self.listener_sasl_mode == "terminate" and not self.authorizes()
            and not self.listener_sasl_terminate_grants_gateway_rights
        ):
            raise ValueError(
                "listener_sasl_mode=terminate with authorization=off: the cluster then sees only the gateway's "
                "identity and nothing checks the clients' rights, so every authenticated client gets the "
                "gateway's rights on the cluster; set listener_sasl_terminate_grants_gateway_rights=true to "
                "accept that, or leave authorization on"
            )
        if self.listener_sasl_mode == "terminate" and self.authorizes() and not self.coordinator.enabled:
            # The ACL cache lives in the group layer: without it every passed-through request would be refused.
            raise ValueError(
                "listener_sasl_mode=terminate with authorization on needs the group coordinator enabled "
                "(it reads the cluster's ACLs)"
            )
        if self.upstream_sasl_password is not None and self.upstream_sasl_password_file is not None:
            raise ValueError("upstream_sasl_password and upstream_sasl_password_file: set one, not both")
        lp = self.listener_security_protocol
        if lp is not None and lp.endswith("SSL") != (self.listener_tls_cert is not None):
            raise ValueError(
                f"listener_security_protocol={lp} needs listener_tls_cert/listener_tls_key set"
                if lp.endswith("SSL")
                else f"listener_security_protocol={lp} but listener_tls_cert is set (use SSL or SASL_SSL)"
            )
        return self

    @model_validator(mode="after")
    def _check_range(self) -> GatewayConfig:
        base = self.effective_port_base()
        if base is None:
            return self
        last = base + self.max_brokers - 1
        if last > 65535:
            raise ValueError(
                f"broker ports {base}..{last} run past 65535; lower max_brokers or broker_port_base"
            )
        if self.listen_port and base <= self.listen_port <= last:
            raise ValueError(
                f"the bootstrap port {self.listen_port} lies inside the broker port range {base}..{last}"
            )
        for node, port in self.broker_ports.items():
            if port == self.listen_port:
                raise ValueError(f"broker_ports[{node}] collides with the bootstrap port {port}")
            if base <= port <= last and (port - base + self.node_id_base) != node:
                raise ValueError(
                    f"broker_ports[{node}]={port} collides with the range port of node {port - base + self.node_id_base}"
                )
        return self

    # --- derived values -------------------------------------------------------------------------------

    def listener_sasl(self) -> bool:
        """Client listeners speak SASL (passthrough to the cluster, with inspection)."""
        return self.listener_security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def authorizes(self) -> bool:
        """Whether the gateway authorizes what it answers itself (``authorization``)."""
        if self.authorization == "auto":
            # SASL listeners, passthrough or termination (where the gateway also authorizes what its clients
            # send through, gateway/authz/data.py).
            return self.listener_sasl()
        return self.authorization != "off"

    def upstream_password_credentials(self) -> tuple[str, str, str] | None:
        """(mechanism, username, password) of the gateway's own connections under PLAIN or SCRAM; None
        without SASL. Reads the password file each time (a rotated secret is picked up on the next
        connection). OAUTHBEARER's token source: gateway/security/credentials.py."""
        if self.upstream_sasl_mechanism is None or self.upstream_sasl_mechanism == "OAUTHBEARER":
            return None
        assert self.upstream_sasl_username is not None
        if self.upstream_sasl_password_file is not None:
            try:
                password = Path(self.upstream_sasl_password_file).read_text().rstrip("\r\n")
            except OSError as e:
                raise ValueError(f"upstream_sasl_password_file={self.upstream_sasl_password_file}: {e.strerror or e}") from e
        else:
            assert self.upstream_sasl_password is not None
            password = self.upstream_sasl_password.get_secret_value()
        return self.upstream_sasl_mechanism, self.upstream_sasl_username, password

    def upstream_addresses(self) -> list[tuple[str, int]]:
        return [parse_host_port(x) for x in self.upstream.split(",") if x.strip()]

    def client_host(self) -> str:
        if self.advertised_host:
            return self.advertised_host
        return "127.0.0.1" if self.listen_host in WILDCARD_HOSTS else self.listen_host

    def effective_port_base(self) -> int | None:
        if self.broker_port_base is not None:
            return self.broker_port_base
        return self.listen_port + 1 if self.listen_port else None

    def broker_port(self, node_id: int) -> int:
        """The gateway port for a node id; 0 = OS-chosen (ephemeral mode); PortMappingError if unmapped."""
        base = self.effective_port_base()
        if base is None:
            return self.broker_ports.get(node_id, 0)
        port = ports.broker_port(
            node_id, base=base, id_base=self.node_id_base, count=self.max_brokers, explicit=self.broker_ports
        )
        if port is None:
            raise PortMappingError(
                f"node id {node_id} is outside the mapped range {self.node_id_base}.."
                f"{self.node_id_base + self.max_brokers - 1}; set node_id_base/max_brokers or broker_ports"
            )
        return port


# --- loading: file < env < flags ----------------------------------------------------------------------


def _env_values(environ: dict[str, str] | os._Environ[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    coordinator = {
        field: environ[ENV_PREFIX + "COORDINATOR_" + field.upper()]
        for field in CoordinatorSettings.model_fields
        if ENV_PREFIX + "COORDINATOR_" + field.upper() in environ
    }
    if coordinator:
        # GROUPGATE_COORDINATOR_<FIELD>, e.g. GROUPGATE_COORDINATOR_STATE_DIR=/var/lib/groupgate
        out["coordinator"] = coordinator
    for name in GatewayConfig.model_fields:
        if name == "coordinator":
            continue
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is None:
            continue
        if name == "broker_ports":
            # GROUPGATE_BROKER_PORTS="1=19092,2=19093"
            out[name] = {int(k): int(v) for k, v in (p.split("=", 1) for p in raw.split(",") if p.strip())}
        else:
            out[name] = raw
    return out


def load_config(
    path: str | Path | None = None,
    flags: dict[str, Any] | None = None,
    environ: dict[str, str] | os._Environ[str] | None = None,
) -> GatewayConfig:
    values: dict[str, Any] = {}
    if path is not None:
        with open(path, "rb") as f:
            data = tomllib.load(f)
        coordinator = data.get("coordinator")
        data = dict(data.get("gateway", data))
        if coordinator is not None and "coordinator" not in data:
            data["coordinator"] = coordinator  # a top-level [coordinator] table beside [gateway]
        if "broker_ports" in data:
            data["broker_ports"] = {int(k): v for k, v in data["broker_ports"].items()}
        values.update(data)
    env = _env_values(os.environ if environ is None else environ)
    flag_values = {k: v for k, v in (flags or {}).items() if v is not None}
    # The coordinator section merges key by key (file < env < flags) rather than being replaced.
    coordinator = dict(values.pop("coordinator", None) or {})
    coordinator.update(env.pop("coordinator", {}))
    coordinator.update(flag_values.pop("coordinator", None) or {})
    values.update(env)
    values.update(flag_values)
    if coordinator:
        values["coordinator"] = coordinator
    return GatewayConfig.model_validate(values)
