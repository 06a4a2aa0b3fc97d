"""Test support for the connect group type: a driver that keeps every record and checks replay."""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.connect.codec import decode, encode
from coordinator.connect.messages import (
    AssignorSpec,
    ConnectGroupHeartbeatRequest,
    ConnectGroupHeartbeatResponse,
    ConnectGroupInstallAssignmentRequest,
    ConnectGroupInstallAssignmentResponse,
    ConnectGroupPrepareAssignmentRequest,
    ConnectGroupPrepareAssignmentResponse,
    ConnectorsAndTasks,
    InstalledWorker,
)
from coordinator.connect.model import SESSIONED, ConnectAssignment, ConnectGroup
from coordinator.connect.records import ConnectRecord, replay
from coordinator.connect.service import ConnectConfig, ConnectGroupCoordinator
from coordinator.outcome import Outcome

G = "connect-cluster"
ICA = AssignorSpec("incremental-cooperative", 0, SESSIONED, version=SESSIONED)


def units(*names: str) -> ConnectAssignment:
    """The case studies' names: AC0 is connector A, AT1 task 1 of connector A."""
    connectors = frozenset(n[0] for n in names if n[1] == "C")
    tasks = frozenset((n[0], int(n[2:])) for n in names if n[1] == "T")
    return ConnectAssignment(connectors, tasks)


def cat(*names: str) -> ConnectorsAndTasks:
    return ConnectorsAndTasks.of(units(*names))


def names(a: ConnectAssignment | ConnectorsAndTasks | None) -> list[str]:
    if a is None:
        return []
    if isinstance(a, ConnectorsAndTasks):
        a = a.assignment()
    return sorted([f"{c}C0" for c in a.connectors] + [f"{c}T{n}" for c, n in a.tasks])


class Driver:
    def __init__(self, cfg: ConnectConfig | None = None) -> None:
        self.coord = ConnectGroupCoordinator(cfg or ConnectConfig())
        self.records: list[ConnectRecord] = []
        self.now = 0

    def keep(self, res: Outcome) -> Outcome:
        self.records.extend(res.records)
        return res

    def join(
        self, member: str, assignors: Sequence[AssignorSpec] = (ICA,), rebalance_timeout_ms: int = 60_000, **kw: object
    ) -> Outcome[ConnectGroupHeartbeatResponse]:
        req = ConnectGroupHeartbeatRequest(
            G, member, 0, rebalance_timeout_ms=rebalance_timeout_ms, client_assignors=list(assignors),
            worker_url=f"http://{member.lower()}:8083", owned=ConnectorsAndTasks(), **kw,  # type: ignore[arg-type]
        )
        return self.keep(self.coord.connect_group_heartbeat(req, self.now))  # type: ignore[return-value]

    def hb(self, member: str, epoch: int | None = None, owned: Sequence[str] | None = None, **kw: object) -> Outcome[ConnectGroupHeartbeatResponse]:
        if epoch is None:
            epoch = self.group().workers[member].member_epoch
        req = ConnectGroupHeartbeatRequest(
            G, member, epoch, owned=None if owned is None else cat(*owned), **kw  # type: ignore[arg-type]
        )
        return self.keep(self.coord.connect_group_heartbeat(req, self.now))  # type: ignore[return-value]

    def prepare(self, member: str) -> ConnectGroupPrepareAssignmentResponse:
        epoch = self.group().workers[member].member_epoch
        res = self.keep(self.coord.prepare_assignment(ConnectGroupPrepareAssignmentRequest(G, member, epoch), self.now))
        assert not res.records  # reading the group writes nothing
        return res.response  # type: ignore[no-any-return]

    def install(
        self, member: str, targets: dict[str, Sequence[str]], group_epoch: int | None = None, error: int = 0
    ) -> Outcome[ConnectGroupInstallAssignmentResponse]:
        g = self.group()
        epoch = g.workers[member].member_epoch
        ge = g.group_epoch if group_epoch is None else group_epoch
        members = [InstalledWorker(m, cat(*u), version=2) for m, u in targets.items()]
        req = ConnectGroupInstallAssignmentRequest(G, member, epoch, ge, error, members)
        return self.keep(self.coord.install_assignment(req, self.now))  # type: ignore[return-value]

    def compute(self, member: str, targets: dict[str, Sequence[str]]) -> None:
        """What the selected worker does on COMPUTE_ASSIGNMENT: prepare, then install."""
        prepared = self.prepare(member)
        assert prepared.error_code == 0, prepared.error_message
        r = self.install(member, targets, group_epoch=prepared.group_epoch).response
        assert r.error_code == 0, r.error_message

    def group(self) -> ConnectGroup:
        g = self.coord.group(G)
        assert g is not None
        return g

    def target(self) -> dict[str, list[str]]:
        return {m: names(t.assignment) for m, t in sorted(self.group().target.items())}

    def current(self, member: str) -> tuple[int, list[str]]:
        w = self.group().workers[member]
        return w.member_epoch, names(w.assigned | w.pending_revocation)

    def assert_replays(self, through_bytes: bool = True) -> None:
        """The records replay to the same state, as values and (unless told not to) through their bytes."""
        assert {k: v.snapshot() for k, v in replay(self.records).items()} == self.coord.snapshot()
        if not through_bytes:
            return
        decoded = [decode(*encode(r)) for r in self.records]
        assert decoded == self.records
        assert {k: v.snapshot() for k, v in replay(decoded).items()} == self.coord.snapshot()
