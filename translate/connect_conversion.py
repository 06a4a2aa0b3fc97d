"""Kafka Connect worker groups converted online between a classic group of protocol type ``connect`` and a
connect group (coordinator/connect/), as translate/conversion.py converts consumer groups.

Upgrade, on a ConnectGroupHeartbeat with member epoch 0 for an id held by a classic group:
- an empty classic group is deleted (its tombstone) and the heartbeat creates a fresh connect group;
- a non-empty one must be of protocol type ``connect`` (else GROUP_ID_NOT_FOUND, "not a connect group"),
  run an incremental protocol (``sessioned`` or ``compatible``; eager ``default`` workers stop everything
  at every rebalance: GROUP_ID_NOT_FOUND saying so) and be Stable (mid-rebalance: the retriable
  COORDINATOR_LOAD_IN_PROGRESS, as two workers may then both claim a connector or task).
  The connect group starts at group epoch = assignment epoch = the classic generation; each member becomes a
  STABLE worker at that epoch whose current assignment and target are what it runs (the allocation of its
  last JoinGroup, minus what its last assignment revoked, plus what it assigned), its assignors its
  protocols, its classic metadata kept in its member record. The classic leader keeps computing.
  Records, in the consumer conversion's order: the classic tombstone; per worker its metadata; the group
  epoch; per worker its target; the target metadata; per worker its current assignment.

Downgrade, when the last worker on the connect protocol leaves or is fenced and classic workers remain:
the classic group gets generation = group epoch, the members' preferred common protocol, as leader the last
computing worker (else the first), each member's metadata with allocation = what it runs and as assignment
its target (leader fields filled), then PreparingRebalance since a worker left. Records: the connect
group's tombstones, then the classic GroupMetadata record.
"""

from __future__ import annotations

from coordinator.connect import assignors as sel
from coordinator.connect import records as crec
from coordinator.connect.messages import ConnectGroupHeartbeatRequest
from coordinator.connect.model import (
    NO_TARGET,
    ClassicWorkerMetadata,
    ClientAssignor,
    ConnectAssignment,
    ConnectGroup,
    ConnectWorker,
    WorkerState,
    WorkerTarget,
)
from coordinator.connect.service import (
    ConnectGroupCoordinator,
    ConnectTx,
    assignment_key,
    rebalance_key,
    session_key,
)
from coordinator.errors import ApiError, Errors
from coordinator.outcome import GroupConverted, Outcome
from translate.classic_coordinator import ClassicGroupCoordinator
from translate.classic_group import ClassicGroup, ClassicGroupMember, ClassicGroupState
from translate.classic_messages import JoinGroupRequestProtocol
from translate.connect_classic_worker import CONNECT_PROTOCOL_TYPE, ConnectClassicWorkers
from translate.connect_protocol import (
    PROTOCOL_VERSIONS,
    ExtendedAssignment,
    WorkerMetadata,
    after,
    decode_assignment,
    decode_metadata,
    encode_assignment,
    encode_metadata,
    running,
)
from translate.connect_worker_bytes import read_protocols
from translate.conversion import MigrationPolicy


class ConnectConverter:
    def __init__(
        self,
        connect: ConnectGroupCoordinator,
        classic_groups: ClassicGroupCoordinator,
        workers: ConnectClassicWorkers,
        policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL,
    ) -> None:
        self.connect = connect
        self.classic_groups = classic_groups
        self.workers = workers
        self.policy = policy

    # ---- upgrade -----------------------------------------------------------------------------
    def upgrade(self, group: ClassicGroup, now_ms: int, out: Outcome) -> None:
        """Convert a non-empty classic group; raises ApiError (nothing changed) when it may not be."""
        converted = self._converted(group)
        gid = group.group_id
        generation = group.generation_id
        answered = self.classic_groups.retire(out, group, "connect")  # told to rejoin: their JoinGroups are expected

        tx = ConnectTx(self.connect.state)
        for worker, _ in converted:
            tx.emit(crec.member_metadata(gid, worker))
        tx.emit(crec.group_epoch(gid, generation))
        for worker, target in converted:
            tx.emit(crec.target_member(gid, worker.member_id, target))
        tx.emit(crec.target_metadata(gid, generation, 0, group.protocol_name))
        for worker, _ in converted:
            tx.emit(crec.current_assignment(gid, worker))
        for worker, target in converted:
            assert worker.classic is not None
            tx.schedule(session_key(gid, worker.member_id), now_ms + worker.classic.session_timeout_ms)
            self.workers.adopt(gid, worker.member_id, worker.assigned, target.metadata)
        for member_id in answered:
            self.workers.asked.add((gid, member_id))
        out.records.extend(tx.records)
        out.timers.extend(tx.timers)
        connect_group = self.connect.group(gid)
        assert connect_group is not None
        if group.leader_id in connect_group.workers:
            connect_group.last_computer = group.leader_id  # the sticky computing worker, as Connect's leader

    def upgrade_refusal(self, group: ClassicGroup) -> ApiError | None:
        """Why a non-empty classic group may not be converted, or None."""
        try:
            self._converted(group)
        except ApiError as exc:
            return exc
        return None

    def joiner_refusal(self, group: ClassicGroup, joiner: ConnectGroupHeartbeatRequest) -> ApiError | None:
        """Why the joining worker could not join the converted group (its size, its assignors), checked
        before converting so that a refused join leaves the classic group as it was."""
        limit = self.connect.state.config.max_group_size
        if limit is not None and len(group.members) >= limit:
            error = ApiError(Errors.GROUP_MAX_SIZE_REACHED, f"The connect group has reached its maximum of {limit} workers.")
            error.reason = "group_max_size"  # type: ignore[attr-defined]
            return error
        if joiner.client_assignors is None:
            return None  # the join itself is invalid: the coordinator says why, after the conversion
        workers = [w for w, _ in self._converted(group)]
        offered = tuple(
            ClientAssignor(a.name, a.minimum_version, a.maximum_version, a.reason, a.version, bytes(a.metadata))
            for a in joiner.client_assignors
        )
        if sel.select([*workers, ConnectWorker(joiner.member_id, assignors=offered)], None) is None:
            error = ApiError(Errors.UNSUPPORTED_ASSIGNOR, (
                f"The worker's assignors ({', '.join(a.name for a in offered)}) share no protocol and version "
                f"with the classic workers of group {group.group_id}."
            ))  # fmt: skip
            error.reason = "member_metadata"  # type: ignore[attr-defined]
            return error
        return None

    def _converted(self, group: ClassicGroup) -> list[tuple[ConnectWorker, WorkerTarget]]:
        gid = group.group_id
        if not self.policy.upgrade_enabled:
            raise _refused("policy", f"Cannot upgrade classic group {gid}: the migration policy {self.policy.value} "
                                     "does not allow upgrades.")  # fmt: skip
        if group.protocol_type != CONNECT_PROTOCOL_TYPE:
            raise _refused("protocol_type", f"Group {gid} is not a connect group.")
        protocol = group.protocol_name
        if protocol is not None and PROTOCOL_VERSIONS.get(protocol, 1) < 1:
            raise _refused("protocol_type", (
                f"Cannot upgrade classic group {gid}: its workers run the eager protocol {protocol!r}, which stops "
                "every connector and task at each rebalance; only 'sessioned' or 'compatible' groups convert."
            ))  # fmt: skip
        if not group.is_in(ClassicGroupState.STABLE) or protocol is None:
            raise ApiError(Errors.COORDINATOR_LOAD_IN_PROGRESS,
                           f"Classic group {gid} is rebalancing; it converts once it is stable.")  # fmt: skip
        limit = self.connect.state.config.max_group_size
        if limit is not None and len(group.members) > limit:
            raise _refused("group_max_size",
                           f"Cannot upgrade classic group {gid}: its members exceed the connect group max size {limit}.")
        generation = group.generation_id
        out: list[tuple[ConnectWorker, WorkerTarget]] = []
        owners: dict[object, str] = {}
        for m in group.members.values():
            try:
                md = decode_metadata(m.metadata(protocol))
                given = decode_assignment(m.assignment)
                read = read_protocols(m.supported_protocols)
            except (ValueError, KeyError) as exc:
                raise _refused("member_metadata", f"Cannot upgrade classic group {gid}: member {m.member_id}: {exc}.") from exc
            runs = after(running(md.allocation), given)
            for unit in [*runs.connectors, *runs.tasks]:
                other = owners.setdefault(unit, m.member_id)
                if other != m.member_id:
                    raise ApiError(Errors.COORDINATOR_LOAD_IN_PROGRESS, (
                        f"Workers {other} and {m.member_id} may both run {unit}; the group converts once its "
                        "classic rebalance settles that."
                    ))  # fmt: skip
            version = given.version if given is not None else md.version
            error = given.error if given is not None else 0
            worker = ConnectWorker(
                m.member_id, url=md.url, instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, rebalance_timeout_ms=m.rebalance_timeout_ms,
                assignors=tuple(
                    ClientAssignor(a.name, a.minimum_version, a.maximum_version, a.reason, a.version, a.metadata)
                    for a in read.assignors
                ),
                classic=ClassicWorkerMetadata(m.session_timeout_ms, tuple((p.name, p.metadata) for p in m.supported_protocols)),
                member_epoch=generation, previous_member_epoch=generation, state=WorkerState.STABLE, assigned=runs,
                error=error, version=version, metadata=m.assignment,
            )
            out.append((worker, WorkerTarget(runs, error, version, m.assignment)))
        return out

    # ---- downgrade ---------------------------------------------------------------------------
    def should_downgrade(self, group: ConnectGroup | None, new_protocol_before: int) -> bool:
        """After a change that removed workers: the last worker on the connect protocol is gone and
        classic workers remain."""
        if group is None or not self.policy.downgrade_enabled or new_protocol_before == 0 or not group.workers:
            return False
        return all(w.classic is not None for w in group.workers.values())

    def downgrade(self, group: ConnectGroup, now_ms: int, out: Outcome) -> ClassicGroup:
        gid = group.group_id
        workers = list(group.workers.values())
        leader = group.last_computer if group.last_computer in group.workers else workers[0].member_id
        leader_url = group.workers[leader].url
        targets = {w.member_id: group.target.get(w.member_id, NO_TARGET) for w in workers}
        # Read before the tombstones apply: they reset the workers' assignments in place.
        runs = {w.member_id: w.assigned | w.pending_revocation for w in workers}
        tx = ConnectTx(self.connect.state)
        for w in workers:
            tx.emit(crec.current_assignment_tombstone(gid, w.member_id))
            if w.member_id in group.target:
                tx.emit(crec.target_member_tombstone(gid, w.member_id))
            tx.emit(crec.member_metadata_tombstone(gid, w.member_id))
            for key in (session_key(gid, w.member_id), rebalance_key(gid, w.member_id), assignment_key(gid, w.member_id)):
                tx.cancel(key)
        for record in crec.group_tombstones(gid):
            tx.emit(record)
        group.computing = None
        out.records.extend(tx.records)
        out.timers.extend(tx.timers)
        for w in workers:
            self.workers.forget(out, gid, w.member_id)

        classic = ClassicGroup(
            gid, state=ClassicGroupState.STABLE, previous_state=ClassicGroupState.COMPLETING_REBALANCE,
            state_timestamp_ms=now_ms, protocol_type=CONNECT_PROTOCOL_TYPE, generation_id=group.group_epoch,
        )
        ordered = sorted(workers, key=lambda w: w.member_id != leader)  # the leader first: it leads
        for w in ordered:
            cm = w.classic
            assert cm is not None
            classic.add(ClassicGroupMember(
                member_id=w.member_id, group_instance_id=w.instance_id, client_id=w.client_id,
                client_host=w.client_host, rebalance_timeout_ms=w.rebalance_timeout_ms,
                session_timeout_ms=cm.session_timeout_ms, protocol_type=CONNECT_PROTOCOL_TYPE,
                supported_protocols=[
                    JoinGroupRequestProtocol(n, _with_allocation(md, runs[w.member_id], leader, leader_url))
                    for n, md in cm.protocols
                ],
            ))  # fmt: skip
        classic.protocol_name = classic.select_protocol()
        version = PROTOCOL_VERSIONS.get(classic.protocol_name, 1)
        for cmember in classic.members.values():
            target = targets[cmember.member_id]
            try:
                offset = decode_metadata(cmember.metadata(classic.protocol_name)).config_offset
            except ValueError:
                offset = -1
            stored = _stored(target.metadata)
            if stored is not None:
                offset = stored.config_offset
            cmember.assignment = cmember.synced_assignment = encode_assignment(
                ExtendedAssignment(version, target.error, leader, leader_url, offset, target.assignment)
            )
        self.classic_groups.groups[gid] = classic
        rb = self.classic_groups.rebalancer
        out.records.append(rb.group_record(classic))
        out.changes.append(GroupConverted(gid, "connect", "classic"))
        for cmember in classic.members.values():
            rb.reschedule_heartbeat(out, classic, cmember, now_ms)
        rb.prepare_rebalance(out, classic, now_ms)  # a worker left: the others rebalance as classic workers
        return classic


def _refused(reason: str, message: str) -> ApiError:
    """A refused upgrade (GROUP_ID_NOT_FOUND) with its reason word (ConversionRefused's)."""
    error = ApiError(Errors.GROUP_ID_NOT_FOUND, message)
    error.reason = reason  # type: ignore[attr-defined]
    return error


def new_protocol_workers(group: ConnectGroup | None) -> int:
    return 0 if group is None else sum(1 for w in group.workers.values() if w.classic is None)


def _stored(metadata: bytes) -> ExtendedAssignment | None:
    try:
        return decode_assignment(metadata)
    except ValueError:
        return None


def _with_allocation(metadata: bytes, runs: ConnectAssignment, leader: str, leader_url: str) -> bytes:
    """A worker's protocol metadata with its allocation set to what it runs (eager metadata unchanged)."""
    try:
        md = decode_metadata(metadata)
    except ValueError:
        return metadata
    if md.version < 1:
        return metadata
    allocation = ExtendedAssignment(md.version, 0, leader, leader_url, md.config_offset, runs) if runs else None
    return encode_metadata(WorkerMetadata(md.version, md.url, md.config_offset, allocation))
