"""Upgrading classic groups whose assignments carry a built-in sticky assignor's userData.

Kafka refuses any assignment userData (KAFKA-18134). A librdkafka group leader copies each member's
subscription userData into its assignment, so librdkafka sticky and cooperative-sticky fleets carry
it after their first rebalance; the gateway converts them when the copy is recognisably a built-in
assignor's (translate/assignor_userdata.py) and refuses everything else as Kafka does.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from migration_harness import TOPIC, Driver, assignment_bytes, partitions_of

from coordinator.errors import Errors
from gateway.config.coordinator import CoordinatorSettings
from translate.assignor_userdata import decode_sticky_userdata
from translate.classic_group import ClassicGroupState
from translate.embedded import ConsumerProtocolSubscription, encode_subscription
from translate.embedded import TopicPartitions as NamedPartitions
from translate.group_config import GroupServiceConfig
from translate.group_service import GroupService


def _previous(previous: dict[str, list[int]]) -> bytes:
    out = struct.pack(">i", len(previous))
    for topic, parts in previous.items():
        name = topic.encode()
        out += struct.pack(">h", len(name)) + name + struct.pack(">i", len(parts))
        out += b"".join(struct.pack(">i", p) for p in parts)
    return out


def sticky_v1(previous: dict[str, list[int]], generation: int) -> bytes:
    """Java StickyAssignor since 2.3, librdkafka sticky and cooperative-sticky."""
    return _previous(previous) + struct.pack(">i", generation)


def sticky_v0(previous: dict[str, list[int]], generation: int) -> bytes:
    """Java StickyAssignor before 2.3: no generation."""
    return _previous(previous)


def cooperative_generation(previous: dict[str, list[int]], generation: int) -> bytes:
    """Java CooperativeStickyAssignor: the generation alone."""
    return struct.pack(">i", generation)


Layout = Callable[[dict[str, list[int]], int], bytes]


def sticky_fleet(
    protocol: str,
    layout: Layout,
    *,
    owned: bool = True,
    tamper: Callable[[int, bytes], tuple[bytes, bytes]] | None = None,
    generation_delta: int = 0,
) -> tuple[Driver, list[str]]:
    """A Stable classic fleet of three under ``protocol`` whose members' subscriptions carry
    ``layout`` userData naming their current partitions, copied into their assignments as a
    librdkafka leader does. ``tamper(i, userData)`` -> (subscription userData, assignment userData)."""
    d = Driver()
    ids, generation = d.classic_fleet(protocols=(protocol,))
    group = d.classic()
    for i, mid in enumerate(ids):
        member = group.members[mid]
        parts = partitions_of(member.assignment)
        user_data = layout(parts, generation + generation_delta)
        sub_ud, asg_ud = tamper(i, user_data) if tamper is not None else (user_data, user_data)
        owned_tps = [NamedPartitions(t, tuple(p)) for t, p in parts.items()] if owned else []
        member.supported_protocols[0].metadata = encode_subscription(
            ConsumerProtocolSubscription([TOPIC], sub_ud, owned_tps, generation), 3
        )
        member.assignment = assignment_bytes(parts, user_data=asg_ud)
    return d, ids


BUILTIN = [
    ("cooperative-sticky", sticky_v1),  # librdkafka cooperative-sticky
    ("sticky", sticky_v1),  # librdkafka sticky, Java StickyAssignor 2.3+
    ("sticky", sticky_v0),  # Java StickyAssignor before 2.3
    ("cooperative-sticky", cooperative_generation),  # Java CooperativeStickyAssignor
]


@pytest.mark.parametrize(("protocol", "layout"), BUILTIN, ids=[f"{p}-{f.__name__}" for p, f in BUILTIN])
def test_builtin_sticky_userdata_copied_into_assignments_converts(protocol: str, layout: Layout) -> None:
    d, ids = sticky_fleet(protocol, layout, owned=layout is not sticky_v0)
    held = {mid: partitions_of(d.classic().members[mid].assignment)[TOPIC] for mid in ids}
    response = d.consumer("m1")
    assert response.error_code == Errors.NONE, response
    group = d.cgroup()
    assert set(group.members) == {*ids, "m1"}
    for mid in ids:
        # Each classic member keeps what it holds until it revokes it (its target may move on).
        assert d.assigned(mid) == held[mid]
    # The joiner gets nothing any classic member still holds.
    assert not set(d.assigned("m1")) & {p for parts in held.values() for p in parts}
    assert group.members["m1"].member_epoch >= 1


def test_a_first_generation_without_userdata_converts_as_in_kafka() -> None:
    d, _ = sticky_fleet("cooperative-sticky", sticky_v1, tamper=lambda i, ud: (None, b""))  # type: ignore[arg-type,return-value]
    assert d.consumer("m1").error_code == Errors.NONE


def _refused(d: Driver) -> None:
    before = len(d.records)
    assert d.consumer("m1").error_code == Errors.GROUP_ID_NOT_FOUND
    assert d.records[before:] == []
    assert d.classic().is_in(ClassicGroupState.STABLE)


TAMPERED: dict[str, tuple[str, Layout, Callable[[int, bytes], tuple[bytes, bytes]]]] = {
    # A custom assignor's data, the same in subscription and assignment.
    "custom-bytes": ("cooperative-sticky", sticky_v1, lambda i, ud: (b"custom", b"custom")),
    # Valid sticky data, but the assignment's is not the member's own subscription userData.
    "not-a-copy": ("cooperative-sticky", sticky_v1, lambda i, ud: (ud, sticky_v1({TOPIC: [5]}, 0))),
    # Only in the assignment: the subscription has none.
    "assignment-only": ("sticky", sticky_v1, lambda i, ud: (None, ud)),  # type: ignore[dict-item]
    # A byte more than the layout.
    "trailing-byte": ("sticky", sticky_v1, lambda i, ud: (ud + b"\x00", ud + b"\x00")),
    # Truncated inside a partition.
    "truncated": ("cooperative-sticky", sticky_v1, lambda i, ud: (ud[:-6], ud[:-6])),
    # A negative topic count.
    "negative-count": ("sticky", sticky_v1, lambda i, ud: (b"\xff\xff\xff\xfe" + ud[4:],) * 2),
}


@pytest.mark.parametrize("case", list(TAMPERED))
def test_unknown_or_inconsistent_userdata_is_refused_as_in_kafka(case: str) -> None:
    protocol, layout, tamper = TAMPERED[case]
    d, _ = sticky_fleet(protocol, layout, tamper=tamper)
    _refused(d)


def test_sticky_userdata_under_another_assignor_name_is_refused() -> None:
    d, _ = sticky_fleet("range", sticky_v1)
    _refused(d)


def test_a_generation_the_group_never_had_is_refused() -> None:
    d, _ = sticky_fleet("cooperative-sticky", sticky_v1, generation_delta=1)
    _refused(d)


def test_owned_partitions_missing_from_the_previous_assignment_are_refused() -> None:
    # The userData says the member had nothing, its subscription says it owns partitions.
    d, _ = sticky_fleet("cooperative-sticky", lambda parts, gen: sticky_v1({}, gen))
    _refused(d)


def test_setting_off_refuses_builtin_userdata_as_kafka() -> None:
    d, _ = sticky_fleet("cooperative-sticky", sticky_v1)
    d.service.converter.convert_builtin_sticky_userdata = False
    _refused(d)


def test_the_setting_reaches_the_converter_under_its_name() -> None:
    assert CoordinatorSettings().convert_builtin_sticky_userdata is True
    off = CoordinatorSettings.model_validate({"group.consumer.convert.builtin.sticky.userdata": False})
    service_config, _ = off.service_configs()
    assert service_config.convert_builtin_sticky_userdata is False
    assert GroupService(service_config).converter.convert_builtin_sticky_userdata is False
    assert GroupService(GroupServiceConfig()).converter.convert_builtin_sticky_userdata is True


# ---- the decoder alone ---------------------------------------------------------------------------


def test_decoder_reads_each_layout_exactly() -> None:
    v1 = decode_sticky_userdata("sticky", sticky_v1({"a": [0, 2], "b": []}, 7))
    assert v1 is not None and v1.layout == "sticky-v1"
    assert v1.previous == {"a": frozenset({0, 2}), "b": frozenset()} and v1.generation == 7
    v0 = decode_sticky_userdata("sticky", sticky_v0({"a": [1]}, 0))
    assert v0 is not None and v0.layout == "sticky-v0" and v0.generation == -1
    coop = decode_sticky_userdata("cooperative-sticky", cooperative_generation({}, 4))
    assert coop is not None and coop.layout == "cooperative-generation" and coop.generation == 4
    rd = decode_sticky_userdata("cooperative-sticky", sticky_v1({"a": [1]}, 3))
    assert rd is not None and rd.layout == "sticky-v1" and rd.previous == {"a": frozenset({1})}


@pytest.mark.parametrize(
    ("protocol", "data"),
    [
        ("range", sticky_v1({"a": [0]}, 1)),
        ("sticky", sticky_v1({"a": [0]}, 1) + b"\x00"),
        ("sticky", sticky_v1({"a": [0, 0]}, 1)),  # a repeated partition
        ("sticky", sticky_v1({"a": [-1]}, 1)),  # a negative partition
        ("cooperative-sticky", b"\x00\x00\x00"),
        ("cooperative-sticky", sticky_v0({"a": [0]}, 0)),  # v0 is the Java sticky assignor's alone
        ("sticky", b"\x00\x00\x00\x01\xff\xff"),  # a null topic name
    ],
)
def test_decoder_rejects_anything_else(protocol: str, data: bytes) -> None:
    assert decode_sticky_userdata(protocol, data) is None
