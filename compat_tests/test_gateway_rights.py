"""The rights (ACLs) of the gateway's own principal (docs/gateway.md, "The rights of the gateway's
principal"), against the SASL broker with the StandardAuthorizer: with exactly the documented list the
gateway starts and serves, in each mode; with one ACL fewer, each in turn, start-up names the right it
lacks: exit status 2 and one line on stderr for what start-up needs, one warning for what only some
requests need (the brokers' authorizer, per-group configs).

Each case is its own principal (a SCRAM user made for it) with its own state topic and transactional id
prefix, so the cases share the broker and nothing else; each runs one short-lived gateway.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from compat_tests.harness.gateway_proc import groupgate_binary
from compat_tests.harness.sasl import (
    ADMIN,
    WAIT_S,
    admin_client,
    frame,
    grant,
    plain_authenticate,
    read_response,
    write_toml,
)
from gateway.ops.embedded_kafka import EmbeddedKafka
from gateway.security.sasl_server import add_user
from gateway.wire import codec

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

LIT, PRE = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.BROKER, ResourceType.TRANSACTIONAL_ID

# The documented list, per store: (resource type, name, pattern, operation) with {topic}, {txn} and
# {instances} standing for the case's state topic, transactional id prefix and instances group; and what
# start-up says without it: ("exit", the stderr line's words) or ("warn", the log's words).
AUTHORIZATION = [
    ((C, "kafka-cluster", LIT, AclOperation.DESCRIBE), ("exit", "lacks DESCRIBE on the cluster")),
    ((C, "kafka-cluster", LIT, AclOperation.DESCRIBE_CONFIGS), ("warn", "lacks DESCRIBE_CONFIGS on the cluster")),
    # Per-group configs of the managed groups (here every group: "*"); warned at the first read.
    ((G, "*", LIT, AclOperation.DESCRIBE_CONFIGS), ("warn", "lacks DESCRIBE_CONFIGS on group")),
    # Whether a managed group's id is a share or streams group of the cluster's (FindCoordinator).
    ((G, "*", LIT, AclOperation.DESCRIBE), ("warn", "lacks DESCRIBE on group")),
]
KAFKA_STORE = [
    ((T, "{topic}", LIT, AclOperation.CREATE), ("exit", "lacks CREATE on topic {topic}")),
    ((T, "{topic}", LIT, AclOperation.READ), ("exit", "lacks READ on topic {topic}")),
    ((T, "{topic}", LIT, AclOperation.WRITE), ("exit", "lacks WRITE on topic {topic}")),
    ((T, "{topic}", LIT, AclOperation.DESCRIBE_CONFIGS), ("exit", "lacks DESCRIBE_CONFIGS on topic {topic}")),
    ((X, "{txn}", PRE, AclOperation.WRITE), ("exit", "lacks WRITE on transactional id {txn}0")),
]
INSTANCES = [((G, "{instances}", LIT, AclOperation.READ), ("exit", "lacks READ on group {instances}"))]

MODES: dict[str, list[Any]] = {
    "passthrough": KAFKA_STORE + AUTHORIZATION,
    "terminate": KAFKA_STORE + AUTHORIZATION,
    "file-store": AUTHORIZATION,
    "instances": KAFKA_STORE + INSTANCES + AUTHORIZATION,
}
CASES = [(mode, None) for mode in MODES] + [
    (mode, i) for mode, rights in MODES.items() for i in range(len(rights))
    # The instances mode adds one right to the passthrough list: only that one is taken away there.
    if mode != "instances" or rights[i][0][0] == G and rights[i][0][1] == "{instances}"
]


def _case_id(case: tuple[str, int | None]) -> str:
    mode, i = case
    if i is None:
        return f"{mode}-all"
    (rt, name, _p, op), _ = MODES[mode][i]
    return f"{mode}-without-{op.name}-{rt.name}-{name.strip('{}').replace('*', 'any')}".lower()


def _user(sasl_kafka: EmbeddedKafka, name: str, password: str) -> None:
    admin = admin_client(sasl_kafka)
    up = UserScramCredentialUpsertion(name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode())
    for f in admin.alter_user_scram_credentials([up]).values():
        f.result(timeout=WAIT_S)


def _join(bootstrap: str, group: str) -> int:
    """A KIP-848 member joins ``group`` through the gateway as User:admin (a super user): the first
    ConsumerGroupHeartbeat's error code. The gateway reads the group's configs from the cluster first."""
    import uuid

    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=15) as s:
        assert plain_authenticate(s, 1, ADMIN).error_code == 0
        req = codec.REQUESTS[68][1](
            group_id=group, member_id=str(uuid.uuid4()), member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout_ms=10000, subscribed_topic_names=["t"], subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=[],
        )
        s.sendall(frame(req, 1, 3))
        return int(codec.decode_response(68, 1, read_response(s) or b"")[1].error_code)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_the_documented_rights_and_one_fewer(
    sasl_kafka: EmbeddedKafka, tmp_path: Path, case: tuple[str, int | None]
) -> None:
    mode, missing = case
    tag = f"{_case_id(case)}-{os.getpid()}"[-60:]
    user, password = f"gw-{tag}", "gw-secret"
    names = {"topic": f"gg-state-{tag}", "txn": f"gg-txn-{tag}-", "instances": f"gg-instances-{tag}"}
    _user(sasl_kafka, user, password)
    rights = MODES[mode]
    acls = []
    for i, ((rt, name, pattern, op), _outcome) in enumerate(rights):
        if i != missing:
            acls.append(AclBinding(rt, name.format(**names), pattern, f"User:{user}", "*", op, AclPermissionType.ALLOW))
    grant(sasl_kafka, *acls)

    (tmp_path / "pw").write_text(password + "\n")
    settings: dict[str, Any] = {"super.users": "User:admin"}
    coordinator: dict[str, Any] = {"state_topic_num_partitions": 1, "initial_rebalance_delay_ms": 0}
    args = ["--listener-security-protocol", "SASL_PLAINTEXT", "--upstream-sasl-mechanism", "SCRAM-SHA-512",
            "--upstream-sasl-username", user, "--upstream-sasl-password-file", str(tmp_path / "pw")]
    if mode == "file-store":
        args += ["--state-dir", str(tmp_path / "state")]
    else:
        coordinator |= {"state_topic": names["topic"], "state_transactional_id_prefix": names["txn"]}
    if mode == "instances":
        coordinator["instances_group"] = names["instances"]
    if mode == "terminate":
        creds = tmp_path / "users.json"
        add_user(creds, *ADMIN)
        settings |= {"listener_sasl_mode": "terminate", "listener_sasl_credentials_file": str(creds)}
    args += ["--config", str(write_toml(tmp_path / "gateway.toml", settings, coordinator))]

    outcome = None if missing is None else rights[missing][1]
    proc = subprocess.Popen(
        [groupgate_binary(), "serve", "--upstream", sasl_kafka.sasl_bootstrap, "--listen", "127.0.0.1:0",
         "--log-format", "console", *args],
        stdout=subprocess.PIPE, stderr=(tmp_path / "stderr").open("w"), text=True,
    )
    try:
        bootstrap = _bootstrap_or_exit(proc)
        stderr = (tmp_path / "stderr").read_text()
        if outcome is not None and outcome[0] == "exit":
            assert bootstrap is None, f"served without {rights[missing][0]}: {stderr[-3000:]}"
            assert proc.returncode == 2, stderr[-3000:]
            lines = [ln for ln in stderr.splitlines() if ln.startswith("groupgate:")]
            assert len(lines) == 1, stderr[-3000:]
            assert outcome[1].format(**names) in lines[0] and f"User:{user}" in lines[0], lines[0]
            return
        assert bootstrap is not None, stderr[-3000:]
        # It serves: a join through it is answered (after reading the group's configs from the cluster); on
        # the bootstrap listener, which is not the coordinator, with NOT_COORDINATOR (16).
        assert _join(bootstrap, f"g-{tag}") in (0, 16), stderr
        deadline = time.monotonic() + (5 if outcome is not None else 0.5)
        while True:
            stderr = (tmp_path / "stderr").read_text()
            warned = [ln for ln in stderr.splitlines() if "lacks" in ln]
            if warned or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if outcome is None:
            assert warned == [], warned
        else:
            assert len(warned) == 1 and outcome[1].format(**names) in warned[0], stderr[-3000:]
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _bootstrap_or_exit(proc: subprocess.Popen[str], timeout_s: float = 60) -> str | None:
    """The ``bootstrap=`` address once the gateway serves; None when it exited first."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if line.startswith("bootstrap="):
                return line.split()[0].split("=", 1)[1]
            if line == "":
                proc.wait(15)
                return None
    raise AssertionError("the gateway neither served nor exited in time")
