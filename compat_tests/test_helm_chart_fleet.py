"""The Helm chart's default rendering runs a fleet: two gateway processes started with exactly the
arguments and gateway.toml a Deployment's pods get (the pod IP standing for 127.0.0.1) against the session
broker become ready on the probes' paths, split the shards of the cluster state store through the chart's
instances group, and advertise their own address at the per-broker ports the chart's Service lists.

Only what this machine cannot give is changed: every server binds 127.0.0.1 on free ports (the chart's
0.0.0.0 and fixed ports are overridden on the command line, which comes before the file), and the release
gets a state topic and transactional id prefix of its own (deploy/README.md: two releases against one
cluster) so as not to meet other tests' state. helm comes from `make chart-tools`.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from compat_tests.harness.brokers import ProcessBackend, free_port_block
from compat_tests.harness.names import unique
from compat_tests.harness.probe import find_coordinator_endpoints, metadata_endpoints
from gateway.ops.embedded_kafka import free_port
from groupgate.testing.process import GatewayProcess

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[1]
SHARDS = 6
POD_IP = "127.0.0.1"


def _chart_check() -> Any:
    spec = importlib.util.spec_from_file_location("chart_check", ROOT / "deploy" / "chart_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("chart_check", module)
    spec.loader.exec_module(module)
    return module


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", text, re.M)
    assert m is not None, f"{name} not in /metrics"
    return float(m.group(1))


def test_the_default_rendering_runs_a_fleet_that_splits_the_shards(kafka: ProcessBackend, tmp_path: Path) -> None:
    chart_check = _chart_check()
    try:
        chart_check.tool("helm")
    except chart_check.ToolsMissing as e:
        pytest.fail(str(e), pytrace=False)
    name = unique("chart")
    rendered = chart_check.helm_template(None, extra=[
        "--set", f"upstream={kafka.bootstrap}",
        "--set", f"config.coordinator.state_topic={name}-state",
        "--set", f"config.coordinator.state_transactional_id_prefix={name}-",
        "--set", f"config.coordinator.state\\.topic\\.num\\.partitions={SHARDS}",
        "--set", "config.coordinator.instances_heartbeat_interval_ms=500",
    ]).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "gg-groupgate")
    toml = tmp_path / "gateway.toml"
    toml.write_text(config_map["data"]["gateway.toml"])

    # The pod's arguments, with the file where this machine has it and the admin listener on loopback.
    args = [a.replace("$(POD_IP)", POD_IP) for a in container["args"]]
    args[args.index("--config") + 1] = str(toml)
    i = args.index("--metrics-listen")
    del args[i:i + 2]
    assert "$(" not in " ".join(args)

    gateways = []
    try:
        for n in range(2):
            gw = GatewayProcess(
                upstream=kafka.bootstrap,
                # GatewayProcess adds --ephemeral-state without a store flag: the same store the file names.
                extra_args=[*args, "--state-store", "kafka"],
                listen_port=free_port_block(10),
                metrics_port=free_port(),
                log_dir=tmp_path / f"gw{n}",
            )
            (tmp_path / f"gw{n}").mkdir()
            gateways.append(gw.start(timeout_s=60))

        for gw in gateways:
            for probe in ("livenessProbe", "readinessProbe"):
                path = container[probe]["httpGet"]["path"]
                with urllib.request.urlopen(f"http://127.0.0.1:{gw.metrics_port}{path}", timeout=5) as r:
                    assert r.status == 200, (probe, path)

        # The instances group of the rendering splits the shards: each owns a share, together all of them.
        deadline = time.monotonic() + 45
        while True:
            owned = []
            for gw in gateways:
                with urllib.request.urlopen(f"http://127.0.0.1:{gw.metrics_port}/metrics", timeout=5) as r:
                    owned.append(_metric(r.read().decode(), "groupgate_state_shards_owned"))
            if owned == [SHARDS / 2, SHARDS / 2]:
                break
            assert time.monotonic() < deadline, f"shards owned {owned}\n" + "\n".join(g.tail(30) for g in gateways)
            time.sleep(0.3)

        # Every address handed out is an instance's own (the pod IP) at a port of the chart's Service,
        # relative to its bootstrap port: broker N at bootstrap + 1 + N - nodeIdBase, the coordinator
        # nodes at the bootstrap ports.
        listed = {p["name"]: p["port"] for p in service["spec"]["ports"]}
        offsets = {name: port - listed["bootstrap"] for name, port in listed.items()}
        bootstraps = {gw.listen_port for gw in gateways}
        for gw in gateways:
            nodes = metadata_endpoints(gw.bootstrap)
            assert nodes
            brokers = [e for e in nodes if e.port not in bootstraps]
            assert brokers, nodes
            for e in nodes:
                assert e.host == POD_IP, e
            for e in brokers:
                # The instance carrying the broker: the one whose port block (bootstrap, then its
                # broker listeners) holds the port.
                (owner,) = [b for b in bootstraps if b < e.port < b + len(listed)]
                assert offsets[f"broker-{e.node_id}"] == e.port - owner, (e, offsets)
            coordinator = find_coordinator_endpoints(gw.bootstrap, f"{name}-group", 3)[0]
            assert coordinator.host == POD_IP and coordinator.port in bootstraps
    finally:
        for gw in gateways:
            gw.stop()
