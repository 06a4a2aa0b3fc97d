"""`groupgate rehearse calibrate-fleet` end to end on the smallest fleet: three librdkafka consumers of a
6-partition topic, classic cooperative-sticky, rolled to the consumer protocol through a gateway that runs
every setting at its default, beside the fleet command's own simulation of the same description. The
figures of a full calibration (five members, every mix, several rolls) are in docs/rehearsal.md; here the
command's path is checked: the real roll plays the plan of its simulated twin, ends converged on the new
protocol, is measured as the simulation is, and the two sides land in one row with their spread."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from compat_tests.harness.brokers import ProcessBackend
from compat_tests.upgrade.calibration import HARNESS
from rehearsal import events as ev
from rehearsal.events import read_events
from rehearsal.fleet_calibration import add_arguments, calibrate_fleet

pytestmark = pytest.mark.kafka

MEMBERS = 3
PARTITIONS = 6


class SharedBroker:
    """The session's broker, handed to the command as its own (neither started nor stopped by it)."""

    def __init__(self, kafka: ProcessBackend) -> None:
        self.bootstrap = kafka.bootstrap

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class Runs:
    def __init__(self, kafka: ProcessBackend) -> None:
        self.kafka = kafka

    def broker(self) -> SharedBroker:
        return SharedBroker(self.kafka)

    def fleet_gateway(self, upstream: str, work_dir: Path, config: Path, extra_args: Any) -> Any:
        return HARNESS.fleet_gateway(upstream, work_dir, config, extra_args)

    def fleet_roll(self, bootstrap: str, broker: str, spec: Any, index: int, *, quiet_s: float, log_dir: Path,
                   plan: Any = None) -> Any:
        assert plan, "every real roll plays its simulated twin's plan"
        return HARNESS.fleet_roll(bootstrap, broker, spec, index, quiet_s=quiet_s, log_dir=log_dir, plan=plan)


@pytest.mark.timeout(300)
def test_a_real_roll_beside_the_fleet_commands_prediction(kafka: ProcessBackend, tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([
        "--clients", "librdkafka", "--mix", "classic-cooperative", "--members", str(MEMBERS),
        "--topics", f"events:{PARTITIONS}", "--runs", "1", "--seeds", "4", "--quiet-s", "11",
        "--out", str(tmp_path),
    ])
    said: list[str] = []
    assert calibrate_fleet(args, Runs(kafka), echo=said.append) == 0, said
    data = json.loads((tmp_path / "fleet-calibration.json").read_text())
    (row,) = data["rows"]
    assert row["mix"] == "classic-cooperative" and len(row["real_rolls"]) == 1 and len(row["simulated_rolls"]) == 4
    # The real roll played its simulated twin's plan: the prediction is that twin, the spread every simulated roll.
    assert row["paired"] and row["predicted"]["unavailable_s"]["n"] == 1 and row["all_simulated"]["unavailable_s"]["n"] == 4
    # The gateway's defaults are what both sides ran with (the simulated gateway read the same empty file).
    assert row["settings"]["group.consumer.session.timeout.ms"] == 45_000
    assert row["settings"]["group.consumer.heartbeat.interval.ms"] == 5_000
    assert row["settings"]["group.initial.rebalance.delay.ms"] == 3_000
    for side in ("real", "predicted"):
        for metric, s in row[side].items():
            assert s["p10"] <= s["mean"] <= s["p90"], (side, metric, s)
    # Each member was stopped once: a disturbance per step, and its partitions moved.
    real = list(read_events([tmp_path / "real-classic-cooperative" / "events"]))
    assert sum(1 for e in real if isinstance(e, ev.Disturbance)) == MEMBERS
    (roll,) = row["real_rolls"]
    assert roll["rebalances_per_member"] > 0 and roll["time_to_stable_s"] > 0
    # Cooperative members never share a partition, and the roll ended with every partition owned once by a
    # member of the new protocol.
    owners: dict[tuple[str, int], str] = {}
    protocol: dict[str, str] = {}
    for e in sorted(real, key=lambda e: (e.ts_ms, e.seq)):
        if isinstance(e, ev.PartitionsAssigned):
            protocol[e.member] = e.protocol
            for tp in e.partitions:
                held = owners.get((tp.topic, tp.partition))
                assert held in (None, e.member), f"{tp} given to {e.member} while {held} owns it"
                owners[(tp.topic, tp.partition)] = e.member
        elif isinstance(e, ev.PartitionsRevoked):
            for tp in e.partitions:
                owners.pop((tp.topic, tp.partition), None)
        elif isinstance(e, ev.MemberLeft | ev.MemberFenced):
            for key in [k for k, m in owners.items() if m == e.member]:
                del owners[key]
    assert len(owners) == PARTITIONS and {protocol[m] for m in owners.values()} == {"consumer"}, owners
    # The table names both sides' spread.
    assert "p10-p90" in (tmp_path / "fleet-calibration.md").read_text()
