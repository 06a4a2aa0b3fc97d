"""Records (bytes round trip, Kafka's layout), replay, describe / list groups, offset validation."""

from __future__ import annotations

import uuid

from cg_helpers import Driver

from coordinator.errors import Errors
from coordinator.model import ClassicMemberMetadata, ConsumerGroupMember, MemberState, MemberType
from coordinator.records import (
    Record,
    RecordType,
    current_assignment,
    current_assignment_tombstone,
    group_epoch,
    member_metadata,
    partition_metadata,
    regular_expression,
    target_epoch,
    target_member,
)
from coordinator.records.codec import decode, encode
from coordinator.replay import replay

G = "grp"
T = uuid.UUID("00000000-0000-0000-0000-00000000000a")


def test_key_layout_is_type_then_non_flexible_strings() -> None:
    key, value = encode(group_epoch("g", 7))
    assert key == b"\x00\x03" + b"\x00\x01g"
    # value: version 0, int32 epoch, empty tagged fields
    assert value == b"\x00\x00" + (7).to_bytes(4, "big") + b"\x00"
    key, _ = encode(current_assignment_tombstone("g", "m"))
    assert key == b"\x00\x08\x00\x01g\x00\x01m"


def test_current_assignment_value_layout() -> None:
    m = ConsumerGroupMember("m", member_epoch=5, previous_member_epoch=4, state=MemberState.UNREVOKED_PARTITIONS,
                            assigned_partitions={T: frozenset({2, 1})}, partitions_pending_revocation={})
    _, value = encode(current_assignment("g", m))
    assert value == (
        b"\x00\x00" + (5).to_bytes(4, "big") + (4).to_bytes(4, "big") + b"\x01"
        + b"\x02" + T.bytes + b"\x03" + (1).to_bytes(4, "big") + (2).to_bytes(4, "big") + b"\x00"
        + b"\x01" + b"\x00"
    )


def test_every_record_type_round_trips() -> None:
    from coordinator.assignors.api import TopicMetadata

    classic = ConsumerGroupMember(
        "m2", instance_id="i", rack_id="r", client_id="c", client_host="/1.2.3.4",
        subscribed_topic_names=frozenset({"b", "a"}), subscribed_topic_regex="x.*", rebalance_timeout_ms=3,
        server_assignor="range", classic_metadata=ClassicMemberMetadata(6000, (("range", b"\x00\x01"), ("rr", b""))),
    )
    records: list[Record] = [
        group_epoch("g", 1), partition_metadata("g", {"a": TopicMetadata(T, "a", 3)}),
        member_metadata("g", ConsumerGroupMember("m1")), member_metadata("g", classic),
        target_member("g", "m1", {T: frozenset({0, 2})}), target_epoch("g", 1),
        current_assignment("g", classic), regular_expression("g", "x.*", frozenset({"xa", "xb"}), 3, 99),
    ]
    records += [Record(r.type, r.group_id, r.sub_key, None) for r in records]
    for r in records:
        assert decode(*encode(r)) == r


def test_replay_from_bytes_rebuilds_the_same_state() -> None:
    d = Driver()
    d.topics({"foo": 3, "bar": 2})
    d.hb(G, "A", 0, subscribed_topic_names=["foo", "bar"], instance_id="ia")
    d.hb(G, "B", 0, subscribed_topic_names=None, subscribed_topic_regex="ba.*")
    d.hb(G, "A", 1, {"foo": [0, 1, 2], "bar": [0, 1]}, instance_id="ia")
    stored = [encode(r) for r in d.records]
    from coordinator.service import ConsumerGroupCoordinator

    fresh = ConsumerGroupCoordinator(d.coord.state.config)
    for k, v in stored:
        fresh.replay_bytes(k, v)
    assert fresh.snapshot() == d.coord.snapshot()
    g = fresh.group(G)
    assert g is not None and g.static_members == {"ia": "A"}
    assert g.partition_owners == d.group(G).partition_owners
    assert {k: v.snapshot() for k, v in replay(d.records).items()} == d.coord.snapshot()


def test_describe_and_list_groups() -> None:
    d = Driver()
    d.topics({"foo": 2})
    d.hb(G, "A", 0, instance_id="ia", rack_id="r1", client_id="cid", client_host="/10.0.0.1")
    d.hb(G, "B", 0)
    (desc,) = d.coord.describe([G])
    assert (desc.error_code, desc.group_state, desc.group_epoch, desc.assignment_epoch) == (0, "Reconciling", 2, 2)
    assert desc.assignor_name == "sticky-test"
    a = next(m for m in desc.members if m.member_id == "A")
    assert (a.instance_id, a.rack_id, a.client_id, a.client_host, a.member_epoch) == ("ia", "r1", "cid", "/10.0.0.1", 1)
    assert a.member_type == MemberType.CONSUMER == 1
    assert [(t.topic_name, t.partitions) for t in a.assignment] == [("foo", [0, 1])]
    assert [(t.topic_name, t.partitions) for t in a.target_assignment] == [("foo", [0])]
    assert a.subscribed_topic_names == ["foo"]
    (missing,) = d.coord.describe(["nope"])
    assert missing.error_code == Errors.GROUP_ID_NOT_FOUND

    listed = d.coord.list_groups()
    assert [(x.group_id, x.protocol_type, x.group_state, x.group_type) for x in listed] == [
        (G, "consumer", "Reconciling", "consumer")
    ]
    assert d.coord.list_groups(states=["STABLE"]) == []
    assert len(d.coord.list_groups(states=["reconciling"], types=["Consumer"])) == 1
    assert d.coord.list_groups(types=["classic"]) == []
    # Empty, then deleted (DEAD: gone from the listing).
    d.hb(G, "A", -1, instance_id="ia")
    d.hb(G, "B", -1)
    assert d.coord.list_groups()[0].group_state == "Empty"
    res = d.coord.delete_group(G)
    assert res.response == Errors.NONE and d.coord.list_groups() == []
    d.records.extend(res.records)
    assert replay(d.records) == {}


def test_offset_commit_validation() -> None:
    d = Driver()
    d.topics({"foo": 1})
    c = d.coord
    assert c.validate_offset_commit(G, "", -1, 9) == Errors.NONE  # no group yet: simple commit
    d.hb(G, "A", 0)
    assert c.validate_offset_commit(G, "A", 1, 9) == Errors.NONE
    assert c.validate_offset_commit(G, "A", 0, 9) == Errors.STALE_MEMBER_EPOCH
    # TxnOffsetCommit: ILLEGAL_GENERATION up to v5; v6 says STALE_MEMBER_EPOCH (KIP-1319, Kafka 4.4).
    assert c.validate_offset_commit(G, "A", 0, 5, is_transactional=True) == Errors.ILLEGAL_GENERATION
    assert c.validate_offset_commit(G, "A", 0, 6, is_transactional=True) == Errors.STALE_MEMBER_EPOCH
    assert c.validate_offset_commit(G, "A", 1, 8) == Errors.UNSUPPORTED_VERSION
    assert c.validate_offset_commit(G, "", -1, 9) == Errors.UNKNOWN_MEMBER_ID  # group has members
    assert c.validate_offset_commit(G, "ghost", 1, 9) == Errors.UNKNOWN_MEMBER_ID
    # Classic members inside a consumer group: ILLEGAL_GENERATION, any OffsetCommit version.
    tx = c.begin()
    c.upsert_member(tx, G, ConsumerGroupMember("K", subscribed_topic_names=frozenset({"foo"}),
                                                classic_metadata=ClassicMemberMetadata(10_000, (("range", b""),))), 0)
    k = c.reconcile_member(tx, G, "K", None, 0)
    assert c.validate_offset_commit(G, "K", k.member_epoch, 2) == Errors.NONE
    assert c.validate_offset_commit(G, "K", k.member_epoch + 5, 2) == Errors.ILLEGAL_GENERATION
    # Offset fetch.
    assert c.validate_offset_fetch(G, None, -1) == Errors.NONE
    assert c.validate_offset_fetch(G, "A", 1) == Errors.NONE
    assert c.validate_offset_fetch(G, "A", 7) == Errors.STALE_MEMBER_EPOCH
    assert c.validate_offset_fetch(G, "ghost", 1) == Errors.UNKNOWN_MEMBER_ID


def test_lower_level_api_for_classic_members() -> None:
    d = Driver()
    d.topics({"foo": 2})
    c = d.coord
    d.hb(G, "A", 0)
    tx = c.begin()
    member = ConsumerGroupMember(
        "K", client_id="legacy", subscribed_topic_names=frozenset({"foo"}), rebalance_timeout_ms=5000,
        classic_metadata=ClassicMemberMetadata(10_000, (("range", b"\x00\x03"),)),
    )
    assert c.upsert_member(tx, G, member, 0) is True  # a new member bumps the epoch
    k = c.reconcile_member(tx, G, "K", {}, 0)
    d.records.extend(tx.records)
    g = d.group(G)
    assert k.member_type is MemberType.CLASSIC and k.member_epoch == g.group_epoch
    assert g.target_assignment["K"] and k.state is MemberState.UNRELEASED_PARTITIONS
    (desc,) = c.describe([G])
    assert {m.member_id: m.member_type for m in desc.members} == {"A": 1, "K": 0}
    tx = c.begin()
    c.remove_member(tx, G, "K", 0)
    d.records.extend(tx.records)
    assert "K" not in g.members
    assert {k: v.snapshot() for k, v in replay(d.records).items()} == c.snapshot()
    assert RecordType.MEMBER_METADATA in {r.type for r in tx.records}
