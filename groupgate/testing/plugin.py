"""pytest plugin of groupgate.testing (entry point ``pytest11``: ``groupgate``).

Fixtures (nothing starts until a test asks for it; brokers are shared by the session):

- ``groupgate_kafka`` (session): the cluster gateways front. The embedded single-node broker (a JVM,
  ``LocalKafka``), or ``--groupgate-upstream HOST:PORT``'s cluster.
- ``groupgate_kafka_container`` (session): ``apache/kafka`` in a container (GroupgateKafkaContainer);
  skipped with "no Docker engine (...)" where none answers.
- ``groupgate_settings``: the GatewaySettings of the test, from ``@pytest.mark.groupgate(**settings)``
  (defaults otherwise); override the fixture to set them for a module.
- ``groupgate``: a started gateway in front of the session's cluster, stopped after the test: a
  LocalGateway (child process) or, with ``--groupgate-backend container``, a GroupgateContainer.
- ``groupgate_container``: a GroupgateContainer in front of ``groupgate_kafka_container`` (skipped
  without a Docker engine), whatever the backend option.
- ``groupgate_factory``: ``make(**settings) -> Gateway``, more gateways, all stopped after the test.
- ``groupgate_fleet``: ``make(size=2, **settings) -> GatewayFleet``, instances sharing the groups.
- ``groupgate_target``: parametrizes the test to run twice, ``[direct]`` against the cluster and
  ``[gateway]`` through a gateway (a Target: ``.bootstrap``, ``.direct``, ``.gateway``).

On a failed test the gateway's log tail is printed in the report.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from groupgate.testing.settings import GatewaySettings

_FAILED = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("groupgate", "groupgate gateways (groupgate.testing)")
    group.addoption(
        "--groupgate-backend", choices=("process", "container"), default="process",
        help="what runs the `groupgate` fixture's gateway and broker: child processes (default) or containers",
    )
    group.addoption(
        "--groupgate-upstream", metavar="HOST:PORT", default=None,
        help="front this cluster instead of starting the embedded broker (process backend)",
    )
    group.addoption(
        "--groupgate-image", metavar="IMAGE", default=None,
        help="the gateway image of the container fixtures (default: groupgate:<package version>)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "groupgate(**settings): GatewaySettings of the test's gateways")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
    return report


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "groupgate_target" in metafunc.fixturenames:
        metafunc.parametrize("groupgate_target", ["direct", "gateway"], indirect=True)


class _Upstream:
    """An existing cluster (``--groupgate-upstream``)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap


@pytest.fixture(scope="session")
def groupgate_kafka(pytestconfig: pytest.Config) -> Iterator[Any]:
    upstream = pytestconfig.getoption("--groupgate-upstream")
    if upstream:
        yield _Upstream(upstream)
        return
    from groupgate.testing.local import LocalKafka

    kafka = LocalKafka().start()
    try:
        yield kafka
    finally:
        kafka.stop()


def _skip_without_docker() -> None:
    from groupgate.testing.containers import docker_unavailable_reason

    reason = docker_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def groupgate_kafka_container() -> Iterator[Any]:
    _skip_without_docker()
    from groupgate.testing.containers import GroupgateKafkaContainer

    kafka = GroupgateKafkaContainer().start()
    try:
        yield kafka
    finally:
        kafka.stop()


@pytest.fixture
def groupgate_settings(request: pytest.FixtureRequest) -> GatewaySettings:
    settings = GatewaySettings()
    # Farthest marker first (module, class), the test's own last, so the closest wins.
    for marker in reversed(list(request.node.iter_markers("groupgate"))):
        settings = settings.replace(**marker.kwargs)
    return settings


def _failed(request: pytest.FixtureRequest) -> bool:
    return bool(request.node.stash.get(_FAILED, False))


class _Gateways:
    """Makes gateways of the session's backend; stops them all at the end of the test."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> None:
        self.request = request
        self.tmp_path = tmp_path
        self.backend = backend
        self.started: list[Any] = []

    def make(self, settings: GatewaySettings, index: int = 0, start: bool = True) -> Any:
        n = len(self.started)
        if self.backend == "container":
            _skip_without_docker()
            from groupgate.testing.containers import GroupgateContainer

            kafka = self.request.getfixturevalue("groupgate_kafka_container")
            gw: Any = GroupgateContainer(
                self.request.config.getoption("--groupgate-image"), upstream=kafka, settings=settings
            )
        else:
            from groupgate.testing.local import LocalGateway

            kafka = self.request.getfixturevalue("groupgate_kafka")
            gw = LocalGateway(kafka.bootstrap, settings, work_dir=self.tmp_path / f"gateway-{n}")
        self.started.append(gw)
        if start:
            gw.start()
        return gw

    def close(self) -> None:
        failed = _failed(self.request)
        for gw in reversed(self.started):
            if failed:
                # Shown in the failure report's teardown section: the gateway's side of the story.
                tail = "\n".join(gw.logs().splitlines()[-60:])
                print(f"--- tail of the gateway's log ({gw.bootstrap if _has_bootstrap(gw) else '?'})\n{tail}")
            gw.stop()


def _has_bootstrap(gw: Any) -> bool:
    try:
        return bool(gw.bootstrap)
    except Exception:  # noqa: BLE001 - never started
        return False


@pytest.fixture
def _groupgate_gateways(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[_Gateways]:
    gateways = _Gateways(request, tmp_path, request.config.getoption("--groupgate-backend"))
    try:
        yield gateways
    finally:
        gateways.close()


@pytest.fixture
def groupgate(_groupgate_gateways: _Gateways, groupgate_settings: GatewaySettings) -> Any:
    return _groupgate_gateways.make(groupgate_settings)


@pytest.fixture
def groupgate_container(request: pytest.FixtureRequest, tmp_path: Path, groupgate_settings: GatewaySettings) -> Iterator[Any]:
    gateways = _Gateways(request, tmp_path, "container")
    try:
        yield gateways.make(groupgate_settings)
    finally:
        gateways.close()


@pytest.fixture
def groupgate_factory(_groupgate_gateways: _Gateways, groupgate_settings: GatewaySettings) -> Callable[..., Any]:
    def make(**changes: Any) -> Any:
        return _groupgate_gateways.make(groupgate_settings.replace(**changes))

    return make


@pytest.fixture
def groupgate_fleet(_groupgate_gateways: _Gateways, groupgate_settings: GatewaySettings) -> Iterator[Callable[..., Any]]:
    from groupgate.testing.fleet import GatewayFleet

    fleets: list[GatewayFleet] = []

    def make(size: int = 2, **changes: Any) -> GatewayFleet:
        fleet = GatewayFleet(
            lambda s, i: _groupgate_gateways.make(s, i, start=False), size, groupgate_settings.replace(**changes)
        )
        fleets.append(fleet)
        return fleet.start()

    yield make


@pytest.fixture
def groupgate_target(request: pytest.FixtureRequest) -> Any:
    from groupgate.testing.scenario import Target

    if request.param == "direct":
        backend = request.config.getoption("--groupgate-backend")
        kafka = request.getfixturevalue("groupgate_kafka_container" if backend == "container" else "groupgate_kafka")
        bootstrap = kafka.get_bootstrap_server() if backend == "container" else kafka.bootstrap
        return Target("direct", bootstrap)
    gw = request.getfixturevalue("groupgate")
    return Target("gateway", gw.bootstrap, gw)
