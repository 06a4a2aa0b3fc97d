"""JoinGroup answers that translated classic members wait for together (translate/classic_member.py).

Translate mode only, with ``group.initial.rebalance.delay.ms`` above zero. Two cases hold joins back so
that classic members are assigned once, together, rather than one after another:
- the initial gathering of a group without members: the joins are parked before their members are added;
- the rejoin barrier opened by a join that moved the group epoch while other classic members are in the
  group: the members are added at once, their answers held until every classic member has rejoined.
Both end on the gather timer, or (the barrier) as soon as no classic member is missing.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from coordinator.errors import ApiError, Errors
from coordinator.model import Assignment
from coordinator.outcome import Outcome, RequestKey
from coordinator.service import ConsumerGroupCoordinator
from coordinator.state import Tx
from coordinator.timers import session_key
from translate.classic_join import join_error
from translate.classic_member_checks import rebalance_timeout
from translate.classic_messages import MEMBER_ID_REQUIRED_VERSION, UNKNOWN_MEMBER_ID, JoinGroupRequest
from translate.classic_rebalance import ClassicGroupConfig
from translate.result import Schedule as _schedule
from translate.result import timer_key

# A translated group without members holds its first joins (group.initial.rebalance.delay.ms).
CLASSIC_MEMBER_GATHER_TIMER = "classic-member-gather"


@dataclasses.dataclass(slots=True)
class _Gathering:
    deadline_ms: int  # when the parked joins are answered
    limit_ms: int  # newcomers extend the deadline up to here (the first joiner's rebalance timeout)
    # Initial gathering: joins held before their members are added.
    parked: list[tuple[JoinGroupRequest, RequestKey]] = dataclasses.field(default_factory=list)
    # Rejoin barrier: members already added (the group epoch moved), answers held.
    admitted: list[Admitted] = dataclasses.field(default_factory=list)
    barrier: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Admitted:
    """A validated join whose member is written (its subscription), its answer not yet given."""

    request: JoinGroupRequest
    request_key: RequestKey
    member_id: str
    owned: Assignment
    rebalance_timeout_ms: int


class JoinHost(Protocol):
    """What the gatherings use of the classic members' translator."""

    coordinator: ConsumerGroupCoordinator
    config: ClassicGroupConfig
    translate: bool

    def admit(self, out: Outcome, request: JoinGroupRequest, key: RequestKey, now_ms: int) -> Admitted | None: ...

    def answer(self, out: Outcome, admitted: Admitted, now_ms: int) -> None: ...

    def schedule(self, out: Outcome, key: tuple[str, str, str], deadline_ms: int) -> None: ...

    def cancel(self, out: Outcome, key: tuple[str, str, str]) -> None: ...

    def take_tx(self, out: Outcome, tx: Tx) -> None: ...


class JoinGatherings:
    """The held joins of every translated group of one translator."""

    def __init__(self, host: JoinHost) -> None:
        self.host = host
        self.by_group: dict[str, _Gathering] = {}

    def gather(self, out: Outcome, request: JoinGroupRequest, key: RequestKey, now_ms: int) -> bool:
        """Park a join that arrives while its group gathers (or opens the gathering); True if parked.

        A classic group waits ``group.initial.rebalance.delay.ms`` before its first rebalance so that
        consumers started together are assigned once. A translated group does the same when it has no
        members: the joins are held, each newcomer extending the wait by the delay up to the first
        joiner's rebalance timeout (Kafka's initial delayed join), then all are added before any is
        assigned, so the first one does not take every partition only to hand most back."""
        host = self.host
        delay = host.config.initial_rebalance_delay_ms
        if not host.translate or delay <= 0:
            return False
        if (
            request.member_id == UNKNOWN_MEMBER_ID
            and request.group_instance_id is None
            and request.api_version >= MEMBER_ID_REQUIRED_VERSION
        ):
            return False  # answered MEMBER_ID_REQUIRED at once, as a classic group does
        gid = request.group_id
        timer = timer_key(CLASSIC_MEMBER_GATHER_TIMER, gid)
        gathering = self.by_group.get(gid)
        if gathering is not None and gathering.barrier:
            self._at_barrier(out, gathering, request, key, now_ms)
            return True
        if gathering is None:
            group = host.coordinator.group(gid)
            if group is not None and group.members:
                return False
            timeout = max(rebalance_timeout(request), 0)
            gathering = self.by_group[gid] = _Gathering(now_ms + min(delay, timeout), now_ms + timeout)
            host.schedule(out, timer, gathering.deadline_ms)
        else:
            deadline = min(now_ms + delay, gathering.limit_ms)
            if deadline > gathering.deadline_ms:
                gathering.deadline_ms = deadline
                host.schedule(out, timer, deadline)
            if request.member_id != UNKNOWN_MEMBER_ID:
                # The same member joining again while parked: the newer request stands.
                for i, (parked, parked_key) in enumerate(gathering.parked):
                    if parked.member_id == request.member_id:
                        del gathering.parked[i]
                        out.respond(parked_key, join_error(Errors.REBALANCE_IN_PROGRESS, request.member_id))
                        break
        gathering.parked.append((request, key))
        return True

    def opens_barrier(self, request: JoinGroupRequest, admitted: Admitted, epoch_before: int) -> bool:
        """A join that moved the group epoch (a new member, a changed subscription such as a new
        pattern match) while other classic members are in the group: as a classic group's join
        barrier, its answer waits for them to rejoin (they are told to at their next heartbeat),
        so that the new target is handed out once instead of member by member."""
        host = self.host
        if not host.translate or host.config.initial_rebalance_delay_ms <= 0:
            return False
        group = host.coordinator.group(request.group_id)
        if group is None or group.group_epoch == epoch_before:
            return False
        return any(m.uses_classic_protocol and mid != admitted.member_id for mid, m in group.members.items())

    def hold(self, out: Outcome, admitted: Admitted, now_ms: int) -> None:
        """Open the rejoin barrier with this member's answer held. It lasts until every classic
        member has rejoined, at most the joiner's session timeout (a live member heartbeats, and so
        learns it must rejoin, well within it) bounded by its rebalance timeout."""
        request = admitted.request
        gid = request.group_id
        deadline = now_ms + max(min(admitted.rebalance_timeout_ms, request.session_timeout_ms), 0)
        self.by_group[gid] = _Gathering(deadline, deadline, admitted=[admitted], barrier=True)
        self.host.schedule(out, timer_key(CLASSIC_MEMBER_GATHER_TIMER, gid), deadline)
        self._keep_alive(out, admitted, deadline)

    def _keep_alive(self, out: Outcome, admitted: Admitted, until_ms: int) -> None:
        # A member waiting at the barrier sends no heartbeats: its session counts from the answer.
        key = session_key(admitted.request.group_id, admitted.member_id)
        out.timers.append(_schedule(key, until_ms + admitted.request.session_timeout_ms))

    def _at_barrier(self, out: Outcome, gathering: _Gathering, request: JoinGroupRequest, key: RequestKey,
                    now_ms: int) -> None:
        """A join while the barrier is up: the member is added (or updated) now, answered with the rest."""
        try:
            admitted = self.host.admit(out, request, key, now_ms)
        except ApiError as exc:
            out.respond(key, join_error(exc.error, request.member_id))
            return
        if admitted is None:
            return
        for i, held in enumerate(gathering.admitted):
            if held.member_id == admitted.member_id:
                del gathering.admitted[i]
                out.respond(held.request_key, join_error(Errors.REBALANCE_IN_PROGRESS, held.member_id))
                break
        gathering.admitted.append(admitted)
        self._keep_alive(out, admitted, gathering.deadline_ms)
        out.take(self.check_barrier(request.group_id, now_ms))

    def check_barrier(self, group_id: str, now_ms: int) -> Outcome:
        """End the group's join barrier once every classic member in the group is waiting at it
        (after a join, or when a member it waited for left, expired or stopped being classic)."""
        gathering = self.by_group.get(group_id)
        if gathering is None or not gathering.barrier:
            return Outcome()
        group = self.host.coordinator.group(group_id)
        waiting = {a.member_id for a in gathering.admitted}
        if group is not None and any(
            m.uses_classic_protocol and mid not in waiting for mid, m in group.members.items()
        ):
            return Outcome()
        out = Outcome()
        self.host.cancel(out, timer_key(CLASSIC_MEMBER_GATHER_TIMER, group_id))
        out.take(self.end(group_id, now_ms))
        return out

    def end(self, group_id: str, now_ms: int) -> Outcome:
        """Add every parked joiner, then assign: one target for all of them."""
        host = self.host
        out = Outcome()
        gathering = self.by_group.pop(group_id, None)
        if gathering is None:
            return out
        host.coordinator.get_or_create_group(group_id)
        admitted: list[Admitted] = []
        for request, key in gathering.parked:
            try:
                one = host.admit(out, request, key, now_ms)
            except ApiError as exc:
                out.respond(key, join_error(exc.error, request.member_id))
                continue
            if one is not None:
                admitted.append(one)
        group = host.coordinator.group(group_id)

        def still_classic(one: Admitted) -> bool:
            # A member that left, expired, or was taken over by a consumer-protocol member under
            # the same id (an upgrade) while it waited is not this join's member any more.
            member = group.members.get(one.member_id) if group is not None else None
            return member is not None and member.uses_classic_protocol

        waiting = [one for one in gathering.admitted + admitted if still_classic(one)]
        # Everyone reports what it owns first, so that partitions given up by any of them are free
        # for all (an earlier answer must not miss what a later member releases).
        tx = host.coordinator.begin()
        for one in waiting:
            host.coordinator.reconcile_member(tx, group_id, one.member_id, one.owned, now_ms)
        host.take_tx(out, tx)
        for one in gathering.admitted + admitted:
            if not still_classic(one):
                # Fenced or gone while it waited (session, LeaveGroup): it must join again.
                out.respond(one.request_key, join_error(Errors.UNKNOWN_MEMBER_ID, one.member_id))
                continue
            host.answer(out, one, now_ms)
        return out
