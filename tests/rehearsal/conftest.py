"""One local SparkSession for the whole rehearsal test set (starting Spark takes seconds)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    pytest.importorskip("pyspark", reason="pyspark is in the 'rehearsal' extra")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java 17: no java on PATH and no JAVA_HOME")
    from rehearsal.pipeline import spark_session

    session = spark_session(
        "local[2]",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            # Tiny inputs: compiling generated code would cost more than it saves.
            "spark.sql.codegen.wholeStage": "false",
            "spark.sql.codegen.factoryMode": "NO_CODEGEN",
            "spark.sql.adaptive.enabled": "false",
            # A short-lived JVM: the quick JIT tier alone warms up sooner; one small heap needs no parallel GC.
            "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        },
    )
    yield session
    session.stop()
