"""The event loop's own floor per request: what a server that does nothing but frame and answer costs.

A child process runs an asyncio ``Protocol`` server on loopback that reads size-prefixed frames and
answers each with a fixed 24-byte frame, on asyncio's loop and on uvloop. This process sends 64-byte
frames one at a time over one connection (TCP_NODELAY) and reads each answer before the next, as
bench/request_cpu.py does against the gateway, and reads the server's CPU (user + system, /proc/PID/stat)
over the requests. What is left of the gateway's figure there above this one is the gateway's own path:
framing and bookkeeping, the codec, the group layer, the shard and the group logic
(docs/performance.md, "A group's turn and an answer with nothing to wait for").

The LAST line printed is ``key=value`` pairs: ``asyncio_cpu_us_per_request``, ``uvloop_cpu_us_per_request``
(medians of the rounds), ``load_avg_1m``.

    .venv/bin/python bench/loop_floor.py [--requests 20000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import statistics
import struct
from pathlib import Path
from typing import Any

_ANSWER = struct.pack(">i", 20) + bytes(20)
_REQUEST = struct.pack(">i", 60) + bytes(60)
_TICKS = os.sysconf("SC_CLK_TCK")


class _Answering(asyncio.Protocol):
    """Frames in, one fixed answer per frame out."""

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= 4:
            (size,) = struct.unpack_from(">i", self.buf)
            if len(self.buf) < 4 + size:
                return
            self.buf = self.buf[4 + size :]
            self.transport.write(_ANSWER)


def _serve(loop_name: str, port_out: Any) -> None:
    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_Answering, "127.0.0.1", 0)
        port_out.send(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()  # until terminated

    if loop_name == "uvloop":
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _round_trips(sock: socket.socket, n: int) -> None:
    for _ in range(n):
        sock.sendall(_REQUEST)
        got = 0
        while got < len(_ANSWER):
            chunk = sock.recv(256)
            if not chunk:
                raise RuntimeError("the server closed the connection")
            got += len(chunk)


def run(loop_name: str, requests: int) -> float:
    """The server's CPU per request, in microseconds."""
    ctx = mp.get_context("spawn")
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(loop_name, theirs), daemon=True)
    proc.start()
    try:
        port = mine.recv()
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _round_trips(sock, 2_000)  # warm-up
            assert proc.pid is not None
            before = _cpu_s(proc.pid)
            _round_trips(sock, requests)
            return (_cpu_s(proc.pid) - before) * 1e6 / requests
    finally:
        proc.terminate()
        proc.join(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    per: dict[str, list[float]] = {"asyncio": [], "uvloop": []}
    for rnd in range(args.rounds):
        for name in per:
            per[name].append(run(name, args.requests))
            print(f"round {rnd} {name}: {per[name][-1]:.1f} us CPU per request", flush=True)
    figures = " ".join(f"{name}_cpu_us_per_request={statistics.median(v):.1f}" for name, v in per.items())
    print(f"{figures} requests={args.requests} rounds={args.rounds} load_avg_1m={os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
