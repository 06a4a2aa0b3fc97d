"""The group state log under disk faults, through the real gateway in front of the real broker.

- A full disk (a size-limited tmpfs under --state-dir; RLIMIT_FSIZE on the gateway process where
  mounting is not permitted): joins are answered either with success (their records are durable) or
  a retriable coordinator error, never left half-applied; while the log cannot be written the managed
  groups are not served from memory; data traffic and unmanaged groups carry on; once space is back the
  gateway re-reads the log by itself, every acknowledged member is there (and expires when it stops
  heartbeating), no refused one is, and a restart replays cleanly.
- A flipped bit in the middle of the log: `serve` refuses to start naming the file and byte offset,
  `state repair` says exactly what it dropped, and the repaired log starts with no member resurrected.
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

from compat_tests.harness.brokers import ProcessBackend, free_port_block
from compat_tests.harness.clients import produce_confluent, values
from compat_tests.harness.gateway_proc import GatewayProcess, groupgate_binary
from compat_tests.harness.probe import find_coordinator_endpoints, roundtrip
from gateway.state.repair import verify
from gateway.state.segments import _HEAD
from gateway.wire.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

pytestmark = pytest.mark.kafka

COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
RETRIABLE = (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR)
SESSION_MS = 4000

# One shard: these scenarios are about one log on a failing disk (a full disk that every write meets, a
# flipped bit in a log long enough to have a middle). Shards failing alone: tests/gateway/test_runtime.py.
CONFIG = f"""
[coordinator]
"state.topic.num.partitions" = 1
upstream_check_s = 0
initial_rebalance_delay_ms = 0
min_session_timeout_ms = 1000
"group.consumer.min.session.timeout.ms" = 1000
"group.consumer.session.timeout.ms" = {SESSION_MS}
"group.consumer.min.heartbeat.interval.ms" = 200
"group.consumer.heartbeat.interval.ms" = 500
"""


def _gateway(kafka: ProcessBackend, root: Path, state: Path) -> GatewayProcess:
    config = root / "gateway.toml"
    config.write_text(CONFIG)
    return GatewayProcess(
        upstream=kafka.bootstrap,
        listen_port=free_port_block(3),
        log_dir=root,
        extra_args=["--config", str(config), "--state-dir", str(state), "--managed-groups", "fs-.*"],
    )


def _heartbeat(address: str, group: str, member: str, epoch: int, topic: str | None) -> Any:
    req = ConsumerGroupHeartbeatRequest[1](
        group_id=group, member_id=member, member_epoch=epoch, rebalance_timeout_ms=10000,
        subscribed_topic_names=[topic] if topic else None, server_assignor=None,
        topic_partitions=[] if epoch == 0 else None,
    )
    return roundtrip(address, req, ConsumerGroupHeartbeatResponse, 1)


def _classic_join(address: str, group: str) -> tuple[int, str, int]:
    """JoinGroup then SyncGroup of a one-member classic group: (error, member id, generation).

    The group's record is written by the leader's SyncGroup (as in Kafka); the join alone writes nothing."""
    protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
    j = roundtrip(address, JoinGroupRequest[3](
        group_id=group, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=10000, member_id="",
        protocol_type="consumer", protocols=protocols,
    ), JoinGroupResponse, 3)
    if j.error_code != 0:
        return j.error_code, "", -1
    assignments = [SyncGroupRequest.SyncGroupRequestAssignment(member_id=j.member_id, assignment=b"")]
    s = roundtrip(address, SyncGroupRequest[2](
        group_id=group, generation_id=j.generation_id, member_id=j.member_id, assignments=assignments,
    ), SyncGroupResponse, 2)
    return s.error_code, j.member_id, j.generation_id


def _classic_members(address: str, groups: list[str]) -> dict[str, set[str]]:
    d = roundtrip(address, DescribeGroupsRequest[5](groups=groups), DescribeGroupsResponse, 5)
    assert all(g.error_code == 0 for g in d.groups), d
    return {g.group_id: {m.member_id for m in g.members} for g in d.groups}


def _describe(address: str, groups: list[str]) -> Any:
    r = roundtrip(address, ConsumerGroupDescribeRequest[0](group_ids=groups), ConsumerGroupDescribeResponse, 0)
    return r.groups


def _members(address: str, groups: list[str]) -> dict[str, set[str]]:
    out = {}
    for g in _describe(address, groups):
        assert g.error_code in (0, 69), (g.group_id, g.error_code)  # 69: GROUP_ID_NOT_FOUND (no members ever)
        out[g.group_id] = {m.member_id for m in g.members}
    return out


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str, gw: GatewayProcess) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}\n--- gateway log:\n{gw.tail(60)}")


# -- a full disk ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _small_filesystem(where: Path, size_kb: int) -> Iterator[Path]:
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(where)],
        capture_output=True, text=True, check=False,
    )
    if done.returncode != 0:
        raise PermissionError(done.stderr.strip() or f"mount exited {done.returncode}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill(directory: Path) -> Path:
    """Take every free byte of the filesystem; the file to delete to free it again."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for chunk in (65536, 4096, 512, 64, 1):
            with contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * chunk)
    return filler


class _Disk:
    """Fill and free the gateway's state directory's space: tmpfs, else the process's RLIMIT_FSIZE."""

    def __init__(self, mode: str, state: Path) -> None:
        self.mode, self.state, self._filler, self._pid = mode, state, None, 0
        self._limits = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)

    def fill(self, gw: GatewayProcess) -> None:
        if self.mode == "tmpfs":
            self._filler = _fill(self.state.parent)
        else:
            assert gw.pid is not None
            self._pid = gw.pid
            size = sum(p.stat().st_size for p in self.state.glob("shard-*/*.log"))
            self._limits = resource.prlimit(gw.pid, resource.RLIMIT_FSIZE)
            # The soft limit only: raising it back needs no privilege.
            resource.prlimit(gw.pid, resource.RLIMIT_FSIZE, (size, self._limits[1]))

    def free(self) -> None:
        if self._filler is not None:
            self._filler.unlink()
            self._filler = None
        elif self._pid:
            with contextlib.suppress(ProcessLookupError):
                resource.prlimit(self._pid, resource.RLIMIT_FSIZE, self._limits)


@pytest.fixture
def full_disk_gateway(kafka: ProcessBackend, tmp_path: Path) -> Iterator[tuple[GatewayProcess, _Disk]]:
    reasons = []
    # GROUPGATE_TEST_FULL_DISK=rlimit exercises the fallback where mounting works too.
    forced = os.environ.get("GROUPGATE_TEST_FULL_DISK") == "rlimit"
    if not forced:
        try:
            with _small_filesystem(tmp_path / "fs", 1024) as fs:
                gw = _gateway(kafka, tmp_path, fs / "state")
                gw.start()
                try:
                    yield gw, _Disk("tmpfs", fs / "state")
                finally:
                    gw.stop()
                return
        except PermissionError as e:
            reasons.append(f"mount -t tmpfs: {e}")
    try:
        resource.prlimit(os.getpid(), resource.RLIMIT_FSIZE)
    except (OSError, AttributeError) as e:
        reasons.append(f"prlimit RLIMIT_FSIZE: {e}")
        pytest.skip("cannot fill a disk for the gateway: " + "; ".join(reasons))
    gw = _gateway(kafka, tmp_path, tmp_path / "state")
    gw.start()
    try:
        yield gw, _Disk("rlimit", tmp_path / "state")
    finally:
        gw.stop()


def test_a_full_disk_refuses_joins_cleanly_and_the_gateway_recovers_when_space_returns(
    full_disk_gateway: tuple[GatewayProcess, _Disk], kafka: ProcessBackend, make_topic: Any, names: Any
) -> None:
    gw, disk = full_disk_gateway
    topic = make_topic(2)
    groups = [f"fs-{names('g')}" for _ in range(6)]
    (coord,) = find_coordinator_endpoints(gw.bootstrap, groups[0], 3)
    address = coord.address
    acked: dict[str, dict[str, int]] = {g: {} for g in groups}  # group -> member -> epoch

    def join(group: str) -> int:
        member = str(uuid.uuid4())
        r = _heartbeat(address, group, member, 0, topic)
        if r.error_code == 0:
            acked[group][member] = r.member_epoch
        else:
            assert r.error_code in RETRIABLE, f"join answered {r.error_code}, not a retriable coordinator error"
        return int(r.error_code)

    classic = [f"fs-{names('classic')}" for _ in range(4)]
    classic_acked: dict[str, dict[str, int]] = {g: {} for g in classic}

    def classic_join(group: str) -> int:
        error, member, generation = _classic_join(address, group)
        if error == 0:
            classic_acked[group][member] = generation
        else:
            assert error in RETRIABLE, f"classic join answered {error}, not a retriable coordinator error"
        return int(error)

    for g in groups[:3]:
        assert join(g) == 0
    for g in classic[:2]:
        assert classic_join(g) == 0

    disk.fill(gw)
    # The log file's last page may still take a join or two; then writes fail. Every answer is either
    # a success (its records are durable) or retriable; never an error that leaves a member behind.
    answers = [classic_join(g) for g in classic[2:]] + [join(g) for g in groups for _ in range(4)]
    refused = sum(1 for a in answers if a != 0)
    assert refused >= len(answers) // 2, f"the full disk refused only {refused} of {len(answers)} joins"
    assert answers[-1] != 0
    # Not served from memory: what it holds may include changes that are not durable (the gateway
    # re-reads the log after a backoff, and the next write fails again while the disk is full).
    assert {g.error_code for g in _describe(address, groups)} == {NOT_COORDINATOR}
    d = roundtrip(address, DescribeGroupsRequest[5](groups=classic), DescribeGroupsResponse, 5)
    assert {g.error_code for g in d.groups} == {NOT_COORDINATOR}
    # Everyone else is still served: data traffic and a group the gateway does not manage.
    produced = produce_confluent(gw.bootstrap, topic, values("during", 5))
    assert len(produced) == 5
    other = names("unmanaged")
    (theirs,) = find_coordinator_endpoints(gw.bootstrap, other, 3)

    def unmanaged_answered() -> bool:
        d = roundtrip(theirs.address, DescribeGroupsRequest[5](groups=[other]), DescribeGroupsResponse, 5)
        # The cluster's own coordinator answers (retriable while a fresh broker loads __consumer_offsets).
        assert d.groups[0].error_code in (0, 14, 15, 16), d
        return d.groups[0].error_code == 0

    _wait(unmanaged_answered, 30, "the cluster to answer for an unmanaged group", gw)

    disk.free()
    _wait(lambda: all(g.error_code in (0, 69) for g in _describe(address, groups)), 30, "groups served again", gw)
    # Heartbeat at once: re-armed session timers expire members that stay silent.
    for g, ms in acked.items():
        for m, epoch in ms.items():
            r = _heartbeat(address, g, m, epoch, None)
            assert r.error_code == 0, f"acknowledged member {m} of {g} lost: {r.error_code}"
    for g, ms in classic_acked.items():
        for m, generation in ms.items():
            hb = HeartbeatRequest[2](group_id=g, generation_id=generation, member_id=m)
            r = roundtrip(address, hb, HeartbeatResponse, 2)
            assert r.error_code == 0, f"acknowledged classic member {m} of {g} lost: {r.error_code}"
    assert _members(address, groups) == {g: set(ms) for g, ms in acked.items()}
    # The refused classic joins are not in memory either: only members whose SyncGroup was answered.
    assert _classic_members(address, classic) == {g: set(ms) for g, ms in classic_acked.items()}

    # Timers are armed again: members that stop heartbeating expire (none lives on in memory only).
    _wait(
        lambda: not any(_members(address, groups).values()) and not any(_classic_members(address, classic).values()),
        SESSION_MS / 1000 * 3, "silent members to expire", gw,
    )

    gw.restart(hard=True)  # the log loads and replays cleanly
    report = verify(disk.state / "shard-00")
    assert report.loadable and not [d for d in report.damage if d.kind != "torn tail"], report.damage
    # The expirations were durable: nobody comes back.
    assert not any(_members(address, groups).values()) and not any(_classic_members(address, classic).values())


# -- a flipped bit in the middle of the log -------------------------------------------------------


def _serve_once(kafka: ProcessBackend, gw: GatewayProcess) -> subprocess.CompletedProcess[str]:
    cmd = [groupgate_binary(), "serve", "--upstream", kafka.bootstrap, "--listen", "127.0.0.1:0", *gw.extra_args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


def _state(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([groupgate_binary(), "state", *args], capture_output=True, text=True, timeout=60, check=False)


def _entry_offsets(segment: Path) -> list[int]:
    data = segment.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        out.append(pos)
        (length, _) = _HEAD.unpack_from(data, pos)
        pos += _HEAD.size + length
    return out


def test_a_flipped_bit_mid_log_refuses_to_start_and_repair_drops_exactly_it(
    kafka: ProcessBackend, tmp_path: Path, make_topic: Any, names: Any
) -> None:
    state = tmp_path / "state"
    gw = _gateway(kafka, tmp_path, state)
    topic = make_topic(2)
    groups = [f"fs-{names('g')}" for _ in range(8)]
    stayed: dict[str, set[str]] = {g: set() for g in groups}
    left: set[str] = set()
    gw.start()
    try:
        (coord,) = find_coordinator_endpoints(gw.bootstrap, groups[0], 3)
        address = coord.address
        joined: list[tuple[str, str, int]] = []
        for g in groups:
            for _ in range(3):
                member = str(uuid.uuid4())
                r = _heartbeat(address, g, member, 0, topic)
                assert r.error_code == 0
                joined.append((g, member, r.member_epoch))
        (segment,) = state.glob("shard-00/*.log")
        first_half = _entry_offsets(segment)
        # Then a third of the members leave: their removal is written after the first half.
        for i, (g, m, _) in enumerate(joined):
            if i % 3 == 0:
                assert _heartbeat(address, g, m, -1, None).error_code == 0
                left.add(m)
            else:
                stayed[g].add(m)
    finally:
        gw.stop()
    offsets = _entry_offsets(segment)
    assert len(offsets) > len(first_half) > 20
    victim_index = len(first_half) // 2
    victim, victim_end = offsets[victim_index], offsets[victim_index + 1]
    data = bytearray(segment.read_bytes())
    victim_bytes = bytes(data[victim:victim_end])
    data[victim] ^= 0x20  # the length field's top byte: the entry now "runs past the end of the file"
    segment.write_bytes(bytes(data))
    size = len(data)

    done = _serve_once(kafka, gw)
    assert done.returncode == 3, (done.returncode, done.stderr[-2000:])
    assert f"{segment} is damaged at byte {victim}" in done.stderr
    assert "Traceback" not in done.stderr
    assert segment.stat().st_size == size  # nothing was cut

    v = _state("verify", "--state-dir", str(state))
    assert v.returncode == 3 and f"{segment}: corrupt at bytes {victim}..{victim_end}" in v.stdout, v.stdout
    rep = _state("repair", "--state-dir", str(state))
    assert rep.returncode == 0, rep.stderr
    assert f"dropped: {segment}: corrupt at bytes {victim}..{victim_end} ({victim_end - victim} bytes, 1 entry)" in rep.stdout
    assert f"kept: {segment.name}: {len(offsets) - 1} entries" in rep.stdout, rep.stdout
    assert _state("verify", "--state-dir", str(state)).returncode == 0

    gw.start()  # the repaired log starts
    try:
        members = _members(address, groups)
        assert not set().union(*members.values()) & left, "a member that left came back"
        for g in groups:
            if g.encode() in victim_bytes:
                continue  # the dropped entry was this group's: the operator chose to lose it
            assert members[g] == stayed[g], g
    finally:
        gw.stop()
