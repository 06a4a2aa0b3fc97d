"""KIP-1251 (Kafka 4.3): a classic member inside a consumer group that commits with the generation it
just left behind, for a partition it held at that generation already, is no zombie. Driven with raw
requests against the broker and through the gateway, which must answer alike.

The member C (JoinGroup/SyncGroup) consumes topic T1 alone; a consumer-protocol member on T2 makes the
group a consumer group, and another one joining on T3 moves the group to a new epoch that C rejoins at
without any change to its own partitions.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from translate.embedded import (
    ConsumerProtocolSubscription,
    TopicPartitions,
    decode_assignment,
    encode_subscription,
)

from .harness.probe import find_coordinator_endpoints, roundtrip

MEMBER_ID_REQUIRED = 79
REBALANCE_IN_PROGRESS = 27
ILLEGAL_GENERATION = 22
_LOADING = (14, 15)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE


def _heartbeat(address: str, group: str, member_id: str, epoch: int, topics: list[str] | None, owned: Any) -> Any:
    req = ConsumerGroupHeartbeatRequest[1](
        group_id=group, member_id=member_id, member_epoch=epoch, rebalance_timeout_ms=20_000,
        subscribed_topic_names=topics, server_assignor="uniform" if epoch == 0 else None, topic_partitions=owned,
    )
    return roundtrip(address, req, ConsumerGroupHeartbeatResponse, 1)


def _consumer_member(address: str, group: str, topic: str, above: int = 0) -> tuple[str, int]:
    """A consumer-protocol member on ``topic``, heartbeating until its assignment is acknowledged and its
    epoch is above ``above`` (Kafka 4.3 computes a new target assignment after the join, not in it)."""
    member = str(uuid.uuid4())
    deadline = time.monotonic() + 30
    r = _heartbeat(address, group, member, 0, [topic], [])
    while r.error_code in _LOADING and time.monotonic() < deadline:  # __consumer_offsets still being created
        time.sleep(0.3)
        r = _heartbeat(address, group, member, 0, [topic], [])
    assert r.error_code == 0, r
    epoch, owned = r.member_epoch, []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if r.assignment is not None:
            owned = [{"topic_id": t.topic_id, "partitions": list(t.partitions)} for t in r.assignment.topic_partitions]
        cls = ConsumerGroupHeartbeatRequest.TopicPartitions
        r = _heartbeat(address, group, member, epoch, None, [cls(**o) for o in owned])
        assert r.error_code == 0, r
        if r.member_epoch == epoch and r.assignment is None and epoch > above:
            return member, epoch
        epoch = r.member_epoch
        time.sleep(0.2)
    raise AssertionError("the consumer-protocol member did not settle")


def _join(address: str, group: str, member_id: str, topic: str, owned: list[int]) -> Any:
    sub = ConsumerProtocolSubscription([topic], owned_partitions=[TopicPartitions(topic, tuple(owned))] if owned else [])
    proto = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=encode_subscription(sub, 1))
    req = JoinGroupRequest[5](
        group_id=group, session_timeout_ms=30_000, rebalance_timeout_ms=20_000, member_id=member_id,
        group_instance_id=None, protocol_type="consumer", protocols=[proto],
    )
    return roundtrip(address, req, JoinGroupResponse, 5, timeout_s=40.0)


def _sync(address: str, group: str, member_id: str, generation: int) -> list[int]:
    req = SyncGroupRequest[5](
        group_id=group, generation_id=generation, member_id=member_id, group_instance_id=None,
        protocol_type="consumer", protocol_name="range", assignments=[],
    )
    r = roundtrip(address, req, SyncGroupResponse, 5, timeout_s=40.0)
    assert r.error_code == 0, r
    return [p for tp in decode_assignment(bytes(r.assignment)).assigned_partitions for p in tp.partitions]


def _classic_member(address: str, group: str, topic: str) -> tuple[str, int, list[int]]:
    first = _join(address, group, "", topic, [])
    assert first.error_code == MEMBER_ID_REQUIRED, first
    member = first.member_id
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        joined = _join(address, group, member, topic, [])
        assert joined.error_code == 0, joined
        held = _sync(address, group, member, joined.generation_id)
        if held:
            return member, joined.generation_id, held
        time.sleep(0.3)
    raise AssertionError("the classic member got no partition")


def _commit(address: str, group: str, member_id: str, generation: int, topic: str) -> int:
    cls = OffsetCommitRequest
    part = cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata=""
    )
    req = cls[9](
        group_id=group, generation_id_or_member_epoch=generation, member_id=member_id, group_instance_id=None,
        topics=[cls.OffsetCommitRequestTopic(name=topic, partitions=[part])],
    )
    r = roundtrip(address, req, OffsetCommitResponse, 9)
    return int(r.topics[0].partitions[0].error_code)


def _scenario(bootstrap: str, group: str, t1: str, t2: str, t3: str) -> dict[str, Any]:
    (c,) = find_coordinator_endpoints(bootstrap, group, 3, timeout_s=60.0)
    address = c.address
    _consumer_member(address, group, t2)  # the group is a consumer group from here on
    member, first_generation, held = _classic_member(address, group, t1)
    assert held == [0]
    # Another consumer-protocol member joins (on T3): a new group epoch, nothing changes for C.
    _consumer_member(address, group, t3, above=first_generation)
    hb = roundtrip(
        address, HeartbeatRequest[4](group_id=group, generation_id=first_generation, member_id=member,
                                     group_instance_id=None), HeartbeatResponse, 4,
    )
    rejoined = _join(address, group, member, t1, held)
    assert rejoined.error_code == 0, rejoined
    generation = rejoined.generation_id
    assert generation > first_generation and _sync(address, group, member, generation) == held
    return {
        "heartbeat at the old generation": hb.error_code,
        "commit at generation - 1": _commit(address, group, member, generation - 1, t1),
        "commit at the first generation": _commit(address, group, member, first_generation, t1),
        "commit before the first generation": _commit(address, group, member, first_generation - 1, t1),
        "commit at generation + 1": _commit(address, group, member, generation + 1, t1),
        "commit at generation": _commit(address, group, member, generation, t1),
    }


def test_classic_member_commits_with_the_generation_it_held_the_partition_at(
    kafka, gateway, make_topic: Callable[..., str], names: Callable[[str], str]
) -> None:
    t1, t2, t3 = make_topic(1), make_topic(1), make_topic(1)
    direct = _scenario(kafka.bootstrap, names("direct"), t1, t2, t3)
    through = _scenario(gateway.bootstrap, names("gateway"), t1, t2, t3)
    # Kafka 4.4.0's own answers, so that the comparison below compares what the issue is about.
    assert direct["commit at generation - 1"] == 0 and direct["commit at the first generation"] == 0
    assert direct["commit before the first generation"] == ILLEGAL_GENERATION
    assert direct["commit at generation + 1"] == ILLEGAL_GENERATION and direct["commit at generation"] == 0
    assert through == direct
