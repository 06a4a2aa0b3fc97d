"""groupgate without Docker: the embedded Apache Kafka broker (a child JVM, jars from Maven Central) and
``groupgate serve`` as a child process in front of it. The same interface as groupgate.testing.containers.

Needs Java 17+ (and Maven on the first use, to fetch the jars into ~/.cache/groupgate).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from groupgate.testing._net import free_port, free_port_block
from groupgate.testing.base import state_settings
from groupgate.testing.events import Event, parse_events, select
from groupgate.testing.process import GatewayProcess
from groupgate.testing.settings import GatewaySettings

if TYPE_CHECKING:
    from gateway.ops.embedded_kafka import EmbeddedKafka

START_TIMEOUT_S = 60.0


@dataclass
class LocalKafka:
    """A single-node KRaft broker (node id 1) as a child JVM on 127.0.0.1 (gateway.ops.embedded_kafka)."""

    overrides: dict[str, str] = field(default_factory=dict)
    name: str = "process"
    broker: EmbeddedKafka | None = None

    @property
    def bootstrap(self) -> str:
        assert self.broker is not None, "broker not started"
        return self.broker.bootstrap

    @property
    def port(self) -> int:
        assert self.broker is not None, "broker not started"
        return self.broker.port

    def start(self) -> LocalKafka:
        if self.broker is None:
            from gateway.ops.embedded_kafka import EmbeddedKafka

            self.broker = EmbeddedKafka(overrides=self.overrides)
        self.broker.start()
        return self

    def stop(self) -> None:
        if self.broker is not None:
            self.broker.cleanup()

    def kill(self) -> None:
        if self.broker is not None:
            self.broker.kill()

    def __enter__(self) -> LocalKafka:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class LocalGateway:
    """``groupgate serve`` as a child process in front of ``upstream`` (a bootstrap address), or in front
    of a broker of its own (a LocalKafka it starts and stops) when ``upstream`` is None.

    Ports: the bootstrap port P and broker node N on P + 1 + N - ``node_id_base``, a block of
    ``brokers`` + 1 ports chosen free; a restart keeps them, so clients carry on with what they cached.
    Readiness: ``start()`` returns once /readyz answers 200 (group state replayed, metadata fetched).
    """

    def __init__(
        self,
        upstream: str | None = None,
        settings: GatewaySettings | None = None,
        *,
        work_dir: Path | None = None,
        brokers: int = 1,
        node_id_base: int = 1,
        host: str = "127.0.0.1",
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self.settings = state_settings(settings or GatewaySettings())
        self._upstream = upstream
        self._own_kafka: LocalKafka | None = None
        self._own_dir = work_dir is None
        self.work_dir = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="groupgate-gw-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.brokers = brokers
        self.node_id_base = node_id_base
        self.host = host
        self.start_timeout_s = start_timeout_s
        self.process: GatewayProcess | None = None
        self._listen_port = 0
        self._metrics_port = 0

    # --- addresses -------------------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        assert self.process is not None and self.process.bootstrap, "gateway not started"
        return self.process.bootstrap

    @property
    def upstream(self) -> str:
        if self._upstream is None:
            assert self._own_kafka is not None, "gateway not started"
            return self._own_kafka.bootstrap
        return self._upstream

    @property
    def readyz_url(self) -> str:
        return f"http://{self.host}:{self._metrics_port}/readyz"

    @property
    def events_path(self) -> Path:
        return self.work_dir / "rebalance-events.jsonl"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "gateway.log"

    # --- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> LocalGateway:
        if self._upstream is None and self._own_kafka is None:
            self._own_kafka = LocalKafka().start()
        if not self._listen_port:
            self._listen_port = free_port_block(self.brokers + 1, self.host)
            self._metrics_port = free_port(self.host)
        self.process = GatewayProcess(
            upstream=self.upstream,
            extra_args=self._serve_args(),
            listen_host=self.host,
            listen_port=self._listen_port,
            log_dir=self.work_dir,
            env=self.settings.env(),
            metrics_port=self._metrics_port,
        )
        self.process.start(self.start_timeout_s)
        self._listen_port = self.process.listen_port  # moved if the first block was taken meanwhile
        return self

    def _serve_args(self) -> list[str]:
        s = self.settings
        args = ["--node-id-base", str(self.node_id_base)]
        if s.state == "file":
            args += ["--state-dir", str(self.work_dir / "state")]
        elif s.state == "kafka":
            args += ["--state-store", "kafka"]
        # "ephemeral": GatewayProcess adds --ephemeral-state
        if s.rebalance_events:
            args += ["--rebalance-events", str(self.events_path)]
        return [*args, *s.args]

    def stop(self) -> None:
        """SIGTERM (a clean shutdown); the broker it started goes too. Idempotent."""
        if self.process is not None:
            self.process.stop()
        if self._own_kafka is not None:
            self._own_kafka.stop()
            self._own_kafka = None
        if self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, no goodbye to the members."""
        assert self.process is not None, "gateway not started"
        self.process.kill()

    def restart(self, *, hard: bool = True) -> LocalGateway:
        """Kill (``hard``) or stop the gateway and start it again on the same ports and state."""
        assert self.process is not None, "gateway not started"
        self.process.restart(hard=hard, timeout_s=self.start_timeout_s)
        return self

    def reconfigure(self, **changes: Any) -> LocalGateway:
        """Stop (SIGTERM), change settings (GatewaySettings fields or ``[coordinator]`` settings by name),
        start again on the same ports and state: e.g. ``managed_groups`` to move a live group onto the
        gateway, ``classic_groups="translate"``, ``migration_policy="upgrade"``."""
        assert self.process is not None, "gateway not started"
        self.process.stop()
        self.settings = state_settings(self.settings.replace(**changes))
        return self.start()

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    # --- what it did -----------------------------------------------------------------------------------

    def events(self, group: str | None = None, event: str | None = None) -> list[Event]:
        """The rebalance events written so far (``rebalance_events=True``), of ``group``/``event`` if given."""
        try:
            text = self.events_path.read_text()
        except FileNotFoundError:
            return []
        return select(parse_events(text.splitlines()), group, event)

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def __enter__(self) -> LocalGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
