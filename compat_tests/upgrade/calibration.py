"""The real half of a calibration (rehearsal/calibration.py): a small fleet of real consumers through the
gateway, one scenario, recorded as rebalance events plus the schedule the simulation then replays.

Scenarios, one step per fleet slot, each step waiting for the group to settle (every partition owned once):

- ``rolling-upgrade``: the slot's consumer is stopped cleanly and started again on the new protocol
  (``consumer`` mix: on the same protocol, which makes it the rolling restart);
- ``rolling-restart``: stopped cleanly and started again as the same client;
- ``crashes``: killed (SIGKILL: no LeaveGroup, the session timeout fences it) and started again
  ``crash_pause_s`` later.

What each consumer acknowledged comes from its own rebalance callbacks (VerifiableConsumer's
partitions_assigned / partitions_revoked, librdkafka's assign / revoke / lost callbacks), converted with
rehearsal.recorded.convert; a killed member's end is a ``member_left`` with reason ``crash``. The schedule
records each slot's start (Java: the tool's ``startup_complete``; librdkafka: the consumer's creation), each
stop (the old incarnation's last revocation callback, or the kill) and each restart.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compat_tests.harness.admin import create_topic
from compat_tests.harness.brokers import ProcessBackend
from compat_tests.harness.events import OwnershipEvent, now_ms
from compat_tests.harness.gateway_proc import GatewayProcess
from compat_tests.harness.names import unique
from groupgate.testing._net import free_port_block
from rehearsal import events as ev
from rehearsal.calibration import Schedule, Step
from rehearsal.client_timings import Timings
from rehearsal.fleet_spec import ClientMix, FleetSpec
from rehearsal.recorded import convert

from . import endpoints
from .members import COOPERATIVE_STICKY, RANGE, Member, MemberSpec, Timeouts
from .scenario import RollingUpgrade

SCENARIOS = ("rolling-upgrade", "rolling-restart", "crashes")


def gateway_settings(timings: Timings) -> dict[str, int]:
    """The gateway's coordinator settings for a calibration (added to endpoints.FAST_GROUP_SETTINGS): the
    consumer groups' session timeout and heartbeat interval equal to the classic clients' own."""
    return {
        "group.consumer.session.timeout.ms": timings.session_timeout_ms,
        "group.consumer.min.session.timeout.ms": min(2_000, timings.session_timeout_ms),
        "group.consumer.heartbeat.interval.ms": timings.heartbeat_interval_ms,
        "group.consumer.min.heartbeat.interval.ms": min(200, timings.heartbeat_interval_ms),
        "group.min.session.timeout.ms": min(2_000, timings.session_timeout_ms),
    }


def member_spec(mix: ClientMix, client: str, *, upgraded: bool = False) -> MemberSpec:
    """The consumer of a mix (translate: cooperative classic clients; the gateway must run translate mode)."""
    java = client == "java"
    if upgraded or mix == "consumer":
        return MemberSpec("java", "consumer", "4.4.0", "uniform") if java else MemberSpec("confluent", "consumer",
                                                                                             assignor="uniform")
    if mix == "classic-eager":
        return MemberSpec("java", "classic", "4.4.0", RANGE) if java else MemberSpec("confluent", "classic",
                                                                                      assignor="range")
    return (MemberSpec("java", "classic", "4.4.0", COOPERATIVE_STICKY) if java
            else MemberSpec("confluent", "classic", assignor="cooperative-sticky"))


@dataclass
class RealRun:
    mix: ClientMix
    scenario: str
    client: str
    group: str
    topic: str
    events: list[ev.Event]
    schedule: Schedule
    run: RollingUpgrade


def _started_ms(m: Member, fallback: float) -> float:
    if m.tool is not None:
        marks = m.tool.named("startup_complete")
        if marks:
            return float(marks[0].timestamp_ms)
    return fallback


def _stopped_ms(run: RollingUpgrade, m: Member, fallback: float) -> float:
    """When the old incarnation gave its partitions up (its first revocation or end after it was told to
    stop at ``fallback``), else ``fallback``."""
    if m.killed_at_ms is not None:
        return m.killed_at_ms
    m.ingest()
    after = [e.at_ms for e in run.log.ownership
             if e.consumer == m.name and e.kind in ("revoked", "stopped") and e.at_ms >= fallback]
    return min(after) if after else fallback


def ends_after_close(ownership: list[OwnershipEvent]) -> list[OwnershipEvent]:
    """The recording with each incarnation's end after the revocation its close reported.

    The librdkafka harness records ``stopped`` when its poll loop ends and only then closes the consumer,
    whose close serves the revocation callback (classic and KIP-848 alike) within a millisecond or two; the
    Java tool reports that revocation before it ends. Converted as recorded, a librdkafka member's end
    comes first and its final revocation no longer changes anything, so its rolling restart counted one
    ownership change per step fewer than the same restart by Java clients or by the simulation (which
    revokes, then leaves). Moving the end after the close's revocation measures every client alike."""
    out = list(ownership)
    i = 0
    while i < len(out):
        e = out[i]
        later = [j for j in range(i + 1, len(out))
                 if out[j].consumer == e.consumer and out[j].kind in ("revoked", "lost")]
        if e.kind == "stopped" and later:
            last = later[-1]
            out.insert(last + 1, OwnershipEvent(e.consumer, "stopped", (), max(e.at_ms, out[last].at_ms)))
            del out[i]
            continue
        i += 1
    return out


def run_real(
    bootstrap: str,
    broker: str,
    mix: ClientMix,
    scenario: str,
    *,
    members: int = 3,
    partitions: int = 6,
    client: str = "java",
    timings: Timings = Timings(),
    log_dir: Path | None = None,
    crash_pause_s: float = 1.0,
    stop_jitter_ms: int | None = None,
) -> RealRun:
    """Run one scenario with real clients against ``bootstrap`` (the gateway, configured with
    ``gateway_settings(timings)``; translate mode for the translate mix).

    Each step waits a random 0..``stop_jitter_ms`` (default: the heartbeat interval) after the group
    settled before it stops the next member. Without it every stop came a fixed time after the group's
    last rebalance, so at the same phase of the members' heartbeats (which that rebalance reset), and the
    members learned of every stop after about the same delay: a bias of the harness that neither a
    production rollout nor the simulation replaying the schedule has."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario}")
    if scenario == "crashes" and client != "java":
        raise ValueError("crashes kill a consumer's process: only java consumers run in one")
    topic = create_topic(broker, unique("calibration"), partitions)
    group = unique(f"calibration-{mix}")
    spec = member_spec(mix, client)
    after = member_spec(mix, client, upgraded=scenario == "rolling-upgrade")
    run = RollingUpgrade(
        bootstrap, topic, group, [spec] * members, [after] * members, partitions=partitions,
        timeouts=Timeouts(timings.session_timeout_ms, timings.heartbeat_interval_ms), log_dir=log_dir,
    )
    kill = scenario == "crashes"
    jitter = timings.heartbeat_interval_ms if stop_jitter_ms is None else stop_jitter_ms
    rng = random.Random(group)
    launched: dict[str, float] = {}
    steps: list[tuple[int, Member, float, Member, bool]] = []
    try:
        t = now_ms()
        run.start_fleet()
        for m in run.members.values():
            launched[m.name] = t
        for slot in range(members):
            time.sleep(rng.uniform(0, jitter) / 1000)
            started = now_ms()
            if kill:
                old = run.stop_slot(slot, kill=True)
                time.sleep(crash_pause_s)
            else:
                old = run.stop_slot(slot)
            launched_at = now_ms()
            new = run._start_slot(slot, after)
            launched[new.name] = launched_at
            run.settle(f"slot {slot}: {'killed' if kill else 'stopped'}, restarted as {after.label()}", started)
            steps.append((slot, old, started, new, not kill))
    finally:
        run.close()
    origin = min(_started_ms(m, launched[m.name]) for m in run.all_members() if m.name.endswith(".1"))
    firsts = sorted((m for m in run.all_members() if m.name.endswith(".1")), key=lambda m: m.name)

    def rel(ms: float) -> int:
        return max(int(ms - origin), 0)

    schedule = Schedule(
        mix=mix, scenario=scenario, partitions=partitions,
        starts=tuple(rel(_started_ms(m, launched[m.name])) for m in firsts),
        steps=tuple(
            Step(slot, rel(_stopped_ms(run, old, started)), graceful,
                 rel(_started_ms(new, launched[new.name])), after.protocol)
            for slot, old, started, new, graceful in steps
        ),
        timings=timings, topic=topic,
    )
    killed = {old.name for _, old, _, _, graceful in steps if not graceful}
    # The run ends when the last step settled: the fleet's shutdown after it is not part of the scenario.
    end_ms = run.steps[-1].settled_ms
    recorded = convert(
        ends_after_close([e for e in run.log.ownership if e.at_ms <= end_ms]), run="measured", group=group, client_mix=mix,
        protocols={m.name: m.spec.protocol for m in run.all_members()}, topics={topic: partitions},
    )
    events = [e.model_copy(update={"reason": "crash"}) if e.event == "member_left" and e.member in killed else e
              for e in recorded]
    # The stops as disturbances (the schedule's times), so both runs' windows start alike.
    base = len(events)
    for i, step in enumerate(schedule.steps):
        events.append(ev.Disturbance(ts_ms=int(origin) + step.stop_ms, seq=base + i, run="measured", group=group,
                                     protocol="consumer", client_mix=mix, kind=scenario))
    return RealRun(mix, scenario, client, group, topic, events, schedule, run)


class HarnessRuns:
    """The real half of ``groupgate rehearse calibrate`` (rehearsal/calibrate_cli.py ``RealRuns``), found by the
    command as the ``groupgate.calibration`` entry point: the harness's broker and gateway processes, and
    ``run_real``."""

    def broker(self) -> ProcessBackend:
        return endpoints.broker()

    def gateway(self, upstream: str, work_dir: Path, timings: Timings, extra_args: Sequence[str]) -> GatewayProcess:
        gw = endpoints.gateway(upstream, work_dir, extra=gateway_settings(timings))
        gw.extra_args += list(extra_args)
        return gw

    def fleet_gateway(self, upstream: str, work_dir: Path, config: Path, extra_args: Sequence[str]) -> GatewayProcess:
        """A gateway reading ``config`` and nothing else of the harness's (its default state store included)."""
        work_dir.mkdir(parents=True, exist_ok=True)
        return GatewayProcess(upstream=upstream, listen_port=free_port_block(3), log_dir=work_dir,
                              extra_args=["--config", str(config), *extra_args])

    def fleet_roll(self, bootstrap: str, broker: str, spec: FleetSpec, index: int, *, quiet_s: float,
                   log_dir: Path, plan: Sequence[tuple[int, int, bool, int]] | None = None) -> Any:
        from .fleet_roll import run_fleet_roll  # it builds on this module's ends_after_close

        return run_fleet_roll(bootstrap, broker, spec, index, quiet_s=quiet_s, log_dir=log_dir, plan=plan)

    def run(self, bootstrap: str, broker: str, mix: str, scenario: str, *, members: int, partitions: int,
            client: str, timings: Timings, log_dir: Path) -> RealRun:
        return run_real(bootstrap, broker, mix, scenario, members=members, partitions=partitions,  # type: ignore[arg-type]
                        client=client, timings=timings, log_dir=log_dir)


HARNESS = HarnessRuns()
