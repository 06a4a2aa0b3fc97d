"""What handing decoded requests between processes costs: the unmeasured step of serving one group's
members from every core (docs/performance.md, "Where a request's CPU goes, by layer").

That design has processes on every core read, decode and answer members' connections, and hand each
group's decoded requests in batches to the process holding the group's shard, which runs the group logic
and hands the answers back. Whether it pays depends on what the hand-over costs the shard's process per
request, against what that process spends per request today (the whole path: loop, connection, codec,
group layer; bench/request_cpu.py).

Here, two processes joined by a socket pair: the "worker" (this process) sends batches of steady
ConsumerGroupHeartbeat requests, reduced to the fields the group logic reads plus the connection's
number and the correlation id; the "owner" (a child) receives a batch, unpacks it, makes an answer per
request (a tuple: error, member id, epoch, interval) and sends the batch of answers back; one batch in
flight at a time. Serialisations: ``pickle`` (protocol 5) and ``marshal`` (builtin types only). Each
process's CPU (user + system, its own getrusage) over a run divided by the requests is the figure. For context, in the same
run: kafka-python decoding one ConsumerGroupHeartbeat (v1) and encoding its answer, the codec work a
worker would take from the owner.

    .venv/bin/python bench/handover_cost.py [--requests 200000] [--batches 1,10,100] [--rounds 3]

The LAST line is ``key=value`` pairs (microseconds of CPU per request).
"""

from __future__ import annotations

import argparse
import marshal
import os
import pickle
import resource
import socket
import statistics
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

_LEN = struct.Struct(">I")
CODECS = {"pickle": (lambda o: pickle.dumps(o, protocol=5), pickle.loads), "marshal": (marshal.dumps, marshal.loads)}


def _own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _read(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


def _send(sock: socket.socket, payload: bytes) -> None:
    sock.sendall(_LEN.pack(len(payload)) + payload)


def _recv(sock: socket.socket) -> bytes:
    (n,) = _LEN.unpack(_read(sock, 4))
    return _read(sock, n)


def owner(fd: int) -> None:
    """The shard's process: unpack each batch, answer every request, send the answers back."""
    sock = socket.socket(fileno=fd)
    while True:
        head = _recv(sock)
        if head == b"stop":
            return
        dumps, loads = CODECS[head.decode()]
        _send(sock, struct.pack(">d", _own_cpu()))  # its CPU clock at the start and the end of each run
        while True:
            payload = _recv(sock)
            if payload == b"end":
                _send(sock, struct.pack(">d", _own_cpu()))
                break
            answers = []
            for conn, corr, _group, member, epoch, _instance, _rack, _rebalance, _topics, _regex, _owned in loads(payload):
                answers.append((conn, corr, 0, member, epoch, 5000, None))
            _send(sock, dumps(answers))


def _requests(n: int) -> list[tuple[Any, ...]]:
    """Steady heartbeats of members of 100 groups: what the group logic reads, and where to answer."""
    members = [str(uuid.uuid4()) for _ in range(1000)]
    return [
        (i % 5000, i, f"group-{i % 100}", members[i % 1000], 7, None, None, -1, None, None, None)
        for i in range(n)
    ]


def handover(sock: socket.socket, codec: str, batch: int, requests: list[tuple[Any, ...]]) -> tuple[float, float, float]:
    """(worker us, owner us, wall us) per request for one run."""
    dumps, loads = CODECS[codec]
    _send(sock, codec.encode())
    (o0,) = struct.unpack(">d", _recv(sock))
    w0, t0 = _own_cpu(), time.perf_counter()
    answered = 0
    for start in range(0, len(requests), batch):
        _send(sock, dumps(requests[start:start + batch]))
        answered += len(loads(_recv(sock)))
    _send(sock, b"end")
    (o1,) = struct.unpack(">d", _recv(sock))
    w1, t1 = _own_cpu(), time.perf_counter()
    assert answered == len(requests), (answered, len(requests))
    n = len(requests)
    return (w1 - w0) / n * 1e6, (o1 - o0) / n * 1e6, (t1 - t0) / n * 1e6


def codec_cost(n: int) -> float:
    """kafka-python decoding one steady ConsumerGroupHeartbeat v1 and encoding its answer, us each."""
    from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse

    req = ConsumerGroupHeartbeatRequest[1](  # type: ignore[misc]
        group_id="group-1", member_id=str(uuid.uuid4()), member_epoch=7, instance_id=None, rack_id=None,
        rebalance_timeout_ms=-1, subscribed_topic_names=None, subscribed_topic_regex=None, server_assignor=None,
        topic_partitions=None,
    )
    raw = req.encode(version=1)
    resp = ConsumerGroupHeartbeatResponse[1](  # type: ignore[misc]
        throttle_time_ms=0, error_code=0, error_message=None, member_id=req.member_id, member_epoch=7,
        heartbeat_interval_ms=5000, assignment=None,
    )
    c0 = _own_cpu()
    for _ in range(n):
        ConsumerGroupHeartbeatRequest[1].decode(raw, version=1)  # type: ignore[misc]
        resp.encode(version=1)
    return (_own_cpu() - c0) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--batches", default="1,10,100")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--owner", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.owner is not None:
        owner(args.owner)
        return
    batches = [int(b) for b in args.batches.split(",")]
    requests = _requests(args.requests)
    mine, theirs = socket.socketpair()
    child = subprocess.Popen([sys.executable, __file__, "--owner", str(theirs.fileno())], pass_fds=(theirs.fileno(),))
    theirs.close()
    figures: dict[str, list[float]] = {}
    try:
        for rnd in range(1, args.rounds + 1):
            for codec in CODECS:
                for batch in batches:
                    worker_us, owner_us, wall_us = handover(mine, codec, batch, requests)
                    for side, v in (("worker", worker_us), ("owner", owner_us), ("wall", wall_us)):
                        figures.setdefault(f"{codec}_b{batch}_{side}_us", []).append(v)
                    print(f"round {rnd} {codec} batch {batch}: owner {owner_us:.2f} us, worker {worker_us:.2f} us "
                          f"CPU per request, {wall_us:.2f} us wall", flush=True)
            c = codec_cost(max(args.requests // 10, 1000))
            figures.setdefault("kafka_python_heartbeat_codec_us", []).append(c)
            print(f"round {rnd} kafka-python heartbeat decode + answer encode: {c:.2f} us", flush=True)
    finally:
        _send(mine, b"stop")
        child.wait(10)
    medians = " ".join(f"{k}={statistics.median(v):.2f}" for k, v in figures.items())
    print(f"{medians} requests={args.requests} rounds={args.rounds} load_average_1m={os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
