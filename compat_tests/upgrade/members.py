"""One consumer of the fleet, whatever its client: a Java VerifiableConsumer or a confluent-kafka consumer.

A ``MemberSpec`` says which client, release, group protocol and assignor; ``start_member`` runs one
incarnation of it. Every incarnation has its own name (``c3.2`` = slot 3, second start) so that the
ownership invariant can tell a consumer from its successor in the same slot. Java incarnations keep their
events in the tool until ``ingest`` copies them into the shared EventLog; confluent ones write to the log
as they go.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from compat_tests.harness.clients import ConfluentConsumer
from compat_tests.harness.events import EventLog, ingest_verifiable_consumer, now_ms
from compat_tests.harness.java import (
    JavaTool,
    PartitionsAssigned,
    PartitionsRevoked,
    major,
    verifiable_consumer,
)

Protocol = Literal["classic", "consumer"]
TP = tuple[str, int]

# Java assignor class names for --assignment-strategy (classic protocol only).
RANGE = "org.apache.kafka.clients.consumer.RangeAssignor"
COOPERATIVE_STICKY = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Client-side group timings of the classic protocol (KIP-848 members get theirs from the coordinator)."""

    session_ms: int = 6000
    heartbeat_ms: int = 500


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """``client``: java or confluent; ``assignor``: the classic client-side one, or the KIP-848 server one."""

    client: Literal["java", "confluent"]
    protocol: Protocol
    release: str = "4.4.0"
    assignor: str | None = None
    instance_id: str | None = None
    # librdkafka members: a failed commit is retried on the next loop instead of ending the member, as an
    # application does when a broker of the cluster is down (its commits time out until leadership moves).
    retry_commits: bool = False

    def label(self) -> str:
        who = f"java-{self.release}" if self.client == "java" else "confluent"
        how = self.assignor.rsplit(".", 1)[-1] if self.assignor else "default"
        return f"{who}/{self.protocol}/{how}"

    def with_instance(self, instance_id: str | None) -> MemberSpec:
        return MemberSpec(self.client, self.protocol, self.release, self.assignor, instance_id, self.retry_commits)


@dataclass
class Member:
    """A running (or finished) incarnation of one fleet slot."""

    name: str
    spec: MemberSpec
    log: EventLog
    tool: JavaTool | None = None
    confluent: ConfluentConsumer | None = None
    killed_at_ms: float | None = None
    ingested: bool = field(default=False, init=False)

    @property
    def running(self) -> bool:
        if self.tool is not None:
            return self.tool.alive()
        c = self.confluent
        if c is None or self.killed_at_ms is not None or c._stop.is_set():
            return False
        # A client whose poll thread died (its error is kept) is not running, whatever was asked of it.
        return c.error is None and c._thread is not None and c._thread.is_alive()

    def owned(self) -> set[TP]:
        """What this incarnation holds right now, replaying its own assigned/revoked events."""
        held: set[TP] = set()
        if self.tool is not None:
            if not self.tool.alive():
                return held
            for e in list(self.tool.events):
                if isinstance(e, PartitionsAssigned):
                    held.update((tp.topic, tp.partition) for tp in e.partitions)
                elif isinstance(e, PartitionsRevoked):
                    held.difference_update((tp.topic, tp.partition) for tp in e.partitions)
            return held
        for change in list(self.log.ownership):
            if change.consumer != self.name:
                continue
            if change.kind == "assigned":
                held.update(change.partitions)
            elif change.kind == "stopped":
                held.clear()
            else:
                held.difference_update(change.partitions)
        return held

    def assignment_events(self) -> int:
        """How many times this incarnation was handed partitions (a rebalance it took part in)."""
        if self.tool is not None:
            return len(self.tool.of_type(PartitionsAssigned))
        return sum(1 for e in list(self.log.ownership) if e.consumer == self.name and e.kind == "assigned")

    def stop(self) -> None:
        """A clean shutdown: the client leaves the group (SIGTERM for the Java tool)."""
        if self.tool is not None:
            self.tool.stop()
            if self.tool.returncode not in (0, 143, -15):
                raise AssertionError(f"{self.name} exited {self.tool.returncode}:\n{self.tool.tail()}")
        elif self.confluent is not None:
            self.confluent.stop()

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no revocation callback; the coordinator must fence it on its own."""
        if self.tool is None:
            raise ValueError("only a Java member runs in a process that can be killed")
        self.killed_at_ms = now_ms()
        self.tool.kill()

    def ingest(self) -> None:
        """Copy a Java incarnation's events into the log (once, when it has ended)."""
        if self.ingested or self.tool is None:
            return
        self.ingested = True
        ingest_verifiable_consumer(self.log, self.name, self.tool)
        if self.killed_at_ms is not None:
            # A killed process stops consuming at once, though it printed no revocation.
            self.log.owned(self.name, "stopped", (), self.killed_at_ms)


def start_member(
    name: str,
    spec: MemberSpec,
    bootstrap: str,
    topic: str,
    group: str,
    log: EventLog,
    *,
    timeouts: Timeouts = Timeouts(),
    log_dir: Path | None = None,
) -> Member:
    if spec.client == "java":
        return Member(name, spec, log, tool=_start_java(spec, bootstrap, topic, group, timeouts, log_dir))
    return Member(
        name, spec, log, confluent=_start_confluent(name, spec, bootstrap, topic, group, log, timeouts)
    )


@dataclass
class QuickJavaTool(JavaTool):
    """A Java tool started with the client-only JIT and serial GC: a consumer JVM reaches its first poll
    about twice as fast on a small machine, which is most of the time a rolling restart takes."""

    def command(self) -> list[str]:
        cmd = super().command()
        return [cmd[0], "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto", *cmd[1:]]


def _quick(tool: JavaTool) -> QuickJavaTool:
    return QuickJavaTool(tool.release, tool.main_class, list(tool.args), heap=tool.heap, log_dir=tool.log_dir)


def _start_java(
    spec: MemberSpec, bootstrap: str, topic: str, group: str, timeouts: Timeouts, log_dir: Path | None
) -> JavaTool:
    classic = spec.protocol == "classic"
    tool = _quick(
        verifiable_consumer(
            spec.release,
            bootstrap,
            topic,
            group,
            group_protocol=spec.protocol,
            session_timeout_ms=timeouts.session_ms if classic else None,
            assignment_strategy=spec.assignor if classic else None,
            group_instance_id=spec.instance_id,
            log_dir=log_dir,
        )
    )
    if not classic and spec.assignor is not None:
        tool.args += ["--group-remote-assignor", spec.assignor]
    props = {"client.id": f"upgrade-{spec.protocol}", "metadata.max.age.ms": "5000"}
    if classic:
        # The tool has no flag for the heartbeat interval; KIP-848 members take it from the coordinator
        # (setting it with group.protocol=consumer is a configuration error).
        props["heartbeat.interval.ms"] = str(timeouts.heartbeat_ms)
    directory = log_dir if log_dir is not None else Path(tempfile.mkdtemp(prefix="groupgate-upgrade-"))
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="consumer-", suffix=".properties", dir=directory)
    os.close(fd)
    cfg = Path(name)
    cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    tool.args += ["--consumer.config", str(cfg)]
    if major(spec.release) < 3 and not classic:
        raise ValueError(f"Kafka {spec.release} clients only speak the classic protocol")
    return tool.start()


def _start_confluent(
    name: str, spec: MemberSpec, bootstrap: str, topic: str, group: str, log: EventLog, timeouts: Timeouts
) -> ConfluentConsumer:
    config: dict[str, object] = {"topic.metadata.refresh.interval.ms": 5000}
    if spec.protocol == "classic":
        config["session.timeout.ms"] = timeouts.session_ms
        config["heartbeat.interval.ms"] = timeouts.heartbeat_ms
        if spec.assignor is not None:
            config["partition.assignment.strategy"] = spec.assignor
    elif spec.assignor is not None:
        config["group.remote.assignor"] = spec.assignor
    if spec.instance_id is not None:
        config["group.instance.id"] = spec.instance_id
    consumer = ConfluentConsumer(
        name,
        log,
        bootstrap=bootstrap,
        group_id=group,
        topics=[topic],
        group_protocol=spec.protocol,
        config=config,
        # A cooperative classic member keeps consuming while its group rebalances, so a synchronous
        # commit may be told REBALANCE_IN_PROGRESS; an application retries it after the rebalance.
        tolerate_commit_errors=spec.retry_commits
        or (spec.protocol == "classic" and spec.assignor == "cooperative-sticky"),
    )
    consumer.start()
    return consumer
