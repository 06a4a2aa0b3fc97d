"""Client models of the simulation: what every model shares, and the classic consumer (eager or
cooperative); the new-protocol consumer is rehearsal/sim_consumer_client.py.

Each model behaves the way the Java consumer does on the wire, reduced to what matters for group
membership: when it sends what, what it believes it owns, and how it reacts to errors and to
responses that never arrive. ``owned`` is the set of (topic, partition) the client believes it owns
after the last response it processed: the invariant checker compares these across clients.

Clients never call the endpoint: they ask their ``Host`` (the simulation) to send a request, to wake
them later, and to tell them how long processing takes. A response the network lost is reported as
``on_lost`` after the request timeout, and the client retries as real clients do.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from typing import Any, Protocol

from coordinator.errors import Errors
from rehearsal.sim_assignors import COOPERATIVE_ASSIGNOR, MemberInput, TopicPartition, assign
from translate.classic_messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from translate.embedded import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    TopicPartitions,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

JOIN, SYNC, HEARTBEAT, LEAVE, CONSUMER_HEARTBEAT = "join", "sync", "heartbeat", "leave", "consumer-heartbeat"

CLASSIC_SESSION_TIMEOUT_MS = 10_000
CLASSIC_HEARTBEAT_INTERVAL_MS = 1_000
REBALANCE_TIMEOUT_MS = 15_000
RETRY_BACKOFF_MS = 100


class Host(Protocol):
    now: int
    rng: random.Random
    group_id: str
    partitions: dict[str, int]
    topic_ids: dict[str, uuid.UUID]
    topic_names: dict[uuid.UUID, str]

    def send(self, client: SimClient, kind: str, request: Any) -> None: ...

    def call_later(self, client: SimClient, delay_ms: int, tag: str) -> None: ...

    def processing_delay(self, client: SimClient) -> int: ...

    def event(self, name: str, client: SimClient, **fields: Any) -> None: ...


def _to_embedded(tps: set[TopicPartition]) -> list[TopicPartitions]:
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    return [TopicPartitions(t, tuple(sorted(ps))) for t, ps in sorted(by_topic.items())]


def _from_embedded(tps: list[TopicPartitions]) -> set[TopicPartition]:
    return {(tp.topic, p) for tp in tps for p in tp.partitions}


class SimClient:
    """What every client model shares: identity, liveness, ownership and the wake-up plumbing."""

    protocol = "classic"

    def __init__(self, host: Host, name: str, topics: frozenset[str]) -> None:
        self.host = host
        self.name = name
        self.topics = topics
        self.member_id = ""
        self.alive = True
        self.owned: set[TopicPartition] = set()
        # Bumped when the client dies: wake-ups and responses of an older incarnation are ignored.
        self.incarnation = 0
        self.inflight: set[str] = set()
        # Set by the host: the client's place in the fleet and its static instance id (KIP-345).
        self.slot = 0
        self.instance_id: str | None = None

    @property
    def settled(self) -> bool:
        """Nothing in flight and nothing to do: what convergence waits for."""
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def leave(self) -> None:
        raise NotImplementedError

    def crash(self) -> None:
        """The process dies: it stops sending and owns nothing any more."""
        self.alive = False
        self.incarnation += 1
        self.inflight.clear()
        self.owned = set()

    def on_response(self, kind: str, request: Any, response: Any) -> None:
        raise NotImplementedError

    def on_lost(self, kind: str, request: Any) -> None:
        raise NotImplementedError

    def on_wake(self, tag: str) -> None:
        raise NotImplementedError

    # ---- shared helpers ----------------------------------------------------------------------
    def _revoke(self, tps: set[TopicPartition], lost: bool = False) -> None:
        tps = tps & self.owned
        if tps:
            self.owned -= tps
            self.host.event("partitions_revoked", self, partitions=tps, lost=lost)

    def _assign(self, tps: set[TopicPartition]) -> None:
        tps = tps - self.owned
        if tps:
            self.owned |= tps
            self.host.event("partitions_assigned", self, partitions=tps)

    def _send(self, kind: str, request: Any) -> None:
        self.inflight.add(kind)
        self.host.send(self, kind, request)


class ClassicClient(SimClient):
    """A classic consumer: JoinGroup -> (leader assigns) -> SyncGroup -> Heartbeat, rejoining when
    told. Eager (range / roundrobin) revokes everything before every rejoin; cooperative-sticky
    (KIP-429) keeps what it owns, revokes what the assignment takes away and then rejoins."""

    # session.timeout.ms sent in JoinGroup; a calibration against real clients uses theirs.
    session_timeout_ms = CLASSIC_SESSION_TIMEOUT_MS
    # At most one JoinGroup per this many ms when the coordinator asks a member that gives nothing up
    # (cooperative) to rejoin; the deferred JoinGroup goes out at the client's next heartbeat tick. 0: at
    # once (Java). librdkafka paces its joins to one a second: told of a rebalance 500 ms after its last
    # JoinGroup, it sends the next one 500 ms later, where a member told long after joins at once
    # (measured against a plain broker; docs/rehearsal.md, "Calibration against real clients", item 9).
    join_interval_ms = 0
    # True: the heartbeat timer restarts on the SyncGroup response (librdkafka: its first heartbeat after a
    # rebalance comes one interval after the assignment), not on the JoinGroup response (Java).
    heartbeat_from_sync = False
    # True: the leader's SyncGroup waits a callback's time (processing_delay) for its assignor; measured
    # against Java leaders (16 ms from the last JoinGroup to the assignments, against 5 ms for librdkafka
    # leaders, on the same gateway).
    leader_assign_delay = False

    def __init__(self, host: Host, name: str, topics: frozenset[str], assignor: str) -> None:
        super().__init__(host, name, topics)
        self.assignor = assignor
        self.cooperative = assignor == COOPERATIVE_ASSIGNOR
        self.generation = -1
        self.phase = "idle"  # idle, preparing, joining, syncing, revoking, stable, gone
        self.leader = False
        self.sync_request: SyncGroupRequest | None = None
        self.joined_once = False
        self.rejoin_after_revoke = False
        self._pending_revoke: set[TopicPartition] = set()
        # The partition counts the leader assigned with; a change makes it ask for a rebalance.
        self.assigned_with: dict[str, int] = {}
        self.hb_token = 0
        self.last_join_ms: int | None = None
        self.join_at_tick = False  # a paced JoinGroup waits for the next heartbeat tick

    @property
    def settled(self) -> bool:
        return self.phase == "stable" and not (self.inflight - {HEARTBEAT})

    def start(self) -> None:
        self.phase = "preparing"
        self.host.call_later(self, 1, "join")
        self._heartbeat_in(CLASSIC_HEARTBEAT_INTERVAL_MS)

    def _heartbeat_in(self, delay_ms: int) -> None:
        # Only the latest scheduled wake-up heartbeats: one heartbeat thread per client.
        self.hb_token += 1
        self.host.call_later(self, delay_ms, f"heartbeat:{self.hb_token}")

    def leave(self) -> None:
        self._revoke(set(self.owned))
        # A static member does not leave on close (KIP-345): its session keeps its place for a restart.
        if self.member_id and self.instance_id is None:
            self._send(LEAVE, LeaveGroupRequest(self.host.group_id, [MemberIdentity(self.member_id)], client_id=self.name))
        self.phase = "gone"
        self.alive = False
        self.host.event("member_left", self, reason="leave")

    # ---- rebalance -----------------------------------------------------------------------------
    def request_rejoin(self, paced: bool = False) -> None:
        """Rejoin; ``paced``: asked by the coordinator (a heartbeat's REBALANCE_IN_PROGRESS), which a client
        with a ``join_interval_ms`` answers no sooner than that after its last JoinGroup."""
        if self.phase in ("preparing", "joining", "gone"):
            return
        if self.phase in ("syncing", "revoking"):
            self.rejoin_after_revoke = True
            return
        self.phase = "preparing"
        if not self.cooperative:
            # Eager: onPartitionsRevoked for everything before JoinGroup; the callback takes time.
            self.host.call_later(self, self.host.processing_delay(self), "revoke-all-then-join")
        elif paced and self._join_too_soon():
            self.join_at_tick = True
        else:
            self.host.call_later(self, 1, "join")

    def _join_too_soon(self) -> bool:
        return self.last_join_ms is not None and self.host.now - self.last_join_ms < self.join_interval_ms

    def _lose_all(self, reset_member_id: bool) -> None:
        self._revoke(set(self.owned), lost=True)
        self.generation = -1
        if reset_member_id:
            self.member_id = ""
        self.phase = "preparing"
        self.host.call_later(self, RETRY_BACKOFF_MS, "join")

    def _subscription(self) -> bytes:
        owned = _to_embedded(self.owned) if self.cooperative else []
        sub = ConsumerProtocolSubscription(
            topics=sorted(self.topics), owned_partitions=owned, generation_id=self.generation
        )
        return encode_subscription(sub, 2)

    def _send_join(self) -> None:
        self.phase = "joining"
        self.rejoin_after_revoke = False
        self.join_at_tick = False
        self.last_join_ms = self.host.now
        request = JoinGroupRequest(
            group_id=self.host.group_id,
            session_timeout_ms=self.session_timeout_ms,
            member_id=self.member_id,
            protocols=[JoinGroupRequestProtocol(self.assignor, self._subscription())],
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
            group_instance_id=self.instance_id,
            client_id=self.name,
            client_host="/10.0.0.1",
        )
        self._send(JOIN, request)

    def _on_join(self, response: JoinGroupResponse) -> None:
        err = response.error_code
        if err == Errors.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            self._send_join()
            return
        if err in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
            self._lose_all(reset_member_id=True)
            return
        if err == Errors.ILLEGAL_GENERATION:
            self._lose_all(reset_member_id=False)
            return
        if err != Errors.NONE:
            self.phase = "preparing"
            self.host.call_later(self, RETRY_BACKOFF_MS, "join")
            return
        self.member_id = response.member_id
        self.generation = response.generation_id
        self.leader = response.leader == self.member_id
        # The Java consumer pauses its heartbeat thread while it joins and re-enables it on the JoinGroup
        # response, which resets the heartbeat timer: the next heartbeat is a full interval later. So all
        # members of a generation heartbeat in step and learn of the next rebalance together (measured
        # against real clients: docs/rehearsal.md, "Calibration against real clients").
        self._heartbeat_in(CLASSIC_HEARTBEAT_INTERVAL_MS)
        if not self.joined_once:
            self.joined_once = True
            self.host.event("member_joined", self)
        assignments: list[SyncGroupRequestAssignment] = []
        if self.leader and response.skip_assignment:
            # KIP-814: a restarted static leader keeps the group's assignment and only watches
            # metadata from now on.
            self.assigned_with = dict(self.host.partitions)
        elif self.leader:
            inputs: dict[str, MemberInput] = {}
            for m in response.members:
                sub = decode_subscription(m.metadata)
                inputs[m.member_id] = (frozenset(sub.topics), frozenset(_from_embedded(sub.owned_partitions)), sub.generation_id)
            protocol = response.protocol_name or self.assignor
            self.assigned_with = dict(self.host.partitions)
            result = assign(protocol, inputs, self.host.partitions)
            assignments = [
                SyncGroupRequestAssignment(m, encode_assignment(ConsumerProtocolAssignment(_to_embedded(tps)), 0))
                for m, tps in sorted(result.items())
            ]
        self.phase = "syncing"
        self.sync_request = SyncGroupRequest(
            group_id=self.host.group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            protocol_type="consumer",
            protocol_name=response.protocol_name,
            assignments=assignments,
            client_id=self.name,
        )
        if assignments and self.leader_assign_delay:
            # The leader runs the assignor and encodes every member's assignment before its SyncGroup.
            self.host.call_later(self, self.host.processing_delay(self), "sync")
            return
        self._send(SYNC, self.sync_request)

    def _on_sync(self, response: SyncGroupResponse) -> None:
        err = response.error_code
        if err in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
            self._lose_all(reset_member_id=True)
            return
        if err == Errors.ILLEGAL_GENERATION:
            self._lose_all(reset_member_id=False)
            return
        if err != Errors.NONE:
            self.phase = "stable"
            self.request_rejoin()
            return
        assigned = _from_embedded(decode_assignment(response.assignment).assigned_partitions)
        revoked = self.owned - assigned
        if self.heartbeat_from_sync:
            self._heartbeat_in(CLASSIC_HEARTBEAT_INTERVAL_MS)
        self._assign(assigned)
        if revoked:
            # KIP-429: give up what moved (the callback takes time), then rejoin so it can be reassigned.
            self.phase = "revoking"
            self._pending_revoke = revoked
            self.host.call_later(self, self.host.processing_delay(self), "revoke")
            return
        self.phase = "stable"
        if self.rejoin_after_revoke:
            self.request_rejoin()

    def _on_heartbeat(self, response: HeartbeatResponse) -> None:
        err = response.error_code
        if err == Errors.REBALANCE_IN_PROGRESS:
            self.request_rejoin(paced=True)
        elif err == Errors.UNKNOWN_MEMBER_ID or err == Errors.FENCED_INSTANCE_ID:
            if self.phase in ("stable", "syncing", "revoking"):
                self._lose_all(reset_member_id=True)
        elif err == Errors.ILLEGAL_GENERATION:
            if self.phase in ("stable", "syncing", "revoking"):
                self._lose_all(reset_member_id=False)

    # ---- host callbacks ------------------------------------------------------------------------
    def on_response(self, kind: str, request: Any, response: Any) -> None:
        self.inflight.discard(kind)
        if kind == JOIN:
            if self.phase == "joining":
                self._on_join(response)
        elif kind == SYNC:
            if self.phase == "syncing" and request is self.sync_request:
                self._on_sync(response)
        elif kind == HEARTBEAT:
            if request.generation_id == self.generation and request.member_id == self.member_id:
                self._on_heartbeat(response)

    def on_lost(self, kind: str, request: Any) -> None:
        self.inflight.discard(kind)
        if kind == JOIN and self.phase == "joining":
            self._send_join()
        elif kind == SYNC and self.phase == "syncing" and self.sync_request is not None:
            self._send(SYNC, self.sync_request)

    def on_wake(self, tag: str) -> None:
        if tag == "join":
            if self.phase == "preparing":
                self._send_join()
        elif tag == "revoke-all-then-join":
            if self.phase == "preparing":
                self._revoke(set(self.owned))
                self._send_join()
        elif tag == "revoke":
            if self.phase == "revoking":
                self._revoke(self._pending_revoke)
                self.phase = "stable"
                self.request_rejoin()
        elif tag == "sync":
            if self.phase == "syncing" and self.sync_request is not None and SYNC not in self.inflight:
                self._send(SYNC, self.sync_request)
        elif tag.startswith("heartbeat:"):
            if int(tag[len("heartbeat:"):]) != self.hb_token:
                return
            self._check_metadata()
            if self.join_at_tick and self.phase == "preparing":
                # A paced rejoin: no heartbeat while it waits, the JoinGroup at the first tick it may go.
                if not self._join_too_soon():
                    self._send_join()
            elif self.phase in ("syncing", "revoking", "stable", "preparing") and self.generation >= 0:
                if HEARTBEAT not in self.inflight:
                    self._send(
                        HEARTBEAT,
                        HeartbeatRequest(
                            self.host.group_id, self.generation, self.member_id, self.instance_id, client_id=self.name
                        ),
                    )
            self._heartbeat_in(CLASSIC_HEARTBEAT_INTERVAL_MS)
        elif tag == "metadata-changed":
            self._check_metadata()

    def _check_metadata(self) -> None:
        # The leader notices that partitions were added since it assigned (the Java consumer compares
        # its metadata snapshot on every poll) and asks for a rebalance.
        if self.leader and self.phase == "stable" and self.assigned_with != self.host.partitions:
            self.request_rejoin()


def make_topic_ids(names: Mapping[str, int]) -> dict[str, uuid.UUID]:
    return {name: uuid.UUID(int=i + 1) for i, name in enumerate(sorted(names))}
