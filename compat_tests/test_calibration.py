"""The rehearsal simulator calibrated against real clients on the smallest fleet: three Java 4.3.1 consumers
of a 6-partition topic through the gateway, each killed in turn (no LeaveGroup) and restarted a second
later, once as classic eager (range) and once as classic cooperative-sticky members. The simulator then
replays each run's schedule with the same timings (rehearsal/calibration.py), and both runs are measured
alike. The full table (every mix and scenario, Java and librdkafka) is bench/calibrate.py's, in
docs/rehearsal.md ("Calibration against real clients")."""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.harness.brokers import ProcessBackend
from compat_tests.upgrade import endpoints
from compat_tests.upgrade.calibration import gateway_settings, run_real
from rehearsal.calibration import TOLERANCE, Comparison, Timings, figures, simulate_schedule

pytestmark = pytest.mark.kafka

MEMBERS = 3
PARTITIONS = 6
SEEDS = 3


@pytest.fixture(scope="module")
def calibration_gateway(kafka: ProcessBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A gateway whose consumer groups use the classic clients' session timeout and heartbeat interval."""
    gw = endpoints.gateway(kafka.bootstrap, tmp_path_factory.mktemp("calibration"), extra=gateway_settings(Timings()))
    gw.start()
    try:
        yield gw.bootstrap
    finally:
        gw.stop()


def measure(bootstrap: str, broker: str, mix: str, log_dir: Path) -> Comparison:
    real = run_real(bootstrap, broker, mix, "crashes", members=MEMBERS, partitions=PARTITIONS,  # type: ignore[arg-type]
                    log_dir=log_dir)
    first = figures(real.events, MEMBERS)
    sims = [figures(simulate_schedule(real.schedule, seed), MEMBERS) for seed in range(SEEDS)]
    span = max(first.time_to_stable_ms, *(s.time_to_stable_ms for s in sims))
    measured = figures(real.events, MEMBERS, first.first_disturbance_ms + span)
    simulated = [figures(simulate_schedule(real.schedule, seed), MEMBERS, s.first_disturbance_ms + span)
                 for seed, s in enumerate(sims)]
    # The median seed: the simulated runs differ only in network and callback delays.
    middle = sorted(simulated, key=lambda f: f.unavailable_ms)[SEEDS // 2]
    middle.changes = round(statistics.median(f.changes for f in simulated))
    return Comparison(mix, "crashes", measured, middle)


@pytest.mark.timeout(240)
def test_simulated_crashes_agree_with_real_clients(kafka: ProcessBackend, calibration_gateway: str,
                                                   tmp_path: Path) -> None:
    rows = {mix: measure(calibration_gateway, kafka.bootstrap, mix, tmp_path / mix)
            for mix in ("classic-eager", "classic-cooperative")}
    for mix, row in rows.items():
        real, sim = row.real, row.simulated
        # Every kill cost the killed member's partitions a session timeout, in both runs.
        assert real.crash_unavailable_ms >= MEMBERS * 2 * Timings().session_timeout_ms * 0.5, (mix, real)
        assert sim.crash_unavailable_ms >= MEMBERS * 2 * Timings().session_timeout_ms * 0.5, (mix, sim)
        assert all(row.within(TOLERANCE).values()), (mix, row.ratios(), real, sim)
    eager, cooperative = rows["classic-eager"], rows["classic-cooperative"]
    # The protocol's share: a restarted eager member's JoinGroup makes every member revoke everything and
    # wait for the dead member's session to expire; cooperative members keep theirs. Real and simulated
    # clients agree that eager costs well over the cooperative figure.
    for side in ("real", "simulated"):
        e, c = getattr(eager, side), getattr(cooperative, side)
        assert e.unavailable_ms > 1.5 * c.unavailable_ms, (side, e.unavailable_ms, c.unavailable_ms)
        assert e.rebalances_per_member > c.rebalances_per_member, side
