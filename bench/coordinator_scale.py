"""Group coordinators at fleet scale: Kafka's own against groupgate (cluster store and file store), driven by
the Go load generator in ``bench/loadgen`` (open loop, latency from the intended send time, HdrHistogram).

One embedded broker and two ``groupgate serve`` children in front of it, one keeping group state in the
cluster's state topic (the default), one in per-shard files (``--state-dir``). Each case runs against the
broker's own coordinator and each gateway, in the same run, for each group protocol (KIP-848
``consumer`` and ``classic``):

  - ``1000x10``, ``10x1000``, ``1x10000``: groups x members. Every member joins (FindCoordinator first,
    then JoinGroup/SyncGroup or ConsumerGroupHeartbeat with reconciliation); ``stable_s`` is the time until
    every group is stable (each member holds its assignment, has heard nothing new since the group's last
    join, and the members own every partition once). Then rates are stepped (multipliers of 1 heartbeat and
    1 commit per second per member, so the first step is commits at 1/s per member) until a step saturates:
    answered < 90 % of offered, > 1 % errors, or p99 > 1 s. Reported per workload: ``per_s``, the highest
    answered rate of a step within the goal (answered >= 90 % of offered and p99 <= 50 ms; 0 if none was),
    and ``peak_per_s``, the highest answered rate of any step.
  - ``massjoin``: 1,000 groups of 5 members heartbeat and commit at 1/s each; after an idle window a group
    of 1,000 members joins at once. Reported: the small groups' p99 idle and during the join (until the big
    group is stable), and the big group's time to stable.

``--scale 0.1`` shrinks each case to a tenth of its members (the larger of its two sizes shrinks). The broker is
pinned to the first core and the gateways to the second (taskset) when the machine has two or more; the
load generator is not pinned. Each run also reports the coordinator's CPU per answered request (user +
system time of the broker for Kafka's own, of the gateway for a gateway, over the whole run divided by the
requests answered without error; ``broker_cpu_us_per_request`` adds what a gateway's write-throughs and
state writes cost the broker): unlike the saturation steps, a figure that another job sharing the machine
moves little. The last line is ``key=value`` figures and ratios against Kafka.

    make loadgen   # once: builds bench/loadgen/bin/loadgen
    .venv/bin/python bench/coordinator_scale.py [--scale 0.1] [--cases 1000x10,massjoin] \\
        [--protocols consumer,classic] [--targets kafka,topic,file] [--steps 1,2,5,10,20] [--step-seconds 8] \\
        [--out runs.json] [--keep-logs]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from compat_tests.harness.admin import create_topic  # noqa: E402
from compat_tests.harness.gateway_proc import GatewayProcess  # noqa: E402

# gateway/ is being split into subpackages (the embedded broker moves to gateway/ops/): take the module this
# checkout has, never another checkout's through an editable install.
from gateway.ops.embedded_kafka import EmbeddedKafka  # noqa: E402

LOADGEN_DIR = ROOT / "bench" / "loadgen"
LOADGEN = LOADGEN_DIR / "bin" / "loadgen"
CASES: dict[str, tuple[int, int]] = {"1000x10": (1000, 10), "10x1000": (10, 1000), "1x10000": (1, 10000)}
MASS_SMALL = (1000, 5)  # small groups x members beside the mass join
MASS_BIG = 1000
MAX_PARTITIONS = 1000  # a topic's partitions: the group size, at most this (members beyond commit a shared one)
P99_LIMIT_MS = 50.0  # the goal: a rate counts as sustained with p99 at most this
# Stepping stops later than the goal (answered < 90 % of offered, > 1 % errors, or p99 above this), so that
# a machine shared with other work, where every coordinator's p99 passes 50 ms now and then, still shows
# how far each one goes.
STOP_P99_MS = 1000.0


def scaled(groups: int, members: int, scale: float) -> tuple[int, int]:
    """The case with ``scale`` times as many members: the larger of its two sizes shrinks (1,000 x 10 at 0.1
    is 100 x 10, 10 x 1,000 is 10 x 100, 1 x 10,000 is 1 x 1,000), so that its shape stays."""
    if groups >= members:
        return max(1, round(groups * scale)), members
    return groups, max(2, round(members * scale))


def build_loadgen() -> Path:
    """``make loadgen``'s build (go build), when the binary is missing or older than its sources."""
    newest = max(p.stat().st_mtime for p in LOADGEN_DIR.glob("*.go"))
    if not LOADGEN.exists() or LOADGEN.stat().st_mtime < newest:
        if shutil.which("go") is None:
            raise SystemExit("Go is needed to build bench/loadgen (make loadgen)")
        subprocess.run(["go", "build", "-o", "bin/loadgen", "."], cwd=LOADGEN_DIR, check=True)
    return LOADGEN


def raise_nofile() -> int:
    """Every member holds a connection: lift the descriptor limit for this process and its children."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for want in (1 << 17, hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(want, hard)))
            return want
        except (ValueError, OSError):
            continue
    return soft


def pin(cpu: int | None) -> None:
    """This process's affinity, inherited by the children started next (None: every core)."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)) if cpu is None else {cpu})


def affinity_of(pid: int | None) -> str:
    if pid is None or shutil.which("taskset") is None:
        return "?"
    out = subprocess.run(["taskset", "-a", "-cp", str(pid)], capture_output=True, text=True).stdout
    cores = sorted({line.rsplit(":", 1)[-1].strip() for line in out.splitlines() if ":" in line})
    return ",".join(cores) or "?"


def run_loadgen(bootstrap: str, args: list[str], max_s: float) -> dict[str, Any]:
    cmd = [str(LOADGEN), "-bootstrap", bootstrap, "-max-seconds", str(int(max_s)), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=max_s + 60)
    if not proc.stdout.strip():
        raise RuntimeError(f"loadgen printed nothing (exit {proc.returncode}): {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    result["cmd"] = " ".join(cmd)
    return result


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU of a process and all its threads so far (/proc/PID/stat); 0 when unknown."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def answered(result: dict[str, Any]) -> int:
    """Requests answered without error in every phase of a run (joins, heartbeats, commits...)."""
    return sum(int(o.get("ok", 0)) for p in result.get("phases", []) for o in p.get("ops", {}).values())


def phase(result: dict[str, Any], name: str) -> dict[str, Any]:
    for p in result.get("phases", []):
        if p["phase"] == name:
            return p
    return {"ops": {}}


def op(p: dict[str, Any], name: str) -> dict[str, Any]:
    return p.get("ops", {}).get(name, {})


def steps_summary(result: dict[str, Any]) -> dict[str, Any]:
    """Per workload: the highest answered rate of a step within the limits (``sustained``: answered >= 90 %
    of offered, p99 <= 50 ms), its p50/p99, and the highest answered rate of any step (``peak``)."""
    out: dict[str, Any] = {}
    for kind in ("commit", "heartbeat"):
        best: dict[str, Any] | None = None
        peak = 0.0
        for p in result.get("phases", []):
            if not p["phase"].startswith("step-"):
                continue
            o = op(p, kind)
            if not o:
                continue
            peak = max(peak, o["ok_per_s"])
            within = o["ok_per_s"] >= 0.9 * o.get("offered_per_s", 0) and o["p99_ms"] <= P99_LIMIT_MS
            if within and (best is None or o["ok_per_s"] > best["ok_per_s"]):
                best = o
        out[f"{kind}_per_s"] = round(best["ok_per_s"]) if best else 0
        out[f"{kind}_p50_ms"] = best["p50_ms"] if best else None
        out[f"{kind}_p99_ms"] = best["p99_ms"] if best else None
        out[f"{kind}_peak_per_s"] = round(peak)
    return out


def mass_summary(result: dict[str, Any]) -> dict[str, Any]:
    idle, join = phase(result, "idle"), phase(result, "mass-join")
    out: dict[str, Any] = {"big_stable_s": result.get("big_stable_s")}
    for kind in ("heartbeat", "commit"):
        i, j = op(idle, kind), op(join, kind)
        out[f"{kind}_p99_idle_ms"] = i.get("p99_ms")
        out[f"{kind}_p99_join_ms"] = j.get("p99_ms")
        if i.get("p99_ms") and j.get("p99_ms") is not None:
            out[f"{kind}_p99_growth"] = round(j["p99_ms"] / i["p99_ms"], 2)
    return out


def describe(result: dict[str, Any]) -> str:
    """One line per step: answered/offered and p50/p99 of heartbeats and commits, errors."""
    lines = []
    for p in result.get("phases", []):
        if not (p["phase"].startswith("step-") or p["phase"] in ("join", "idle", "mass-join")):
            continue
        parts = []
        for name, o in sorted(p["ops"].items()):
            if name in ("reconcile", "big.reconcile") or not o.get("count"):
                continue
            errs = {k: v for k, v in o["errors"].items() if v}
            off = f"/{o['offered_per_s']:.0f}" if "offered_per_s" in o else ""
            parts.append(
                f"{name} {o['ok_per_s']:.0f}{off}/s p50 {o['p50_ms']:.2f} p99 {o['p99_ms']:.1f} "
                f"max {o['max_ms']:.0f} ms" + (f" errors {errs}" if errs else "")
            )
        lines.append(f"    {p['phase']:10s} {p['seconds']:6.1f} s  " + "; ".join(parts))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies group counts and sizes")
    ap.add_argument("--cases", default="1000x10,10x1000,1x10000,massjoin")
    ap.add_argument("--protocols", default="consumer,classic")
    ap.add_argument("--targets", default="kafka,topic,file")
    ap.add_argument("--steps", default="1,2,5,10,20", help="multipliers of 1 heartbeat + 1 commit /s per member")
    ap.add_argument("--step-seconds", type=float, default=8.0)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--join-timeout", type=float, default=120.0)
    ap.add_argument("--max-seconds", type=float, default=600.0, help="per load generator run")
    ap.add_argument("--out", type=Path, help="write every run's full JSON here")
    ap.add_argument("--keep-logs", action="store_true", help="keep the gateways' logs and state (printed at the end)")
    args = ap.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        if c not in CASES and c != "massjoin":
            raise SystemExit(f"unknown case {c!r}: {', '.join([*CASES, 'massjoin'])}")
    protocols = [p for p in args.protocols.split(",") if p]
    targets = [t for t in args.targets.split(",") if t]

    build_loadgen()
    nofile = raise_nofile()
    cpus = os.cpu_count() or 1
    pinned = cpus >= 2 and hasattr(os, "sched_setaffinity")
    load_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="groupgate-bench-coord-"))
    config = work / "gateway.toml"
    # As the broker (EmbeddedKafka sets 0): a first join completes at once on both.
    config.write_text('[coordinator]\n"group.initial.rebalance.delay.ms" = 0\n')
    broker_overrides = {"group.consumer.max.size": str(1 << 20), "group.max.size": str(1 << 20)}
    if pinned:
        pin(0)
    cluster = EmbeddedKafka(heap="2g", overrides=broker_overrides)
    gateways: dict[str, GatewayProcess] = {}
    runs: list[dict[str, Any]] = []
    summary: dict[str, Any] = {"scale": args.scale}
    try:
        cluster.start()
        if pinned:
            pin(1)
        bootstrap = cluster.bootstrap
        if "topic" in targets:
            gateways["topic"] = GatewayProcess(
                bootstrap, ["--config", str(config), "--state-store", "kafka"], log_dir=work / "topic", nofile=nofile
            )
        if "file" in targets:
            gateways["file"] = GatewayProcess(
                bootstrap, ["--config", str(config), "--state-dir", str(work / "file-state")],
                log_dir=work / "file", nofile=nofile,
            )
        for g in gateways.values():
            assert g.log_dir is not None
            g.log_dir.mkdir(parents=True, exist_ok=True)
            g.start(timeout_s=180)
        pin(None)
        addresses = {"kafka": bootstrap, **{n: g.bootstrap for n, g in gateways.items()}}
        broker_pid = cluster._proc.pid if cluster._proc is not None else None
        sharing = (
            f"cores: {cpus}; broker on cpu {affinity_of(broker_pid)}, "
            + ", ".join(f"gateway {n} on cpu {affinity_of(g.pid)}" for n, g in gateways.items())
            + "; load generator unpinned"
            + ("" if pinned else " (not pinned: one core)")
        )
        print(sharing, flush=True)
        summary["cores"] = sharing.split(";")[0].split(": ")[1]

        # Untimed warm-up: the broker's JVM compiles its hot paths first; the gateways load their shards.
        warm_topic = create_topic(bootstrap, f"bench-coord-warm-{uuid.uuid4().hex[:6]}", 5)
        for name in targets:
            for proto in protocols:
                run_loadgen(addresses[name], ["-protocol", proto, "-groups", "20", "-members", "5", "-topic",
                                              warm_topic, "-partitions", "5", "-steps", "1,5", "-step-seconds", "3",
                                              "-join-timeout", "60"], 120)
        print(f"warm-up done; load average {os.getloadavg()[0]:.1f}", flush=True)

        for ci, case in enumerate(cases):
            if case == "massjoin":
                groups, members = scaled(*MASS_SMALL, args.scale)
                big = scaled(1, MASS_BIG, args.scale)[1]
                partitions = members
            else:
                groups, members = scaled(*CASES[case], args.scale)
                partitions = min(members, MAX_PARTITIONS)
            topic = create_topic(bootstrap, f"bench-coord-{case}-{uuid.uuid4().hex[:6]}", partitions)
            for proto in protocols:
                order = targets if ci % 2 == 0 else list(reversed(targets))
                for name in order:
                    lg = ["-protocol", proto, "-groups", str(groups), "-members", str(members), "-topic", topic,
                          "-partitions", str(partitions), "-join-timeout", str(args.join_timeout),
                          "-p99-limit-ms", str(STOP_P99_MS)]
                    if case == "massjoin":
                        lg += ["-mass-join", str(big), "-idle-seconds", str(args.idle_seconds), "-steps", "1"]
                        label = f"massjoin {groups}x{members}+{big}"
                    else:
                        lg += ["-steps", args.steps, "-step-seconds", str(args.step_seconds)]
                        label = f"{groups}x{members}"
                    began = time.monotonic()
                    target_pid = broker_pid if name == "kafka" else gateways[name].pid
                    cpu_before = cpu_seconds(target_pid), cpu_seconds(broker_pid)
                    result = run_loadgen(addresses[name], lg, args.max_seconds)
                    cpu = cpu_seconds(target_pid) - cpu_before[0], cpu_seconds(broker_pid) - cpu_before[1]
                    result.update(case=case, target=name, load_avg_1m=round(os.getloadavg()[0], 1))
                    # The coordinator's CPU per answered request over the whole run: the broker's for Kafka's
                    # own, the gateway's for a gateway (its write-throughs and state writes cost the broker
                    # besides: broker_cpu_us_per_request).
                    n = max(1, answered(result))
                    result.update(cpu_s=round(cpu[0], 2), broker_cpu_s=round(cpu[1], 2), answered=n)
                    runs.append(result)
                    key = f"{case}_{proto}_{name}"
                    print(
                        f"{label} {proto} {name}: stable in {result.get('stable_s')} s "
                        f"({result.get('groups_stable')}/{groups} groups), "
                        f"saturated at x{result.get('saturated_at', '-')} ({result.get('saturated_because', '')}), "
                        f"load generator {result.get('loadgen_cores_used')} cores, {time.monotonic() - began:.0f} s, "
                        f"{name} CPU {cpu[0]:.1f} s ({cpu[0] / n * 1e6:.0f} us per answered request; broker "
                        f"{cpu[1] / n * 1e6:.0f} us), "
                        f"load average {result['load_avg_1m']}"
                        + (f", ERROR {result['error']}" if "error" in result else "")
                        + (f", {result['aborted']}" if "aborted" in result else ""),
                        flush=True,
                    )
                    print(describe(result), flush=True)
                    summary[f"{key}_stable_s"] = result.get("stable_s")
                    summary[f"{key}_cpu_us_per_request"] = round(cpu[0] / n * 1e6, 1)
                    if name != "kafka":
                        summary[f"{key}_broker_cpu_us_per_request"] = round(cpu[1] / n * 1e6, 1)
                    if case == "massjoin":
                        for k, v in mass_summary(result).items():
                            summary[f"{key}_{k}"] = v
                    else:
                        for k, v in steps_summary(result).items():
                            summary[f"{key}_{k}"] = v
    finally:
        pin(None)
        for g in gateways.values():
            g.stop()
        cluster.cleanup()
        if args.out is not None:
            args.out.write_text(json.dumps(runs, indent=1))
        if args.keep_logs:
            print(f"gateway logs and state kept in {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)
    # Ratios against Kafka's own coordinator, same case and protocol.
    ratios: dict[str, Any] = {}
    for key, value in summary.items():
        if "_kafka_" not in key:
            continue
        for name in gateways:
            other = summary.get(key.replace("_kafka_", f"_{name}_"))
            metric = key.split("_kafka_", 1)[1]
            prefix = key.split("_kafka_", 1)[0]
            if metric.endswith("per_s") and value:
                ratios[f"{prefix}_{name}_{metric}_ratio"] = round((other or 0) / value, 2)
            elif metric == "cpu_us_per_request" and value and other is not None:
                # CPU per answered request against Kafka's (above 1: the gateway spends more per request).
                ratios[f"{prefix}_{name}_{metric}_ratio"] = round(other / value, 2)
            elif metric in ("stable_s", "big_stable_s") and value and value > 0 and other is not None:
                ratios[f"{prefix}_{name}_{metric}_ratio"] = round(other / value, 2) if other > 0 else None
    summary.update(ratios)
    summary["load_avg_start"] = round(load_start[0], 1)
    summary["load_avg_end"] = round(os.getloadavg()[0], 1)
    summary["cpus"] = cpus
    print(" ".join(f"{k}={v}" for k, v in summary.items()), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
