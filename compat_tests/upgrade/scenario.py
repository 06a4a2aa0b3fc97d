"""The rolling upgrade driver: a fleet of five consumers on a 6-partition topic, a producer throughout,
slots restarted one at a time with the other group protocol, the group settling after every step.

Settled means, from the clients' own events, every partition held by exactly one running member and every
running member holding something, unchanged for a short quiet period, and the coordinator reporting the
group Stable. After every settle the group's type is read from ListGroups v5 through the endpoint under
test and compared with the migration policy (KIP-848 "Online migration"): a group is "consumer" as soon
as one member speaks the new protocol, and "classic" again once the last such member has left.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from compat_tests.harness.events import EventLog, ProducedRecord, now_ms
from compat_tests.harness.java import (
    JavaTool,
    ProducerSendError,
    ProducerSendSuccess,
    RecordsConsumed,
    verifiable_producer,
)

from . import group_probe
from .group_probe import GroupView
from .members import TP, Member, MemberSpec, Timeouts, start_member

SETTLE_TIMEOUT_S = 60.0
QUIET_S = 0.4
# The Java producer's built-in partitioner (KIP-794) sends keyless records to one partition until
# ``batch.size`` bytes went there: with the default 16 KiB and the tool's few-byte values, one partition
# takes every record for 10 s and more, so a short run leaves partitions with nothing written for most of
# it (in Kafka's runs as in the gateway's). ``batch.size=0`` moves on after every record, so each of the
# partitions gets its share (about rate / partitions records a second) throughout, which a check of
# "every partition consumed again" and per-partition gap figures need.
SPREAD_PRODUCER = {"batch.size": "0"}


@dataclass(frozen=True, slots=True)
class Step:
    """One settled state of the fleet: what changed, when it settled, the group as its coordinator saw it."""

    what: str
    started_ms: float
    settled_ms: float
    expected_type: str
    group: GroupView


@dataclass
class RollingUpgrade:
    """Drives one fleet against one endpoint (a broker, or the gateway in front of it)."""

    bootstrap: str
    topic: str
    group: str
    before: Sequence[MemberSpec]  # per slot: the classic fleet
    after: Sequence[MemberSpec]  # per slot: what each slot is upgraded to
    partitions: int = 6
    timeouts: Timeouts = Timeouts()
    log_dir: Path | None = None
    producer_rate: int = 100
    # The producer's own client settings (its --command-config file), e.g. SPREAD_PRODUCER.
    producer_props: Mapping[str, str] = field(default_factory=dict)
    check_group: bool = True
    # A produce in flight when the endpoint dies fails; only acknowledged records are promised delivery.
    allow_send_errors: bool = False
    # Whether a restart waits for the other members to settle before starting the slot again.
    settle_between: bool = False
    # The one address the group probes dial (FindCoordinator, then the describe APIs), when ``bootstrap``
    # lists several (a fleet of gateway instances) or names one that went away; None: ``bootstrap``.
    probe: str | None = None
    log: EventLog = field(default_factory=EventLog)
    members: dict[int, Member] = field(default_factory=dict)
    retired: list[Member] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    producer: JavaTool | None = None
    _starts: dict[int, int] = field(default_factory=dict)

    # --- the fleet ---

    def all_members(self) -> list[Member]:
        return [*self.retired, *self.members.values()]

    def _start_slot(self, slot: int, spec: MemberSpec) -> Member:
        n = self._starts[slot] = self._starts.get(slot, 0) + 1
        name = f"c{slot}.{n}"
        m = start_member(
            name,
            spec,
            self.bootstrap,
            self.topic,
            self.group,
            self.log,
            timeouts=self.timeouts,
            log_dir=self.log_dir,
        )
        self.members[slot] = m
        return m

    def start_fleet(self, specs: Sequence[MemberSpec] | None = None) -> Step:
        """All slots at once (their JVMs start in parallel); returns the first settled step."""
        started = now_ms()
        chosen = list(specs if specs is not None else self.before)
        with ThreadPoolExecutor(max_workers=len(chosen)) as pool:
            list(pool.map(lambda item: self._start_slot(*item), enumerate(chosen)))
        return self.settle("fleet started", started)

    def add(self, specs: dict[int, MemberSpec], what: str = "members joined") -> Step:
        """Start the given slots at once (joining the running fleet) and wait for the group to settle."""
        started = now_ms()
        with ThreadPoolExecutor(max_workers=len(specs)) as pool:
            list(pool.map(lambda item: self._start_slot(*item), specs.items()))
        return self.settle(what, started)

    def start_producer(self, release: str = "4.4.0", timeout_s: float = 60.0) -> None:
        """Start the producer and wait for its first acknowledged record, so that it runs throughout."""
        producer = verifiable_producer(
            release, self.bootstrap, self.topic, -1, throughput=self.producer_rate, log_dir=self.log_dir
        )
        if self.producer_props:
            directory = self.log_dir if self.log_dir is not None else Path(tempfile.mkdtemp(prefix="groupgate-upgrade-"))
            directory.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix="producer-", suffix=".properties", dir=directory)
            os.close(fd)
            Path(name).write_text("".join(f"{k}={v}\n" for k, v in self.producer_props.items()))
            producer.args += ["--command-config", name]
        self.producer = producer.start()
        self.producer.wait_for(
            lambda tool: bool(tool.of_type(ProducerSendSuccess)), timeout_s, "first acknowledged record"
        )

    def stop_slot(self, slot: int, *, kill: bool = False) -> Member:
        m = self.members.pop(slot)
        (m.kill if kill else m.stop)()
        self.retired.append(m)
        return m

    def restart(self, slot: int, spec: MemberSpec, *, settle_between: bool | None = None) -> Step:
        """Stop the slot's consumer cleanly and start it again as ``spec`` (its JVM boots while the others
        rebalance without it; ``settle_between`` waits for that rebalance first); wait for the group to
        settle. Kafka upgrades a classic group even mid-rebalance (its join and sync waiters are told
        REBALANCE_IN_PROGRESS), so the restart need not wait."""
        started = now_ms()
        old = self.members[slot].spec.label()
        self.stop_slot(slot)
        if self.settle_between if settle_between is None else settle_between:
            self.settle(f"slot {slot} stopped", started)
        self._start_slot(slot, spec)
        return self.settle(f"slot {slot}: {old} -> {spec.label()}", started)

    def upgrade(self, on_step: Callable[[int], None] | None = None) -> None:
        for slot, spec in enumerate(self.after):
            self.restart(slot, spec)
            if on_step is not None:
                on_step(slot)

    def downgrade(self) -> None:
        for slot, spec in enumerate(self.before):
            self.restart(slot, spec)

    # --- settling ---

    @property
    def probe_address(self) -> str:
        return self.probe if self.probe is not None else self.bootstrap

    def expected_type(self) -> str:
        return "consumer" if any(m.spec.protocol == "consumer" for m in self.members.values()) else "classic"

    def ownership(self) -> dict[TP, list[str]]:
        owners: dict[TP, list[str]] = {}
        for m in self.members.values():
            for tp in m.owned():
                owners.setdefault(tp, []).append(m.name)
        return owners

    def settled_now(self) -> bool:
        owners = self.ownership()
        if any(len(owners.get((self.topic, p), [])) != 1 for p in range(self.partitions)):
            return False
        holders = {name for names in owners.values() for name in names}
        return holders == {m.name for m in self.members.values()}

    def settle(self, what: str, started_ms: float, timeout_s: float = SETTLE_TIMEOUT_S) -> Step:
        deadline = time.monotonic() + timeout_s
        calm_since: float | None = None
        last: dict[TP, list[str]] = {}
        view = GroupView("", "")
        while True:
            for slot, m in self.members.items():
                if not m.running:
                    raise AssertionError(f"{m.name} (slot {slot}, {m.spec.label()}) ended:\n{self._tail(m)}")
            owners = self.ownership()
            if self.settled_now() and owners == last:
                calm_since = calm_since if calm_since is not None else time.monotonic()
                if time.monotonic() - calm_since >= QUIET_S:
                    view = group_probe.describe(self.probe_address, self.group) if self.check_group else view
                    if not self.check_group or view.stable:
                        break
            else:
                calm_since = None
            last = owners
            if time.monotonic() > deadline:
                if self.check_group:
                    view = group_probe.describe(self.probe_address, self.group)
                raise TimeoutError(
                    f"{what}: group not settled in {timeout_s}s; owners {owners}; group {view}"
                )
            time.sleep(0.1)
        step = Step(what, started_ms, now_ms(), self.expected_type(), view)
        self.steps.append(step)
        return step

    @staticmethod
    def _tail(m: Member) -> str:
        return m.tool.tail() if m.tool is not None else repr(m.confluent.error if m.confluent else None)

    # --- delivery ---

    def consumed(self) -> set[tuple[str, int, int]]:
        seen = self.log.distinct_positions()
        for m in self.all_members():
            if m.tool is not None and not m.ingested:
                for e in m.tool.of_type(RecordsConsumed):
                    for r in e.ranges:
                        seen.update(
                            (r.partition.topic, r.partition.partition, o)
                            for o in range(r.min_offset, r.max_offset + 1)
                        )
        return seen

    def stop_producer(self) -> list[ProducedRecord]:
        assert self.producer is not None
        self.producer.stop()
        errors = self.producer.of_type(ProducerSendError)
        assert self.allow_send_errors or not errors, f"{len(errors)} producer send errors, e.g. {errors[:3]}"
        return [
            ProducedRecord(e.partition.topic, e.partition.partition, e.offset, e.value.encode())
            for e in self.producer.of_type(ProducerSendSuccess)
        ]

    def wait_consumed(self, produced: list[ProducedRecord], timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            seen = self.consumed()
            gone = [p.position for p in produced if p.position not in seen]
            if not gone:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{len(gone)} of {len(produced)} records never consumed, e.g. {gone[:10]}"
                )
            time.sleep(0.2)

    def finish(self) -> list[ProducedRecord]:
        """Stop producing, wait for the fleet to consume everything acknowledged, stop the fleet."""
        produced = self.stop_producer() if self.producer is not None else []
        self.wait_consumed(produced)
        self.close()
        return produced

    def close(self) -> None:
        """Stop whatever still runs (clean shutdown) and gather every Java incarnation's events."""
        if self.producer is not None and self.producer.alive():
            self.producer.kill()
        running = list(self.members)
        with ThreadPoolExecutor(max_workers=max(len(running), 1)) as pool:
            list(pool.map(lambda slot: self._quiet_stop(slot), running))
        for m in self.all_members():
            m.ingest()

    def _quiet_stop(self, slot: int) -> None:
        m = self.members.pop(slot)
        self.retired.append(m)
        try:
            m.stop()
        except AssertionError:
            pass


def standard_run(run: RollingUpgrade) -> list[ProducedRecord]:
    """The whole scenario: fleet up, producer on, rolling upgrade, rolling downgrade, drain."""
    run.start_fleet()
    run.start_producer()
    run.upgrade()
    run.downgrade()
    return run.finish()
