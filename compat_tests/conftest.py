"""Fixtures of the compatibility suites: a real broker, the gateway in front of it, names and topics.

- ``kafka``: one single-node KRaft broker (process backend) for the whole session: the one the groupgate.testing
  plugin's ``groupgate_kafka`` starts, so that suites using the plugin's fixtures share it.
- ``kafka3``: a 3-node KRaft cluster (three combined broker+controller voters, replication factor 3) for the
  session, started only when a test asks for it.
- ``sasl_kafka``: a second single-node broker with a SASL_PLAINTEXT listener and ACLs enforced
  (compat_tests/harness/sasl.py), started on first use only.
- ``kafka_container``: the testcontainers backend; skipped with "no Docker engine" when none answers.
- ``gateway`` / ``module_gateway``: ``groupgate serve`` as a child process in front of ``kafka``, so a test
  can SIGKILL and restart it. ``pytest --compat-direct`` points these fixtures at the broker itself, to
  tell a harness problem from a gateway problem while developing; the suites' verdicts only count through
  the gateway.
- ``names``: unique topic/group names; ``make_topic``: creates a topic on the broker and waits for leaders.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from compat_tests.harness.admin import create_topic
from compat_tests.harness.brokers import (
    ContainerBackend,
    ProcessBackend,
    docker_unavailable_reason,
    free_port_block,
)
from compat_tests.harness.cluster import KafkaCluster
from compat_tests.harness.gateway_proc import GatewayProcess
from compat_tests.harness.names import unique
from compat_tests.harness.sasl import MECHANISMS, SASL_SESSION_MS, USERS
from compat_tests.harness.tls_certs import Pki, make_pki, openssl_missing_reason
from gateway.ops.embedded_kafka import BrokerSasl, BrokerTls, EmbeddedKafka


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--compat-direct",
        action="store_true",
        default=False,
        help="compat suites: connect clients to the broker directly instead of through the gateway",
    )


@dataclass
class DirectTarget:
    """Stands in for the gateway under --compat-direct: clients talk to the broker itself."""

    bootstrap: str
    direct: bool = True

    def kill(self) -> None:
        pytest.skip("--compat-direct: there is no gateway process to kill")

    def restart(self, *, hard: bool = True) -> DirectTarget:
        pytest.skip("--compat-direct: there is no gateway process to restart")


@pytest.fixture(scope="session")
def kafka(groupgate_kafka: ProcessBackend) -> ProcessBackend:
    if not isinstance(groupgate_kafka, ProcessBackend):
        pytest.skip("the compat suites need the embedded broker (not --groupgate-upstream)")
    return groupgate_kafka


@pytest.fixture(scope="session")
def kafka3() -> Iterator[KafkaCluster]:
    cluster = KafkaCluster()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def sasl_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki | None:
    """Certificates for the SASL broker's SASL_SSL listener; None without openssl."""
    return None if openssl_missing_reason() else make_pki(tmp_path_factory.mktemp("sasl-pki"))


@pytest.fixture(scope="session")
def sasl_kafka(sasl_pki: Pki | None) -> Iterator[EmbeddedKafka]:
    """PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER (unsecured tokens) on ``sasl_bootstrap`` (and on ``sasl_ssl_bootstrap``, with certificates
    from ``sasl_pki``, when openssl is there), StandardAuthorizer, super.users=User:admin."""
    # A short session lifetime (KIP-368): clients re-authenticate, and the gateway renews its own links,
    # within a test of a few seconds.
    broker = EmbeddedKafka(
        sasl=BrokerSasl(users=USERS, mechanisms=MECHANISMS),
        tls=None if sasl_pki is None else BrokerTls(keystore=sasl_pki.server_keystore),
        heap="384m",
        overrides={
            "connections.max.reauth.ms": str(SASL_SESSION_MS),
            # OAUTHBEARER sessions last as long as their token: the state topic's aiokafka clients
            # (test_sasl_oauth.py) authenticate with it and do not re-authenticate (KIP-368).
            "listener.name.sasl_plaintext.oauthbearer.connections.max.reauth.ms": "0",
        },
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.cleanup()


@pytest.fixture(scope="session")
def kafka_container() -> Iterator[ContainerBackend]:
    reason = docker_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    backend = ContainerBackend()
    backend.start()
    try:
        yield backend
    finally:
        backend.stop()


def _serve(request: pytest.FixtureRequest, upstream: str, log_dir: Path) -> Iterator[GatewayProcess | DirectTarget]:
    if request.config.getoption("--compat-direct"):
        yield DirectTarget(upstream)
        return
    # A fixed bootstrap port (and so fixed broker ports P+1+N): a restarted gateway comes back on the
    # addresses its clients already cached.
    gw = GatewayProcess(upstream=upstream, listen_port=free_port_block(3), log_dir=log_dir)
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()
        if _failed(request):
            # Shown in the failure report's teardown section: the gateway's side of the story.
            print(f"--- tail of {gw.log_path}\n{gw.tail(60)}")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
    return report


_FAILED = pytest.StashKey[bool]()


def _failed(request: pytest.FixtureRequest) -> bool:
    """Whether the requesting test failed (for a module fixture: whether any test of the module did)."""
    if request.scope == "module":
        return any(item.stash.get(_FAILED, False) for item in request.session.items if getattr(item, "module", None) is request.module)
    return request.node.stash.get(_FAILED, False)


@pytest.fixture
def gateway(
    request: pytest.FixtureRequest, kafka: ProcessBackend, tmp_path: Path
) -> Iterator[GatewayProcess | DirectTarget]:
    yield from _serve(request, kafka.bootstrap, tmp_path)


@pytest.fixture(scope="module")
def module_gateway(
    request: pytest.FixtureRequest, kafka: ProcessBackend, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess | DirectTarget]:
    yield from _serve(request, kafka.bootstrap, tmp_path_factory.mktemp("gateway"))


@pytest.fixture
def names(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``names("topic")`` -> a name unique to this test run and call."""
    base = request.node.name.replace("[", "-").replace("]", "")[:60]
    return lambda kind: unique(f"{base}-{kind}")


@pytest.fixture
def make_topic(kafka: ProcessBackend, names: Callable[[str], str]) -> Callable[..., str]:
    """Create a fresh topic on the broker (not through the gateway: setup must not depend on what is tested)."""

    def make(partitions: int = 3) -> str:
        return create_topic(kafka.bootstrap, names("topic"), partitions)

    return make


@pytest.fixture
def java_logs(tmp_path: Path) -> Path:
    path = tmp_path / "java"
    path.mkdir()
    return path
