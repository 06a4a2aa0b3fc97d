"""A refused upgrade says why in a word (ConversionRefused, counted by /metrics); a conversion that happens
says which way (GroupConverted); a refusal changes nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from migration_harness import TOPIC, Driver, assignment_bytes

from coordinator.errors import Errors
from coordinator.outcome import ConversionRefused, GroupConverted
from translate.classic_group import ClassicGroupState


def _custom_userdata(d: Driver) -> None:
    ids, _ = d.classic_fleet()
    d.classic().members[ids[0]].assignment = assignment_bytes({TOPIC: [0]}, user_data=b"custom")


def _malformed_subscription(d: Driver) -> None:
    ids, _ = d.classic_fleet()
    d.classic().members[ids[1]].supported_protocols[0].metadata = b"\x00\x01\x00\x00\x00\x05ab"


@pytest.mark.parametrize(
    ("driver", "setup", "reason", "error"),
    [
        (lambda: Driver(policy="downgrade"), lambda d: d.classic_fleet(), "policy", Errors.GROUP_ID_NOT_FOUND),
        (Driver, lambda d: d.classic_fleet(protocol_type="connect"), "protocol_type", Errors.GROUP_ID_NOT_FOUND),
        (lambda: Driver(max_group_size=2), lambda d: d.classic_fleet(), "group_max_size", Errors.GROUP_ID_NOT_FOUND),
        (lambda: Driver(max_group_size=3), lambda d: d.classic_fleet(), "group_max_size", Errors.GROUP_MAX_SIZE_REACHED),
        (Driver, _custom_userdata, "assignment_userdata", Errors.GROUP_ID_NOT_FOUND),
        (Driver, _malformed_subscription, "member_metadata", Errors.GROUP_ID_NOT_FOUND),
    ],
)
def test_a_refused_upgrade_names_its_reason_and_changes_nothing(
    driver: Callable[[], Driver], setup: Callable[[Driver], object], reason: str, error: Errors,
) -> None:
    d = driver()
    setup(d)
    records, changes = len(d.records), len(d.changes)
    assert d.consumer("m1").error_code == error
    assert d.changes[changes:] == [ConversionRefused("g", "classic", "consumer", reason)]
    assert d.records[records:] == [] and d.classic().is_in(ClassicGroupState.STABLE)


def test_a_conversion_each_way_is_announced() -> None:
    d = Driver()
    d.classic_fleet()
    assert d.consumer("m1").error_code == 0
    assert [c for c in d.changes if isinstance(c, GroupConverted)] == [GroupConverted("g", "classic", "consumer")]
    assert not [c for c in d.changes if isinstance(c, ConversionRefused)]
    assert d.consumer("m1", epoch=-1).error_code == 0  # the only KIP-848 member leaves: back to classic
    assert [c for c in d.changes if isinstance(c, GroupConverted)][-1] == GroupConverted("g", "consumer", "classic")
