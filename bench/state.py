"""Group coordination latency and throughput by where group state is kept, against Kafka's own coordinator.

One embedded broker (or, with ``--brokers 3``, a 3-node KRaft cluster from the compat harness) and two
``groupgate serve`` children in front of it: one keeping group state in the cluster's state topic (the
default), one in per-shard files (``--state-dir``). Against each target, and the broker itself:

  - ``join``: a KIP-848 member joins (epoch 0) and leaves (epoch -1) over and over: every request
    changes group state, so each answer waits for its records to be durable (a transaction on the
    state topic; an fsync of the file log; Kafka's own write to ``__consumer_offsets``);
  - ``heartbeat``: steady heartbeats of a joined member (nothing to write);
  - ``commit``: synchronous offset commits of a librdkafka KIP-848 consumer (offsets go to the
    cluster in every case; the gateway validates them against its group first).

Each workload runs ``--clients`` threads, each with its own group and connection, for ``--seconds``.
Targets alternate order per round. Prints per-target p50/p99 latency and throughput, then a LAST line
of ``key=value`` pairs with the ratios to Kafka's own coordinator (the goal for the cluster store:
``commit_p99_ratio_topic`` within 2).

    .venv/bin/python bench/state.py [--rounds 2] [--seconds 5] [--clients 4] [--brokers 1|3]
"""

from __future__ import annotations

import argparse
import itertools
import os
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka

from compat_tests.harness.admin import create_topic
from compat_tests.harness.gateway_proc import GatewayProcess
from compat_tests.harness.probe import find_coordinator_endpoints, split_address
from coordinator.errors import Errors
from gateway.ops.embedded_kafka import EmbeddedKafka
from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse

_ids = itertools.count(1)
_NOT_READY = {Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE, Errors.COORDINATOR_LOAD_IN_PROGRESS}


class Conn:
    """One persistent connection: request/response round trips with kafka-python's codec."""

    def __init__(self, address: str) -> None:
        self.sock = socket.create_connection(split_address(address), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, request: Any, response_class: Any, version: int) -> Any:
        cid = next(_ids)
        request.with_header(correlation_id=cid, client_id="groupgate-bench-state")
        self.sock.sendall(request.encode(version=version, header=True, framed=True))
        (size,) = struct.unpack(">i", self._read(4))
        return response_class[version].decode(self._read(size), version=version, header=True)

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def _hb(group: str, member: str, epoch: int, topic: str) -> Any:
    req: Any = ConsumerGroupHeartbeatRequest[1]  # type: ignore[misc]
    join = epoch == 0
    return req(
        group_id=group, member_id=member, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30000 if join else -1, subscribed_topic_names=[topic] if join else None,
        subscribed_topic_regex=None, server_assignor=None, topic_partitions=[] if join else None,
    )


Namer = Callable[[str, int], str]


def _group(kind: str, i: int) -> str:
    """Client ``i``'s own group: a fresh name (``bench/fleet_scale.py`` passes names spread over the shards)."""
    return f"bench-{kind}-{uuid.uuid4().hex[:8]}"


def _via(bootstrap: str, i: int) -> str:
    """The address client ``i`` asks FindCoordinator: of a list, each client its own, in turn."""
    addresses = bootstrap.split(",")
    return addresses[i % len(addresses)]


def _run(clients: int, seconds: float, work: Callable[[int, list[float], threading.Event], None]) -> dict[str, float]:
    stop = threading.Event()
    lat: list[list[float]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            work(i, lat[i], stop)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(60)
    elapsed = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"a client failed: {errors[0]!r}")
    all_ms = sorted(x for xs in lat for x in xs)
    if not all_ms:
        raise RuntimeError("no request completed")
    return {
        "p50": statistics.median(all_ms),
        "p99": all_ms[min(len(all_ms) - 1, int(len(all_ms) * 0.99))],
        "per_s": len(all_ms) / elapsed,
    }


def joins(
    bootstrap: str, topic: str, clients: int, seconds: float, name: Namer = _group
) -> dict[str, float]:
    def work(i: int, lat: list[float], stop: threading.Event) -> None:
        group = name("join", i)
        conn = Conn(find_coordinator_endpoints(_via(bootstrap, i), group, 3)[0].address)
        try:
            while not stop.is_set():
                member = str(uuid.uuid4())
                t = time.perf_counter()
                r = conn.call(_hb(group, member, 0, topic), ConsumerGroupHeartbeatResponse, 1)
                lat.append((time.perf_counter() - t) * 1000)
                if r.error_code != 0:
                    raise RuntimeError(f"join: error {r.error_code}")
                t = time.perf_counter()
                r = conn.call(_hb(group, member, -1, topic), ConsumerGroupHeartbeatResponse, 1)
                lat.append((time.perf_counter() - t) * 1000)
        finally:
            conn.close()

    return _run(clients, seconds, work)


def _joined(address: str, group: str, member: str, topic: str) -> tuple[Conn, int]:
    """A member joined at its coordinator, found again while the coordinator is not ready (as clients do:
    a freshly started broker loads ``__consumer_offsets``, a gateway's shards may still be moving)."""
    deadline = time.monotonic() + 60
    while True:
        conn = Conn(find_coordinator_endpoints(address, group, 3)[0].address)
        r = conn.call(_hb(group, member, 0, topic), ConsumerGroupHeartbeatResponse, 1)
        if r.error_code == 0:
            return conn, r.member_epoch
        conn.close()
        if r.error_code not in _NOT_READY or time.monotonic() > deadline:
            raise RuntimeError(f"join: error {r.error_code}")
        time.sleep(0.3)


def heartbeats(
    bootstrap: str, topic: str, clients: int, seconds: float, name: Namer = _group
) -> dict[str, float]:
    def work(i: int, lat: list[float], stop: threading.Event) -> None:
        group = name("hb", i)
        member = str(uuid.uuid4())
        conn, epoch = _joined(_via(bootstrap, i), group, member, topic)
        try:
            while not stop.is_set():
                t = time.perf_counter()
                r = conn.call(_hb(group, member, epoch, topic), ConsumerGroupHeartbeatResponse, 1)
                lat.append((time.perf_counter() - t) * 1000)
                if r.error_code != 0:
                    raise RuntimeError(f"heartbeat: error {r.error_code}")
                epoch = r.member_epoch
        finally:
            conn.close()

    return _run(clients, seconds, work)


def commits(
    bootstrap: str, topic: str, clients: int, seconds: float, name: Namer = _group
) -> dict[str, float]:
    def work(i: int, lat: list[float], stop: threading.Event) -> None:
        c = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": name("commit", i),
            "group.protocol": "consumer", "enable.auto.commit": False,
        })
        try:
            c.subscribe([topic])
            deadline = time.monotonic() + 60
            while not c.assignment() and time.monotonic() < deadline:
                c.poll(0.2)
            parts = c.assignment()
            if not parts:
                raise RuntimeError("no assignment within 60 s")
            offset = 0
            while not stop.is_set():
                offset += 1
                tps = [confluent_kafka.TopicPartition(p.topic, p.partition, offset) for p in parts]
                t = time.perf_counter()
                c.commit(offsets=tps, asynchronous=False)
                lat.append((time.perf_counter() - t) * 1000)
        finally:
            c.close()

    return _run(clients, seconds, work)


WORKLOADS = {"join": joins, "heartbeat": heartbeats, "commit": commits}


def start_cluster(brokers: int) -> Any:
    """One embedded broker, or the compat harness's 3-node KRaft cluster; started (``.stop()`` it)."""
    if brokers == 3:
        from compat_tests.harness.cluster import KafkaCluster

        return KafkaCluster().start()
    return EmbeddedKafka(heap="1g").start()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--brokers", type=int, choices=(1, 3), default=1)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="groupgate-bench-state-"))
    cluster = start_cluster(args.brokers)
    gateways: dict[str, GatewayProcess] = {}
    try:
        bootstrap = cluster.bootstrap
        topic = create_topic(bootstrap, f"bench-state-{uuid.uuid4().hex[:6]}", 1, replication_factor=args.brokers)
        gateways = {
            "topic": GatewayProcess(bootstrap, ["--state-store", "kafka"], log_dir=work / "topic"),
            "file": GatewayProcess(bootstrap, ["--state-dir", str(work / "file-state")], log_dir=work / "file"),
        }
        for g in gateways.values():
            assert g.log_dir is not None
            g.log_dir.mkdir(parents=True, exist_ok=True)
            g.start(timeout_s=180)
        targets = {"kafka": bootstrap, **{name: g.bootstrap for name, g in gateways.items()}}
        results: dict[str, dict[str, list[dict[str, float]]]] = {t: {w: [] for w in WORKLOADS} for t in targets}
        for r in range(args.rounds):
            order = list(targets) if r % 2 == 0 else list(reversed(targets))
            for name in order:
                for wname, fn in WORKLOADS.items():
                    got = fn(targets[name], topic, args.clients, args.seconds)
                    results[name][wname].append(got)
                    print(
                        f"round {r} {name:6s} {wname:9s} p50 {got['p50']:7.2f} ms  p99 {got['p99']:7.2f} ms  "
                        f"{got['per_s']:8.0f}/s",
                        flush=True,
                    )
    finally:
        for g in gateways.values():
            g.stop()
        if args.brokers == 3:
            cluster.stop()
        else:
            cluster.cleanup()
    summary: dict[str, Any] = {"rounds": args.rounds, "clients": args.clients, "brokers": args.brokers}
    for name, per in results.items():
        for wname, runs in per.items():
            for k in ("p50", "p99", "per_s"):
                summary[f"{wname}_{k}_{name}"] = round(statistics.median(x[k] for x in runs), 2)
    for store in ("topic", "file"):
        for wname in WORKLOADS:
            base = summary[f"{wname}_p99_kafka"]
            summary[f"{wname}_p99_ratio_{store}"] = round(summary[f"{wname}_p99_{store}"] / base, 2) if base else None
    summary["load_avg_1m"] = round(os.getloadavg()[0], 1)
    summary["cpus"] = os.cpu_count()
    print(" ".join(f"{k}={v}" for k, v in summary.items()), flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
