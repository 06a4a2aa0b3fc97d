"""New connections on a full core: does a server whose event loop is busy with the connections it has still
accept and answer new ones? asyncio's loop against uvloop.

A server process pinned to one core (the second when the machine has two) answers every 8-byte message by
echoing it after about ``--work-us`` of CPU, as a gateway answers a request. A client process opens
``--busy`` connections that ping-pong without pause, so the server's core stays full. Once they run, the
driver opens ``--new`` connections, sends one message on each and counts the answers within ``--window``
seconds. Every second the server prints how many connections it has been handed and from how many it has
read. Each loop in one run, one after the other: ``asyncio`` and ``uvloop`` with the loop's own
``create_server``, ``asyncio+acceptor`` and ``uvloop+acceptor`` with the gateway's listener
(gateway/net/acceptor.py), which accepts every waiting connection on either loop. The last line is
``key=value`` figures.

uvloop's libuv accepts one connection per turn of its loop (libuv since 1.45: "don't accept() connections
in a loop"); asyncio's loop accepts up to the listen backlog per turn. With the core full a turn serves
every busy connection, so on uvloop new clients wait for as many turns as there are clients before them.

    .venv/bin/python bench/accept_under_load.py [--busy 2000] [--new 2000] [--work-us 150] [--window 40] \
        [--loops asyncio,uvloop,asyncio+acceptor,uvloop+acceptor]

Only loopback; every process stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import selectors
import socket
import sys
import time
from typing import Any


def _serve(loop_name: str, work_us: float, ports: Any, stop_after_s: float) -> None:
    if loop_name.startswith("uvloop"):
        import uvloop

        uvloop.install()
    made = [0]
    read = [0]

    class Echo(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            self.seen = False
            made[0] += 1

        def data_received(self, data: bytes) -> None:
            if not self.seen:
                self.seen = True
                read[0] += 1
            end = time.perf_counter() + work_us / 1e6 * max(1, len(data) // 8)
            while time.perf_counter() < end:
                pass
            self.transport.write(data)

    async def main() -> None:
        if loop_name.endswith("+acceptor"):
            from gateway.net import acceptor

            server: Any = await acceptor.listen(Echo, "127.0.0.1", 0, backlog=4096)
        else:
            server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0, backlog=4096)
        ports.put(server.sockets[0].getsockname()[1])
        began = time.monotonic()
        while time.monotonic() - began < stop_after_s:
            await asyncio.sleep(1)
            print(f"  {loop_name} server: {made[0]} connections handed to it, {read[0]} read from", flush=True)

    asyncio.run(main())


def _ping_pong(port: int, count: int, stop_after_s: float) -> None:
    sel = selectors.DefaultSelector()
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port))
        s.setblocking(False)
        s.send(b"x" * 8)
        sel.register(s, selectors.EVENT_READ)
    began = time.monotonic()
    while time.monotonic() - began < stop_after_s:
        for key, _ in sel.select(1):
            try:
                if key.fileobj.recv(4096):  # type: ignore[union-attr]
                    key.fileobj.send(b"x" * 8)  # type: ignore[union-attr]
            except OSError:
                pass


def run(loop_name: str, busy: int, new: int, work_us: float, window_s: float) -> dict[str, float]:
    ports: Any = mp.Queue()
    lifetime = window_s + 60
    server = mp.Process(target=_serve, args=(loop_name, work_us, ports, lifetime), daemon=True)
    server.start()
    port = ports.get(timeout=30)
    if (os.cpu_count() or 1) >= 2:
        os.sched_setaffinity(server.pid, {1})  # type: ignore[arg-type]
    clients = mp.Process(target=_ping_pong, args=(port, busy, lifetime), daemon=True)
    clients.start()
    time.sleep(5)  # the busy connections are open (the kernel queues what the server has not accepted)
    sel = selectors.DefaultSelector()
    began = time.perf_counter()
    for _ in range(new):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.setblocking(False)
        s.send(b"y" * 8)
        sel.register(s, selectors.EVENT_READ)
    answered: list[float] = []
    deadline = began + window_s
    while len(answered) < new and time.perf_counter() < deadline:
        for key, _ in sel.select(0.5):
            sel.unregister(key.fileobj)
            answered.append(time.perf_counter() - began)
            key.fileobj.close()  # type: ignore[union-attr]
    server.terminate()
    clients.terminate()
    answered.sort()
    p50 = answered[len(answered) // 2] if answered else -1.0
    print(f"{loop_name}: {len(answered)} of {new} new connections answered within {window_s:g} s"
          f" (p50 {p50:.2f} s), {busy} busy connections, {work_us:g} us of work per message", flush=True)
    return {f"{loop_name}_answered": len(answered), f"{loop_name}_p50_s": round(p50, 2)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--busy", type=int, default=2000, help="connections that keep the server's core full")
    p.add_argument("--new", type=int, default=2000, help="connections opened once the core is full")
    p.add_argument("--work-us", type=float, default=150.0, help="CPU the server spends per message")
    p.add_argument("--window", type=float, default=40.0, help="seconds the new connections may wait")
    p.add_argument("--loops", default="asyncio,uvloop,asyncio+acceptor,uvloop+acceptor")
    args = p.parse_args()
    figures: dict[str, float] = {}
    for loop_name in args.loops.split(","):
        figures.update(run(loop_name, args.busy, args.new, args.work_us, args.window))
    load = os.getloadavg()[0]
    print(" ".join(f"{k}={v}" for k, v in figures.items())
          + f" busy={args.busy} new={args.new} work_us={args.work_us:g} load_avg_1m={load:.1f} cpus={os.cpu_count()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
