"""Offset commit/fetch validation for classic groups, the GroupMetadata records they persist,
and replay rebuilding the same group."""

from __future__ import annotations

import struct

import pytest
from classic_harness import SESSION, Harness, identity, protocols

from coordinator.errors import Errors
from translate.classic_coordinator import ClassicGroupCoordinator
from translate.classic_group import ClassicGroup
from translate.classic_group import ClassicGroupState as State
from translate.classic_messages import HeartbeatRequest
from translate.group_records import (
    GroupMetadataMember,
    GroupMetadataRecord,
    GroupMetadataValue,
    MalformedRecord,
    decode_record,
    decode_value,
    encode_record,
    encode_value,
)
from translate.result import Schedule

DELAY = 3000


def stable_group(h: Harness, n: int, static: bool = False) -> tuple[list[str], int]:
    keys = [h.join(client_id=f"c{i}", instance_id=f"i{i}") if static else h.join_with_id(f"c{i}") for i in range(n)]
    h.advance(2 * DELAY)
    responses = [h.join_response(k) for k in keys]
    ids = [r.member_id for r in responses]
    gen = responses[0].generation_id
    leader = responses[0].leader
    h.sync(leader, gen, assignments={m: m.encode() * 2 for m in ids}, instance_id="i0" if static else None)
    for i, m in enumerate(ids):
        if m != leader:
            h.sync(m, gen, instance_id=f"i{i}" if static else None)
    return ids, gen


# ---- offsets -------------------------------------------------------------------------------
def test_commit_from_a_current_member_is_accepted() -> None:
    h = Harness()
    (m1, _), gen = stable_group(h, 2)
    assert h.coordinator.validate_offset_commit("g", m1, gen, None, 8, h.now) == Errors.NONE


def test_commit_with_an_old_generation_is_fenced() -> None:
    h = Harness()
    (m1, _), gen = stable_group(h, 2)
    assert h.coordinator.validate_offset_commit("g", m1, gen - 1, None, 8, h.now) == Errors.ILLEGAL_GENERATION


def test_commit_from_an_unknown_member_is_refused() -> None:
    h = Harness()
    _, gen = stable_group(h, 2)
    assert h.coordinator.validate_offset_commit("g", "ghost", gen, None, 8, h.now) == Errors.UNKNOWN_MEMBER_ID


def test_commit_outside_the_group_is_accepted_only_while_the_group_is_empty() -> None:
    h = Harness()
    c = h.coordinator
    assert c.validate_offset_commit("simple", "", -1, None, 8, h.now) == Errors.NONE
    assert h.group("simple").state is State.EMPTY
    (m1,), gen = stable_group(h, 1)
    assert c.validate_offset_commit("g", "", -1, None, 8, h.now) == Errors.UNKNOWN_MEMBER_ID
    h.leave(identity(m1))
    assert h.group().state is State.EMPTY
    assert c.validate_offset_commit("g", "", -1, None, 8, h.now) == Errors.NONE


def test_commit_with_a_generation_to_a_missing_group_depends_on_the_version() -> None:
    c = ClassicGroupCoordinator(lambda client: client)
    assert c.validate_offset_commit("nope", "m", 3, None, 9, 0) == Errors.GROUP_ID_NOT_FOUND
    assert c.validate_offset_commit("nope", "m", 3, None, 8, 0) == Errors.ILLEGAL_GENERATION
    assert c.group("nope") is None


def test_commit_between_join_and_sync_is_rebalance_in_progress() -> None:
    h = Harness()
    a = h.join_with_id("a")
    h.advance(DELAY)
    member = h.join_response(a).member_id
    assert h.coordinator.validate_offset_commit("g", member, 1, None, 8, h.now) == Errors.REBALANCE_IN_PROGRESS
    assert (
        h.coordinator.validate_offset_commit("g", member, 1, None, 8, h.now, is_transactional=True)
        == Errors.NONE
    )


def test_offset_fetch_is_open_to_anyone_until_the_group_is_deleted() -> None:
    h = Harness()
    (m1,), _ = stable_group(h, 1)
    assert h.coordinator.validate_offset_fetch("g") == Errors.NONE
    assert h.coordinator.validate_offset_fetch("unknown") == Errors.NONE


def test_deleting_a_group_needs_it_empty_and_writes_a_tombstone() -> None:
    h = Harness()
    (m1,), _ = stable_group(h, 1)
    error, _ = h.coordinator.delete_group("g", h.now)
    assert error == Errors.NON_EMPTY_GROUP
    h.leave(identity(m1))
    error, result = h.coordinator.delete_group("g", h.now)
    assert error == Errors.NONE and result.records == [GroupMetadataRecord("g", None)]
    assert h.coordinator.group("g") is None
    assert h.coordinator.delete_group("g", h.now)[0] == Errors.GROUP_ID_NOT_FOUND


# ---- record codec --------------------------------------------------------------------------
def sample_value() -> GroupMetadataValue:
    return GroupMetadataValue(
        protocol_type="consumer",
        generation=5,
        protocol="range",
        leader="m-1",
        current_state_timestamp=1234,
        members=[
            GroupMetadataMember("m-1", "inst-1", "client-a", "/10.0.0.1", 30000, 10000, b"sub", b"asg"),
            GroupMetadataMember("m-2", None, "client-b", "/10.0.0.2", 45000, 12000, b"", b""),
        ],
    )


def test_group_metadata_key_bytes_match_the_documented_layout() -> None:
    key, _ = encode_record(GroupMetadataRecord("grp", None))
    assert key == struct.pack(">hh", 2, 3) + b"grp"


def test_group_metadata_value_v3_bytes_match_the_documented_layout() -> None:
    value = GroupMetadataValue("consumer", 1, "range", "m", 7, [GroupMetadataMember("m", None, "c", "h", 2, 3, b"S", b"A")])
    expected = (
        struct.pack(">h", 3)
        + struct.pack(">h", 8) + b"consumer"
        + struct.pack(">i", 1)
        + struct.pack(">h", 5) + b"range"
        + struct.pack(">h", 1) + b"m"
        + struct.pack(">q", 7)
        + struct.pack(">i", 1)
        + struct.pack(">h", 1) + b"m"
        + struct.pack(">h", -1)
        + struct.pack(">h", 1) + b"c"
        + struct.pack(">h", 1) + b"h"
        + struct.pack(">ii", 2, 3)
        + struct.pack(">i", 1) + b"S"
        + struct.pack(">i", 1) + b"A"
    )
    assert encode_value(value, 3) == expected


def test_group_metadata_value_v4_is_flexible() -> None:
    value = GroupMetadataValue("consumer", 1, None, None, -1, [])
    # compact "consumer" (len+1), generation, null, null, timestamp, empty compact array, no tags
    expected = struct.pack(">h", 4) + bytes([9]) + b"consumer" + struct.pack(">i", 1) + b"\x00\x00"
    expected += struct.pack(">q", -1) + b"\x01" + b"\x00"
    assert encode_value(value, 4) == expected


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_value_round_trips_in_every_version(version: int) -> None:
    value = sample_value()
    decoded, decoded_version = decode_value(encode_value(value, version))
    assert decoded_version == version
    assert decoded.members[0].subscription == b"sub" and decoded.generation == 5
    if version >= 3:
        assert decoded == value
    else:
        # Fields the old versions lack come back with their defaults.
        assert decoded.members[0].group_instance_id is None
        if version == 0:
            assert decoded.members[0].rebalance_timeout_ms == decoded.members[0].session_timeout_ms


@pytest.mark.parametrize(
    "key,value",
    [
        (struct.pack(">hh", 3, 1) + b"g", None),  # a consumer-group record key
        (struct.pack(">hh", 2, 5) + b"g", None),  # truncated group id
        (struct.pack(">hh", 2, 1) + b"g", struct.pack(">h", 7)),  # unknown value version
        (struct.pack(">hh", 2, 1) + b"g", struct.pack(">hh", 3, 8) + b"cons"),  # truncated value
    ],
)
def test_malformed_records_are_refused(key: bytes, value: bytes | None) -> None:
    with pytest.raises(MalformedRecord):
        decode_record(key, value)


# ---- replay --------------------------------------------------------------------------------
def persisted_view(group: ClassicGroup) -> dict[str, object]:
    """Everything about a Stable/Empty group that must survive a restart."""
    return {
        "state": group.state,
        "generation": group.generation_id,
        "protocol_type": group.protocol_type,
        "protocol_name": group.protocol_name,
        "leader": group.leader_id,
        "static": dict(group.static_members),
        "members": [
            (
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata(group.protocol_name) if group.protocol_name else None,
                m.assignment,
            )
            for m in group.members.values()
        ],
    }


def replayed(h: Harness) -> ClassicGroupCoordinator:
    fresh = ClassicGroupCoordinator(lambda client: f"{client}-after-restart")
    for record in h.records:
        key, value = encode_record(record)
        fresh.replay(decode_record(key, value))
    return fresh


@pytest.mark.parametrize("static", [False, True])
def test_replay_rebuilds_a_stable_group_identically(static: bool) -> None:
    h = Harness()
    stable_group(h, 3, static=static)
    group = replayed(h).group("g")
    assert group is not None
    assert persisted_view(group) == persisted_view(h.group())


def test_replay_rebuilds_an_empty_group_identically() -> None:
    h = Harness()
    (m1,), _ = stable_group(h, 1)
    h.leave(identity(m1))
    group = replayed(h).group("g")
    assert group is not None and persisted_view(group) == persisted_view(h.group())


def test_replay_after_static_restart_knows_the_new_member_id() -> None:
    h = Harness()
    ids, gen = stable_group(h, 2, static=True)
    new_id = h.join_response(h.join(client_id="c1", instance_id="i1")).member_id
    group = replayed(h).group("g")
    assert group is not None and group.static_members["i1"] == new_id
    assert persisted_view(group) == persisted_view(h.group())


def test_group_mid_rebalance_restores_its_last_generation_and_members_carry_on() -> None:
    h = Harness()
    (m1, m2), gen = stable_group(h, 2)
    h.join(member_id=m1, client_id="c0", protos=protocols("range", topics=("x",)))  # rebalance starts
    assert h.group().state is State.PREPARING_REBALANCE
    fresh = replayed(h)
    group = fresh.group("g")
    assert group is not None and group.state is State.STABLE and group.generation_id == gen
    loaded = fresh.on_loaded(h.now)
    assert len(loaded.timers) == 2  # a session for each member
    # The members keep heartbeating the restored generation; the leader rejoins to rebalance.
    beat = fresh.heartbeat(HeartbeatRequest("g", gen, m2), "k", h.now)
    assert beat.responses[0].body.error_code == Errors.NONE
    # A member that never comes back expires with its session.
    deadline = max(t.deadline_ms for t in loaded.timers if isinstance(t, Schedule))
    assert deadline == h.now + SESSION
