"""Apache Kafka's own Java test tools, run as subprocesses against a bootstrap address.

VerifiableProducer and VerifiableConsumer print one JSON object per line on stdout (Kafka's system tests
drive them the same way); a reader thread turns each line into an event object as it arrives, so a test
can wait for "partitions assigned" or "N records consumed" while the tool keeps running. The perf tools
print text; their lines are kept as they are.

Releases: ``kafka_dist.clients(release)`` supplies kafka-clients + kafka-tools of 4.4.0, 4.3.1, 3.9.1 or 2.8.2;
``kafka_dist.legacy_admin("2.8.2")`` the Scala broker jar that held 2.8's kafka-consumer-groups.
2.8.x differs on the command line: the producer's address flag is ``--broker-list`` and the consumer has
no ``--group-protocol`` (it only speaks the classic protocol).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gateway.ops import kafka_dist
from gateway.ops.embedded_kafka import java_binary

# Distributions ship more than one slf4j binding (log4j/reload4j besides slf4j-simple); keeping only
# slf4j-simple gives one predictable logger that -Dorg.slf4j.simpleLogger.* configures.
_OTHER_SLF4J_BINDINGS = ("slf4j-log4j12-", "slf4j-reload4j-", "log4j-slf4j-impl-", "log4j-slf4j2-impl-")


def tools_classpath(release: str, dist: kafka_dist.Distribution | None = None) -> str:
    dist = dist or kafka_dist.clients(release)
    kafka_dist.fetch(dist)
    jars = sorted(p for p in dist.libs.glob("*.jar") if not p.name.startswith(_OTHER_SLF4J_BINDINGS))
    return os.pathsep.join(str(p) for p in jars)


def compiled(source: Path, classpath: str) -> Path:
    """The classes directory of a test's own Java program, compiled with javac once per source and
    classpath (kept in the cache directory beside the jars)."""
    if shutil.which("javac") is None:
        raise FileNotFoundError("javac is not on PATH: a JDK (17+) is needed to compile " + source.name)
    digest = hashlib.sha256(source.read_bytes() + classpath.encode()).hexdigest()[:16]
    out = kafka_dist.cache_dir() / "compiled" / f"{source.stem}-{digest}"
    if (out / f"{source.stem}.class").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{source.stem}-", dir=out.parent))
    proc = subprocess.run(
        ["javac", "-nowarn", "-d", str(tmp), "-cp", classpath, str(source)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"javac {source.name} failed:\n{proc.stderr[-4000:]}")
    try:
        tmp.rename(out)
    except OSError:  # compiled concurrently by another run: theirs is the same
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def major(release: str) -> int:
    return int(release.split(".")[0])


# --- events -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class ToolEvent:
    """Any event line; ``data`` is the whole JSON object. Known events have the subclasses below."""

    name: str
    timestamp_ms: int
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PartitionsAssigned(ToolEvent):
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionsRevoked(ToolEvent):
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionRange:
    partition: TopicPartition
    count: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class RecordsConsumed(ToolEvent):
    count: int = 0
    ranges: tuple[PartitionRange, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetsCommitted(ToolEvent):
    success: bool = False
    error: str | None = None
    offsets: tuple[tuple[TopicPartition, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ProducerSendSuccess(ToolEvent):
    key: str | None = None
    value: str = ""
    partition: TopicPartition = TopicPartition("", -1)
    offset: int = -1


@dataclass(frozen=True, slots=True)
class ProducerSendError(ToolEvent):
    key: str | None = None
    value: str = ""
    exception: str = ""
    message: str = ""


def _tps(items: Sequence[dict[str, Any]]) -> tuple[TopicPartition, ...]:
    return tuple(TopicPartition(p["topic"], int(p["partition"])) for p in items)


def parse_event(obj: dict[str, Any]) -> ToolEvent:
    """One JSON line of a Verifiable* tool as an event object (unknown names stay a plain ToolEvent)."""
    name = str(obj.get("name", ""))
    ts = int(obj.get("timestamp", 0))
    if name == "partitions_assigned":
        return PartitionsAssigned(name, ts, obj, _tps(obj.get("partitions", [])))
    if name == "partitions_revoked":
        return PartitionsRevoked(name, ts, obj, _tps(obj.get("partitions", [])))
    if name == "records_consumed":
        ranges = tuple(
            PartitionRange(
                TopicPartition(p["topic"], int(p["partition"])),
                int(p["count"]),
                int(p["minOffset"]),
                int(p["maxOffset"]),
            )
            for p in obj.get("partitions", [])
        )
        return RecordsConsumed(name, ts, obj, int(obj.get("count", 0)), ranges)
    if name == "offsets_committed":
        offsets = tuple(
            (TopicPartition(o["topic"], int(o["partition"])), int(o["offset"])) for o in obj.get("offsets") or []
        )
        return OffsetsCommitted(name, ts, obj, bool(obj.get("success")), obj.get("error"), offsets)
    if name == "producer_send_success":
        tp = TopicPartition(obj["topic"], int(obj["partition"]))
        return ProducerSendSuccess(name, ts, obj, obj.get("key"), str(obj.get("value")), tp, int(obj["offset"]))
    if name == "producer_send_error":
        return ProducerSendError(
            name, ts, obj, obj.get("key"), str(obj.get("value")), str(obj.get("exception")), str(obj.get("message"))
        )
    return ToolEvent(name, ts, obj)


# --- the process --------------------------------------------------------------------------------------

E = TypeVar("E", bound=ToolEvent)


@dataclass
class JavaTool:
    """One Java tool process; ``events`` fills in as the tool prints, ``lines`` keeps non-JSON output."""

    release: str
    main_class: str
    args: list[str]
    heap: str = "256m"
    log_dir: Path | None = None
    # A classpath of the test's own choosing (a compiled program, Kafka Streams) instead of the tools'.
    classpath: str | None = None
    # slf4j-simple levels of the test's choosing for some loggers (name -> level); the default stays warn.
    log_levels: dict[str, str] = field(default_factory=dict)
    events: list[ToolEvent] = field(default_factory=list, init=False)
    # The JVM's thread dump taken when the tool did not stop within its grace period (see ``stop``).
    thread_dump: str = field(default="", init=False)
    lines: list[str] = field(default_factory=list, init=False)
    _proc: subprocess.Popen[str] | None = field(default=None, init=False, repr=False)
    _cond: threading.Condition = field(default_factory=threading.Condition, init=False, repr=False)
    _reader: threading.Thread | None = field(default=None, init=False, repr=False)

    @property
    def stderr_path(self) -> Path:
        if self.log_dir is None:
            self.log_dir = Path(tempfile.mkdtemp(prefix="groupgate-java-"))
        short = self.main_class.rsplit(".", 1)[-1]
        return self.log_dir / f"{short}-{self.release}-{id(self):x}.stderr.log"

    def command(self) -> list[str]:
        return [
            java_binary(),
            f"-Xmx{self.heap}",
            "-Djava.awt.headless=true",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            *(f"-Dorg.slf4j.simpleLogger.log.{name}={level}" for name, level in self.log_levels.items()),
            "-cp",
            self.classpath or tools_classpath(self.release),
            self.main_class,
            *self.args,
        ]

    def start(self) -> JavaTool:
        err = open(self.stderr_path, "w")  # noqa: SIM115 - handed to the child process
        self._proc = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        err.close()
        self._reader = threading.Thread(target=self._read, name=f"{self.main_class}-stdout", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for raw in self._proc.stdout:
            line = raw.strip()
            event: ToolEvent | None = None
            if line.startswith("{"):
                try:
                    event = parse_event(json.loads(line))
                except (ValueError, KeyError, TypeError):
                    event = None
            with self._cond:
                if event is not None:
                    self.events.append(event)
                elif line:
                    self.lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    # --- waiting ---

    def wait_for(self, predicate: Callable[[JavaTool], bool], timeout_s: float, what: str = "condition") -> None:
        """Block until ``predicate(self)`` holds (checked after every line), or fail with the tool's stderr."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"{self.main_class} ({self.release}): no {what} in {timeout_s}s\n{self.tail()}")
                if not self.alive() and (self._reader is None or not self._reader.is_alive()):
                    if predicate(self):
                        return
                    raise RuntimeError(
                        f"{self.main_class} ({self.release}) exited ({self.returncode}) before {what}\n{self.tail()}"
                    )
                self._cond.wait(min(remaining, 0.5))

    def of_type(self, kind: type[E]) -> list[E]:
        with self._cond:
            return [e for e in self.events if isinstance(e, kind)]

    def named(self, name: str) -> list[ToolEvent]:
        with self._cond:
            return [e for e in self.events if e.name == name]

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.stderr_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    # --- lifecycle ---

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def wait(self, timeout_s: float) -> int:
        assert self._proc is not None
        code = self._proc.wait(timeout_s)
        if self._reader is not None:
            self._reader.join(5)
        return code

    def stop(self, grace_s: float = 15.0) -> int | None:
        """SIGTERM (the tools' shutdown hooks close the client and print shutdown_complete), then SIGKILL."""
        return self._signal(signal.SIGTERM, grace_s)

    def kill(self) -> int | None:
        return self._signal(signal.SIGKILL, 10.0)

    def _signal(self, sig: signal.Signals, grace_s: float) -> int | None:
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, sig)
                self._proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                if sig != signal.SIGKILL:
                    self._dump_threads()
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
            except ProcessLookupError:
                pass
        if self._reader is not None:
            self._reader.join(5)
        return self._proc.returncode

    def _dump_threads(self) -> None:
        """SIGQUIT makes the JVM print every thread's stack on stdout: what a tool that would not stop
        was waiting for, kept in ``thread_dump`` for the test's failure message."""
        assert self._proc is not None
        with self._cond:
            before = len(self.lines)
        try:
            os.kill(self._proc.pid, signal.SIGQUIT)
        except ProcessLookupError:
            return
        time.sleep(2.0)
        with self._cond:
            self.thread_dump = "\n".join(self.lines[before:])

    def __enter__(self) -> JavaTool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- the tools ----------------------------------------------------------------------------------------

TOOLS = "org.apache.kafka.tools."


def verifiable_producer(
    release: str,
    bootstrap: str,
    topic: str,
    max_messages: int,
    *,
    throughput: int = -1,
    acks: int = -1,
    value_prefix: int | None = None,
    log_dir: Path | None = None,
) -> JavaTool:
    # 2.8.x documents only --broker-list for the producer; later releases use --bootstrap-server.
    address_flag = "--broker-list" if major(release) < 3 else "--bootstrap-server"
    args = [address_flag, bootstrap, "--topic", topic, "--max-messages", str(max_messages)]
    args += ["--throughput", str(throughput), "--acks", str(acks)]
    if value_prefix is not None:
        args += ["--value-prefix", str(value_prefix)]
    return JavaTool(release, TOOLS + "VerifiableProducer", args, heap="256m", log_dir=log_dir)


def verifiable_consumer(
    release: str,
    bootstrap: str,
    topic: str,
    group_id: str,
    *,
    group_protocol: str = "classic",
    max_messages: int = -1,
    session_timeout_ms: int | None = None,
    assignment_strategy: str | None = None,
    group_instance_id: str | None = None,
    enable_autocommit: bool = False,
    verbose: bool = False,
    log_dir: Path | None = None,
) -> JavaTool:
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--group-id", group_id]
    args += ["--max-messages", str(max_messages), "--reset-policy", "earliest"]
    if major(release) >= 3:
        args += ["--group-protocol", group_protocol]
    elif group_protocol != "classic":
        raise ValueError(f"Kafka {release} clients only speak the classic group protocol")
    if session_timeout_ms is not None:
        args += ["--session-timeout", str(session_timeout_ms)]
    if assignment_strategy is not None:
        args += ["--assignment-strategy", assignment_strategy]
    if group_instance_id is not None:
        args += ["--group-instance-id", group_instance_id]
    if enable_autocommit:
        args.append("--enable-autocommit")
    if verbose:
        args.append("--verbose")
    return JavaTool(release, TOOLS + "VerifiableConsumer", args, heap="256m", log_dir=log_dir)


def producer_performance(
    release: str, bootstrap: str, topic: str, num_records: int, record_size: int = 100, log_dir: Path | None = None
) -> JavaTool:
    args = ["--topic", topic, "--num-records", str(num_records), "--throughput", "-1"]
    args += ["--record-size", str(record_size), "--producer-props", f"bootstrap.servers={bootstrap}"]
    return JavaTool(release, TOOLS + "ProducerPerformance", args, heap="256m", log_dir=log_dir)


def consumer_performance(
    release: str, bootstrap: str, topic: str, messages: int, group: str, timeout_ms: int = 30000,
    log_dir: Path | None = None,
) -> JavaTool:
    if major(release) < 3:
        raise ValueError("ConsumerPerformance is not in the kafka-tools artifact before 3.x")
    # 4.2 renamed --messages to --num-records (the old name is still accepted in 4.x).
    version = tuple(int(x) for x in release.split(".")[:2])
    count_flag = "--num-records" if version >= (4, 2) else "--messages"
    args = ["--bootstrap-server", bootstrap, "--topic", topic, count_flag, str(messages)]
    args += ["--group", group, "--timeout", str(timeout_ms)]
    return JavaTool(release, TOOLS + "ConsumerPerformance", args, heap="256m", log_dir=log_dir)


@dataclass(frozen=True, slots=True)
class ProducerPerfSummary:
    records: int
    records_per_sec: float


def parse_producer_perf(lines: Sequence[str]) -> ProducerPerfSummary | None:
    """The final summary line: ``N records sent, R records/sec (...)``."""
    for line in reversed(lines):
        if " records sent, " in line and "records/sec" in line:
            head = line.split(" records sent, ", 1)
            rate = head[1].split(" records/sec", 1)[0]
            return ProducerPerfSummary(int(head[0].strip()), float(rate))
    return None


def parse_consumer_perf(lines: Sequence[str]) -> dict[str, str] | None:
    """The CSV-like result: a header starting with ``start.time`` and one row of values."""
    for i, line in enumerate(lines):
        if line.startswith("start.time") and i + 1 < len(lines):
            keys = [k.strip() for k in line.split(",")]
            values = [v.strip() for v in lines[i + 1].split(",")]
            return dict(zip(keys, values, strict=False))
    return None


def consumer_groups_command(
    release: str, bootstrap: str, *args: str, timeout_s: float = 90.0
) -> subprocess.CompletedProcess[str]:
    """``kafka-consumer-groups.sh --bootstrap-server BOOTSTRAP ARGS`` of ``release``, run to completion: from
    kafka-tools (3.7+), or for 2.x from the release's Scala broker jar, where the tool lived then."""
    if major(release) < 3:
        main, classpath = "kafka.admin.ConsumerGroupCommand", tools_classpath(release, kafka_dist.legacy_admin(release))
    else:
        main, classpath = TOOLS + "consumer.group.ConsumerGroupCommand", tools_classpath(release)
    cmd = [
        java_binary(), "-Xmx256m", "-Djava.awt.headless=true", "-Dorg.slf4j.simpleLogger.defaultLogLevel=error",
        "-cp", classpath, main, "--bootstrap-server", bootstrap, *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
