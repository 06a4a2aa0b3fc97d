"""Passthrough overhead of the gateway: Kafka's own perf tools straight to the broker and through the gateway.

One embedded broker, one ``groupgate serve`` child process in front of it. Each round runs, alternating the
order of the two targets to spread drift and noise:
  - produce throughput: ProducerPerformance, unthrottled, 1 KiB records;
  - produce latency: ProducerPerformance at a fixed, moderate rate (so latency is not queueing), 100-byte
    records, linger.ms=0: the tool's p50 / p99 send-to-ack latency;
  - consume throughput: ConsumerPerformance reading a prefilled topic with a fresh group.
The medians over the rounds are compared. The LAST line printed is ``key=value`` pairs, including
``produce_ratio`` and ``consume_ratio`` (gateway / direct throughput) and ``p99_added_ms``.

    .venv/bin/python bench/passthrough.py [--rounds 3] [--records 300000] [--profile FILE]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

from gateway.ops import kafka_dist
from gateway.ops.embedded_kafka import EmbeddedKafka, java_binary

_PRODUCER = "org.apache.kafka.tools.ProducerPerformance"
_CONSUMER = "org.apache.kafka.tools.ConsumerPerformance"
_FINAL = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, ([\d.]+) ms max latency, "
    r"(\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th"
)


def _java(cls: str, args: list[str]) -> str:
    cmd = [java_binary(), "-Xmx512m", "-cp", kafka_dist.broker().classpath(), cls, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{cls} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc.stdout


def produce(
    bootstrap: str, topic: str, records: int, size: int, rate: int, props: list[str]
) -> dict[str, float]:
    out = _java(
        _PRODUCER,
        [
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--num-records",
            str(records),
            "--record-size",
            str(size),
            "--throughput",
            str(rate),
            "--producer-props",
            *props,
        ],
    )
    m = None
    for line in out.splitlines():
        m = _FINAL.search(line) or m
    if m is None:
        raise RuntimeError(f"no summary line from ProducerPerformance:\n{out[-2000:]}")
    return {
        "rps": float(m.group(2)),
        "mb_s": float(m.group(3)),
        "p50": float(m.group(6)),
        "p99": float(m.group(8)),
    }


def consume(bootstrap: str, topic: str, records: int) -> dict[str, float]:
    out = _java(
        _CONSUMER,
        [
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--num-records",
            str(records),
            "--group",
            f"bench-{uuid.uuid4().hex[:8]}",
            "--timeout",
            "60000",
            "--command-property",
            "auto.offset.reset=earliest",
        ],
    )
    lines = [ln for ln in out.splitlines() if ln.strip() and ln[0].isdigit()]
    if not lines:
        raise RuntimeError(f"no result line from ConsumerPerformance:\n{out[-2000:]}")
    cols = [c.strip() for c in lines[-1].split(",")]
    # start, end, MB, MB.sec, nMsg, nMsg.sec, rebalance.ms, fetch.ms, fetch.MB.sec, fetch.nMsg.sec
    return {"mb_s": float(cols[8]), "rps": float(cols[9])}


class GatewayProc:
    def __init__(self, upstream: str, profile: str | None) -> None:
        cmd = [sys.executable]
        if profile:
            cmd += ["-m", "cProfile", "-o", profile]
        cmd += [
            "-m",
            "gateway.ops.cli",
            "serve",
            "--upstream",
            upstream,
            "--listen",
            "127.0.0.1:0",
            "--log-level",
            "warning",
            "--ephemeral-state",
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line.startswith("bootstrap="):
            self.proc.kill()
            raise RuntimeError(f"gateway did not start: {line!r}")
        self.bootstrap = line.split("=", 1)[1]

    def cpu_s(self) -> tuple[float, float]:
        """User and system CPU seconds the gateway process has used so far (Linux /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        tick = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / tick, int(fields[12]) / tick

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=300_000, help="records per throughput run")
    ap.add_argument("--latency-records", type=int, default=10_000)
    ap.add_argument("--latency-rate", type=int, default=500, help="records/s of the latency runs")
    ap.add_argument("--profile", help="run the gateway under cProfile, writing this file")
    args = ap.parse_args()

    kafka_dist.fetch(kafka_dist.broker())
    throughput_props = ["acks=1", "linger.ms=5", "batch.size=262144", "compression.type=none"]
    latency_props = ["acks=1", "linger.ms=0"]
    results: dict[str, dict[str, list[float]]] = {
        t: {k: [] for k in ("produce_mb_s", "consume_mb_s", "p50", "p99")} for t in ("direct", "gateway")
    }
    # The gateway's own CPU per MB moved: a cost figure that does not depend on how busy the machine is;
    # and the part of it spent in the kernel (socket reads and writes, the loopback TCP stack, epoll).
    cpu_per_mb: dict[str, list[float]] = {"produce": [], "consume": []}
    sys_per_mb: dict[str, list[float]] = {"produce": [], "consume": []}
    with EmbeddedKafka(heap="1g") as broker:
        gw = GatewayProc(broker.bootstrap, args.profile)
        try:
            targets = {"direct": broker.bootstrap, "gateway": gw.bootstrap}
            fill = f"bench-fill-{uuid.uuid4().hex[:6]}"
            produce(broker.bootstrap, fill, args.records, 1024, -1, throughput_props)
            # warm-up of both paths (JIT, connections, topic creation)
            for target in targets.values():
                produce(target, f"bench-warm-{uuid.uuid4().hex[:6]}", 20_000, 1024, -1, throughput_props)
            for r in range(args.rounds):
                order = ["direct", "gateway"] if r % 2 == 0 else ["gateway", "direct"]
                for name in order:
                    bs = targets[name]
                    cpu0 = gw.cpu_s()
                    p = produce(bs, f"bench-p-{name}-{r}", args.records, 1024, -1, throughput_props)
                    cpu1 = gw.cpu_s()
                    lat = produce(
                        bs, f"bench-l-{name}-{r}", args.latency_records, 100, args.latency_rate, latency_props
                    )
                    cpu2 = gw.cpu_s()
                    c = consume(bs, fill, args.records)
                    cpu3 = gw.cpu_s()
                    if name == "gateway":
                        mb = args.records * 1024 / 1e6
                        for kind, a, b in (("produce", cpu0, cpu1), ("consume", cpu2, cpu3)):
                            cpu_per_mb[kind].append((b[0] + b[1] - a[0] - a[1]) * 1000 / mb)
                            sys_per_mb[kind].append((b[1] - a[1]) * 1000 / mb)
                    results[name]["produce_mb_s"].append(p["mb_s"])
                    results[name]["consume_mb_s"].append(c["mb_s"])
                    results[name]["p50"].append(lat["p50"])
                    results[name]["p99"].append(lat["p99"])
                    print(
                        f"round {r} {name:8s} produce {p['mb_s']:8.2f} MB/s  consume {c['mb_s']:8.2f} MB/s  "
                        f"latency p50 {lat['p50']:.0f} ms p99 {lat['p99']:.0f} ms",
                        flush=True,
                    )
        finally:
            gw.stop()
    med = {t: {k: statistics.median(v) for k, v in d.items()} for t, d in results.items()}
    d, g = med["direct"], med["gateway"]
    summary = {
        "rounds": args.rounds,
        "produce_direct_mb_s": round(d["produce_mb_s"], 2),
        "produce_gateway_mb_s": round(g["produce_mb_s"], 2),
        "produce_ratio": round(g["produce_mb_s"] / d["produce_mb_s"], 3),
        "consume_direct_mb_s": round(d["consume_mb_s"], 2),
        "consume_gateway_mb_s": round(g["consume_mb_s"], 2),
        "consume_ratio": round(g["consume_mb_s"] / d["consume_mb_s"], 3),
        "p50_direct_ms": d["p50"],
        "p50_gateway_ms": g["p50"],
        "p99_direct_ms": d["p99"],
        "p99_gateway_ms": g["p99"],
        "p99_added_ms": round(g["p99"] - d["p99"], 2),
        "gateway_cpu_ms_per_mb_produce": round(statistics.median(cpu_per_mb["produce"]), 2),
        "gateway_cpu_ms_per_mb_consume": round(statistics.median(cpu_per_mb["consume"]), 2),
        "gateway_sys_ms_per_mb_produce": round(statistics.median(sys_per_mb["produce"]), 2),
        "gateway_sys_ms_per_mb_consume": round(statistics.median(sys_per_mb["consume"]), 2),
        "load_avg_1m": round(os.getloadavg()[0], 1),
        "cpus": os.cpu_count(),
    }
    if args.profile:
        print(f"profile written to {Path(args.profile).resolve()} (python -m pstats)", flush=True)
    print(" ".join(f"{k}={v}" for k, v in summary.items()), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
