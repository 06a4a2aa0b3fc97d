"""Property-based tests: random joins, leaves, heartbeats, lost responses, subscription and metadata
changes, expiries. After every step: no partition has two owners, epochs never go backwards, and a
replay of the records rebuilds the same state. When traffic stops the group converges to STABLE with
every subscribed partition assigned exactly once.

Runs with the test assignor and, when present, the shipped ``uniform`` assignor.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field

import pytest
from cg_helpers import StickyTestAssignor
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from coordinator.config import CoordinatorConfig
from coordinator.errors import Errors
from coordinator.messages import ConsumerGroupHeartbeatRequest, TopicPartitions
from coordinator.model import GroupState, MemberState, subscribed_topic_names
from coordinator.records import Record
from coordinator.records.codec import decode, encode
from coordinator.replay import replay
from coordinator.service import ConsumerGroupCoordinator
from coordinator.timers import apply_timer_changes, deadline, rebalance_key, session_key

G = "g"
TOPICS = ["t0", "t1", "t2", "t3"]
SUBSCRIPTIONS: list[tuple[tuple[str, ...] | None, str | None]] = [
    (("t0",), None), (("t0", "t1"), None), (("t1", "t2", "t3"), None), (tuple(TOPICS), None),
    (None, "t[01]"), (None, "t.*"), ((), None),
]


def _assignors() -> list[str]:
    out = ["sticky-test"]
    try:
        import coordinator.assignors.uniform  # noqa: F401

        out.append("uniform")
    except ImportError:  # the shipped assignors are optional for these properties
        pass
    return out


@dataclass
class Client:
    member_id: str
    instance_id: str | None
    subscription: tuple[tuple[str, ...] | None, str | None]
    epoch: int = 0
    owned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    full_next: bool = True  # send every field (after joining, a lost response or an error)
    sub_changed: bool = False


class CoordinatorMachine(RuleBasedStateMachine):
    assignor_name = "sticky-test"

    def __init__(self) -> None:
        super().__init__()
        if self.assignor_name == "uniform":
            from coordinator.assignors.uniform import UniformAssignor

            assignors = {"uniform": UniformAssignor()}
        else:
            assignors = {"sticky-test": StickyTestAssignor()}
        self.coord = ConsumerGroupCoordinator(CoordinatorConfig(assignors=assignors))  # type: ignore[arg-type]
        self.records: list[Record] = []
        self.now = 0
        self.clients: dict[str, Client] = {}
        self.next_id = 0
        self.topic_parts = {"t0": 3, "t1": 2}
        self.topic_ids = {n: uuid.uuid4() for n in TOPICS}
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.member_epochs: dict[str, int] = {}
        self.timers: dict[tuple[str, str, str], int] = {}
        self._metadata()

    # -- plumbing --------------------------------------------------------------------------------

    def _keep(self, res) -> None:  # type: ignore[no-untyped-def]
        self.records.extend(res.records)
        apply_timer_changes(self.timers, res.timers, deadline)

    def _fire_due(self) -> None:
        while True:
            due = sorted((d, k) for k, d in self.timers.items() if d <= self.now)
            if not due:
                return
            _, key = due[0]
            del self.timers[key]
            self._keep(self.coord.on_timer(key, self.now))

    def _metadata(self) -> None:
        self._keep(self.coord.on_metadata({n: (self.topic_ids[n], c) for n, c in self.topic_parts.items()}, self.now))

    def _send(self, c: Client, epoch: int, lost: bool = False) -> None:
        self.now += 100
        names, regex = c.subscription
        full = epoch == 0 or c.full_next
        req = ConsumerGroupHeartbeatRequest(
            group_id=G, member_id=c.member_id, member_epoch=epoch, instance_id=c.instance_id,
            rebalance_timeout_ms=30000 if full else -1,
            subscribed_topic_names=list(names) if (full or c.sub_changed) and names is not None else None,
            subscribed_topic_regex=regex if (full or c.sub_changed) and regex is not None else None,
            topic_partitions=[TopicPartitions(t, sorted(p)) for t, p in c.owned.items()] if epoch >= 0 else None,
        )
        if epoch == 0:
            req.topic_partitions = []
        if full and names is None and regex is None:
            req.subscribed_topic_names = []
        res = self.coord.consumer_group_heartbeat(req, self.now)
        self._keep(res)
        resp = res.response
        if epoch < 0:
            self.clients.pop(c.member_id, None)
            return
        if lost:
            c.full_next = True
            return
        c.sub_changed = False
        if resp.error_code == 0:
            c.full_next = False
            c.epoch = resp.member_epoch
            if resp.assignment is not None:
                c.owned = {tp.topic_id: frozenset(tp.partitions) for tp in resp.assignment if tp.partitions}
        elif resp.error_code in (Errors.FENCED_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID):
            c.owned = {}
            c.epoch = 0
            c.full_next = True
        else:
            # Fatal for a client: another process owns its instance id.
            assert resp.error_code in (Errors.UNRELEASED_INSTANCE_ID, Errors.FENCED_INSTANCE_ID), resp
            self.clients.pop(c.member_id, None)

    def _pick(self, data: st.DataObject) -> Client | None:
        if not self.clients:
            return None
        return self.clients[data.draw(st.sampled_from(sorted(self.clients)))]

    # -- rules -----------------------------------------------------------------------------------

    @rule(sub=st.sampled_from(SUBSCRIPTIONS), static=st.sampled_from([None, "i1", "i2"]))
    def join(self, sub: tuple[tuple[str, ...] | None, str | None], static: str | None) -> None:
        if len(self.clients) >= 5:
            return
        self.next_id += 1
        c = Client(f"m{self.next_id}", static, sub)
        self.clients[c.member_id] = c
        self._send(c, 0)

    @rule(data=st.data(), lost=st.booleans())
    def heartbeat(self, data: st.DataObject, lost: bool) -> None:
        c = self._pick(data)
        if c is not None:
            self._send(c, c.epoch, lost)

    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        c = self._pick(data)
        if c is not None and c.epoch > 0:
            self._send(c, -1)

    @rule(data=st.data())
    def static_leave(self, data: st.DataObject) -> None:
        c = self._pick(data)
        if c is not None and c.instance_id is not None and c.epoch > 0:
            self._send(c, -2)

    @rule(data=st.data(), sub=st.sampled_from(SUBSCRIPTIONS))
    def change_subscription(self, data: st.DataObject, sub: tuple[tuple[str, ...] | None, str | None]) -> None:
        c = self._pick(data)
        if c is not None and sub != c.subscription and sub[0] is not None and c.subscription[0] is not None:
            c.subscription = sub
            c.sub_changed = True

    @rule(data=st.data(), kind=st.sampled_from(["session", "rebalance"]))
    def expire(self, data: st.DataObject, kind: str) -> None:
        g = self.coord.group(G)
        if g is None or not g.members:
            return
        mid = data.draw(st.sampled_from(sorted(g.members)))
        key = session_key(G, mid) if kind == "session" else rebalance_key(G, mid)
        self._keep(self.coord.on_timer(key, self.now))

    @rule(ms=st.integers(min_value=1_000, max_value=60_000))
    def advance_time(self, ms: int) -> None:
        """Silent members' sessions (45 s) and revocation deadlines (30 s) expire."""
        self.now += ms
        self._fire_due()

    @rule(data=st.data(), sub=st.sampled_from(SUBSCRIPTIONS))
    def resubscribe(self, data: st.DataObject, sub: tuple[tuple[str, ...] | None, str | None]) -> None:
        """Switch between names and regex: the client sends both fields (an empty list / empty regex
        clears the other kind)."""
        c = self._pick(data)
        if c is not None and c.epoch > 0:
            names, regex = sub
            c.subscription = (names if names is not None else (), regex if regex is not None else "")
            c.sub_changed = True

    @rule(topic=st.sampled_from(TOPICS), change=st.sampled_from(["grow", "delete", "recreate", "create"]))
    def metadata(self, topic: str, change: str) -> None:
        if change == "grow" and topic in self.topic_parts:
            self.topic_parts[topic] += 1
        elif change == "delete":
            self.topic_parts.pop(topic, None)
        elif change == "recreate" and topic in self.topic_parts:
            self.topic_ids[topic] = uuid.uuid4()
        elif change == "create" and topic not in self.topic_parts:
            self.topic_parts[topic] = 2
        self._metadata()

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def single_owner(self) -> None:
        g = self.coord.group(G)
        if g is None:
            return
        seen: dict[tuple[uuid.UUID, int], str] = {}
        for m in g.members.values():
            for a in (m.assigned_partitions, m.partitions_pending_revocation):
                for t, ps in a.items():
                    for p in ps:
                        assert (t, p) not in seen, f"{(t, p)} owned by {seen[(t, p)]} and {m.member_id}"
                        seen[(t, p)] = m.member_id

    @invariant()
    def epochs_monotonic(self) -> None:
        g = self.coord.group(G)
        if g is None:
            return
        assert g.group_epoch >= self.group_epoch and g.assignment_epoch >= self.assignment_epoch
        assert g.assignment_epoch <= g.group_epoch
        self.group_epoch, self.assignment_epoch = g.group_epoch, g.assignment_epoch
        epochs = {}
        for mid, m in g.members.items():
            if m.member_epoch >= 0 and mid in self.member_epochs:
                assert m.member_epoch >= self.member_epochs[mid], (mid, m.member_epoch, self.member_epochs[mid])
            epochs[mid] = max(m.member_epoch, self.member_epochs.get(mid, 0)) if m.member_epoch >= 0 else self.member_epochs.get(mid, 0)
            assert m.member_epoch <= g.assignment_epoch
        self.member_epochs = epochs

    @invariant()
    def timers_armed(self) -> None:
        g = self.coord.group(G)
        if g is None:
            return
        for mid, m in g.members.items():
            assert session_key(G, mid) in self.timers, mid
            if m.state is MemberState.UNREVOKED_PARTITIONS and m.member_epoch >= 0:
                assert rebalance_key(G, mid) in self.timers, mid

    @invariant()
    def subscriptions_counted(self) -> None:
        g = self.coord.group(G)
        if g is None:
            return
        held = Counter((m.subscribed_topic_names, m.subscribed_topic_regex) for m in g.members.values())
        assert g.subscriptions == dict(held)
        assert g.subscriptions == replay(self.records)[G].subscriptions

    @invariant()
    def replay_matches(self) -> None:
        assert {k: v.snapshot() for k, v in replay(self.records).items()} == self.coord.snapshot()

    def teardown(self) -> None:
        # Members that left temporarily and never came back time out.
        g = self.coord.group(G)
        if g is not None:
            for mid, m in list(g.members.items()):
                if m.member_epoch == -2:
                    self.timers[session_key(G, mid)] = self.now
            self._fire_due()
        for c in self.clients.values():
            c.full_next = True  # a fresh session: like a client after a lost response
        interval = self.coord.state.config.assignment_interval_ms
        for _ in range(8):
            # A target held back by the assignment interval (KIP-1263) is computed by the first
            # heartbeat after the interval.
            self.now += interval
            for mid in sorted(self.clients):
                c = self.clients.get(mid)
                if c is not None:
                    self._send(c, c.epoch)
        g = self.coord.group(G)
        if g is not None and self.clients:
            assert g.state() is GroupState.STABLE, [(m.member_id, m.member_epoch, m.state) for m in g.members.values()]
            subscribed: set[str] = set()
            for m in g.members.values():
                subscribed |= subscribed_topic_names(g, m)
                assert m.state is MemberState.STABLE and not m.partitions_pending_revocation
            expected = {
                (self.topic_ids[n], p) for n in subscribed if n in self.topic_parts for p in range(self.topic_parts[n])
            }
            got: list[tuple[uuid.UUID, int]] = [
                (t, p) for m in g.members.values() for t, ps in m.assigned_partitions.items() for p in ps
            ]
            assert sorted(got, key=str) == sorted(expected, key=str)
            # Clients agree with the coordinator.
            for c in self.clients.values():
                m = g.members[c.member_id]
                assert c.epoch == m.member_epoch
                assert {t: p for t, p in c.owned.items() if p} == {t: p for t, p in m.assigned_partitions.items() if p}
        # Byte-level round trip of every record, then replay.
        decoded = [decode(*encode(r)) for r in self.records]
        assert decoded == self.records
        assert {k: v.snapshot() for k, v in replay(decoded).items()} == self.coord.snapshot()


@pytest.mark.parametrize("assignor", _assignors())
def test_random_traffic(assignor: str) -> None:
    machine = type(f"Machine_{assignor.replace('-', '_')}", (CoordinatorMachine,), {"assignor_name": assignor})
    test_case = machine.TestCase
    test_case.settings = settings(
        max_examples=60, stateful_step_count=40, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    test_case().runTest()
