"""The gateway's CPU per request on its hottest paths, read from the process's own CPU clock.

``groupgate dev`` (an embedded broker, a child JVM, with the gateway in front of it in the command's own
process) is started, then over one connection each:
  - ``passthrough``: ListOffsets requests forwarded to the broker as bytes (header parsed, nothing decoded);
  - ``heartbeat``: steady ConsumerGroupHeartbeats of a joined KIP-848 member (decoded, answered by the
    coordinator core, nothing written);
  - ``classic_heartbeat``: steady Heartbeats (v4) of a joined classic member (its generation, stable group);
  - ``commit``: OffsetCommits (v9) of the KIP-848 member with its member epoch, one partition each;
  - ``classic_commit``: OffsetCommits (v9) of the classic member with its generation, one partition each;
  - ``pipelined_classic_heartbeat``: the classic member's Heartbeats sent 20 at a time in one write, the
    20 answers read before the next 20 (as a client that pipelines, or a proxy for many members).
The commits are checked by the coordinator and written through to the cluster (docs/gateway.md, "Offsets
stay in the cluster"), so their figure includes the gateway's side of that round trip.
Requests go one at a time (a round trip each, but the pipelined path), so the figure is the gateway's work
per request, not queueing. The gateway's CPU (user + system, /proc/PID/stat, the broker excluded) over a run divided by the
requests is the figure; rounds rotate the order of the paths and the medians are printed. Between two
timed runs both members heartbeat once (untimed), so that neither's session runs out during the others. CPU time, unlike
wall time, is barely moved by other work on the machine, which is why this bench reads it: figures taken
at different commits on a shared machine stay comparable. The LAST line is ``key=value`` pairs.

    .venv/bin/python bench/request_cpu.py [--requests 20000] [--rounds 3] [--paths heartbeat,commit]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse

try:  # the gateway's own KIP-848 schemas (gateway/wire/protocol; gateway/protocol before the packages)
    from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
except ImportError:  # pragma: no cover - an older checkout, for before/after figures
    from gateway.protocol.messages import (  # type: ignore[no-redef]
        ConsumerGroupHeartbeatRequest,
        ConsumerGroupHeartbeatResponse,
    )

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime of the process itself


class Conn:
    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cid = 0

    def call(self, request: Any, response_class: Any, version: int) -> Any:
        self.cid += 1
        request.with_header(correlation_id=self.cid, client_id="groupgate-bench-cpu")
        self.sock.sendall(request.encode(version=version, header=True, framed=True))
        (size,) = struct.unpack(">i", self._read(4))
        return response_class[version].decode(self._read(size), version=version, header=True)

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)


def _hb(group: str, member: str, epoch: int, topic: str) -> Any:
    join = epoch == 0
    return ConsumerGroupHeartbeatRequest[1](  # type: ignore[misc]
        group_id=group, member_id=member, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30000 if join else -1, subscribed_topic_names=[topic] if join else None,
        subscribed_topic_regex=None, server_assignor=None, topic_partitions=[] if join else None,
    )


def _list_offsets(topic: str) -> Any:
    t = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest[7](  # type: ignore[misc]
        replica_id=-1, isolation_level=0, topics=[t(name=topic, partitions=[
            t.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])],
    )


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0: one topic, no user data."""
    return struct.pack(">hi", 0, 1) + _string(topic) + struct.pack(">i", -1)


def _assignment(topic: str) -> bytes:
    """ConsumerProtocolAssignment v0: partition 0 of the topic, no user data."""
    return struct.pack(">hi", 0, 1) + _string(topic) + struct.pack(">iii", 1, 0, -1)


class Classic:
    """A classic consumer group member joined alone (it is its own leader), at its generation."""

    def __init__(self, conn: Conn, group: str, topic: str) -> None:
        self.conn, self.group, self.topic = conn, group, topic
        self.member, self.generation = "", -1

    def join(self) -> None:
        proto = JoinGroupRequest.JoinGroupRequestProtocol
        deadline = time.monotonic() + 60
        while True:
            r = self.conn.call(JoinGroupRequest[9](  # type: ignore[misc]
                group_id=self.group, session_timeout_ms=45000, rebalance_timeout_ms=30000,
                member_id=self.member, group_instance_id=None, protocol_type="consumer",
                protocols=[proto(name="range", metadata=_subscription(self.topic))], reason=None,
            ), JoinGroupResponse, 9)
            if r.error_code == 79:  # MEMBER_ID_REQUIRED: join again with the id handed out
                self.member = r.member_id
                continue
            if r.error_code == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"JoinGroup: error {r.error_code}")
            time.sleep(0.3)
        self.member, self.generation = r.member_id, r.generation_id
        assign = SyncGroupRequest.SyncGroupRequestAssignment
        s = self.conn.call(SyncGroupRequest[5](  # type: ignore[misc]
            group_id=self.group, generation_id=self.generation, member_id=self.member, group_instance_id=None,
            protocol_type="consumer", protocol_name="range",
            assignments=[assign(member_id=self.member, assignment=_assignment(self.topic))],
        ), SyncGroupResponse, 5)
        if s.error_code != 0:
            raise RuntimeError(f"SyncGroup: error {s.error_code}")

    def heartbeat(self, n: int) -> None:
        req = HeartbeatRequest[4](  # type: ignore[misc]
            group_id=self.group, generation_id=self.generation, member_id=self.member, group_instance_id=None,
        )
        for _ in range(n):
            r = self.conn.call(req, HeartbeatResponse, 4)
            if r.error_code != 0:
                raise RuntimeError(f"classic heartbeat: error {r.error_code}")

    def pipelined_heartbeats(self, n: int, depth: int = 20) -> None:
        req = HeartbeatRequest[4](  # type: ignore[misc]
            group_id=self.group, generation_id=self.generation, member_id=self.member, group_instance_id=None,
        )
        conn = self.conn
        for start in range(0, n, depth):
            first = conn.cid + 1
            out = bytearray()
            for _ in range(min(depth, n - start)):
                conn.cid += 1
                req.with_header(correlation_id=conn.cid, client_id="groupgate-bench-cpu")
                out += req.encode(version=4, header=True, framed=True)
            conn.sock.sendall(out)
            for corr in range(first, conn.cid + 1):
                (size,) = struct.unpack(">i", conn._read(4))
                payload = conn._read(size)
                (answered,) = struct.unpack_from(">i", payload)
                r = HeartbeatResponse[4].decode(payload, version=4, header=True)
                if answered != corr or r.error_code != 0:
                    raise RuntimeError(f"pipelined heartbeat {corr}: error {r.error_code}, answer to {answered}")


def _commit(group: str, generation_or_epoch: int, member: str, topic: str, offset: int) -> Any:
    t = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest[9](  # type: ignore[misc]
        group_id=group, generation_id_or_member_epoch=generation_or_epoch, member_id=member,
        group_instance_id=None, topics=[t(name=topic, partitions=[t.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata="")])],
    )


def commits(conn: Conn, group: str, generation_or_epoch: int, member: str, topic: str, n: int) -> None:
    for i in range(n):
        r = conn.call(_commit(group, generation_or_epoch, member, topic, i), OffsetCommitResponse, 9)
        code = r.topics[0].partitions[0].error_code
        if code != 0:
            raise RuntimeError(f"OffsetCommit: error {code}")


def start_dev(work: Path) -> tuple[subprocess.Popen[str], str, str]:
    binary = Path(sys.executable).parent / "groupgate"
    proc = subprocess.Popen(
        [str(binary), "dev", "--state-dir", str(work), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("groupgate dev exited before it printed its addresses")
        if line.startswith("bootstrap="):
            parts = dict(p.split("=", 1) for p in line.split())
            return proc, parts["bootstrap"], parts["upstream"]
    raise RuntimeError("groupgate dev did not start in time")


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)


def passthrough(conn: Conn, topic: str, n: int) -> None:
    req = _list_offsets(topic)
    for _ in range(n):
        r = conn.call(req, ListOffsetsResponse, 7)
        if r.topics[0].partitions[0].error_code != 0:
            raise RuntimeError(f"ListOffsets: error {r.topics[0].partitions[0].error_code}")


def heartbeat(conn: Conn, group: str, member: str, epoch: int, topic: str, n: int) -> int:
    for _ in range(n):
        r = conn.call(_hb(group, member, epoch, topic), ConsumerGroupHeartbeatResponse, 1)
        if r.error_code != 0:
            raise RuntimeError(f"heartbeat: error {r.error_code}")
        epoch = r.member_epoch
    return epoch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=20_000, help="requests per path and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--paths", default="", help="comma-separated paths to time (default: all), e.g. to profile one")
    args = ap.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="groupgate-bench-cpu-") as work:
        proc, bootstrap, _ = start_dev(Path(work))
        try:
            host, port = bootstrap.rsplit(":", 1)
            topic = f"bench-cpu-{uuid.uuid4().hex[:8]}"
            create_topic(bootstrap, topic)
            conn = Conn(host, int(port))
            group, member = f"bench-cpu-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
            deadline = time.monotonic() + 60
            while True:  # the coordinator may still be loading: join as a client would, again
                r = conn.call(_hb(group, member, 0, topic), ConsumerGroupHeartbeatResponse, 1)
                if r.error_code == 0:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"join: error {r.error_code}")
                time.sleep(0.3)
            epoch = r.member_epoch
            classic = Classic(conn, f"bench-cpu-classic-{uuid.uuid4().hex[:8]}", topic)
            classic.join()

            def run(path: str, n: int) -> None:
                nonlocal epoch
                if path == "passthrough":
                    passthrough(conn, topic, n)
                elif path == "heartbeat":
                    epoch = heartbeat(conn, group, member, epoch, topic, n)
                elif path == "classic_heartbeat":
                    classic.heartbeat(n)
                elif path == "pipelined_classic_heartbeat":
                    classic.pipelined_heartbeats(n)
                elif path == "commit":
                    commits(conn, group, epoch, member, topic, n)
                else:
                    commits(conn, classic.group, classic.generation, classic.member, topic, n)

            paths = [
                "passthrough", "heartbeat", "classic_heartbeat", "commit", "classic_commit", "pipelined_classic_heartbeat",
            ]
            if args.paths:
                unknown = set(args.paths.split(",")) - set(paths)
                if unknown:
                    raise SystemExit(f"unknown paths: {', '.join(sorted(unknown))} (known: {', '.join(paths)})")
                paths = [p for p in paths if p in args.paths.split(",")]
            # Warm-up: the first requests of each kind pay imports and caches.
            for path in paths:
                run(path, 500)
            per: dict[str, list[float]] = {path: [] for path in paths}
            for rnd in range(args.rounds):
                order = paths[rnd % len(paths):] + paths[:rnd % len(paths)]
                for path in order:
                    epoch = heartbeat(conn, group, member, epoch, topic, 1)  # keep both sessions alive
                    classic.heartbeat(1)
                    c0 = cpu_s(proc.pid)
                    run(path, args.requests)
                    per[path].append((cpu_s(proc.pid) - c0) * 1e6 / args.requests)
                    print(f"round {rnd} {path}: {per[path][-1]:.1f} us CPU per request", flush=True)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    load = os.getloadavg()[0]
    figures = " ".join(f"{path}_cpu_us_per_request={statistics.median(v):.1f}" for path, v in per.items())
    print(f"{figures} requests={args.requests} rounds={args.rounds} load_average_1m={load:.1f}")


if __name__ == "__main__":
    main()
