"""A long fuzzing run against the gateway, with live consumer groups alongside.

One embedded Kafka broker, one ``groupgate serve`` child in front of it, and through the gateway: a producer
on a 3-partition topic, a classic consumer group (two confluent-kafka members) and a KIP-848 consumer group
(one member), each consuming the topic and committing. Meanwhile the structure-aware fuzzer of
compat_tests/harness/fuzz/ sends ``--frames`` fuzzed request frames over ``--connections`` concurrent
connections (several pipelined per connection). At the end the groups must have consumed every produced
record and committed the end offsets.

Prints frames tried, answers, closes, whether the gateway died, silent connections, the gateway's RSS
before and after, records lost per group and the Python tracebacks in the gateway's log by signature.
The LAST line is ``key=value`` figures. It stops by itself (about 20-40 minutes per million frames on two
cores); run it by hand, never in CI:

    .venv/bin/python bench/fuzz.py [--frames 1000000] [--seed 1] [--connections 8]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from compat_tests.harness.admin import create_topic
from compat_tests.harness.brokers import ProcessBackend, free_port_block
from compat_tests.harness.fuzz import gateway_health, generate, live_groups, oracle, runner
from compat_tests.harness.gateway_proc import GatewayProcess
from compat_tests.harness.names import unique


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--connections", type=int, default=8)
    ap.add_argument("--silence-s", type=float, default=20.0, help="a batch unanswered and open this long is silent")
    args = ap.parse_args()

    kafka = ProcessBackend()
    kafka.start()
    log_dir = Path(tempfile.mkdtemp(prefix="groupgate-fuzz-"))
    gw = GatewayProcess(upstream=kafka.bootstrap, listen_port=free_port_block(3), log_dir=log_dir)
    live: live_groups.LiveGroups | None = None
    try:
        gw.start()
        topic = create_topic(kafka.bootstrap, unique("fuzz-live"), 3)
        tag = unique("b")
        live = live_groups.LiveGroups(
            gw.bootstrap, topic, {f"live-{tag}-classic": ["classic", "classic"], f"live-{tag}-848": ["consumer"]},
        ).start()
        rss_before = gateway_health.rss_kb(gw.pid)
        started = time.monotonic()

        def progress(s: runner.FuzzStats) -> None:
            print(f"  {time.monotonic() - started:7.0f}s {s.line()} rss_kb={gateway_health.rss_kb(gw.pid)}", flush=True)

        stats, fz = asyncio.run(runner.run_fuzz(
            gw.bootstrap, seed=args.seed, frames=args.frames, connections=args.connections,
            names=generate.Names.for_run(tag), silence_s=args.silence_s, alive=gw.alive, progress=progress,
        ))
        elapsed = time.monotonic() - started
        alive = gw.alive()
        broker_alive = kafka.broker is not None and kafka.broker.alive()
        rss_after = gateway_health.rss_kb(gw.pid)
        live.stop_producing()
        missing, committed = live.settle(120.0) if alive and broker_alive else (live.missing(), {})
        ends = live.end_offsets()
        short = {g: {p: (c.get(p), e) for p, e in ends.items() if c.get(p, -1) < e} for g, c in committed.items()}
        direct = {g: live.committed(kafka.bootstrap, g) for g in live.groups} if broker_alive else {}
        produced, produce_errors = live.produced, live.produce_errors
        consumer_errors = live.stop()
        live = None
        tracebacks = gateway_health.traceback_signatures(gw.log_path.read_text(errors="replace"))

        print(f"seed={args.seed} connections={args.connections} seconds={elapsed:.0f} "
              f"frames_per_s={stats.frames / elapsed:.0f}")
        print(f"mutations and evil values: {dict(sorted(fz.op_counts.items()))}")
        print(stats.line())
        if not broker_alive:
            print("the BROKER died during the run (not the gateway); live figures are void. Its log ends:")
            assert kafka.broker is not None
            print("\n".join(kafka.broker.log_path.read_text(errors="replace").splitlines()[-15:]))
        print(f"live: produced={len(produced)} produce_errors={produce_errors[:3]} "
              f"missing={missing} committed_short={short} consumer_errors={consumer_errors}")
        print(f"committed offsets through the gateway == on the broker: "
              f"{bool(direct) and all(committed.get(g) == direct[g] for g in direct)}")
        for sig, n in tracebacks.most_common():
            print(f"traceback x{n}: {sig}")
        for seconds, what in stats.slowest:
            print(f"slow batch: {seconds}s for frames (api key/version) {what}")
        for ex in stats.silent_examples:
            print(f"silent batch: {oracle.hexdump_frames(ex)}")
        for ex in stats.misanswered_examples:
            print(f"misanswered: {ex[:2000]}")
        print(f"gateway log: {gw.log_path}")
        lost = sum(missing.values())
        print(
            f"generated={stats.generated} frames={stats.frames} answers={stats.answers} closes={stats.closes} "
            f"crashes={int(not alive)} "
            f"silent={stats.silent} misanswered={stats.misanswered} tracebacks={sum(tracebacks.values())} "
            f"broker_died={int(not broker_alive)} "
            f"rss_before_kb={rss_before} rss_after_kb={rss_after} records_produced={len(produced)} "
            f"records_lost={lost} commits_short={sum(len(v) for v in short.values())}"
        )
        return 0
    finally:
        try:
            if live is not None:
                live.stop()
        finally:
            gw.stop()
            kafka.stop()


if __name__ == "__main__":
    sys.exit(main())
