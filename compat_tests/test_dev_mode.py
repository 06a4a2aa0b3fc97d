"""`groupgate dev`: the gateway in front of its embedded broker coordinates groups with that broker's
settings. The embedded broker runs group.initial.rebalance.delay.ms=0; a gateway left at Kafka's
default (3000 ms) made every first JoinGroup of an empty group wait 3 s more than on the broker."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from kafka.protocol.consumer.group import JoinGroupRequest, JoinGroupResponse

from .harness.gateway_proc import groupgate_binary
from .harness.probe import find_coordinator_endpoints, roundtrip

MEMBER_ID_REQUIRED = 79
START_TIMEOUT_S = 180.0


def _start_dev(log_path: Path) -> tuple[subprocess.Popen[str], str]:
    log = open(log_path, "w")  # noqa: SIM115 - handed to the child process
    proc = subprocess.Popen(
        [groupgate_binary(), "dev", "--listen", "127.0.0.1:0", "--log-format", "json"],
        stdout=subprocess.PIPE, stderr=log, text=True,
    )
    log.close()
    found: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("bootstrap=") and not found:
                found.append(line.split()[0].removeprefix("bootstrap="))

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not found and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if not found:
        proc.kill()
        raise AssertionError(f"groupgate dev did not come up; log:\n{log_path.read_text()[-4000:]}")
    return proc, found[0]


def _events(log_path: Path, event: str) -> list[dict[str, Any]]:
    out = []
    for line in log_path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # the embedded broker's own start-up lines
        if entry.get("event") == event:
            out.append(entry)
    return out


def _join(address: str, group: str, member_id: str) -> Any:
    proto = JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01\x00\x00\x00\x00\x00\x00")
    req = JoinGroupRequest[5](
        group_id=group, session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id=member_id,
        group_instance_id=None, protocol_type="consumer", protocols=[proto],
    )
    return roundtrip(address, req, JoinGroupResponse, 5, timeout_s=30.0)


def test_dev_gateway_uses_the_embedded_brokers_initial_rebalance_delay(tmp_path: Path) -> None:
    log_path = tmp_path / "dev.log"
    proc, bootstrap = _start_dev(log_path)
    try:
        (setting,) = _events(log_path, "dev: group coordinator setting")
        assert setting["setting"] == "group.initial.rebalance.delay.ms"
        assert (setting["value"], setting["embedded_broker_value"], setting["source"]) == (0, "0", "embedded broker")
        (ready,) = _events(log_path, "group coordinator ready")
        assert ready["group.initial.rebalance.delay.ms"] == 0
        # A fresh classic group's first JoinGroup through the gateway: the member is told its id, joins
        # with it and gets generation 1 as the group's only member and leader.
        (coordinator,) = find_coordinator_endpoints(bootstrap, "dev-first-join", 3, timeout_s=60.0)
        first = _join(coordinator.address, "dev-first-join", "")
        assert first.error_code == MEMBER_ID_REQUIRED
        joined = _join(coordinator.address, "dev-first-join", first.member_id)
        assert (joined.error_code, joined.generation_id, joined.leader) == (0, 1, first.member_id)
        assert [m.member_id for m in joined.members] == [first.member_id]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
