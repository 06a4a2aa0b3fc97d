"""Group type conversion: KIP-848 "Supporting Online Consumer Group Upgrade" (and its way back).

Upgrade (classic -> consumer) happens on the first ConsumerGroupHeartbeat with member epoch 0 for
a group that is a classic group:
- an EMPTY classic group (no members: a simple group holding offsets, or one every member left)
  is deleted (GroupMetadata tombstone) whatever the migration policy; the heartbeat then creates a
  fresh consumer group;
- a non-empty one is converted only when the policy allows upgrades, its protocol type is
  ``consumer`` and its size fits the consumer group max size; otherwise GROUP_ID_NOT_FOUND. A
  custom client assignor's userData in any member assignment refuses it too (it would be lost,
  KAFKA-18134), and so does an embedded subscription or assignment that cannot be read. Unlike
  Kafka, userData that is a built-in sticky assignor's copy of the member's subscription userData
  (librdkafka's leader writes one into every assignment) does not refuse it when
  ``convert_builtin_sticky_userdata`` is on: it only repeats the owned partitions and generation the
  conversion reads anyway (translate/assignor_userdata.py).
The converted group starts at group epoch = target assignment epoch = the classic generation
("the group epoch starts at the current group generation"); each classic member becomes a member
at that epoch, STABLE, whose target assignment is its classic assignment (as in Kafka, which
also takes it as the current one). Deliberately unlike Kafka, its CURRENT assignment is what it
may still hold: its last synced assignment (kept when a rebalance resets the classic one) and the
partitions its subscription reports as owned (cooperative, v1+). Kafka's way hands partitions
still held by members of a group converted while it rebalances to the joiner; ours keeps one
owner per partition, the member giving up the rest through the classic-member path
(REBALANCE_IN_PROGRESS, rejoin reporting what it owns). When two members may both hold a
partition the conversion waits (COORDINATOR_LOAD_IN_PROGRESS, retriable) for the classic
rebalance to settle it. Its classic metadata (session timeout, protocols) is kept and its session
timer restarts with its classic session timeout. The group starts without partition metadata:
the joiner's heartbeat computes it and bumps the epoch; after a static takeover (which changes no
subscription) the group service computes it and bumps the epoch unless the classic assignment is
already a complete target (``classic_target_is_complete``). Pending JoinGroup / SyncGroup calls
are answered REBALANCE_IN_PROGRESS so those members rejoin through the per-member translation
(translate/classic_member.py).
Records, in Kafka's order: GroupMetadata tombstone; per member its subscription; group epoch;
per member its target assignment; target assignment epoch; per member its current assignment.

A classic group still in its first rebalance has no protocol yet: the protocol every member
supports is chosen the way a generation would choose it, and the group converts at epoch 0 with
no assignment (its members are answered REBALANCE_IN_PROGRESS and rejoin the consumer group).

Downgrade (consumer -> classic, "When the last consumer using the new rebalance protocol leaves
the group, the group is converted back") happens instead of removing the leaving members when:
the policy allows downgrades; one of the leaving members uses the consumer protocol; every
remaining member uses the classic protocol; at least one member remains; and they fit the classic
group max size. The classic group gets generation = group epoch, protocol type ``consumer``, the
protocol most members prefer among those all support, leader = the first member, and as each
member's assignment its TARGET assignment encoded at its subscription version (and as its last
synced one, for a later upgrade, its current assignment plus what it has yet to revoke). It is
STABLE and, because a member left, goes straight to PreparingRebalance (join timer = the
rebalance timeout): members at the group epoch learn it from Heartbeat, members behind it get
ILLEGAL_GENERATION.
Records: the consumer group's tombstones, then the classic group's GroupMetadata record.
A classic static member that takes the place (JoinGroup with its instance id) of the last
consumer-protocol member downgrades the group too, after its join was translated; the group then
stays STABLE (unless the join bumped the group epoch, KAFKA-19546: then it rebalances) and the
joiner's JoinGroup response carries its member epoch as generation.

All checks happen before any state changes, so a refused conversion leaves both groups as they
were. Persisting the records is the caller's job (write-ahead, as for every Outcome).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Collection, Mapping

from coordinator import records as rec
from coordinator.assignors.api import TopicMetadata
from coordinator.errors import ApiError, Errors
from coordinator.model import (
    EMPTY_ASSIGNMENT,
    Assignment,
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    subscribed_topic_names,
)
from coordinator.outcome import GroupConverted, Outcome
from coordinator.records import Record, RecordType
from coordinator.service import ConsumerGroupCoordinator
from coordinator.timers import rebalance_key, session_key
from translate.assignor_userdata import builtin_userdata_refusal
from translate.classic_coordinator import ClassicGroupCoordinator
from translate.classic_group import ClassicGroup, ClassicGroupMember, ClassicGroupState
from translate.classic_member import ClassicMemberTranslator
from translate.classic_member_checks import owned_partitions
from translate.classic_messages import JoinGroupRequestProtocol
from translate.embedded import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerProtocolAssignment,
    MalformedEmbeddedProtocol,
    TopicPartitions,
    announced_version,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from translate.group_records import GroupMetadataRecord
from translate.result import HEARTBEAT_TIMER, JOIN_TIMER, SYNC_TIMER, timer_key


class MigrationPolicy(enum.Enum):
    """``group.consumer.migration.policy``: which online conversions are allowed."""

    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @classmethod
    def parse(cls, value: str | MigrationPolicy) -> MigrationPolicy:
        """Case-insensitive, as Kafka reads the setting."""
        if isinstance(value, MigrationPolicy):
            return value
        try:
            return cls(value.strip().lower())
        except ValueError:
            raise ValueError(
                f"invalid migration policy {value!r}: expected one of {', '.join(p.value for p in cls)}"
            ) from None

    @property
    def upgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def downgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)


class GroupConverter:
    """Converts groups between the classic coordinator and the consumer group coordinator."""

    def __init__(
        self,
        coordinator: ConsumerGroupCoordinator,
        classic_groups: ClassicGroupCoordinator,
        classic_members: ClassicMemberTranslator,
        policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL,
        downgrade_allowed: bool = True,
        convert_builtin_sticky_userdata: bool = True,
    ) -> None:
        self.coordinator = coordinator
        self.classic_groups = classic_groups
        self.classic_members = classic_members
        self.policy = policy
        # group.consumer.convert.builtin.sticky.userdata: False refuses every assignment userData,
        # as Kafka does.
        self.convert_builtin_sticky_userdata = convert_builtin_sticky_userdata
        # False in ``translate`` mode: groups run as consumer groups for good.
        self.downgrade_allowed = downgrade_allowed

    # ---- upgrade -----------------------------------------------------------------------------
    def delete_empty_classic_group(self, group: ClassicGroup, now_ms: int, out: Outcome) -> None:
        """An empty classic group makes way for a consumer group, whatever the policy."""
        gid = group.group_id
        rb = self.classic_groups.rebalancer
        for kind in (JOIN_TIMER, SYNC_TIMER):
            rb.cancel(out, timer_key(kind, gid))
        for member_id in sorted(group.pending_members):
            rb.cancel(out, timer_key(HEARTBEAT_TIMER, gid, member_id))
        group.transition_to(ClassicGroupState.DEAD, now_ms)
        del self.classic_groups.groups[gid]
        out.records.append(GroupMetadataRecord(gid, None))

    def upgrade(self, group: ClassicGroup, now_ms: int, out: Outcome, joiner_replaces: bool = False) -> None:
        """Convert a non-empty classic group; raises ApiError (nothing changed) when it may not be.
        ``joiner_replaces``: the joining member takes a classic static member's place, so the group
        does not grow."""
        converted = self._converted_members(group, joiner_replaces)
        members = [member for member, _ in converted]
        gid = group.group_id
        generation = group.generation_id
        # Every parked request gets an answer: its member rejoins the consumer group.
        self.classic_groups.retire(out, group, "consumer")

        tx = self.coordinator.begin()
        for member in members:
            tx.emit(rec.member_metadata(gid, member))
        tx.emit(rec.group_epoch(gid, generation))
        for member, target in converted:
            tx.emit(rec.target_member(gid, member.member_id, target))
        tx.emit(rec.target_epoch(gid, generation))
        for member in members:
            tx.emit(rec.current_assignment(gid, member))
        for member in members:
            assert member.classic_metadata is not None
            tx.schedule(session_key(gid, member.member_id), now_ms + member.classic_metadata.session_timeout_ms)
        out.records.extend(tx.records)
        out.timers.extend(tx.timers)

    def upgrade_refusal(self, group: ClassicGroup, joiner_replaces: bool = False) -> str | None:
        """Why a non-empty classic group may not be converted, or None."""
        refusal = self.upgrade_refusal_of(group, joiner_replaces)
        return None if refusal is None else refusal[1]

    def upgrade_refusal_of(self, group: ClassicGroup, joiner_replaces: bool = False) -> tuple[str, str] | None:
        """(reason word, message) of a refused upgrade, or None; the word is one of ConversionRefused's."""
        if not self.policy.upgrade_enabled:
            return "policy", f"the migration policy {self.policy.value} does not allow upgrades"
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return "protocol_type", f"its protocol type is {group.protocol_type!r}, not {CONSUMER_PROTOCOL_TYPE!r}"
        limit = self.coordinator.state.config.max_group_size
        if limit is not None and len(group.members) > limit:
            return "group_max_size", f"its {len(group.members)} members exceed the consumer group max size {limit}"
        try:
            self._converted_members(group, joiner_replaces)
        except ApiError as exc:
            if exc.error is not Errors.GROUP_ID_NOT_FOUND:
                raise  # not a refusal: the conversion may succeed once the classic group settles
            return getattr(exc, "reason", "member_metadata"), exc.message or ""
        return None

    def _converted_members(
        self, group: ClassicGroup, joiner_replaces: bool
    ) -> list[tuple[ConsumerGroupMember, Assignment]]:
        """Each classic member as a consumer group member (its current assignment set) with its
        target assignment."""
        protocol = group.protocol_name
        if protocol is None:
            # Still in its first rebalance: no generation has chosen a protocol yet.
            if not group.candidate_protocols():
                raise ApiError(Errors.GROUP_ID_NOT_FOUND, "its members share no protocol")
            protocol = group.select_protocol()
        generation = group.generation_id
        out: list[tuple[ConsumerGroupMember, Assignment]] = []
        held: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
        for m in group.members.values():
            try:
                subscription = decode_subscription(m.metadata(protocol))
                assignment = decode_assignment(m.assignment)
                synced = decode_assignment(m.synced_assignment)
            except (MalformedEmbeddedProtocol, KeyError) as exc:
                raise ApiError(Errors.GROUP_ID_NOT_FOUND, f"member {m.member_id}: {exc}") from exc
            if assignment.user_data:
                # A custom client assignor's data would be lost (KAFKA-18134); a built-in sticky
                # assignor's copy of the subscription userData would not.
                refusal = (
                    builtin_userdata_refusal(protocol, assignment.user_data, subscription, generation)
                    if self.convert_builtin_sticky_userdata
                    else "conversion of built-in assignors' userData is off"
                )
                if refusal is not None:
                    error = ApiError(
                        Errors.GROUP_ID_NOT_FOUND,
                        f"member {m.member_id}'s assignment carries userData a custom assignor may need "
                        f"({refusal})",
                    )
                    error.reason = "assignment_userdata"  # type: ignore[attr-defined]
                    raise error
            # The target is Kafka's: the member's classic assignment (reset to nothing while the
            # group rebalances). The CURRENT assignment differs from Kafka on purpose: it is
            # everything the member may still hold - its last synced assignment (an eager member
            # that has not rejoined yet still consumes it) and the partitions its subscription
            # says it owns (cooperative, v1+) - so that no partition is handed to another member
            # while this one may hold it (a partition has one owner at a time). The member gives
            # up the difference through the classic-member path: its epoch falls behind, it is
            # answered REBALANCE_IN_PROGRESS and rejoins reporting what it owns.
            held[m.member_id] = self._partitions(
                [*synced.assigned_partitions, *subscription.owned_partitions]
            )
            member = ConsumerGroupMember(
                member_id=m.member_id,
                instance_id=m.group_instance_id,
                rack_id=subscription.rack_id,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=frozenset(subscription.topics),
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                classic_metadata=ClassicMemberMetadata(
                    m.session_timeout_ms, tuple((p.name, p.metadata) for p in m.supported_protocols)
                ),
                member_epoch=generation,
                previous_member_epoch=generation,
                state=MemberState.STABLE,
            )
            out.append((member, self._partitions(assignment.assigned_partitions) or EMPTY_ASSIGNMENT))
        _check_single_owner(held)
        for member, _ in out:
            member.assigned_partitions = held[member.member_id] or EMPTY_ASSIGNMENT
        return out

    def _partitions(self, named: Collection[TopicPartitions]) -> dict[uuid.UUID, frozenset[int]]:
        """Named partitions as an assignment; topics unknown to the metadata are dropped."""
        return owned_partitions(self.coordinator.state.topics, named)

    # ---- downgrade ---------------------------------------------------------------------------
    def should_downgrade(self, group: ConsumerGroup, leaving: Collection[str]) -> bool:
        """Whether removing ``leaving`` must turn the group back into a classic group."""
        if not self.downgrade_allowed or not self.policy.downgrade_enabled:
            return False
        members = group.members
        if not any(mid in members and not members[mid].uses_classic_protocol for mid in leaving):
            return False
        remaining = [m for mid, m in members.items() if mid not in leaving]
        if not remaining or any(not m.uses_classic_protocol for m in remaining):
            return False
        if len(remaining) > self.classic_groups.rebalancer.config.max_size:
            return False
        return bool(_common_protocols(remaining))

    def should_downgrade_on_takeover(self, group: ConsumerGroup, replaced_member_id: str) -> bool:
        """Whether a classic static member taking ``replaced_member_id``'s place (JoinGroup with
        its instance id) leaves only classic members, so that the group must turn classic."""
        if not self.downgrade_allowed or not self.policy.downgrade_enabled:
            return False
        replaced = group.members.get(replaced_member_id)
        if replaced is None or replaced.uses_classic_protocol:
            return False
        if any(not m.uses_classic_protocol for mid, m in group.members.items() if mid != replaced_member_id):
            return False
        return len(group.members) <= self.classic_groups.rebalancer.config.max_size

    def downgrade(
        self, group: ConsumerGroup, leaving: Collection[str], now_ms: int, out: Outcome, rebalance: bool = True
    ) -> ClassicGroup:
        """Replace the consumer group by a classic group of its remaining (classic) members;
        ``rebalance``: a member left, so the classic group starts a rebalance at once."""
        gid = group.group_id
        epoch = group.group_epoch
        remaining = [m for mid, m in group.members.items() if mid not in leaving]
        targets = {m.member_id: group.target_assignment.get(m.member_id, EMPTY_ASSIGNMENT) for m in remaining}
        # What each member may still hold: its current assignment and what it has yet to revoke.
        # Kafka keeps only the target; an upgrade right after this downgrade must not take the
        # target for what the member holds (a partition has one owner at a time).
        held = {
            m.member_id: _union(m.assigned_partitions, m.partitions_pending_revocation) for m in remaining
        }
        names = {meta.topic_id: name for name, meta in self.coordinator.state.topics.items()}
        for name, meta in group.subscription_metadata.items():
            names.setdefault(meta.topic_id, name)

        tx = self.coordinator.begin()
        member_ids = list(group.members)
        for mid in member_ids:
            tx.emit(rec.current_assignment_tombstone(gid, mid))
        for mid in member_ids:
            tx.emit(rec.target_member_tombstone(gid, mid))
        tx.emit(Record(RecordType.TARGET_ASSIGNMENT_METADATA, gid, None, None))
        for mid in member_ids:
            tx.emit(rec.member_metadata_tombstone(gid, mid))
        for regex in list(group.resolved_regexes):
            tx.emit(rec.regular_expression_tombstone(gid, regex))
        tx.emit(Record(RecordType.PARTITION_METADATA, gid, None, None))
        tx.emit(Record(RecordType.GROUP_METADATA, gid, None, None))
        for mid in member_ids:
            tx.cancel(session_key(gid, mid))
            tx.cancel(rebalance_key(gid, mid))
        out.records.extend(tx.records)
        out.timers.extend(tx.timers)
        for mid in member_ids:
            self.classic_members.cancel_member_timers(out, gid, mid)

        classic = ClassicGroup(
            gid,
            state=ClassicGroupState.STABLE,
            previous_state=ClassicGroupState.COMPLETING_REBALANCE,
            state_timestamp_ms=now_ms,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            generation_id=epoch,
        )
        for m in remaining:
            cm = m.classic_metadata
            assert cm is not None
            classic.add(
                ClassicGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=cm.session_timeout_ms,
                    protocol_type=CONSUMER_PROTOCOL_TYPE,
                    supported_protocols=[JoinGroupRequestProtocol(n, md) for n, md in cm.supported_protocols],
                )
            )
        classic.protocol_name = classic.select_protocol()
        for cmember in classic.members.values():
            version = announced_version(cmember.metadata(classic.protocol_name))
            cmember.assignment = encode_assignment(
                ConsumerProtocolAssignment(_named(targets[cmember.member_id], names), None, version)
            )
            cmember.synced_assignment = encode_assignment(
                ConsumerProtocolAssignment(_named(held[cmember.member_id], names), None, version)
            )
        self.classic_groups.groups[gid] = classic
        rb = self.classic_groups.rebalancer
        out.records.append(rb.group_record(classic))
        out.changes.append(GroupConverted(gid, "consumer", "classic"))
        for cmember in classic.members.values():
            rb.reschedule_heartbeat(out, classic, cmember, now_ms)
        if rebalance:
            # A member left: the remaining ones rebalance under the classic protocol.
            rb.prepare_rebalance(out, classic, now_ms)
        return classic


def classic_target_is_complete(group: ConsumerGroup) -> bool:
    """Whether a converted group's target (the classic assignment) can stand as it is: every
    member holds exactly its target and the targets give each subscribed partition of the
    partition metadata to one subscriber. Otherwise the target must be recomputed."""
    meta = group.subscription_metadata
    wanted: dict[uuid.UUID, int] = {}
    given: dict[uuid.UUID, set[int]] = {}
    for mid, member in group.members.items():
        target = group.target_assignment.get(mid, EMPTY_ASSIGNMENT)
        if member.partitions_pending_revocation or dict(member.assigned_partitions) != dict(target):
            return False
        subscribed = {
            meta[n].topic_id: meta[n].num_partitions for n in subscribed_topic_names(group, member) if n in meta
        }
        wanted.update(subscribed)
        for topic_id, parts in target.items():
            taken = given.setdefault(topic_id, set())
            if topic_id not in subscribed or not parts.isdisjoint(taken):
                return False
            taken |= parts
    complete = all(given.get(topic_id, set()) == set(range(n)) for topic_id, n in wanted.items())
    return complete and given.keys() <= wanted.keys()


def leaves_partitions_unassigned(group: ClassicGroup, topics: Mapping[str, TopicMetadata]) -> bool:
    """Whether a (replayed) classic group of the consumer protocol leaves partitions of the topics
    its members subscribe to out of every member's assignment. A downgrade stores the members'
    targets, which miss the partitions of the member whose departure caused it, and starts a
    rebalance that no record remembers: a failover before that rebalance ends would leave those
    partitions unassigned for good (Kafka's replay has the same gap)."""
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE or group.protocol_name is None or not group.members:
        return False
    wanted: set[tuple[str, int]] = set()
    given: set[tuple[str, int]] = set()
    try:
        for m in group.members.values():
            for name in decode_subscription(m.metadata(group.protocol_name)).topics:
                meta = topics.get(name)
                if meta is not None:
                    wanted.update((name, p) for p in range(meta.num_partitions))
            for tp in decode_assignment(m.assignment).assigned_partitions:
                given.update((tp.topic, p) for p in tp.partitions)
    except (MalformedEmbeddedProtocol, KeyError):
        return False  # not ours to read: the group runs as its clients decide
    return not wanted <= given


def _check_single_owner(held: dict[str, dict[uuid.UUID, frozenset[int]]]) -> None:
    """A consumer group gives each partition one owner. When two classic members may both still
    hold a partition (a stale claim in a subscription, say), no current assignment is safe for
    either: the conversion waits (a retriable error) until the classic rebalance settles who owns
    what. Kafka would convert and take the (possibly reset) classic assignments as owned instead."""
    owners: dict[tuple[uuid.UUID, int], str] = {}
    for member_id, assignment in held.items():
        for topic_id, parts in assignment.items():
            for partition in parts:
                other = owners.setdefault((topic_id, partition), member_id)
                if other != member_id:
                    raise ApiError(
                        Errors.COORDINATOR_LOAD_IN_PROGRESS,
                        f"members {other} and {member_id} may both hold partition {partition} of topic "
                        f"{topic_id}; the group converts once its classic rebalance settles that",
                    )


def _common_protocols(members: list[ConsumerGroupMember]) -> set[str]:
    common: set[str] | None = None
    for m in members:
        assert m.classic_metadata is not None
        names = {name for name, _ in m.classic_metadata.supported_protocols}
        common = names if common is None else common & names
    return common or set()


def _union(a: Assignment, b: Assignment) -> Assignment:
    if not b:
        return a
    merged = dict(a)
    for topic_id, parts in b.items():
        merged[topic_id] = merged.get(topic_id, frozenset()) | parts
    return merged


def _named(assignment: Assignment, names: dict[uuid.UUID, str]) -> list[TopicPartitions]:
    result = [
        TopicPartitions(names[topic_id], tuple(sorted(parts)))
        for topic_id, parts in assignment.items()
        if parts and topic_id in names
    ]
    return sorted(result, key=lambda tp: tp.topic)
