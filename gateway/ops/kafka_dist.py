"""Apache Kafka distributions fetched from Maven Central into a cache outside the repository.

groupgate's development mode and its test harness run a real Apache Kafka broker and the Java tools
(VerifiableProducer/VerifiableConsumer, the perf-test tools, older kafka-clients for legacy-client tests,
Kafka Streams and a distributed Kafka Connect worker).
The jars come from Maven Central, resolved by Maven itself (transitive runtime dependencies), into
``$GROUPGATE_CACHE`` (default ``~/.cache/groupgate``), one directory of jars per distribution.
Other jar sets (Spark's Kafka connector for the rehearsal report, rehearsal/spark_kafka.py) are fetched
the same way, with version pins (dependencyManagement) and artifacts left out that the host already has.

The current release is pinned to the newest 4.x release whose broker *and* kafka-tools artifacts are both
published; older releases serve as legacy clients.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Newest 4.x release with kafka_2.13, kafka-tools and kafka-group-coordinator all on Maven Central.
CURRENT_KAFKA = "4.4.0"
# Older releases whose clients and tools the compatibility suite runs as legacy consumers (the first one
# also as an older broker).
LEGACY_KAFKA = ("4.3.1", "3.9.1", "2.8.2")
PREVIOUS_KAFKA = LEGACY_KAFKA[0]
# Kafka Connect's release: the newest whose connect-file artifact (the FileStream connectors the suite
# runs) is on Maven Central. 4.4.0's is not, and 4.3.1's connectors do not load on a 4.4.0 worker (they
# call kafka-clients' AppInfoParser, which 4.4 moved to an internal package).
CONNECT_KAFKA = "4.3.1"
SLF4J_SIMPLE = "org.slf4j:slf4j-simple:1.7.36"


@dataclass(frozen=True, slots=True)
class Distribution:
    """One set of jars: a name, the Maven coordinates to resolve, and where they land.

    managed: ``group:artifact:version`` pins for transitive dependencies (the version may be a Maven
    range); exclude: artifactIds not copied (the host application ships its own)."""

    name: str
    artifacts: tuple[str, ...]
    managed: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    @property
    def libs(self) -> Path:
        return cache_dir() / self.name / "libs"

    def classpath(self) -> str:
        return os.pathsep.join(str(p) for p in sorted(self.libs.glob("*.jar")))

    def is_fetched(self) -> bool:
        return (self.libs.parent / ".complete").exists()


def cache_dir() -> Path:
    return Path(os.environ.get("GROUPGATE_CACHE", Path.home() / ".cache" / "groupgate"))


def broker(version: str = CURRENT_KAFKA) -> Distribution:
    """The broker (KRaft, combined mode), its tools and Kafka's own group coordinator module."""
    return Distribution(
        f"kafka-{version}",
        (
            f"org.apache.kafka:kafka_2.13:{version}",
            f"org.apache.kafka:kafka-tools:{version}",
            f"org.apache.kafka:kafka-group-coordinator:{version}",
            SLF4J_SIMPLE,
        ),
    )


def clients(version: str) -> Distribution:
    """kafka-clients and kafka-tools (VerifiableConsumer, perf tools) of one release, without the broker."""
    return Distribution(
        f"kafka-clients-{version}",
        (
            f"org.apache.kafka:kafka-clients:{version}",
            f"org.apache.kafka:kafka-tools:{version}",
            SLF4J_SIMPLE,
        ),
    )


def legacy_admin(version: str) -> Distribution:
    """The Scala broker jar of a release before 3.x (with scala-library, jopt-simple and its other runtime
    dependencies), for the admin tools that lived there until they moved to kafka-tools (2.8's
    ``kafka.admin.ConsumerGroupCommand``); only run as a tool, never as a broker."""
    return Distribution(f"kafka-admin-{version}", (f"org.apache.kafka:kafka_2.13:{version}", SLF4J_SIMPLE))


def streams(version: str = CURRENT_KAFKA) -> Distribution:
    """Kafka Streams of one release (with its kafka-clients and RocksDB), for exactly-once Streams
    applications run through the gateway."""
    return Distribution(
        f"kafka-streams-{version}",
        (f"org.apache.kafka:kafka-streams:{version}", SLF4J_SIMPLE),
    )


def connect(version: str = CONNECT_KAFKA) -> Distribution:
    """Kafka Connect of one release: the distributed worker (connect-runtime), the JSON converter and
    the file connectors (connect-file), for a Connect cluster whose worker group the gateway coordinates."""
    return Distribution(
        f"kafka-connect-{version}",
        (
            f"org.apache.kafka:connect-runtime:{version}",
            f"org.apache.kafka:connect-json:{version}",
            f"org.apache.kafka:connect-file:{version}",
            SLF4J_SIMPLE,
        ),
    )


def all_distributions() -> list[Distribution]:
    return [
        broker(),
        clients(CURRENT_KAFKA),
        streams(CURRENT_KAFKA),
        connect(CONNECT_KAFKA),
        broker(PREVIOUS_KAFKA),
        *(clients(v) for v in LEGACY_KAFKA),
        *(legacy_admin(v) for v in LEGACY_KAFKA if int(v.split(".")[0]) < 3),
    ]


_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.groupgate</groupId>
  <artifactId>fetch-{name}</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
{management}  <dependencies>
{deps}
  </dependencies>
</project>
"""

_DEP = """    <dependency>
      <groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version>
    </dependency>"""


_MANAGEMENT = """  <dependencyManagement>
  <dependencies>
{deps}
  </dependencies>
  </dependencyManagement>
"""


def _deps(coordinates: tuple[str, ...]) -> str:
    return "\n".join(_DEP.format(g=g, a=a, v=v) for g, a, v in (c.split(":") for c in coordinates))


def pom(dist: Distribution) -> str:
    management = _MANAGEMENT.format(deps=_deps(dist.managed)) if dist.managed else ""
    return _POM.format(name=dist.name, management=management, deps=_deps(dist.artifacts))


class FetchError(RuntimeError):
    pass


def fetch(dist: Distribution, *, quiet: bool = True) -> Path:
    """Resolve ``dist`` with Maven into its cache directory (once; later calls return at once)."""
    if dist.is_fetched():
        return dist.libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise FetchError(f"Maven ('mvn') is needed to fetch {dist.name} from Maven Central; install it")
    target = dist.libs
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        pom_path = Path(tmp) / "pom.xml"
        pom_path.write_text(pom(dist))
        cmd = [
            mvn,
            "-B",
            "-f",
            str(pom_path),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={target}",
            "-DincludeScope=runtime",
        ]
        if dist.exclude:
            cmd.append("-DexcludeArtifactIds=" + ",".join(dist.exclude))
        if quiet:
            cmd.insert(1, "-q")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise FetchError(f"fetching {dist.name} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    (dist.libs.parent / ".complete").write_text("\n".join((*dist.artifacts, *dist.managed)) + "\n")
    return dist.libs


def fetch_all() -> list[Path]:
    return [fetch(d) for d in all_distributions()]
