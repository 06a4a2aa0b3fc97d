"""The real half of a fleet calibration (rehearsal/fleet_calibration.py): one group of a fleet spec rolled by
real consumers through a gateway, paced as the fleet simulator paces its own rolls.

The group is the spec's (its mix, members, clients and strategies, the classic clients' heartbeat interval
and session timeout); the gateway is whatever the caller started (the calibration starts it with the same
configuration file the simulation read). The roll is drawn from the simulator's distributions
(rehearsal/sim_config.py): members start within START_SPREAD_MS, the first step ROLL_FIRST_MS plus a gap
after the start, each next one a gap later; a step stops a random member still on the old protocol (any
member for the consumer mix's rolling restart), cleanly with probability ``graceful_share`` or by SIGKILL,
and starts its successor ROLL_RESTART_MS after the old process ended. Steps run open loop: nothing waits for the group to settle
between them, as nothing does in the simulation. After the last step the run waits for the group to be
settled and quiet for ``quiet_s`` (several heartbeat intervals, so that a new-protocol member's
reconciliation has come to its end), and cuts the recording at that point: the fleet's shutdown is not part
of the roll.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from compat_tests.harness.admin import create_topic
from compat_tests.harness.events import now_ms
from compat_tests.harness.names import unique
from rehearsal import events as ev
from rehearsal.fleet_settings import client_slots
from rehearsal.fleet_spec import FleetSpec
from rehearsal.recorded import convert
from rehearsal.sim_config import ROLL_FIRST_MS, ROLL_GAP_MS, ROLL_RESTART_MS, START_SPREAD_MS

from .calibration import ends_after_close
from .members import COOPERATIVE_STICKY, RANGE, MemberSpec, Timeouts
from .scenario import RollingUpgrade

ROUNDROBIN = "org.apache.kafka.clients.consumer.RoundRobinAssignor"
_JAVA_ASSIGNORS = {"range": RANGE, "roundrobin": ROUNDROBIN, "cooperative-sticky": COOPERATIVE_STICKY}
# The newest Java release the harness runs (a spec naming another version is run with it).
JAVA_RELEASE = "4.4.0"


@dataclass
class FleetRoll:
    """One real roll: its events (the rehearsal event schema, run ``measured``), its group and topic."""

    group: str
    topic: str
    mix: str
    members: int
    events: list[ev.Event]
    steps: int
    killed: int
    # Java members: from each process's launch to its consumer's startup (the tool's startup_complete).
    start_lags_ms: list[int]


def member_specs(spec: FleetSpec, index: int) -> tuple[list[MemberSpec], list[MemberSpec], list[str]]:
    """Per slot of group ``index``: its consumer before the roll, after it, and its client's name."""
    mix = spec.group_mix(index)
    clients = spec.clients
    if not clients:
        raise ValueError("a fleet calibration needs the spec's clients (--clients): real consumers are of a client")
    slots = client_slots(clients, spec.members)
    before: list[MemberSpec] = []
    after: list[MemberSpec] = []
    names: list[str] = []
    if spec.scenario != "rolling-upgrade":
        raise ValueError(f"a fleet calibration rolls the fleet: scenario rolling-upgrade, not {spec.scenario}")
    for slot in range(spec.members):
        c = clients[slots[slot]]
        strategy = c.strategy or spec.classic_assignor(mix)
        java = c.client == "java"
        classic = (MemberSpec("java", "classic", JAVA_RELEASE, _JAVA_ASSIGNORS[strategy]) if java
                   else MemberSpec("confluent", "classic", assignor=strategy))
        consumer = (MemberSpec("java", "consumer", JAVA_RELEASE, spec.server_assignor) if java
                    else MemberSpec("confluent", "consumer", assignor=spec.server_assignor))
        first = consumer if mix == "consumer" else classic
        before.append(first)
        after.append(consumer)
        names.append(c.client)
    return before, after, names


def run_fleet_roll(
    bootstrap: str,
    broker: str,
    spec: FleetSpec,
    index: int,
    *,
    quiet_s: float,
    log_dir: Path | None = None,
    settle_timeout_s: float = 180.0,
    plan: Sequence[tuple[int, int, bool, int]] | None = None,
) -> FleetRoll:
    """Roll group ``index`` of ``spec`` with real consumers through ``bootstrap`` (see the module's text).

    ``plan``: the steps to play, as the simulator played them (``GroupOutcome.roll_steps``: stop ms, slot,
    clean or not, successor's start ms, from the group's start): the real roll then plays the simulated
    roll's own plan, so that the two differ only in what the clients and the coordinator did."""
    if len(spec.topics) != 1:
        raise ValueError("a fleet calibration runs one topic per group (--topics NAME:PARTITIONS)")
    mix = spec.group_mix(index)
    before, after, clients = member_specs(spec, index)
    if spec.graceful_share < 1.0 and "librdkafka" in clients:
        raise ValueError("librdkafka consumers run inside this process and cannot be killed: give a graceful "
                         "share of 1.0 (a roll that only stops members cleanly), or Java clients")
    (name, partitions), = spec.topics.items()
    topic = create_topic(broker, unique(f"fleet-{name}"), partitions)
    group = unique(f"fleet-{mix}")
    session_ms = min(c.session_timeout_ms for c in spec.clients or ())
    run = RollingUpgrade(bootstrap, topic, group, before, after, partitions=partitions,
                         timeouts=Timeouts(session_ms, spec.heartbeat_interval_ms), log_dir=log_dir)
    rng = random.Random(f"fleet-roll/{spec.seed}/{index}")
    lock = threading.Lock()
    killed: set[str] = set()
    stops: list[float] = []
    errors: list[BaseException] = []
    restart_after: dict[int, int] = {}
    launched: dict[str, float] = {}
    in_flight: set[int] = set()

    def at(origin: float, offset_ms: float) -> None:
        delay = origin + offset_ms - now_ms()
        if delay > 0:
            time.sleep(delay / 1000)

    def start(slot: int, spec_: MemberSpec) -> None:
        try:
            with lock:
                at_ms = now_ms()
                m = run._start_slot(slot, spec_)
                launched[m.name] = at_ms
        except BaseException as e:  # reported after the roll
            errors.append(e)

    def step(slot: int, graceful: bool) -> None:
        try:
            with lock:
                m = run.members.pop(slot)
                run.retired.append(m)
            stops.append(now_ms())
            if graceful:
                m.stop()
            else:
                killed.add(m.name)
                m.kill()
            # The successor starts once the old process is gone (a clean close has left the group by then),
            # as an orchestrator restarts it, and as the simulator's member leaves at once.
            at(now_ms(), restart_after[slot])
            start(slot, after[slot])
        except BaseException as e:
            errors.append(e)
        finally:
            in_flight.discard(slot)

    threads: list[threading.Thread] = []
    origin = now_ms()
    try:
        offsets = sorted((rng.randint(0, START_SPREAD_MS), slot) for slot in range(spec.members))
        for offset, slot in offsets:
            at(origin, offset)
            start(slot, before[slot])
        if errors:
            raise errors[0]
        origin = _fleet_origin(run, spec, origin)
        for stop_ms, slot, graceful, start_ms in plan or ():
            at(origin, stop_ms)
            waited = time.monotonic()
            while slot in in_flight and time.monotonic() - waited < 10:
                time.sleep(0.01)  # its successor, started later than the simulation's, is not up yet
            if slot in in_flight or slot not in run.members:
                raise RuntimeError(f"plan step at {stop_ms} ms: slot {slot} is not running")
            in_flight.add(slot)
            restart_after[slot] = start_ms - stop_ms
            th = threading.Thread(target=step, args=(slot, graceful), name=f"roll-{slot}", daemon=True)
            th.start()
            threads.append(th)
        t = ROLL_FIRST_MS
        rolled: set[int] = set()
        for _ in range(spec.members if plan is None else 0):
            t += rng.randint(*ROLL_GAP_MS)
            at(origin, t)
            # As the simulator: an upgrade picks a member still on the old protocol; the consumer mix's
            # rolling restart any running member (one may be restarted twice, another not at all).
            pool = set(range(spec.members)) - in_flight
            candidates = sorted(pool if mix == "consumer" else pool - rolled)
            if not candidates:
                continue
            slot = rng.choice(candidates)
            rolled.add(slot)
            in_flight.add(slot)
            graceful = rng.random() < spec.graceful_share
            restart_after[slot] = rng.randint(*ROLL_RESTART_MS)
            th = threading.Thread(target=step, args=(slot, graceful), name=f"roll-{slot}", daemon=True)
            th.start()
            threads.append(th)
        for th in threads:
            th.join(120)
        if errors:
            raise errors[0]
        end_ms = _quiet(run, quiet_s, settle_timeout_s)
    finally:
        run.close()
    members = {m.name: m for m in run.all_members()}
    for m in members.values():
        m.ingest()
    recorded = convert(
        ends_after_close([e for e in run.log.ownership if e.at_ms <= end_ms]), run="measured", group=group,
        client_mix=mix, protocols={n: m.spec.protocol for n, m in members.items()}, topics={topic: partitions},
    )
    events = [e.model_copy(update={"reason": "crash"}) if e.event == "member_left" and e.member in killed else e
              for e in recorded]
    base = len(events)
    for i, stop in enumerate(sorted(stops)):
        events.append(ev.Disturbance(ts_ms=int(stop), seq=base + i, run="measured", group=group, protocol="consumer",
                                     client_mix=mix, kind=spec.scenario))
    lags = []
    for name, m in members.items():
        marks = m.tool.named("startup_complete") if m.tool is not None else []
        if marks and name in launched:
            lags.append(int(marks[0].timestamp_ms - launched[name]))
    return FleetRoll(group, topic, mix, spec.members, events, len(stops), len(killed), sorted(lags))


# From a Java consumer's startup (the tool's startup_complete) to its first group request, measured through
# the gateway (rehearsal/client_timings.py Timings.start_latency_ms).
JAVA_FIRST_REQUEST_MS = 170


def _fleet_origin(run: RollingUpgrade, spec: FleetSpec, launched: float) -> float:
    """The roll's clock: in the simulation, the fleet's members send their first group requests ``start_ms``
    after its start. JVMs booting together take longer than one restarted alone (0.8-1.6 s against about
    0.4 s here), so for Java fleets the clock starts when every first consumer is up, ``start_ms`` before
    their first requests; the plan's steps then meet a group formed when the simulated one was."""
    javas = [m for m in run.members.values() if m.tool is not None]
    if not javas:
        return launched
    deadline = time.monotonic() + 120
    while True:
        marks = [m.tool.named("startup_complete") for m in javas if m.tool is not None]
        if all(marks):
            break
        if time.monotonic() > deadline:
            raise TimeoutError("the fleet's Java consumers did not start within 120 s")
        time.sleep(0.02)
    up = max(float(mk[0].timestamp_ms) for mk in marks)
    start_ms = max(m.start_ms for m in spec.client_models() or ())
    return max(launched, up + JAVA_FIRST_REQUEST_MS - start_ms)


def _quiet(run: RollingUpgrade, quiet_s: float, timeout_s: float) -> float:
    """Wait until every partition is owned once by the running members and nothing changed for ``quiet_s``;
    the time of the last change seen (the recording is cut a moment after it)."""
    deadline = time.monotonic() + timeout_s
    last = run.ownership()
    changed = now_ms()
    while True:
        time.sleep(0.1)
        owners = run.ownership()
        if owners != last:
            last, changed = owners, now_ms()
        elif run.settled_now() and now_ms() - changed >= quiet_s * 1000:
            return now_ms()
        if time.monotonic() > deadline:
            raise TimeoutError(f"group {run.group} not settled {timeout_s:.0f}s after its roll; owners {owners}")


__all__ = ["FleetRoll", "member_specs", "run_fleet_roll"]
