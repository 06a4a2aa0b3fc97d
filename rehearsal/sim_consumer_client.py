"""The simulation's new-protocol consumer (KIP-848): ConsumerGroupHeartbeat, server-side assignment, and
the reconciliation of each new target (rehearsal/sim_clients.py holds what every client model shares)."""

from __future__ import annotations

from typing import Any

from coordinator.errors import Errors
from coordinator.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from coordinator.messages import TopicPartitions as IdPartitions
from rehearsal.sim_assignors import TopicPartition
from rehearsal.sim_clients import CONSUMER_HEARTBEAT, REBALANCE_TIMEOUT_MS, RETRY_BACKOFF_MS, Host, SimClient


class ConsumerClient(SimClient):
    """A new-protocol consumer (KIP-848): joins with epoch 0, heartbeats at the interval the
    coordinator gives, reconciles each new assignment (revoke what is gone, then take what is new)
    and acknowledges it by reporting what it owns; leaves with epoch -1."""

    protocol = "consumer"
    # The Java consumer of the new protocol runs its rebalance callbacks on the application thread, inside
    # poll(): each callback waits until that thread's poll loop comes round, which on a topic without new
    # records is the fetch long poll (fetch.max.wait.ms, 500 ms). Revocation and assignment are two
    # callbacks, and the reconciliation is acknowledged after both. 0 (the default) runs them at once;
    # a calibration against real clients on an idle topic sets the fetch wait (docs/rehearsal.md,
    # "Calibration against real clients").
    callback_wait_ms = 0
    # The share of callbacks that wait a whole fetch long poll instead (the application thread was inside
    # one when the callback was queued), and that wait.
    callback_long_wait_share = 0.0
    callback_long_wait_ms = 0

    def __init__(self, host: Host, name: str, topics: frozenset[str], member_id: str, assignor: str | None) -> None:
        super().__init__(host, name, topics)
        self.member_id = member_id  # v1: the client generates its member id (KIP-1082)
        self.epoch = 0
        self.assignor = assignor
        self.interval = 1_000
        self.phase = "idle"  # idle, joining, member, gone
        self.full_next = True
        self.last_sent_owned: set[TopicPartition] | None = None
        self.target: set[TopicPartition] | None = None
        self.reconciling = False
        self.ack_soon = False
        # A reconciliation between its revocation and its assignment callback: (fence count, target).
        self._assigning: tuple[int, set[TopicPartition]] | None = None
        self.fences = 0
        self.joined_once = False
        # Only the latest scheduled heartbeat wake-up sends: one heartbeat loop per client.
        self.hb_token = 0

    @property
    def settled(self) -> bool:
        return (
            self.phase == "member"
            and not self.reconciling
            and self.target is None
            and self.last_sent_owned == self.owned
            and not self.ack_soon
            and self.epoch > 0
        )

    def start(self) -> None:
        self.phase = "joining"
        self.epoch = 0
        self.full_next = True
        self._heartbeat_in(1)

    def _heartbeat_in(self, delay_ms: int) -> None:
        self.hb_token += 1
        self.host.call_later(self, delay_ms, f"heartbeat:{self.hb_token}")

    def leave(self) -> None:
        self._revoke(set(self.owned))
        # A static member leaves temporarily (epoch -2, KIP-848 "Static Membership"): its restart
        # with the same instance id takes its assignment over.
        self._send(CONSUMER_HEARTBEAT, ConsumerGroupHeartbeatRequest(
            group_id=self.host.group_id, member_id=self.member_id, member_epoch=-1 if self.instance_id is None else -2,
            instance_id=self.instance_id, client_id=self.name,
        ))
        self.phase = "gone"
        self.alive = False
        self.host.event("member_left", self, reason="leave")

    def _request(self) -> ConsumerGroupHeartbeatRequest:
        names = self.host.topic_ids
        full = self.full_next or self.epoch == 0
        owned: list[IdPartitions] | None = None
        if full or (self.last_sent_owned != self.owned and self._assigning is None):
            # (Between its two callbacks a reconciliation is not complete: the Java client keeps
            # reporting its previous assignment until both ran.)
            by_topic: dict[str, list[int]] = {}
            for t, p in self.owned:
                by_topic.setdefault(t, []).append(p)
            owned = [IdPartitions(names[t], sorted(ps)) for t, ps in sorted(by_topic.items())]
        return ConsumerGroupHeartbeatRequest(
            group_id=self.host.group_id,
            member_id=self.member_id,
            member_epoch=self.epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS if full else -1,
            subscribed_topic_names=sorted(self.topics) if full else None,
            server_assignor=self.assignor if full else None,
            topic_partitions=([] if self.epoch == 0 else owned),
            client_id=self.name,
            client_host="/10.0.0.2",
        )

    def _send_heartbeat(self) -> None:
        if CONSUMER_HEARTBEAT in self.inflight or self.phase not in ("joining", "member"):
            return
        request = self._request()
        if request.topic_partitions is not None:
            self.last_sent_owned = set(self.owned)
        self.ack_soon = False
        self._send(CONSUMER_HEARTBEAT, request)

    def _fenced(self) -> None:
        """FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: partitions are lost, rejoin at epoch 0."""
        self._revoke(set(self.owned), lost=True)
        self.fences += 1
        self._assigning = None
        self.epoch = 0
        self.target = None
        self.phase = "joining"
        self.full_next = True
        self.last_sent_owned = None
        self.host.event("member_fenced", self, reason="fenced")
        self._heartbeat_in(1)

    def on_response(self, kind: str, request: Any, response: Any) -> None:
        self.inflight.discard(kind)
        if self.phase not in ("joining", "member"):
            return
        assert isinstance(response, ConsumerGroupHeartbeatResponse)
        err = response.error_code
        if err in (Errors.FENCED_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID):
            self._fenced()
            return
        if err != Errors.NONE:
            self.full_next = True
            self.last_sent_owned = None
            self._heartbeat_in(RETRY_BACKOFF_MS * 5)
            return
        self.full_next = False
        if response.member_id:
            self.member_id = response.member_id
        self.epoch = response.member_epoch
        self.interval = response.heartbeat_interval_ms or self.interval
        if self.phase == "joining":
            self.phase = "member"
            if not self.joined_once:
                self.joined_once = True
                self.host.event("member_joined", self)
        if response.assignment is not None:
            self.target = {(self.host.topic_names[tp.topic_id], p) for tp in response.assignment for p in tp.partitions}
            if not self.reconciling:
                self._start_reconcile()
        self._heartbeat_in(1 if self.ack_soon else self.interval)

    def _callback_wait(self) -> int:
        rng = self.host.rng
        if self.callback_long_wait_share and rng.random() < self.callback_long_wait_share:
            return self.callback_long_wait_ms
        return rng.randint(0, self.callback_wait_ms) if self.callback_wait_ms else 0

    def _start_reconcile(self) -> None:
        self.reconciling = True
        self.host.call_later(self, self.host.processing_delay(self) + self._callback_wait(), "reconciled")

    def on_lost(self, kind: str, request: Any) -> None:
        self.inflight.discard(kind)
        if self.phase in ("joining", "member"):
            # The Java client resends everything after a failed heartbeat.
            self.full_next = True
            self.last_sent_owned = None
            self._heartbeat_in(RETRY_BACKOFF_MS)

    def on_wake(self, tag: str) -> None:
        if tag.startswith("heartbeat:"):
            if int(tag[len("heartbeat:"):]) == self.hb_token:
                self._send_heartbeat()
        elif tag == "reconciled":
            if not self.reconciling or self.phase != "member":
                self.reconciling = False
                return
            target, self.target = self.target, None
            if target is not None and self.callback_wait_ms and self.owned - target and target - self.owned:
                # Revoked now; the assignment callback waits for the application thread's next poll.
                self._revoke(self.owned - target)
                self._assigning = (self.fences, target)
                self.host.call_later(self, self._callback_wait(), "assigned")
                return
            self.reconciling = False
            if target is not None:
                # Revoke first (commit, callback), then take the new partitions (KIP-848
                # "Assignment Reconciliation"); the next heartbeat acknowledges both.
                self._revoke(self.owned - target)
                self._assign(target)
                # Every completed reconciliation is acknowledged with the owned partitions, even when
                # they did not change (the Java client bumps its local assignment epoch).
                self.last_sent_owned = None
                self.ack_soon = True
                if CONSUMER_HEARTBEAT not in self.inflight:
                    self._send_heartbeat()
        elif tag == "assigned":
            pending, self._assigning = self._assigning, None
            if pending is None or pending[0] != self.fences or self.phase != "member":
                self.reconciling = False
                return
            self._assign(pending[1])
            self.reconciling = False
            self.last_sent_owned = None
            self.ack_soon = True
            if CONSUMER_HEARTBEAT not in self.inflight:
                self._send_heartbeat()
            if self.target is not None:
                self._start_reconcile()
