"""groupgate's server-side assignors against Apache Kafka's own, on identical inputs.

The grid is the one of Kafka's ServerSideAssignorBenchmark (jmh-benchmarks): members x partitions per
member x topics, homogeneous or heterogeneous subscriptions (five buckets of members, each subscribed to
its own slice of the topics), full (every member new) or incremental (a stable group, computed once by
the assignor under test, that one new member joins). Every case is written to a text file that Kafka's
assignors read through bench/java/AssignorBench.java, compiled here with javac against the
kafka-group-coordinator jars; both sides print a checksum of the input they timed, and the range
assignor (stateless) must produce the very same result on both sides. Each case is timed on the Java
side right after the Python side (one JVM serves all cases), so both see the same machine load.

For incremental cases groupgate is called with the delta (one member added); Kafka's assignors have no
such input and recompute on the same stable group. "gg full" is groupgate without the delta.

    .venv/bin/python bench/assignors.py            # the full grid (several minutes)
    .venv/bin/python bench/assignors.py --quick    # a small subset, under a minute
    .venv/bin/python bench/assignors.py --only 'uniform-*-1000t-*-full'   # cases whose key matches

The last line is machine readable: ``key=value`` pairs (ratios are groupgate / Kafka, lower is better).
Timings are medians (and minimums) of repeated calls after a warm-up; nothing here asserts on them.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from coordinator.assignors import default_assignors  # noqa: E402
from coordinator.assignors.api import (  # noqa: E402
    Assignment,
    AssignmentDelta,
    GroupSpec,
    MemberSpec,
    ServerAssignor,
    SubscriptionType,
    TopicMetadata,
)

JAVA_SOURCE = ROOT / "bench" / "java" / "AssignorBench.java"
BUCKETS = 5  # as Kafka's benchmark: heterogeneous members fall in five subscription buckets
NEW_MEMBER = "newMember"


@dataclass(frozen=True, slots=True)
class Case:
    assignor: str
    members: int
    per_member: int
    topics: int
    heterogeneous: bool
    incremental: bool

    @property
    def key(self) -> str:
        kind = "het" if self.heterogeneous else "hom"
        mode = "inc" if self.incremental else "full"
        return f"{self.assignor}-{self.members}m-{self.per_member}ppm-{self.topics}t-{kind}-{mode}"


@dataclass(slots=True)
class Input:
    """One case's input, in groupgate's types plus the index form written for the Java side."""

    spec: GroupSpec
    delta: AssignmentDelta | None
    subs: list[list[int]]  # subscription index -> topic indices
    member_subs: dict[str, int]  # member id -> subscription index (file order = dict order)


def topic_id(index: int) -> uuid.UUID:
    # The Java side builds Uuid(1, index + 1): the same 128 bits.
    return uuid.UUID(int=(1 << 64) | (index + 1))


def build_input(case: Case, assignors: Mapping[str, ServerAssignor]) -> Input:
    per_topic = case.members * case.per_member // case.topics
    topics = {topic_id(i): TopicMetadata(topic_id(i), f"topic{i}", per_topic) for i in range(case.topics)}
    ids = list(topics)
    # Incremental: a stable group of members - 1, then the last member joins (as Kafka's benchmark).
    stable = case.members - 1 if case.incremental else case.members
    subs: list[list[int]] = []
    member_subs: dict[str, int] = {}
    if not case.heterogeneous:
        subs.append(list(range(case.topics)))
        member_subs = {f"member{i}": 0 for i in range(stable)}
    else:
        buckets = min(BUCKETS, stable)
        topics_per_bucket = math.ceil(case.topics / buckets)
        members_per_bucket = math.ceil(stable / buckets)
        for b in range(buckets):
            subs.append(list(range(b * topics_per_bucket, min((b + 1) * topics_per_bucket, case.topics))))
            for i in range(b * members_per_bucket, min((b + 1) * members_per_bucket, stable)):
                member_subs[f"member{i}"] = b
    sub_sets = [frozenset(ids[t] for t in s) for s in subs]
    kind = SubscriptionType.HETEROGENEOUS if case.heterogeneous else SubscriptionType.HOMOGENEOUS
    members = {m: MemberSpec(m, None, None, sub_sets[s]) for m, s in member_subs.items()}
    spec = GroupSpec(members, topics, kind)
    if not case.incremental:
        return Input(spec, None, subs, member_subs)
    initial = assignors[case.assignor].assign(spec)
    members = {m: MemberSpec(m, None, None, sub_sets[s], initial[m]) for m, s in member_subs.items()}
    new_sub = member_subs[f"member{stable - 1}"]
    member_subs[NEW_MEMBER] = new_sub
    members[NEW_MEMBER] = MemberSpec(NEW_MEMBER, None, None, sub_sets[new_sub])
    delta = AssignmentDelta(added=frozenset({NEW_MEMBER}))
    return Input(GroupSpec(members, topics, kind), delta, subs, member_subs)


def topic_indices(inp: Input) -> dict[uuid.UUID, int]:
    return {tid: i for i, tid in enumerate(inp.spec.topics)}


def write_case(case: Case, inp: Input, path: Path) -> None:
    index = topic_indices(inp)
    lines = [
        f"assignor {case.assignor}",
        f"type {inp.spec.subscription_type.name}",
        f"topics {len(inp.spec.topics)}",
        *(str(t.num_partitions) for t in inp.spec.topics.values()),
        f"subs {len(inp.subs)}",
        *(" ".join(map(str, s)) for s in inp.subs),
        f"members {len(inp.member_subs)}",
    ]
    for mid, s in inp.member_subs.items():
        m = inp.spec.members[mid]
        held = " ".join(
            f"{index[tid]}:{','.join(map(str, sorted(fs)))}" for tid, fs in m.assigned.items() if fs
        )
        lines.append(f"{mid} {m.instance_id or '-'} {s}" + (f" {held}" if held else ""))
    path.write_text("\n".join(lines) + "\n")


def input_checksum(inp: Input) -> int:
    """The same sum as AssignorBench.java's input checksum."""
    index = topic_indices(inp)
    total = sum((i + 1) * t.num_partitions for i, t in enumerate(inp.spec.topics.values()))
    for m, (mid, s) in enumerate(inp.member_subs.items()):
        total += m * 31 * len(inp.subs[s]) + sum(inp.subs[s])
        for tid, fs in inp.spec.members[mid].assigned.items():
            t = index[tid]
            total += sum(((m * 31 + t) * 1000003 + p) for p in fs)
    return total


def result_checksum(inp: Input, result: Mapping[str, Assignment]) -> int:
    index = topic_indices(inp)
    total = 0
    for m, mid in enumerate(inp.member_subs):
        for tid, fs in result.get(mid, {}).items():
            t = index[tid]
            total += sum(((m * 31 + t) * 1000003 + p) for p in fs)
    return total


def time_python(call: Callable[[], object], budget_s: float, runs: int) -> tuple[float, float, object]:
    """(median ms, min ms, result) of ``runs`` calls (fewer past the budget), after a warm-up call."""
    result = call()
    times = []
    deadline = time.perf_counter() + budget_s
    for _ in range(runs):
        t0 = time.perf_counter()
        result = call()
        times.append((time.perf_counter() - t0) * 1000)
        if time.perf_counter() > deadline and len(times) >= 3:
            break
    return statistics.median(times), min(times), result


def kafka_classpath() -> str:
    from gateway.ops import kafka_dist

    dist = kafka_dist.broker()
    kafka_dist.fetch(dist)
    return dist.classpath()


def compile_java(classpath: str) -> Path:
    """Compile the harness once per source version into the cache (never into the repository)."""
    from gateway.ops import kafka_dist

    digest = hashlib.sha256(JAVA_SOURCE.read_bytes()).hexdigest()[:12]
    out = kafka_dist.cache_dir() / "bench-classes" / digest
    if not (out / "AssignorBench.class").exists():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-d", str(out), "-cp", classpath, str(JAVA_SOURCE)], check=True)
    return out


JVM_FLAGS = ["-XX:+UseSerialGC", "-Xms2g", "-Xmx4g"]


class JavaSide:
    """One JVM running Kafka's assignors, timing one case per request (AssignorBench --serve).

    Each case is timed on the Java side right after the Python side, so both see the same machine
    load. The serial collector keeps the single-threaded measurement from competing with GC threads
    for the cores; a fixed heap avoids resizing pauses.
    """

    def __init__(self, classpath: str, classes: Path) -> None:
        cmd = ["java", *JVM_FLAGS, "-cp", f"{classes}{os.pathsep}{classpath}", "AssignorBench", "--serve"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def measure(self, path: Path, warmup_ms: int, runs: int) -> tuple[float, float, int, int]:
        """(median ms, min ms, input checksum, result checksum)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{warmup_ms} {runs} {path}\n")
        self.proc.stdin.flush()
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the Java harness exited (code {self.proc.poll()})")
            parts = line.split()
            if parts and parts[0] == "case":
                return float(parts[3]), float(parts[11]), int(parts[7]), int(parts[9])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def grid(quick: bool, only: list[str] | None = None) -> list[Case]:
    """The cases to run; ``only`` keeps the full grid's cases whose key matches one of the patterns."""
    if only:
        return [c for c in grid(False) if any(fnmatch.fnmatchcase(c.key, p) for p in only)]
    if quick:
        return [
            Case("uniform", 1000, 50, 100, False, False),
            Case("uniform", 1000, 50, 100, False, True),
            Case("uniform", 1000, 50, 100, True, False),
            Case("uniform", 1000, 50, 100, True, True),
            Case("range", 1000, 50, 100, False, False),
            Case("range", 1000, 50, 100, True, False),
        ]
    return [
        Case(a, m, p, t, het, inc)
        for a in ("uniform", "range")
        for m in (100, 1000, 10000)
        for p in (10, 50)
        for t in (10, 100, 1000)
        for het in (False, True)
        for inc in (False, True)
    ]


def heartbeats_per_s(seconds: float = 2.0) -> str:
    """Steady-state heartbeat throughput of the coordinator core, from bench/heartbeat.py."""
    try:
        from bench import heartbeat
    except ImportError:
        return "NA"
    try:
        measure = getattr(heartbeat, "measure", None)
        if callable(measure):
            return f"{float(measure(seconds)):.0f}"
        coord, reqs = heartbeat.stable_group()
        hb = coord.consumer_group_heartbeat
        n = 0
        now = 1
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for req in reqs:
                hb(req, now)
            n += len(reqs)
            now += 1
        return f"{n / (time.perf_counter() - start):.0f}"
    except Exception as exc:  # the coordinator core is developed alongside: report, do not fail
        print(f"heartbeat benchmark failed: {exc!r}", file=sys.stderr)
        return "NA"


@dataclass(slots=True)
class Row:
    case: Case
    ms: float  # median, with the delta for incremental cases
    min_ms: float
    full_ms: float | None  # incremental cases: groupgate's full recompute of the same input
    input_sum: int
    result_sum: int
    lo: int
    hi: int


def measure_groupgate(case: Case, assignors: Mapping[str, ServerAssignor], tmp: Path | None, quick: bool) -> Row:
    inp = build_input(case, assignors)
    assignor = assignors[case.assignor]
    budget, runs = (0.7, 21) if quick else (2.0, 21)
    ms, min_ms, result = time_python(lambda: assignor.assign(inp.spec, inp.delta), budget, runs)
    assert isinstance(result, dict)
    full_ms = None
    if case.incremental:
        full_ms, _, full_result = time_python(lambda: assignor.assign(inp.spec), budget, runs)
        if full_result != result:
            print(f"{case.key}: incremental and full results differ", file=sys.stderr)
    if tmp is not None:
        write_case(case, inp, tmp / f"{case.key}.txt")
    counts = [sum(map(len, a.values())) for a in result.values()]
    return Row(case, ms, min_ms, full_ms, input_checksum(inp), result_checksum(inp, result), min(counts), max(counts))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small subset, under a minute")
    parser.add_argument("--no-java", action="store_true", help="time groupgate only")
    parser.add_argument(
        "--only",
        action="append",
        metavar="PATTERN",
        help="run the cases whose key (e.g. uniform-10000m-10ppm-1000t-hom-full) matches this glob; repeatable",
    )
    args = parser.parse_args(argv)
    if not args.no_java and shutil.which("javac") is None:
        print("javac not found: install a JDK (17+) or pass --no-java", file=sys.stderr)
        return 2

    assignors = default_assignors()
    rows: list[Row] = []
    java: dict[str, tuple[float, float, int, int]] = {}
    side = None
    if not args.no_java:
        classpath = kafka_classpath()
        side = JavaSide(classpath, compile_java(classpath))
    warmup_ms = 700 if args.quick else 1500
    try:
        with tempfile.TemporaryDirectory(prefix="groupgate-bench-") as tmpdir:
            tmp = None if side is None else Path(tmpdir)
            for case in grid(args.quick, args.only):
                row = measure_groupgate(case, assignors, tmp, args.quick)
                rows.append(row)
                note = ""
                if side is not None and tmp is not None:
                    path = tmp / f"{case.key}.txt"
                    java[path.name] = side.measure(path, warmup_ms, 21)
                    path.unlink()
                    note = f", kafka {java[path.name][0]:.3f} ms"
                print(f"# {case.key}: groupgate {row.ms:.3f} ms{note}", file=sys.stderr, flush=True)
    finally:
        if side is not None:
            side.close()

    summary: dict[str, str] = {}
    print(
        f"{'case':42} {'gg ms':>9} {'gg min':>9} {'gg full':>9} {'kafka ms':>9} {'kf min':>9}"
        f" {'ratio':>6} {'r(min)':>6} {'min-max':>9}  check"
    )
    for r in rows:
        kafka = java.get(f"{r.case.key}.txt")
        check, ratio_s, ratio_min_s, kafka_s, kafka_min_s = "-", "NA", "NA", "NA", "NA"
        if kafka is not None:
            kafka_ms, kafka_min, kafka_in, kafka_out = kafka
            kafka_s, kafka_min_s = f"{kafka_ms:.3f}", f"{kafka_min:.3f}"
            ratio_s = f"{r.ms / kafka_ms:.2f}" if kafka_ms > 0 else "inf"
            ratio_min_s = f"{r.min_ms / kafka_min:.2f}" if kafka_min > 0 else "inf"
            check = "input ok" if kafka_in == r.input_sum else "INPUT MISMATCH"
            if r.case.assignor == "range":
                check += ", same result" if kafka_out == r.result_sum else ", RESULT DIFFERS"
            if r.case == Case("uniform", 1000, 50, 100, False, False):
                summary["uniform_full_ratio"] = ratio_s
            if r.case == Case("uniform", 1000, 50, 100, False, True):
                summary["uniform_incremental_ratio"] = ratio_s
        full_s = f"{r.full_ms:.3f}" if r.full_ms is not None else "-"
        print(
            f"{r.case.key:42} {r.ms:9.3f} {r.min_ms:9.3f} {full_s:>9} {kafka_s:>9} {kafka_min_s:>9}"
            f" {ratio_s:>6} {ratio_min_s:>6} {r.lo:>4}-{r.hi:<4}  {check}"
        )
    summary.setdefault("uniform_full_ratio", "NA")
    summary.setdefault("uniform_incremental_ratio", "NA")
    summary["heartbeats_per_s"] = heartbeats_per_s(1.0 if args.quick else 3.0)
    print(" ".join(f"{k}={v}" for k, v in summary.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
