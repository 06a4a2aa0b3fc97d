"""bench/java/AssignorBench.java compiles against Kafka's jars and reads the inputs groupgate timed.

On one tiny case per assignor: Kafka's range result must equal groupgate's (both are stateless and
order members the same way), and Kafka's uniform result must pass the checks groupgate's passes.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from coordinator.assignors import default_assignors

from .support import assert_balanced, assert_valid

ROOT = Path(__file__).resolve().parents[3]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("groupgate_bench_assignors", ROOT / "bench" / "assignors.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _kafka_classpath() -> str:
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("no JDK (javac/java) on PATH")
    from gateway.ops import kafka_dist

    dist = kafka_dist.broker()
    if not dist.is_fetched():
        pytest.skip("Kafka jars not fetched (make kafka)")
    return dist.classpath()


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, str, Path]:
    classpath = _kafka_classpath()
    classes = tmp_path_factory.mktemp("classes")
    bench = _bench()
    subprocess.run(["javac", "-d", str(classes), "-cp", classpath, str(bench.JAVA_SOURCE)], check=True)
    return bench, classpath, classes


def _run(harness: tuple[ModuleType, str, Path], case_file: Path) -> tuple[list[str], list[str]]:
    _, classpath, classes = harness
    proc = subprocess.run(
        ["java", "-Ddump=true", "-cp", f"{classes}:{classpath}", "AssignorBench", "0", "3", str(case_file)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = proc.stdout.splitlines()
    return [ln for ln in lines if ln.startswith("case ")], [ln for ln in lines if ln.startswith("assign ")]


def test_range_results_are_identical(harness: tuple[ModuleType, str, Path], tmp_path: Path) -> None:
    bench = harness[0]
    case = bench.Case("range", 7, 3, 3, False, False)
    inp = bench.build_input(case, default_assignors())
    path = tmp_path / "range.txt"
    bench.write_case(case, inp, path)
    (summary,), _ = _run(harness, path)
    fields = summary.split()
    assert int(fields[7]) == bench.input_checksum(inp)
    assert int(fields[9]) == bench.result_checksum(inp, default_assignors()["range"].assign(inp.spec))


def test_kafka_uniform_passes_the_same_checks(harness: tuple[ModuleType, str, Path], tmp_path: Path) -> None:
    bench = harness[0]
    case = bench.Case("uniform", 6, 5, 10, True, True)
    inp = bench.build_input(case, default_assignors())
    path = tmp_path / "uniform.txt"
    bench.write_case(case, inp, path)
    (summary,), assigned = _run(harness, path)
    assert int(summary.split()[7]) == bench.input_checksum(inp)
    ids = list(inp.spec.topics)
    kafka: dict[str, dict] = {m: {} for m in inp.spec.members}
    for line in assigned:
        _, member_id, topic, partitions = line.split()
        kafka[member_id][ids[int(topic)]] = frozenset(int(p) for p in partitions.split(","))
    for result in (kafka, default_assignors()["uniform"].assign(inp.spec, inp.delta)):
        assert_valid(inp.spec, result)
        assert_balanced(inp.spec, result)
