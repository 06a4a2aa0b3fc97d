"""A rehearsal report from a RECORDED rolling upgrade: real Java consumers (classic cooperative-sticky,
then KIP-848) restarted one at a time through the gateway's coordinator; their rebalance callbacks are
converted to rehearsal events (rehearsal/recorded.py) and analysed by the Spark report like a simulated
fleet's. The driver is compat_tests/upgrade (RollingUpgrade); the broker and gateway run with its short
group timings."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.harness.admin import create_topic
from compat_tests.harness.brokers import ProcessBackend
from compat_tests.harness.names import unique
from compat_tests.upgrade import endpoints
from compat_tests.upgrade.members import COOPERATIVE_STICKY, MemberSpec
from compat_tests.upgrade.scenario import RollingUpgrade
from rehearsal.cli import report_main
from rehearsal.events import EventWriter, validate_logs
from rehearsal.recorded import convert

pytestmark = pytest.mark.kafka

FLEET = 3
PARTITIONS = 6


@pytest.fixture(scope="module")
def gateway_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(gateway bootstrap, broker bootstrap): a broker with short group timings and the gateway in front."""
    broker: ProcessBackend = endpoints.broker()
    broker.start()
    try:
        gw = endpoints.gateway(broker.bootstrap, tmp_path_factory.mktemp("gateway"))
        gw.start()
        try:
            yield gw.bootstrap, broker.bootstrap
        finally:
            gw.stop()
    finally:
        broker.stop()


# The upgrade takes under a minute; starting Spark and the report's jobs take most of the rest.
@pytest.mark.timeout(900)
def test_report_from_a_recorded_rolling_upgrade(gateway_bootstrap: tuple[str, str], tmp_path: Path) -> None:
    pytest.importorskip("pyspark", reason="the report needs PySpark (the 'rehearsal' extra)")
    if shutil.which("java") is None:
        pytest.skip("the report's Spark needs Java 17 on the PATH")
    bootstrap, broker = gateway_bootstrap
    topic = create_topic(broker, unique("rehearsal-topic"), PARTITIONS)
    group = unique("rehearsal-group")
    before = [MemberSpec("java", "classic", "4.3.1", COOPERATIVE_STICKY) for _ in range(FLEET)]
    after = [MemberSpec("java", "consumer", "4.3.1", "uniform") for _ in range(FLEET)]
    run = RollingUpgrade(bootstrap, topic, group, before, after, partitions=PARTITIONS, log_dir=tmp_path)
    try:
        run.start_fleet()
        run.upgrade()
    finally:
        run.close()  # gathers every Java incarnation's callbacks into run.log

    events = convert(
        run.log.ownership,
        run="recorded-upgrade",
        group=group,
        client_mix="classic-cooperative",
        protocols={m.name: m.spec.protocol for m in run.all_members()},
        topics={topic: PARTITIONS},
        steps=run.steps,
    )
    log = tmp_path / "events" / "recorded.jsonl"
    with EventWriter(log) as w:
        w.write_all(events)
    assert validate_logs([log]) == []

    said: list[str] = []
    assert report_main([str(log)], str(tmp_path / "report"), "local[2]", echo=said.append) == 0, said
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["groups"] == 1 and summary["members"] == 2 * FLEET
    assert summary["double_ownership_violations"] == 0
    mix = summary["client_mixes"]["classic-cooperative"]
    assert mix["unavailability_ms"]["max"] is not None and mix["groups_never_stable"] == 0
    # Every step of the driver (the fleet's start, then at least one per restarted slot) settled, and
    # became a group_stable; each step after the first a disturbance.
    assert len(run.steps) >= 1 + FLEET
    kinds = [e.event for e in events]
    assert kinds.count("group_stable") == len(run.steps) and kinds.count("disturbance") == len(run.steps) - 1
    assert summary["runs"]["recorded-upgrade"]["time_to_stable_ms"] > 0
    assert "Client mixes side by side" in (tmp_path / "report" / "report.html").read_text()
