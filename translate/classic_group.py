"""The classic (generic) group: its members, its state and the protocol it runs.

This is the model only; the transitions driven by JoinGroup, SyncGroup, Heartbeat, LeaveGroup and
timers live in classic_rebalance.py and classic_coordinator.py. The coordinator does not read the
protocol metadata: a group of any protocol type ("consumer", "connect", ...) works the same way.

States (the classic group state machine, see the classic group protocol notes):
  Empty -> PreparingRebalance -> CompletingRebalance -> Stable, and Dead once deleted.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field

from coordinator.outcome import RequestKey
from translate.classic_messages import JoinGroupRequestProtocol, JoinGroupResponseMember


class ClassicGroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    ClassicGroupState.EMPTY: frozenset({ClassicGroupState.PREPARING_REBALANCE}),
    ClassicGroupState.PREPARING_REBALANCE: frozenset(
        {ClassicGroupState.EMPTY, ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE}
    ),
    ClassicGroupState.COMPLETING_REBALANCE: frozenset({ClassicGroupState.PREPARING_REBALANCE}),
    ClassicGroupState.STABLE: frozenset({ClassicGroupState.COMPLETING_REBALANCE}),
    ClassicGroupState.DEAD: frozenset(
        {
            ClassicGroupState.EMPTY,
            ClassicGroupState.STABLE,
            ClassicGroupState.PREPARING_REBALANCE,
            ClassicGroupState.COMPLETING_REBALANCE,
            ClassicGroupState.DEAD,
        }
    ),
}


@dataclass(slots=True)
class PendingJoin:
    """A parked JoinGroup, answered when the join phase completes."""

    request_key: RequestKey
    api_version: int


@dataclass(slots=True)
class PendingSync:
    """A parked SyncGroup, answered when the leader's assignment arrives."""

    request_key: RequestKey
    api_version: int


@dataclass(slots=True)
class ClassicGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    # In the member's order of preference.
    supported_protocols: list[JoinGroupRequestProtocol]
    assignment: bytes = b""
    # The assignment of the last generation installed for this member (what a SyncGroup hands or
    # handed it). A rebalance resets ``assignment`` but the member may still hold these partitions
    # until it rejoins (eager) or reports them as owned (cooperative), so a conversion to a
    # consumer group counts them as its current assignment (see translate/conversion.py).
    synced_assignment: bytes = b""
    awaiting_join: PendingJoin | None = None
    awaiting_sync: PendingSync | None = None
    # Joined during the current rebalance: expires on the new-member join timeout, not its session.
    is_new: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> list[str]:
        return [p.name for p in self.supported_protocols]

    def metadata(self, protocol_name: str) -> bytes:
        for protocol in self.supported_protocols:
            if protocol.name == protocol_name:
                return protocol.metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol_name}")

    def matches(self, protocols: list[JoinGroupRequestProtocol]) -> bool:
        """Same protocols, same order, same metadata: a rejoin that changes nothing."""
        if len(protocols) != len(self.supported_protocols):
            return False
        return all(
            a.name == b.name and a.metadata == b.metadata
            for a, b in zip(protocols, self.supported_protocols, strict=True)
        )

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name in self.protocol_names():
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        # New members expire on their join timeout even while parked; an existing member whose
        # JoinGroup/SyncGroup is parked cannot heartbeat, so the parked request counts as one.
        if self.is_new:
            return False
        return self.awaiting_join is not None or self.awaiting_sync is not None


@dataclass(slots=True)
class ClassicGroup:
    group_id: str
    state: ClassicGroupState = ClassicGroupState.EMPTY
    previous_state: ClassicGroupState = ClassicGroupState.EMPTY
    state_timestamp_ms: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    # Insertion order matters: the first member added leads, ties are settled in join order.
    members: dict[str, ClassicGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # Member ids handed out with MEMBER_ID_REQUIRED that have not joined yet (KIP-394).
    pending_members: set[str] = field(default_factory=set)
    # Members of the current generation that have not sent SyncGroup yet.
    pending_sync_members: set[str] = field(default_factory=set)
    # The initial rebalance of an Empty group waits group.initial.rebalance.delay.ms and again
    # while members keep arriving, up to the rebalance timeout. -1: not in the initial delay.
    initial_delay_ms: int = -1
    initial_remaining_ms: int = -1
    # Set when a member joins during the initial delay, to extend it.
    new_member_added: bool = False
    num_awaiting_join: int = 0
    # How many members support each protocol, so a joiner is checked in O(its protocols).
    protocol_support: Counter[str] = field(default_factory=Counter)

    # ---- state -------------------------------------------------------------------------------
    def is_in(self, *states: ClassicGroupState) -> bool:
        return self.state in states

    def transition_to(self, target: ClassicGroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise RuntimeError(f"group {self.group_id}: illegal transition {self.state.value} -> {target.value}")
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms

    def in_initial_delay(self) -> bool:
        return self.state is ClassicGroupState.PREPARING_REBALANCE and self.initial_delay_ms >= 0

    def can_rebalance(self) -> bool:
        return ClassicGroupState.PREPARING_REBALANCE in _VALID_PREVIOUS_FROM.get(self.state, ())

    # ---- members -----------------------------------------------------------------------------
    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def add(self, member: ClassicGroupMember, pending_join: PendingJoin | None = None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self.protocol_support.update(member.protocol_names())
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.discard(member.member_id)
        self.set_awaiting_join(member, pending_join)

    def remove(self, member_id: str) -> ClassicGroupMember | None:
        member = self.members.pop(member_id, None)
        self.pending_sync_members.discard(member_id)
        if member is None:
            return None
        self.protocol_support.subtract(member.protocol_names())
        self.protocol_support += Counter()  # drop counts that fell to zero
        if member.awaiting_join is not None:
            self.num_awaiting_join -= 1
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            # The next member in join order leads; a rebalance elects a joined one if needed.
            self.leader_id = next(iter(self.members), None)
        return member

    def set_awaiting_join(self, member: ClassicGroupMember, pending: PendingJoin | None) -> None:
        if pending is not None and member.awaiting_join is None:
            self.num_awaiting_join += 1
        elif pending is None and member.awaiting_join is not None:
            self.num_awaiting_join -= 1
        member.awaiting_join = pending

    def update_member(
        self,
        member: ClassicGroupMember,
        protocols: list[JoinGroupRequestProtocol],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        pending_join: PendingJoin | None,
    ) -> None:
        self.protocol_support.subtract(member.protocol_names())
        member.supported_protocols = list(protocols)
        self.protocol_support.update(member.protocol_names())
        self.protocol_support += Counter()
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        self.set_awaiting_join(member, pending_join)

    def replace_static_member(self, instance_id: str, old_member_id: str, new_member_id: str) -> ClassicGroupMember:
        """KIP-345: a restarted static member takes over its predecessor's place (and assignment)."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        return member

    def all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def not_yet_rejoined(self) -> list[ClassicGroupMember]:
        return [m for m in self.members.values() if m.awaiting_join is None]

    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of any member: how long the join barrier waits."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # ---- protocols ---------------------------------------------------------------------------
    def supports_protocols(self, protocol_type: str, protocols: list[JoinGroupRequestProtocol]) -> bool:
        """Whether a joiner can be in this group: same protocol type, and at least one protocol
        that every current member also supports (an empty group accepts any non-empty list)."""
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        n = len(self.members)
        return any(self.protocol_support.get(p.name, 0) == n for p in protocols)

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.protocol_support.items() if count == n}

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all members support; the most
        votes wins. Ties go to the candidate the leader prefers (Kafka leaves them unspecified)."""
        if not self.members:
            raise ValueError(f"group {self.group_id} has no members to select a protocol")
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"members of group {self.group_id} share no protocol")
        votes: Counter[str] = Counter(m.vote(candidates) for m in self.members.values())
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        preference = {name: i for i, name in enumerate(leader.protocol_names())}
        return max(votes, key=lambda name: (votes[name], -preference.get(name, len(preference))))

    def current_member_metadata(self) -> list[JoinGroupResponseMember]:
        """What the leader receives: every member's metadata for the selected protocol."""
        if self.protocol_name is None:
            raise ValueError(f"group {self.group_id} has no selected protocol")
        name = self.protocol_name
        return [
            JoinGroupResponseMember(m.member_id, m.group_instance_id, m.metadata(name))
            for m in self.members.values()
        ]


_VALID_PREVIOUS_FROM: dict[ClassicGroupState, tuple[ClassicGroupState, ...]] = {}
for _target, _sources in _VALID_PREVIOUS.items():
    for _source in _sources:
        _VALID_PREVIOUS_FROM.setdefault(_source, ())
        _VALID_PREVIOUS_FROM[_source] += (_target,)
