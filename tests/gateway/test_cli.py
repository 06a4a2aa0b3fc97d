"""`groupgate serve` as a process: one stdout line once serving, clean shutdown on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest

from . import _exposition, wire


def _serve(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.ops.cli", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_invalid_configuration_exits_2():
    proc = _serve("--upstream", "no-port-here")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert out == "" and "invalid configuration" in err


def test_a_bad_metrics_address_is_an_invalid_configuration():
    proc = _serve("--upstream", "127.0.0.1:1", "--ephemeral-state", "--metrics-listen", "9644")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert out == "" and "metrics_listen" in err


def test_state_kept_in_the_cluster_and_a_state_dir_at_once_is_an_invalid_configuration():
    """Without --state-dir or --ephemeral-state, group state goes to the cluster's state topic; asking for
    the topic and a directory at once is refused rather than one of them silently ignored."""
    proc = _serve("--upstream", "127.0.0.1:1", "--state-dir", "/nonexistent", "--state-store", "kafka")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert out == "" and "invalid configuration" in err and "state_store" in err


def test_where_group_state_is_kept_by_default():
    from gateway.config.coordinator import CoordinatorSettings

    # What serve and dev run with: the cluster's state topic unless told otherwise.
    assert CoordinatorSettings().with_default_store().effective_state_store == "kafka"
    assert CoordinatorSettings(state_dir="/x").with_default_store().effective_state_store == "file"
    assert CoordinatorSettings(ephemeral_state=True).with_default_store().effective_state_store == "memory"
    assert CoordinatorSettings(enabled=False).with_default_store().state_store is None
    with pytest.raises(ValueError, match="needs state_dir"):
        CoordinatorSettings(state_store="file")


@pytest.mark.kafka
def test_serve_prints_bootstrap_and_stops_on_sigterm(kafka_broker):
    proc = _serve(
        "--upstream", kafka_broker.bootstrap, "--listen", "127.0.0.1:0", "--log-format", "json", "--ephemeral-state"
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("bootstrap=127.0.0.1:")
        bootstrap = line.strip().split("=", 1)[1]
        md = wire.request(bootstrap, MetadataRequest[12](topics=[]), 12)
        port = int(bootstrap.rsplit(":", 1)[1])
        # ephemeral bootstrap P: brokers are mapped from P + 1, as with --listen 127.0.0.1:P
        assert [b.port for b in md.brokers] == [port + 1 + b.node_id for b in md.brokers]
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert out == ""  # exactly one stdout line
    assert '"event": "gateway stopped"' in err


def _metrics_address(stderr: Any) -> str:
    """The bound metrics address, from the JSON log line that announces it (stdout holds only bootstrap=)."""
    for line in stderr:
        if line.startswith("{") and json.loads(line).get("event") == "metrics endpoint listening":
            return str(json.loads(line)["metrics_listen"])
    raise AssertionError("no 'metrics endpoint listening' log line")


def _http_get(address: str, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.kafka
def test_serve_with_metrics_listen_reports_the_requests_it_serves(kafka_broker):
    proc = _serve(
        "--upstream", kafka_broker.bootstrap, "--listen", "127.0.0.1:0", "--log-format", "json",
        "--ephemeral-state", "--metrics-listen", "127.0.0.1:0",
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline()
        assert line.startswith("bootstrap=127.0.0.1:")
        bootstrap = line.strip().split("=", 1)[1]
        address = _metrics_address(proc.stderr)
        assert _http_get(address, "/healthz") == (200, "ok\n")
        assert _http_get(address, "/readyz") == (200, "ready\n")
        assert _http_get(address, "/nowhere")[0] == 404
        before = _exposition.parse(_http_get(address, "/metrics")[1])
        requests = before["groupgate_requests_total"]
        assert not [s for s in requests.samples if s[1]["api"] == "FindCoordinator"]

        wire.request(bootstrap, MetadataRequest[12](topics=[]), 12)
        fc = wire.request(bootstrap, FindCoordinatorRequest[3](key="metrics-group", key_type=0), 3)
        assert fc.error_code == 0

        status, text = _http_get(address, "/metrics")
        assert status == 200
        m = _exposition.parse(text)
        requests = m["groupgate_requests_total"]
        metadata_before = sum(v for _, ls, v in before["groupgate_requests_total"].samples if ls["api"] == "Metadata")
        assert requests.value(api="Metadata", outcome="forwarded") == metadata_before + 1
        assert requests.value(api="FindCoordinator", outcome="local") == 1
        assert m["groupgate_client_connections_total"].value() == before["groupgate_client_connections_total"].value() + 2
        assert m["groupgate_client_sent_bytes_total"].value() > before["groupgate_client_sent_bytes_total"].value()
        latency = m["groupgate_local_request_duration_seconds"]
        assert [v for n, ls, v in latency.samples if n.endswith("_count") and ls["api"] == "FindCoordinator"] == [1]
        assert m["groupgate_ready"].value() == 1 and m["groupgate_upstream_brokers"].value() >= 1
        pauses = m["groupgate_gc_pause_seconds"]  # the serving process records its collector's pauses
        assert sorted(ls["generation"] for n, ls, _ in pauses.samples if n.endswith("_count")) == ["0", "1", "2"]
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert out == ""  # exactly one stdout line, the metrics address went to the log


def test_dev_takes_the_embedded_brokers_initial_rebalance_delay_unless_configured():
    from gateway.config.settings import load_config
    from gateway.ops.cli import follow_embedded_broker
    from gateway.ops.embedded_kafka import EmbeddedKafka

    broker = EmbeddedKafka()
    assert broker.setting("group.initial.rebalance.delay.ms") == "0"
    default = load_config(None, {"upstream": "127.0.0.1:1"}, environ={})
    assert default.coordinator.initial_rebalance_delay_ms == 3000  # Kafka's default, kept by `serve`
    assert follow_embedded_broker(default, broker.setting).coordinator.initial_rebalance_delay_ms == 0
    configured = load_config(
        None, {"upstream": "127.0.0.1:1"}, environ={"GROUPGATE_COORDINATOR_INITIAL_REBALANCE_DELAY_MS": "500"}
    )
    assert follow_embedded_broker(configured, broker.setting).coordinator.initial_rebalance_delay_ms == 500
    slow = EmbeddedKafka(overrides={"group.initial.rebalance.delay.ms": "250"})
    assert follow_embedded_broker(default, slow.setting).coordinator.initial_rebalance_delay_ms == 250
