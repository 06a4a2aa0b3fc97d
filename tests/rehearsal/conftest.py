"""One local SparkSession for the whole rehearsal test set (starting Spark takes seconds).

Jars cannot be added to a running session, so the shared session starts with Spark's Kafka connector
(rehearsal/spark_kafka.py) whichever test happens to start it: fetched with Maven when a selected test
is marked ``kafka`` and uses the session, otherwise taken from the cache when it is there."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

_CONNECTOR_PROBLEM: list[str] = []


def _connector_conf(session: pytest.Session) -> dict[str, str]:
    from rehearsal import spark_kafka

    needed = any(
        item.get_closest_marker("kafka") is not None and "spark" in getattr(item, "fixturenames", ())
        for item in session.items
    )
    try:
        jars = spark_kafka.connector_jars(fetch=needed)
    except spark_kafka.ConnectorError as e:
        _CONNECTOR_PROBLEM.append(str(e))
        return {}
    return {"spark.jars": ",".join(str(p) for p in jars)}


@pytest.fixture(scope="session")
def spark_with_kafka(spark: object) -> object:
    """The shared session, for tests that read kafka:// inputs: it must have the connector."""
    if _CONNECTOR_PROBLEM:
        pytest.fail(_CONNECTOR_PROBLEM[0])
    return spark


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[object]:
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
            **_connector_conf(request.session),
        },
    )
    yield session
    session.stop()
