"""The cluster state store's write latency: how long a shard's ``sync()`` takes, by linger and retry backoff.

One embedded broker; for each variant a fresh one-partition state topic and one shard log
(``gateway/state/topic.py``, the store the gateway runs), then:
  - ``sequential``: one writer appends a record (200 bytes) and waits for its ``sync()``, over and over,
    as a lone group changing on an idle shard does: every sync is a transaction of its own, right behind
    the previous one;
  - ``concurrent``: ``--writers`` writers on the same shard at once, as the groups of a busy shard: syncs
    share transactions (what is appended while one is in flight goes into the next).
Variants: ``append_linger_ms`` 5 (the earlier default) and 0 (today's), each with aiokafka's own 20 ms
retry after CONCURRENT_TRANSACTIONS and with the store's 1 ms (``CONCURRENT_TRANSACTIONS_BACKOFF_S``). Prints
per variant and mode the syncs per second, p50 / p99 of a sync, and the transactions committed; the LAST
line is ``key=value`` pairs.

``--preopen`` compares the store's defaults with and without a transaction opened ahead of each write
(``preopen_transactions``), alternating the two over ``--rounds``, in three modes: ``sequential`` (as
above), ``spaced`` (one writer that waits ``--gap-ms`` between a sync's end and its next append, as a
client does between a group change's answer and its next request) and ``concurrent``.

``--busy-turn-ms N`` measures something else: the store's defaults only (linger 0, 1 ms retry), with the
calling event loop kept busy, as a gateway's loop is when its core is full: callbacks that burn CPU and
schedule themselves again, so that every turn of the loop takes about N ms, as when thousands of
connections have a request ready. Before the store ran its clients on a loop of their own, every step of a
transaction waited for such a turn.

    .venv/bin/python bench/state_writes.py [--syncs 300] [--writers 8] [--busy-turn-ms 100]
    .venv/bin/python bench/state_writes.py --preopen [--rounds 3] [--gap-ms 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka.producer import sender as aiokafka_sender  # noqa: E402

from gateway.ops.embedded_kafka import EmbeddedKafka  # noqa: E402
from gateway.state import topic as state_topic  # noqa: E402
from gateway.state.log import Record  # noqa: E402
from gateway.state.topic import KafkaStateStore  # noqa: E402


def _hog(turn_ms: float, stop: asyncio.Event, callbacks: int = 100) -> None:
    """Keep the running loop busy: ``callbacks`` callbacks per turn, each burning turn_ms / callbacks."""
    loop = asyncio.get_running_loop()
    each = turn_ms / 1000 / callbacks

    def spin() -> None:
        end = time.perf_counter() + each
        while time.perf_counter() < end:
            pass
        if not stop.is_set():
            loop.call_soon(spin)

    for _ in range(callbacks):
        loop.call_soon(spin)


async def _busy(bootstrap: str, syncs: int, writers: int, turn_ms: float) -> dict[str, float]:
    await _variant(bootstrap, 0, state_topic.CONCURRENT_TRANSACTIONS_BACKOFF_S, 20, 1)  # warm-up
    figures: dict[str, float] = {}
    for label, busy in (("idle", 0.0), ("busy", turn_ms)):
        stop = asyncio.Event()
        if busy:
            _hog(busy, stop)
        try:
            got = await _variant(bootstrap, 0, state_topic.CONCURRENT_TRANSACTIONS_BACKOFF_S, syncs, writers)
        finally:
            stop.set()
        for mode in ("sequential", "concurrent"):
            print(f"loop {label:4} ({busy:g} ms turns), {mode:10}: {got[f'{mode}_per_s']:6.0f} syncs/s  "
                  f"p50 {got[f'{mode}_p50_ms']:8.2f} ms  p99 {got[f'{mode}_p99_ms']:8.2f} ms  "
                  f"transactions {got[f'{mode}_transactions']:.0f}", flush=True)
        figures.update({f"{label}_{k}": v for k, v in got.items()})
    figures["turn_ms"] = turn_ms
    return figures


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def _variant(
    bootstrap: str, linger_ms: float, backoff_s: float, syncs: int, writers: int, *,
    preopen: bool = True, gap_ms: float | None = None,
) -> dict[str, float]:
    aiokafka_sender.BACKOFF_OVERRIDE = backoff_s
    name = f"bench-state-writes-{uuid.uuid4().hex[:8]}"
    store = KafkaStateStore(bootstrap, shards=1, topic=name, transactional_id_prefix=f"{name}-",
                            append_linger_ms=linger_ms, preopen_transactions=preopen)
    await store.open()
    shard = await store.open_shard(0)
    out: dict[str, float] = {}
    modes = [("sequential", 1, 0.0), ("concurrent", writers, 0.0)]
    if gap_ms is not None:
        modes.insert(1, ("spaced", 1, gap_ms / 1000))
    try:
        for mode, count, gap_s in modes:
            latencies: list[float] = []
            before = store.transactions

            async def writer(i: int, n: int, latencies: list[float] = latencies, gap_s: float = gap_s) -> None:
                for j in range(n):
                    if gap_s:
                        await asyncio.sleep(gap_s)
                    began = time.perf_counter()
                    shard.append([Record(f"w{i}-{j % 16}".encode(), b"x" * 200)])
                    await shard.sync()
                    latencies.append((time.perf_counter() - began) * 1000)

            began = time.perf_counter()
            await asyncio.gather(*(writer(i, max(1, syncs // count)) for i in range(count)))
            elapsed = time.perf_counter() - began
            out[f"{mode}_per_s"] = round(len(latencies) / elapsed)
            out[f"{mode}_p50_ms"] = round(_pct(latencies, 0.5), 2)
            out[f"{mode}_p99_ms"] = round(_pct(latencies, 0.99), 2)
            out[f"{mode}_transactions"] = store.transactions - before
    finally:
        await shard.aclose()
        await store.close()
    return out


async def _run(bootstrap: str, syncs: int, writers: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    for linger_ms in (5, 0):
        for backoff_s, label in ((0.02, "aiokafka20ms"), (state_topic.CONCURRENT_TRANSACTIONS_BACKOFF_S, "store1ms")):
            await _variant(bootstrap, linger_ms, backoff_s, 20, 1)  # warm-up: the topic's leader, the coordinator
            got = await _variant(bootstrap, linger_ms, backoff_s, syncs, writers)
            key = f"linger{linger_ms:g}_{label}"
            for mode in ("sequential", "concurrent"):
                print(f"linger {linger_ms:g} ms, CONCURRENT_TRANSACTIONS retry {backoff_s * 1000:g} ms, {mode:10}: "
                      f"{got[f'{mode}_per_s']:6.0f} syncs/s  p50 {got[f'{mode}_p50_ms']:6.2f} ms  "
                      f"p99 {got[f'{mode}_p99_ms']:7.2f} ms  transactions {got[f'{mode}_transactions']:.0f}", flush=True)
            figures.update({f"{key}_{k}": v for k, v in got.items()})
    aiokafka_sender.BACKOFF_OVERRIDE = state_topic.CONCURRENT_TRANSACTIONS_BACKOFF_S
    return figures


async def _preopen(bootstrap: str, syncs: int, writers: int, rounds: int, gap_ms: float) -> dict[str, float]:
    backoff_s = state_topic.CONCURRENT_TRANSACTIONS_BACKOFF_S
    await _variant(bootstrap, 0, backoff_s, 20, 1)  # warm-up: the topic's leader, the coordinator
    runs: dict[str, list[dict[str, float]]] = {"begun": [], "ahead": []}
    for r in range(rounds):
        for label, preopen in (("begun", False), ("ahead", True)):
            got = await _variant(bootstrap, 0, backoff_s, syncs, writers, preopen=preopen, gap_ms=gap_ms)
            runs[label].append(got)
            for mode in ("sequential", "spaced", "concurrent"):
                print(f"round {r + 1}, transaction {'opened ahead' if preopen else 'begun per write'}, {mode:10}: "
                      f"{got[f'{mode}_per_s']:6.0f} syncs/s  p50 {got[f'{mode}_p50_ms']:6.2f} ms  "
                      f"p99 {got[f'{mode}_p99_ms']:7.2f} ms  transactions {got[f'{mode}_transactions']:.0f}", flush=True)
    figures: dict[str, float] = {}
    for label, got_runs in runs.items():
        for key in got_runs[0]:
            ordered = sorted(g[key] for g in got_runs)
            figures[f"{label}_{key}"] = ordered[len(ordered) // 2]  # the median of the rounds
    for mode in ("sequential", "spaced", "concurrent"):
        figures[f"{mode}_p50_ratio"] = round(figures[f"ahead_{mode}_p50_ms"] / figures[f"begun_{mode}_p50_ms"], 2)
    figures["gap_ms"] = gap_ms
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--syncs", type=int, default=300, help="syncs per mode and variant")
    p.add_argument("--writers", type=int, default=8, help="concurrent writers of the concurrent mode")
    p.add_argument("--busy-turn-ms", type=float, default=0.0,
                   help="the store's defaults only, idle and then with every turn of the loop kept about this long")
    p.add_argument("--switch-interval-ms", type=float, default=None,
                   help="the interpreter's thread switch interval (sys.setswitchinterval); default: Python's 5 ms")
    p.add_argument("--preopen", action="store_true",
                   help="the store's defaults with and without a transaction opened ahead of each write")
    p.add_argument("--rounds", type=int, default=3, help="--preopen: rounds of both variants, alternating")
    p.add_argument("--gap-ms", type=float, default=2.0, help="--preopen: the spaced writer's wait between syncs")
    args = p.parse_args()
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1000)
    with EmbeddedKafka() as kafka:
        if args.preopen:
            figures = asyncio.run(_preopen(kafka.bootstrap, args.syncs, args.writers, args.rounds, args.gap_ms))
        elif args.busy_turn_ms > 0:
            figures = asyncio.run(_busy(kafka.bootstrap, args.syncs, args.writers, args.busy_turn_ms))
        else:
            figures = asyncio.run(_run(kafka.bootstrap, args.syncs, args.writers))
    load = os.getloadavg()[0]
    print(" ".join(f"{k}={v}" for k, v in figures.items())
          + f" switch_interval_ms={sys.getswitchinterval() * 1000:g} load_avg_1m={load:.1f} cpus={os.cpu_count()}")


if __name__ == "__main__":
    main()
