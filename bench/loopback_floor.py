"""The kernel's own cost of forwarding bytes between two loopback TCP connections: the floor under the
gateway's CPU per MB of passthrough traffic (bench/passthrough.py, docs/performance.md).

A source process writes ``--mb`` MB in 256 KiB writes to this process, which forwards them to a sink
process, and measures its own CPU (getrusage) per MB. No event loop, no framing, blocking sockets:

  - ``copy``: ``recv_into`` one 256 KiB buffer, then ``sendall`` of what was read;
  - ``splice``: ``os.splice`` from the socket into a pipe and from the pipe into the other socket, the
    bytes never in user space (Linux).

The LAST line printed is ``key=value`` pairs: ``copy_ms_per_mb``, ``splice_ms_per_mb`` (user + system,
medians of the rounds), ``load_avg_1m``.

    .venv/bin/python bench/loopback_floor.py [--mb 1024] [--rounds 2]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import socket
import statistics
import sys

CHUNK = 256 * 1024
_F_SETPIPE_SZ = 1031


def _source(port: int, total: int) -> None:
    s = socket.create_connection(("127.0.0.1", port))
    buf = b"x" * CHUNK
    sent = 0
    while sent < total:
        s.sendall(buf)
        sent += CHUNK
    s.close()


def _sink(port: int) -> None:
    s = socket.create_connection(("127.0.0.1", port))
    view = memoryview(bytearray(1 << 20))
    while s.recv_into(view):
        pass


def forward(mode: str, total: int) -> tuple[float, float]:
    """(user, system) ms of this process's CPU per MB forwarded."""
    la, lb = socket.create_server(("127.0.0.1", 0)), socket.create_server(("127.0.0.1", 0))
    src = mp.Process(target=_source, args=(la.getsockname()[1], total))
    dst = mp.Process(target=_sink, args=(lb.getsockname()[1],))
    src.start()
    dst.start()
    a, _ = la.accept()
    b, _ = lb.accept()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    moved = 0
    if mode == "copy":
        view = memoryview(bytearray(CHUNK))
        while k := a.recv_into(view):
            b.sendall(view[:k])
            moved += k
    else:
        rp, wp = os.pipe()
        try:
            import fcntl

            fcntl.fcntl(wp, _F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass
        while k := os.splice(a.fileno(), wp, CHUNK):
            done = 0
            while done < k:
                done += os.splice(rp, b.fileno(), k - done)
            moved += k
        os.close(rp)
        os.close(wp)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    b.close()
    a.close()
    src.join()
    dst.join()
    mb = moved / 1e6
    return (r1.ru_utime - r0.ru_utime) * 1000 / mb, (r1.ru_stime - r0.ru_stime) * 1000 / mb


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=1024, help="MB forwarded per run")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    modes = ["copy"] + (["splice"] if hasattr(os, "splice") else [])
    totals: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(args.rounds):
        for mode in modes:
            user, system = forward(mode, args.mb * 1_000_000 // CHUNK * CHUNK)
            totals[mode].append(user + system)
            print(f"round {r} {mode:6s} user {user:.3f} system {system:.3f} ms per MB", flush=True)
    summary = {f"{m}_ms_per_mb": round(statistics.median(v), 3) for m, v in totals.items()}
    summary["load_avg_1m"] = round(os.getloadavg()[0], 1)
    print(" ".join(f"{k}={v}" for k, v in summary.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
