"""A running Kafka Connect cluster converted to the connect group type and back, through the gateway, beside
the same cluster's classic rebalances against Kafka itself.

Two distributed Connect 4.3.1 workers (protocol ``sessioned``) run a FileStreamSource (file -> topic) and a
FileStreamSink (topic -> file), one task each. Then a third worker joins the cluster and later leaves it:

- against the broker directly, a third Connect worker (the classic protocol is all Kafka has for Connect);
- through the gateway, the project's new-protocol worker (``groupgate.testing.connect_worker``): its
  ConnectGroupHeartbeat converts the classic worker group into a connect group whose two classic workers are
  translated member by member, and its leave converts the group back.

Both runs append lines while the third worker is in and after it left, and sample every connector's and task's
state over the REST API the whole time. They must end alike: every line once and in order in the sink file,
each connector and task on exactly one worker at every sample, the worker group a Stable classic group of
two at the end; through the gateway the group is a connect group while the new worker is in. The task
downtime of both rolls is printed side by side; the gateway's roll may stop no connector or task that the
classic roll against Kafka did not stop.
"""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kafka.protocol.admin import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)

from compat_tests.harness.connect import (
    Worker,
    cluster_props,
    file_connectors,
    numbered_lines,
    running,
    sink_lines,
    start_worker,
    stop_worker,
    wait_for,
)
from compat_tests.harness.connect import (
    connect_classpath as _connect_classpath,
)
from compat_tests.harness.probe import find_coordinator_endpoints, roundtrip
from groupgate.testing.connect_worker import ConnectWorkerModel

pytestmark = pytest.mark.kafka

LINES = 40
T = TypeVar("T")


@pytest.fixture(scope="module")
def connect_classpath() -> str:
    return _connect_classpath()


class _Loop:
    """An asyncio loop on a thread of its own, so the synchronous test can drive the worker model."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="connect-worker-model", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 120) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@dataclass
class _Sampler:
    """Every connector's and task's state and worker over REST, sampled until stopped."""

    worker: Worker
    units: list[str]
    samples: list[tuple[float, dict[str, tuple[str, str]]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="connect-status", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.monotonic()
            seen: dict[str, tuple[str, str]] = {}
            try:
                for name in self.units:
                    st = self.worker.request("GET", f"/connectors/{name}/status")
                    seen[name] = (st["connector"]["state"], st["connector"]["worker_id"])
                    for t in st.get("tasks", []):
                        seen[f"{name}-{t['id']}"] = (t["state"], t["worker_id"])
            except (urllib.error.URLError, ConnectionError, OSError, ValueError, KeyError) as e:
                self.errors.append(repr(e))
            else:
                self.samples.append((now, seen))
            self._stop.wait(0.2)

    def downtime(self) -> dict[str, float]:
        """Seconds each unit was seen in a state other than RUNNING (between samples)."""
        down: dict[str, float] = {}
        for (t0, seen), (t1, _) in zip(self.samples, self.samples[1:], strict=False):
            for unit, (state, _worker) in seen.items():
                down.setdefault(unit, 0.0)
                if state != "RUNNING":
                    down[unit] += t1 - t0
        return {u: round(s, 2) for u, s in sorted(down.items())}

    def workers_seen(self) -> dict[str, list[str]]:
        """The workers each unit ran on, in order (consecutive repeats folded)."""
        out: dict[str, list[str]] = {}
        for _, seen in self.samples:
            for unit, (state, worker) in seen.items():
                if state == "RUNNING" and (not out.get(unit) or out[unit][-1] != worker):
                    out.setdefault(unit, []).append(worker)
        return out


def _listed(bootstrap: str, group: str) -> tuple[str, str, str] | None:
    """(protocol type, group type, state) of the worker group in ListGroups v5 of its coordinator."""
    address = find_coordinator_endpoints(bootstrap, group, 3)[0].address
    listed = roundtrip(address, ListGroupsRequest[5](states_filter=[], types_filter=[]), ListGroupsResponse, 5)
    entry = next((g for g in listed.groups if g.group_id == group), None)
    return None if entry is None else (entry.protocol_type, entry.group_type, entry.group_state)


def _group_is(bootstrap: str, group: str, want: tuple[str, str, str]) -> Callable[[], tuple[str, str, str] | None]:
    def check() -> tuple[str, str, str] | None:
        got = _listed(bootstrap, group)
        return got if got == want else None

    return check


def _append(path: Path, first: int, n: int) -> None:
    with path.open("a") as f:
        f.write("".join(f"{line}\n" for line in numbered_lines(first, n)))


def _roll(
    classpath: str, bootstrap: str, topic: str, names: Callable[[str], str], work: Path, log_dir: Path,
    third: str,
) -> dict[str, Any]:
    """Two Connect workers run the file connectors; a third worker (``java`` or ``model``) joins and leaves."""
    work.mkdir()
    source, sink = work / "source.txt", work / "sink.txt"
    _append(source, 0, LINES)
    cluster = cluster_props(bootstrap, names)
    group = cluster["group.id"]
    workers: list[Worker] = []
    loop = _Loop() if third == "model" else None
    model: ConnectWorkerModel | None = None
    sampler: _Sampler | None = None
    seen: dict[str, Any] = {}
    try:
        for _ in range(2):
            w = start_worker(classpath, cluster, work, log_dir)
            workers.append(w)
            wait_for(w, "REST API answer", 90, lambda w=w: w.request("GET", "/"))
        first = workers[0]
        wait_for(first, "a Stable worker group of two", 60, _group_is(bootstrap, group, ("connect", "classic", "Stable")))
        src, snk = file_connectors(first, names, source, sink, topic)
        wait_for(first, f"{LINES} lines in the sink file", 90, sink_lines(sink, LINES))
        for name in (src, snk):
            wait_for(first, f"{name} and its task RUNNING", 30, running(first, name))
        sampler = _Sampler(first, [src, snk])
        sampler.start()
        time.sleep(1.0)
        # The third worker joins.
        if third == "java":
            w = start_worker(classpath, cluster, work, log_dir)
            workers.append(w)
            wait_for(w, "REST API answer", 90, lambda w=w: w.request("GET", "/"))
            seen["in"] = wait_for(first, "a Stable worker group of three", 60, lambda: (
                v if (v := _listed(bootstrap, group)) and _classic_members(bootstrap, group) == 3 else None
            ))  # fmt: skip
        else:
            assert loop is not None
            model = ConnectWorkerModel(bootstrap, group, url="http://127.0.0.1:1/new-protocol-worker")
            loop.run(model.start())
            loop.run(model.wait_stable(60), 90)
            seen["in"] = wait_for(first, "the worker group converted to a Stable connect group", 60,
                                  _group_is(bootstrap, group, ("connect", "connect", "Stable")))  # fmt: skip
        _append(source, LINES, LINES)
        wait_for(first, f"{2 * LINES} lines in the sink file", 60, sink_lines(sink, 2 * LINES))
        for name in (src, snk):
            wait_for(first, f"{name} and its task RUNNING with the third worker in", 60, running(first, name))
        # The third worker leaves.
        if third == "java":
            leaving = workers.pop()
            seen["third_exit"] = stop_worker(leaving)
        else:
            assert loop is not None and model is not None
            loop.run(model.leave())
            seen["model_history"] = list(model.history)
        seen["out"] = wait_for(first, "a Stable classic worker group of two", 60,
                               _group_is(bootstrap, group, ("connect", "classic", "Stable")))  # fmt: skip
        _append(source, 2 * LINES, LINES)
        seen["lines"] = wait_for(first, f"{3 * LINES} lines in the sink file", 60, sink_lines(sink, 3 * LINES))
        for name in (src, snk):
            seen[name] = wait_for(first, f"{name} and its task RUNNING after the roll", 60, running(first, name))
        time.sleep(1.0)
    finally:
        if sampler is not None:
            sampler.stop()
        if model is not None and loop is not None:
            loop.run(model.close(), 30)
        if loop is not None:
            loop.close()
        # Not asserted: Connect 4.3.1's shutdown now and then hangs in its REST server's stop (Jetty's own
        # shutdown hook racing Connect's) whatever the coordinator, and the roll is over by now.
        seen["exits"] = [w.tool.stop(grace_s=20) for w in workers]
    assert sampler is not None
    return {
        **seen, "expected": numbered_lines(0, 3 * LINES), "downtime": sampler.downtime(),
        "workers_seen": sampler.workers_seen(), "samples": len(sampler.samples), "sample_errors": sampler.errors[:5],
        "units": (src, snk),
    }  # fmt: skip


def _classic_members(bootstrap: str, group: str) -> int:
    """How many members DescribeGroups v5 shows in the worker group (0 while it is not a Stable classic group)."""
    address = find_coordinator_endpoints(bootstrap, group, 3)[0].address
    described = roundtrip(
        address, DescribeGroupsRequest[5](groups=[group], include_authorized_operations=False), DescribeGroupsResponse, 5
    ).groups[0]
    return len(described.members) if described.error_code == 0 and described.group_state == "Stable" else 0


def test_a_connect_cluster_converted_to_the_connect_group_type_and_back_beside_a_classic_roll_on_kafka(
    kafka: Any, module_gateway: Any, make_topic: Callable[..., str], names: Callable[[str], str],
    connect_classpath: str, java_logs: Path, tmp_path: Path,
) -> None:
    if getattr(module_gateway, "direct", False):
        pytest.skip("--compat-direct: the new-protocol worker needs the gateway")
    results = {
        "kafka, third Connect worker": _roll(connect_classpath, kafka.bootstrap, make_topic(1), names,
                                             tmp_path / "direct", java_logs, "java"),
        "gateway, new-protocol worker": _roll(connect_classpath, module_gateway.bootstrap, make_topic(1), names,
                                              tmp_path / "gateway", java_logs, "model"),
    }  # fmt: skip
    print("\ntask and connector downtime (s) during the roll, side by side:")
    for name, r in results.items():
        print(f"  {name}: {r['downtime']} over {r['samples']} samples; workers seen per unit: {r['workers_seen']}; "
              f"worker exit codes {r.get('third_exit')}, {r['exits']}")
    for name, r in results.items():
        # Every line once and in order across the join and the leave.
        assert r["lines"] == r["expected"], (name, len(r["lines"]), r["lines"][:3])
        for unit, status in ((u, r[u]) for u in r["units"]):
            assert status["connector"]["state"] == "RUNNING", (name, unit, status)
            assert [t["state"] for t in status["tasks"]] == ["RUNNING"], (name, unit, status)
        assert r["out"] == ("connect", "classic", "Stable"), (name, r["out"])
        assert r["samples"] > 10, (name, r["samples"], r["sample_errors"])
    direct, gateway = results.values()
    assert gateway["in"] == ("connect", "connect", "Stable"), gateway["in"]
    # No unit ran on the new-protocol worker while a Connect worker ran it: the model's own history against the
    # samples (the model takes what it is given; the classic leader gives it nothing it must give back late).
    model_units = {unit for _, what, unit in gateway["model_history"] if what == "start"}
    for unit in model_units:
        assert unit not in gateway["workers_seen"], (unit, gateway["workers_seen"])
    # The roll through the gateway stops nothing the classic roll against Kafka did not stop.
    stopped = {name: {u for u, s in r["downtime"].items() if s > 0} for name, r in results.items()}
    assert stopped["gateway, new-protocol worker"] <= stopped["kafka, third Connect worker"], stopped
