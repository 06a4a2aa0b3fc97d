"""A rehearsal report from a RECORDED rolling upgrade: real Java consumers (classic cooperative-sticky,
then KIP-848) restarted one at a time through the gateway's coordinator; their rebalance callbacks are
converted to rehearsal events (rehearsal/recorded.py) and analysed by the Spark report like a simulated
fleet's. The same run is also seen from the other side: the gateway writes its own rebalance events
(``--rebalance-events``), which go into the same report and must agree with the clients' callbacks on
who owns what once the upgrade settled. The driver is compat_tests/upgrade (RollingUpgrade); the broker
and gateway run with its short group timings."""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from compat_tests.harness.admin import create_topic
from compat_tests.harness.brokers import ProcessBackend
from compat_tests.harness.names import unique
from compat_tests.upgrade import endpoints
from compat_tests.upgrade.members import COOPERATIVE_STICKY, MemberSpec
from compat_tests.upgrade.scenario import RollingUpgrade
from rehearsal import oracle
from rehearsal.cli import report_main
from rehearsal.events import Event, EventWriter, parse_event, validate_logs
from rehearsal.recorded import convert

pytestmark = pytest.mark.kafka

FLEET = 3
PARTITIONS = 6
GATEWAY_RUN = "gateway-upgrade"
# How long the gateway's log may trail the clients' callbacks (a KIP-848 member acknowledges what it owns
# on its next heartbeat, every 500 ms here).
ACK_WAIT_S = 15.0


@pytest.fixture(scope="module")
def gateway_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """(gateway bootstrap, broker bootstrap, the gateway's rebalance event log): a broker with short
    group timings and the gateway in front, writing its rebalance events."""
    broker: ProcessBackend = endpoints.broker()
    broker.start()
    try:
        work = tmp_path_factory.mktemp("gateway")
        events = work / "rebalance-events.jsonl"
        gw = endpoints.gateway(broker.bootstrap, work)
        gw.extra_args += ["--rebalance-events", str(events), "--rebalance-run", GATEWAY_RUN]
        gw.start()
        try:
            yield gw.bootstrap, broker.bootstrap, events
        finally:
            gw.stop()
    finally:
        broker.stop()


def gateway_events(path: Path, group: str) -> list[Event]:
    """The complete lines the gateway wrote so far for ``group``, validated."""
    text = path.read_text() if path.exists() else ""
    lines = text.splitlines(keepends=True)
    return [e for e in (parse_event(line) for line in lines if line.endswith("\n")) if e.group == group]


def final_owners(events: list[Event]) -> dict[str, frozenset[int]]:
    """member -> the partitions it owns at the end of the events, by the oracle."""
    owned: dict[str, set[int]] = {}
    for row in oracle.compute(events).ownership_intervals:
        if row["open_at_end"]:
            owned.setdefault(row["member"], set()).add(row["partition"])
    return {m: frozenset(p) for m, p in owned.items()}


def settled_in_gateway_log(path: Path, group: str, expected: Counter[frozenset[int]]) -> list[Event]:
    """Wait until the gateway's log shows the ownership the clients report; its events then."""
    deadline = time.monotonic() + ACK_WAIT_S
    while True:
        events = gateway_events(path, group)
        owners = final_owners(events) if events else {}
        if Counter(owners.values()) == expected or time.monotonic() > deadline:
            return events
        time.sleep(0.2)


# The upgrade takes under a minute; starting Spark and the report's jobs take most of the rest.
@pytest.mark.timeout(900)
def test_report_from_a_recorded_rolling_upgrade(gateway_bootstrap: tuple[str, str, Path], tmp_path: Path) -> None:
    pytest.importorskip("pyspark", reason="the report needs PySpark (the 'rehearsal' extra)")
    if shutil.which("java") is None:
        pytest.skip("the report's Spark needs Java 17 on the PATH")
    bootstrap, broker, gateway_log = gateway_bootstrap
    topic = create_topic(broker, unique("rehearsal-topic"), PARTITIONS)
    group = unique("rehearsal-group")
    before = [MemberSpec("java", "classic", "4.4.0", COOPERATIVE_STICKY) for _ in range(FLEET)]
    after = [MemberSpec("java", "consumer", "4.4.0", "uniform") for _ in range(FLEET)]
    run = RollingUpgrade(bootstrap, topic, group, before, after, partitions=PARTITIONS, log_dir=tmp_path)
    try:
        run.start_fleet()
        run.upgrade()
        # The upgraded fleet as its callbacks report it, and the gateway's log once it shows the same.
        clients = run.ownership()
        by_client: dict[str, set[int]] = {}
        for (_, partition), names in clients.items():
            for name in names:
                by_client.setdefault(name, set()).add(partition)
        expected = Counter(frozenset(p) for p in by_client.values())
        seen_by_gateway = settled_in_gateway_log(gateway_log, group, expected)
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
    assert oracle.compute(events).group_summary[0]["members"] == 2 * FLEET

    # The gateway's own log of the same upgrade (up to the moment it settled): valid, one fleet variant,
    # no partition with two owners, every partition owned, by as many consumer-protocol members as the
    # clients report, holding the same partitions as the clients' callbacks say.
    own_log = tmp_path / "events" / "gateway.jsonl"
    with EventWriter(own_log) as w:
        w.write_all(seen_by_gateway)
    assert validate_logs([own_log]) == []
    assert {e.client_mix for e in seen_by_gateway} == {"classic-cooperative"}
    gateway_metrics = oracle.compute(seen_by_gateway)
    assert gateway_metrics.double_ownership == []
    owners = final_owners(seen_by_gateway)
    assert sorted(p for parts in owners.values() for p in parts) == list(range(PARTITIONS))
    assert Counter(owners.values()) == expected and len(owners) == FLEET
    joined = {e.member: e.protocol for e in seen_by_gateway if e.event == "member_joined"}
    assert {joined[m] for m in owners} == {"consumer"}
    assert {"classic", "consumer"} <= set(joined.values())
    kinds_seen = {e.event for e in seen_by_gateway}
    assert {"group_converted", "partitions_revoked", "assignment_sent", "group_stable"} <= kinds_seen

    said: list[str] = []
    assert report_main([str(log), str(own_log)], str(tmp_path / "report"), "local[2]", echo=said.append) == 0, said
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert summary["groups"] == 2 and set(summary["runs"]) == {"recorded-upgrade", GATEWAY_RUN}
    assert summary["double_ownership_violations"] == 0
    assert summary["runs"][GATEWAY_RUN]["last_stable_ms"] is not None
    mix = summary["client_mixes"]["classic-cooperative"]
    assert mix["unavailability_ms"]["max"] is not None and mix["groups_never_stable"] == 0
    # Every step of the driver (the fleet's start, then at least one per restarted slot) settled, and
    # became a group_stable; each step after the first a disturbance.
    assert len(run.steps) >= 1 + FLEET
    kinds = [e.event for e in events]
    assert kinds.count("group_stable") == len(run.steps) and kinds.count("disturbance") == len(run.steps) - 1
    assert summary["runs"]["recorded-upgrade"]["time_to_stable_ms"] > 0
    assert "Client mixes side by side" in (tmp_path / "report" / "report.html").read_text()
