"""The batch pipeline on a real Spark standalone cluster (a master and two 1-core workers on loopback,
started from the PySpark distribution): `groupgate rehearse report --master spark://...` over a small
simulated fleet must give exactly the summary of the same pipeline on local[*] and of the plain-Python
oracle, and its tasks must have run in executors on both workers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import rehearsal_compare as C
from spark_cluster import StandaloneCluster

from rehearsal import oracle, pipeline
from rehearsal.cli import simulate_main
from rehearsal.events import read_events


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    pytest.importorskip("pyspark", reason="pyspark is in the 'rehearsal' extra")
    java = shutil.which("java")
    if java is None:
        pytest.skip("the Spark standalone cluster needs a JVM: no java on PATH")
    probe = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        pytest.skip(f"the JVM does not start (java -version exit {probe.returncode}): {probe.stderr.strip()}")
    c = StandaloneCluster(tmp_path_factory.mktemp("spark-cluster")).start()
    try:
        yield c
    finally:
        c.stop()


@pytest.mark.timeout(300)
def test_report_on_a_standalone_cluster_equals_local_and_the_oracle(
    cluster: StandaloneCluster, spark: object, tmp_path: Path
) -> None:
    sim = tmp_path / "sim"
    said: list[str] = []
    assert simulate_main(4, 3, "rolling-upgrade", 11, str(sim), "all", topics="orders:4", echo=said.append) == 0

    out = tmp_path / "cluster"
    env = dict(os.environ)
    # The driver is a separate process (a JVM can hold one SparkContext, and this one holds the local
    # session); executors small enough for the workers' 768m, one core each.
    env["PYSPARK_SUBMIT_ARGS"] = (
        "--conf spark.executor.memory=512m --conf spark.executor.cores=1 --conf spark.driver.memory=512m "
        "--conf spark.sql.shuffle.partitions=4 --conf spark.driver.host=127.0.0.1 pyspark-shell"
    )
    env["PYSPARK_PYTHON"] = sys.executable
    cmd = [sys.executable, "-m", "rehearsal.cli", str(sim), "--out", str(out), "--master", cluster.master_url]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr[-3000:] + cluster.logs()
    assert f"starting Spark ({cluster.master_url}" in run.stdout

    on_cluster = json.loads((out / "summary.json").read_text())
    reference = oracle.compute(read_events([sim])).summary
    local = pipeline.summarize(pipeline.compute(pipeline.load_events(spark, [str(sim)])))  # type: ignore[arg-type]
    assert on_cluster["events"] > 0 and on_cluster["groups"] == 4
    assert C.same(on_cluster, C.as_reported(reference, [str(sim)])) == []
    assert C.same(on_cluster, C.as_reported(local, [str(sim)])) == []

    # It ran on the cluster: the master saw the application finish, with an executor on each worker.
    apps = [a for a in cluster.state()["completedapps"] if a["name"] == "groupgate-rehearsal"]
    assert len(apps) == 1, cluster.state()
    for ui in cluster.worker_uis:
        finished = cluster.state(ui)["finishedexecutors"]
        assert any(e["appid"] == apps[0]["id"] for e in finished), (ui, finished)
