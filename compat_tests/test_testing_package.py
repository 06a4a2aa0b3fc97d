"""groupgate.testing, the public testing package, through its pytest plugin's fixtures (docs/testing.md):
what a third-party compatibility suite gets. Runs on the session's embedded broker; the container path
skips with "no Docker engine (...)" where none answers."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from compat_tests.harness.admin import create_topic
from compat_tests.harness.clients import ConfluentConsumer, produce_confluent, values
from compat_tests.harness.events import EventLog
from groupgate.testing import (
    GatewaySettings,
    Target,
    convert_group,
    group_type,
    readyz,
    run_both,
    wait_group_type,
)

pytestmark = pytest.mark.kafka


def test_settings_become_the_coordinators_environment() -> None:
    s = GatewaySettings(classic_groups="translate", migration_policy="upgrade", session_timeout_ms=45000).replace(
        **{"group.consumer.assignors": ["range"], "consumer_max_size": 5}
    )
    env = s.env()
    assert env["GROUPGATE_COORDINATOR_CLASSIC_GROUPS"] == "translate"
    assert env["GROUPGATE_COORDINATOR_MIGRATION_POLICY"] == "upgrade"
    assert env["GROUPGATE_COORDINATOR_CONSUMER_SESSION_TIMEOUT_MS"] == "45000"
    assert env["GROUPGATE_COORDINATOR_CONSUMER_ASSIGNORS"] == "range"
    assert env["GROUPGATE_COORDINATOR_CONSUMER_MAX_SIZE"] == "5"
    assert env["GROUPGATE_COORDINATOR_INITIAL_REBALANCE_DELAY_MS"] == "0"
    with pytest.raises(KeyError):
        GatewaySettings(coordinator={"group.consumer.sesion.timeout.ms": 1}).env()


def _consume(target: Target, names: Callable[[str], str]) -> list[str]:
    topic = create_topic(target.bootstrap, names(f"{target.name}-topic"), partitions=2)
    produced = produce_confluent(target.bootstrap, topic, values(topic, 10))
    log = EventLog()
    with ConfluentConsumer(name="c0", log=log, bootstrap=target.bootstrap, group_id=names("group"), topics=[topic]):
        log.wait_until(lambda lg: lg.covers(produced), 60, f"every record consumed ({target.name})")
    return sorted(r.value.decode().rsplit("-", 1)[1] for r in log.records if r.value is not None)


def test_one_scenario_directly_and_through_the_gateway(groupgate, names) -> None:
    both = run_both(lambda t: _consume(t, names), groupgate)
    assert both.same() and len(both.direct) == 10, both


@pytest.mark.groupgate(migration_policy="bidirectional")
def test_a_live_classic_group_converted_mid_test_and_back(groupgate, names) -> None:
    topic = create_topic(groupgate.bootstrap, names("topic"), partitions=2)
    group = names("group")
    log = EventLog()
    with ConfluentConsumer(name="classic", log=log, bootstrap=groupgate.bootstrap, group_id=group, topics=[topic]):
        log.wait_until(lambda lg: lg.settled(topic, 2, ["classic"]), 30, "the classic member owns both partitions")
        assert group_type(groupgate.bootstrap, group) == ("classic", "Stable")
        with convert_group(groupgate.bootstrap, group, [topic]):
            assert group_type(groupgate.bootstrap, group)[0] == "consumer"  # type: ignore[index]
        wait_group_type(groupgate.bootstrap, group, "classic")
    kinds = {e["event"] for e in groupgate.events(group)}
    assert {"member_joined", "member_left"} <= kinds, kinds


def test_restart_kill_and_reconfigure_keep_the_addresses(groupgate) -> None:
    bootstrap = groupgate.bootstrap
    groupgate.kill()
    assert readyz(groupgate.readyz_url)[0] == 0
    groupgate.restart(hard=True)
    assert groupgate.bootstrap == bootstrap and readyz(groupgate.readyz_url)[0] == 200
    groupgate.reconfigure(managed_groups="managed-.*", classic_groups="translate")
    assert groupgate.bootstrap == bootstrap
    assert groupgate.settings.managed_groups == "managed-.*"


def test_a_fleet_of_two_serves_through_either_instance(groupgate_fleet, names) -> None:
    fleet = groupgate_fleet(2)
    assert len({gw.bootstrap for gw in fleet}) == 2
    topic = create_topic(fleet.upstream, names("topic"), partitions=2)
    produced = produce_confluent(fleet.bootstrap, topic, values(topic, 10))
    log = EventLog()
    with ConfluentConsumer(name="c0", log=log, bootstrap=fleet.bootstrap, group_id=names("group"), topics=[topic]):
        log.wait_until(lambda lg: lg.covers(produced), 60, "every record consumed through the fleet")


def test_the_gateway_container(groupgate_container) -> None:
    assert readyz(groupgate_container.readyz_url)[0] == 200
