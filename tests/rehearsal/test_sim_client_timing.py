"""The classic client model's timing rules that a calibration against real clients measured: librdkafka's
paced rejoin (at most one JoinGroup a second when the coordinator asks, sent at a heartbeat tick), the
heartbeat timer restarting on the SyncGroup response, and a leader's assignor time before its SyncGroup."""

from __future__ import annotations

import random
import uuid
from typing import Any

from coordinator.errors import Errors
from rehearsal.sim_assignors import COOPERATIVE_ASSIGNOR
from rehearsal.sim_clients import HEARTBEAT, JOIN, SYNC, ClassicClient, SimClient
from translate.classic_messages import HeartbeatResponse


class StubHost:
    """A Host that records what the client sends and asks to be woken for, at a clock the test moves."""

    def __init__(self) -> None:
        self.now = 0
        self.rng = random.Random(0)
        self.group_id = "g"
        self.partitions = {"t": 4}
        self.topic_ids = {"t": uuid.UUID(int=1)}
        self.topic_names = {uuid.UUID(int=1): "t"}
        self.sent: list[tuple[int, str, Any]] = []
        self.wakes: list[tuple[int, str]] = []

    def send(self, client: SimClient, kind: str, request: Any) -> None:
        self.sent.append((self.now, kind, request))

    def call_later(self, client: SimClient, delay_ms: int, tag: str) -> None:
        self.wakes.append((self.now + delay_ms, tag))

    def processing_delay(self, client: SimClient) -> int:
        return 7

    def event(self, name: str, client: SimClient, **fields: Any) -> None:
        pass


def stable_member(join_interval_ms: int, last_join_ms: int, now_ms: int, assignor: str = COOPERATIVE_ASSIGNOR) -> tuple[ClassicClient, StubHost]:
    host = StubHost()
    client = type("Paced", (ClassicClient,), {"join_interval_ms": join_interval_ms})(host, "c", frozenset({"t"}), assignor)
    client.member_id, client.generation, client.phase = "m", 1, "stable"
    client.last_join_ms = last_join_ms
    host.now = now_ms
    return client, host


def told_to_rejoin(client: ClassicClient) -> None:
    client.inflight.add(HEARTBEAT)
    client.on_response(HEARTBEAT, type("Hb", (), {"generation_id": 1, "member_id": "m"})(),
                       HeartbeatResponse(error_code=Errors.REBALANCE_IN_PROGRESS))


def joins(host: StubHost) -> list[int]:
    return [at for at, kind, _ in host.sent if kind == JOIN]


def test_a_paced_member_told_soon_after_its_last_join_rejoins_at_the_first_tick_a_second_later() -> None:
    client, host = stable_member(1_000, last_join_ms=10_000, now_ms=10_500)
    told_to_rejoin(client)
    assert client.phase == "preparing" and not [w for w in host.wakes if w[1] == "join"]
    # The next heartbeat tick (10_700) is still within the second: neither a heartbeat nor a join.
    host.now = 10_700
    client.on_wake(f"heartbeat:{client.hb_token}")
    assert not joins(host) and not [s for s in host.sent if s[1] == HEARTBEAT]
    host.now = 11_200
    client.on_wake(f"heartbeat:{client.hb_token}")
    assert joins(host) == [11_200] and client.phase == "joining"


def test_a_member_told_long_after_its_last_join_or_unpaced_rejoins_at_once() -> None:
    for interval, last in ((1_000, 4_000), (0, 10_000)):
        client, host = stable_member(interval, last_join_ms=last, now_ms=10_500)
        told_to_rejoin(client)
        assert (10_501, "join") in host.wakes
        client.on_wake("join")
        assert joins(host) == [10_500]


def test_an_eager_member_revokes_and_rejoins_whatever_the_pacing() -> None:
    client, host = stable_member(1_000, last_join_ms=10_000, now_ms=10_200, assignor="range")
    told_to_rejoin(client)
    assert (10_207, "revoke-all-then-join") in host.wakes


def test_the_heartbeat_restarts_on_the_sync_response_when_the_client_does_so() -> None:
    for from_sync in (False, True):
        host = StubHost()
        client = type("C", (ClassicClient,), {"heartbeat_from_sync": from_sync})(host, "c", frozenset({"t"}), "range")
        client.member_id, client.generation, client.phase = "m", 1, "syncing"
        client.sync_request = request = object()  # type: ignore[assignment]
        client.inflight.add(SYNC)
        host.now = 3_000
        from translate.classic_messages import SyncGroupResponse
        from translate.embedded import ConsumerProtocolAssignment, encode_assignment

        client.on_response(SYNC, request, SyncGroupResponse(assignment=encode_assignment(ConsumerProtocolAssignment([]), 0)))
        ticks = [at for at, tag in host.wakes if tag.startswith("heartbeat:")]
        assert (ticks == [4_000]) is from_sync  # CLASSIC_HEARTBEAT_INTERVAL_MS after the response


def test_a_leader_with_an_assignor_delay_sends_its_sync_group_a_callback_later() -> None:
    from translate.classic_messages import JoinGroupResponse, JoinGroupResponseMember
    from translate.embedded import ConsumerProtocolSubscription, encode_subscription

    sub = encode_subscription(ConsumerProtocolSubscription(topics=["t"]), 0)
    for delayed in (False, True):
        host = StubHost()
        client = type("L", (ClassicClient,), {"leader_assign_delay": delayed})(host, "c", frozenset({"t"}), "range")
        client.phase = "joining"
        client.inflight.add(JOIN)
        host.now = 5_000
        client.on_response(JOIN, None, JoinGroupResponse(
            generation_id=1, protocol_name="range", leader="m", member_id="m",
            members=[JoinGroupResponseMember(member_id="m", group_instance_id=None, metadata=sub)]))
        syncs = [at for at, kind, _ in host.sent if kind == SYNC]
        assert syncs == ([] if delayed else [5_000])
        if delayed:
            assert (5_007, "sync") in host.wakes
            host.now = 5_007
            client.on_wake("sync")
            assert [at for at, kind, _ in host.sent if kind == SYNC] == [5_007]
