"""One local SparkSession for the whole rehearsal test set (starting Spark takes seconds)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

if shutil.which("java") is None:  # pragma: no cover - depends on the machine
    collect_ignore_glob = ["test_pipeline.py", "test_report.py"]


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    pytest.importorskip("pyspark", reason="pyspark is in the 'rehearsal' extra")
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
        },
    )
    yield session
    session.stop()
