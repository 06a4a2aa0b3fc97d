"""Spark's Kafka connector for `groupgate rehearse report kafka://BOOTSTRAP/TOPIC`, fetched with Maven.

The connector (org.apache.spark:spark-sql-kafka-0-10_2.13 of the installed PySpark's version) is resolved
with its runtime dependencies by the same Maven fetch as the Kafka distributions (gateway/ops/kafka_dist.py)
into ``$GROUPGATE_CACHE/spark-kafka-<version>/libs`` and handed to Spark as ``spark.jars`` when the session
starts. Two details make that resolution work where Spark's own ``spark.jars.packages`` (Ivy) does not:

- A Spark patch release may be published without every module: spark-sql-kafka-0-10 4.0.1 is on Maven
  Central, its dependency spark-token-provider-kafka-0-10 4.0.1 is not. The token provider is pinned
  (dependencyManagement) to the newest patch release of the same minor version that exists, up to the
  connector's own: a Maven version range of exact versions, ``[4.0.0],[4.0.1]``, resolved against Maven
  Central's list of published versions.
- What PySpark already ships in its ``jars/`` directory (Scala, Hadoop, spark-tags, slf4j, compression
  codecs, ...) is left out, so the classpath gets no second copy of them. What remains is the connector,
  the token provider, kafka-clients and commons-pool2.

Importing this module does not import PySpark (``groupgate kafka fetch`` uses it).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from pathlib import Path
from typing import Any

from gateway.ops import kafka_dist

GROUP = "org.apache.spark"
CONNECTOR = "spark-sql-kafka-0-10_2.13"
TOKEN_PROVIDER = "spark-token-provider-kafka-0-10_2.13"

# name-1.2.3.jar, name_2.13-1.2.3.jar, zstd-jni-1.5.6-9.jar: the version starts at the first "-<digit>".
_JAR = re.compile(r"^(?P<artifact>.+?)-\d[^/]*\.jar$")
_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")


class ConnectorError(RuntimeError):
    """The connector cannot be provided (no PySpark, no Maven, or the fetch failed)."""


def pyspark_version() -> str:
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError as e:
        raise ConnectorError("PySpark is not installed (the 'rehearsal' extra)") from e


def pyspark_jars_dir() -> Path:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise ConnectorError("PySpark is not installed (the 'rehearsal' extra)")
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def shipped_artifacts(jars_dir: Path) -> tuple[str, ...]:
    """artifactIds of the jars in PySpark's jars/ directory (from their file names)."""
    names = {m["artifact"] for p in jars_dir.glob("*.jar") if (m := _JAR.match(p.name))}
    return tuple(sorted(names))


def patch_releases(version: str) -> str:
    """A Maven range of every patch release of version's minor version up to version itself.

    Exact versions, not ``[4.0.0,4.0.1]``: Maven orders 4.0.0-preview2 after 4.0.0, so an interval would
    let a preview in."""
    m = _RELEASE.match(version)
    if m is None:
        return f"[{version}]"
    major, minor, patch = m.groups()
    return ",".join(f"[{major}.{minor}.{p}]" for p in range(int(patch) + 1))


def distribution(version: str | None = None, jars_dir: Path | None = None) -> kafka_dist.Distribution:
    version = version or pyspark_version()
    return kafka_dist.Distribution(
        f"spark-kafka-{version}",
        (f"{GROUP}:{CONNECTOR}:{version}",),
        managed=(f"{GROUP}:{TOKEN_PROVIDER}:{patch_releases(version)}",),
        exclude=shipped_artifacts(jars_dir or pyspark_jars_dir()),
    )


def connector_jars(*, fetch: bool = True, quiet: bool = True) -> list[Path]:
    """The connector's jar files, fetched first when fetch is set and they are not cached yet.

    Raises ConnectorError when they are not cached and cannot be fetched (the message says why)."""
    dist = distribution()
    if not dist.is_fetched():
        if not fetch:
            raise ConnectorError(f"Spark's Kafka connector is not fetched yet ({dist.libs}): run `groupgate kafka fetch`")
        try:
            kafka_dist.fetch(dist, quiet=quiet)
        except kafka_dist.FetchError as e:
            raise ConnectorError(f"Spark's Kafka connector (for kafka:// inputs) could not be fetched: {e}") from e
    jars = sorted(dist.libs.glob("*.jar"))
    if not any(p.name.startswith(CONNECTOR + "-") for p in jars):
        raise ConnectorError(f"{dist.libs} holds no {CONNECTOR} jar; remove {dist.libs.parent} and fetch again")
    return jars


PROVIDER_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def has_connector(spark: Any) -> bool:
    """Whether a running (classic, JVM-backed) SparkSession's driver can load the connector."""
    try:
        jvm = spark.sparkContext._jvm
        loader = jvm.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(PROVIDER_CLASS, False, loader)
    except Exception:
        return False
    return True
