"""The gateway's CPU per request on its two hottest paths, read from the process's own CPU clock.

``groupgate dev`` (an embedded broker, a child JVM, with the gateway in front of it in the command's own
process) is started, then over one connection each:
  - ``passthrough``: ListOffsets requests forwarded to the broker as bytes (header parsed, nothing decoded);
  - ``heartbeat``: steady ConsumerGroupHeartbeats of a joined KIP-848 member (decoded, answered by the
    coordinator core, nothing written).
Requests go one at a time (a round trip each), so the figure is the gateway's work per request, not
queueing. The gateway's CPU (user + system, /proc/PID/stat, the broker excluded) over a run divided by the
requests is the figure; rounds alternate the two paths and the medians are printed. CPU time, unlike
wall time, is barely moved by other work on the machine, which is why this bench reads it: figures taken
at different commits on a shared machine stay comparable. The LAST line is ``key=value`` pairs.

    .venv/bin/python bench/request_cpu.py [--requests 20000] [--rounds 3]
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
            # Warm-up: the first requests of each kind pay imports and caches.
            passthrough(conn, topic, 500)
            epoch = heartbeat(conn, group, member, epoch, topic, 500)
            per: dict[str, list[float]] = {"passthrough": [], "heartbeat": []}
            for rnd in range(args.rounds):
                order = ["passthrough", "heartbeat"] if rnd % 2 == 0 else ["heartbeat", "passthrough"]
                for path in order:
                    c0 = cpu_s(proc.pid)
                    if path == "passthrough":
                        passthrough(conn, topic, args.requests)
                    else:
                        epoch = heartbeat(conn, group, member, epoch, topic, args.requests)
                    per[path].append((cpu_s(proc.pid) - c0) * 1e6 / args.requests)
                    print(f"round {rnd} {path}: {per[path][-1]:.1f} us CPU per request", flush=True)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
    load = os.getloadavg()[0]
    print(
        f"passthrough_cpu_us_per_request={statistics.median(per['passthrough']):.1f} "
        f"heartbeat_cpu_us_per_request={statistics.median(per['heartbeat']):.1f} "
        f"requests={args.requests} rounds={args.rounds} load_average_1m={load:.1f}"
    )


if __name__ == "__main__":
    main()
