"""The rehearsal simulator calibrated against real clients on the smallest fleet: three Java 4.4.0 consumers
of a 6-partition topic through the gateway, each killed in turn (no LeaveGroup) and restarted a second
later, once as classic eager (range) and once as classic cooperative-sticky members. Each run goes through
the code of ``groupgate rehearse calibrate`` (rehearsal/calibrate_cli.run_one): the real run, its schedule
replayed by the simulator with the same timings (3 seeds, averaged), both measured alike. The full table
(every mix and scenario, Java and librdkafka) is that command's, in docs/rehearsal.md ("Calibration against
real clients")."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.harness.brokers import ProcessBackend
from compat_tests.upgrade import endpoints
from compat_tests.upgrade.calibration import HARNESS, gateway_settings
from rehearsal.calibrate_cli import Row, load_schedule, run_one
from rehearsal.calibration import TOLERANCE
from rehearsal.client_timings import Timings

pytestmark = pytest.mark.kafka

MEMBERS = 3
PARTITIONS = 6
SEEDS = 3


@pytest.fixture(scope="module")
def calibration_gateway(kafka: ProcessBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A gateway whose consumer groups use the classic clients' session timeout and heartbeat interval, writing
    its own rebalance events."""
    work = tmp_path_factory.mktemp("calibration")
    gw = endpoints.gateway(kafka.bootstrap, work, extra=gateway_settings(Timings()))
    gw.extra_args += ["--rebalance-events", str(work / "events.jsonl")]
    gw.start()
    try:
        yield gw.bootstrap, work / "events.jsonl"
    finally:
        gw.stop()


def measure(gateway: tuple[str, Path], broker: str, mix: str, keep: Path) -> Row:
    return run_one(HARNESS, gateway[0], broker, mix, "crashes", members=MEMBERS, partitions=PARTITIONS, client="java",
                   seeds=SEEDS, keep=keep, gateway_events=gateway[1])


@pytest.mark.timeout(240)
def test_simulated_crashes_agree_with_real_clients(kafka: ProcessBackend, calibration_gateway: tuple[str, Path],
                                                   tmp_path: Path) -> None:
    rows = {mix: measure(calibration_gateway, kafka.bootstrap, mix, tmp_path / mix)
            for mix in ("classic-eager", "classic-cooperative")}
    for mix, row in rows.items():
        real, sim = row.comparison.real, row.comparison.simulated
        # Every kill cost the killed member's partitions a session timeout, in both runs.
        assert real.crash_unavailable_ms >= MEMBERS * 2 * Timings().session_timeout_ms * 0.5, (mix, real)
        assert sim.crash_unavailable_ms >= MEMBERS * 2 * Timings().session_timeout_ms * 0.5, (mix, sim)
        # What the command prints: every metric within 25 %.
        metrics = row.metrics()
        assert all(m["within_25"] for m in metrics.values()), (mix, metrics)
        assert all(row.comparison.within(TOLERANCE).values()), (mix, row.comparison.ratios(), real, sim)
        # The run was saved for --replay, and the gateway's own log saw the same group.
        assert (tmp_path / mix / "schedule.json").exists() and (tmp_path / mix / "measured.jsonl").exists()
        assert row.gateway is not None and row.gateway.changes > 0, mix
    eager, cooperative = rows["classic-eager"].comparison, rows["classic-cooperative"].comparison
    # The protocol's share: an eager member restarted before the dead member's session expired makes every
    # member revoke everything and wait for that expiry; cooperative members keep theirs. How much that is
    # depends on how soon the restarted JVM reached the coordinator (on a loaded machine it may come after
    # the expiry, and then costs nothing): the other members' partitions times what was left of the session.
    schedule = load_schedule(tmp_path / "classic-eager" / "schedule.json")
    session = Timings().session_timeout_ms
    others = PARTITIONS - PARTITIONS // MEMBERS
    penalty = sum(others * (step.stop_ms + session - step.first_request_ms) for step in schedule.steps
                  if step.first_request_ms is not None and step.first_request_ms < step.stop_ms + session)
    for side in ("real", "simulated"):
        e, c = getattr(eager, side), getattr(cooperative, side)
        # Slack: when each kill is noticed depends on the heartbeat phase (up to an interval per partition).
        slack = MEMBERS * 2 * Timings().heartbeat_interval_ms
        assert e.unavailable_ms - c.unavailable_ms >= 0.5 * penalty - slack, (side, e, c, penalty)
        assert e.rebalances_per_member > c.rebalances_per_member, side
