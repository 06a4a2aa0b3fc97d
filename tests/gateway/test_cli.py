"""`groupgate serve` as a process: one stdout line once serving, clean shutdown on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from kafka.protocol.metadata import MetadataRequest

from . import wire


def _serve(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_invalid_configuration_exits_2():
    proc = _serve("--upstream", "no-port-here")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert out == "" and "invalid configuration" in err


def test_serve_without_a_state_dir_refuses_to_start():
    """Group state that vanishes on restart is a choice the operator makes, not a default."""
    proc = _serve("--upstream", "127.0.0.1:1", "--listen", "127.0.0.1:0")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert out == "" and "--state-dir DIR" in err and "--ephemeral-state" in err


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
