"""The live groups page (gateway/ops/groups_page.py) on a group layer serving real requests in-process:
its JSON, its events, its credentials, and a conversion seen between two samples."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.ops.groups_page import GroupsPage
from gateway.wire.api_keys import ApiKey
from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest
from translate.embedded import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
    encode_assignment,
    encode_subscription,
)

from ._groups_support import call
from .test_groups_layer import started


async def member(layer: Any, group: str) -> tuple[str, int]:
    """One classic consumer joins and syncs (a real subscription to "t" and an empty assignment)."""
    from kafka.protocol.consumer.group import JoinGroupRequest, SyncGroupRequest

    metadata = encode_subscription(ConsumerProtocolSubscription(["t"]), 1)
    r = await call(layer, ApiKey.JOIN_GROUP, 5, JoinGroupRequest[5](
        group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="", group_instance_id=None,
        protocol_type="consumer", protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=metadata)],
    ))
    if r.error_code == 79:  # MEMBER_ID_REQUIRED: join again with the id handed out
        r = await call(layer, ApiKey.JOIN_GROUP, 5, JoinGroupRequest[5](
            group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id=r.member_id,
            group_instance_id=None, protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=metadata)],
        ))
    assert r.error_code == 0, r
    s = await call(layer, ApiKey.SYNC_GROUP, 3, SyncGroupRequest[3](
        group_id=group, generation_id=r.generation_id, member_id=r.member_id, group_instance_id=None,
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(
            member_id=r.member_id, assignment=encode_assignment(ConsumerProtocolAssignment([]), 1))],
    ))
    assert s.error_code == 0, s
    return r.member_id, r.generation_id


def join848(group: str, member_id: str) -> Any:
    return ConsumerGroupHeartbeatRequest[1](
        group_id=group, member_id=member_id, member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30000, subscribed_topic_names=["t"], subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=[],
    )


@pytest.fixture
async def layer(tmp_path: Path) -> AsyncIterator[Any]:
    layer = await started(state_dir=str(tmp_path / "state"))
    try:
        yield layer
    finally:
        await layer.stop()


async def client_for(page: GroupsPage) -> TestClient[Any, Any]:
    app = web.Application()
    app.add_routes(page.routes())
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    return client


async def test_every_group_with_its_type_state_epoch_and_members_by_protocol(layer: Any) -> None:
    await member(layer, "classic-1")
    r = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, join848("new-1", "m-1"))
    assert r.error_code == 0
    page = GroupsPage(layer)
    client = await client_for(page)
    try:
        overview = await (await client.get("/api/groups")).json()
        rows = {g["group_id"]: g for g in overview["groups"]}
        assert set(rows) == {"classic-1", "new-1"}
        assert (rows["classic-1"]["type"], rows["classic-1"]["state"], rows["classic-1"]["epoch"]) == ("classic", "STABLE", 1)
        assert rows["classic-1"]["protocols"] == {"classic": 1, "translated": 0, "consumer": 0}
        assert (rows["new-1"]["type"], rows["new-1"]["epoch"]) == ("consumer", r.member_epoch)
        assert rows["new-1"]["protocols"] == {"classic": 0, "translated": 0, "consumer": 1}
        assert overview["fleet"]["groups"] == {"classic": 1, "consumer": 1, "connect": 0}
        assert overview["fleet"]["members"] == {"classic": 1, "translated": 0, "consumer": 1, "connect": 0}
        one = await (await client.get("/api/groups/new-1")).json()
        assert [(m["member_id"], m["protocol"], m["member_epoch"]) for m in one["member_list"]] == [
            ("m-1", "consumer", r.member_epoch)]
        assert (await client.get("/api/groups/nobody")).status == 404
        html = await client.get("/groups/new-1")
        assert html.status == 200 and "EventSource" in await html.text()
    finally:
        await client.close()


async def test_a_classic_group_taken_over_by_a_consumer_member_counts_as_a_conversion(layer: Any) -> None:
    classic_id, _ = await member(layer, "moving")
    page = GroupsPage(layer)
    assert page.sample().conversions == {"to_consumer": 0, "to_classic": 0}
    r = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, join848("moving", "m-new"))
    assert r.error_code == 0
    s = page.sample()
    assert s.conversions == {"to_consumer": 1, "to_classic": 0}
    assert s.groups == {"classic": 0, "consumer": 1, "connect": 0}
    assert s.members == {"classic": 0, "translated": 1, "consumer": 1, "connect": 0}  # the classic member, translated
    row = page.group("moving")
    assert row is not None
    assert {m["member_id"]: m["protocol"] for m in row["member_list"]} == {
        classic_id: "classic (translated)", "m-new": "consumer"}
    assert page.overview()["fleet"]["conversions"]["to_consumer"] == 1
    assert len(page.overview()["history"]) == 2


async def test_events_stream_the_overview_again_and_again(layer: Any) -> None:
    await member(layer, "streamed")
    page = GroupsPage(layer, sample_s=0.05)
    client = await client_for(page)
    try:
        resp = await client.get("/api/events/groups")
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        events = []
        while len(events) < 2:
            line = (await resp.content.readline()).decode()
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: "):]))
        assert all([g["group_id"] for g in e["groups"]] == ["streamed"] for e in events)
        assert events[1]["at"] >= events[0]["at"]
        resp.close()
    finally:
        await client.close()


async def test_credentials_are_asked_when_configured(layer: Any) -> None:
    page = GroupsPage(layer, check_password=lambda u, p: (u, p) in {("ops", "s3cret"), ("dev", "pw")},
                      users=frozenset({"ops"}))
    client = await client_for(page)

    def basic(user: str, password: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

    try:
        for path in ("/groups", "/api/groups", "/api/events/groups"):
            refused = await client.get(path)
            assert refused.status == 401 and refused.headers["WWW-Authenticate"].startswith("Basic")
            assert (await client.get(path, headers=basic("ops", "wrong"))).status == 401
            assert (await client.get(path, headers=basic("dev", "pw"))).status == 401  # not in admin_users
            assert (await client.get(path, headers={"Authorization": "Basic !!notbase64"})).status == 401
        assert (await client.get("/api/groups", headers=basic("ops", "s3cret"))).status == 200
    finally:
        await client.close()


def test_who_the_page_asks_for_credentials(tmp_path: Path) -> None:
    from gateway.config.settings import GatewayConfig
    from gateway.ops.groups_page import page_credentials
    from gateway.security.sasl_server import add_user

    sasl_users, admins = tmp_path / "users.json", tmp_path / "admins.json"
    add_user(sasl_users, "alice", "alice-secret")
    add_user(admins, "ops", "ops-secret")
    base = {"upstream": "h:1"}
    terminating = {**base, "listener_security_protocol": "SASL_PLAINTEXT", "listener_sasl_mode": "terminate",
                   "listener_sasl_credentials_file": str(sasl_users)}

    def check(settings: dict[str, Any]) -> tuple[Any, Any]:
        return page_credentials(GatewayConfig.model_validate(settings))

    assert check(base) == (None, None)  # no SASL termination, no admin file: open
    passthrough = {**base, "listener_security_protocol": "SASL_PLAINTEXT"}
    assert check(passthrough)[0] is None  # the gateway sees no passwords to check against
    ok, users = check(terminating)
    assert ok is not None and users is None
    assert ok("alice", "alice-secret") and not ok("alice", "wrong") and not ok("ops", "ops-secret")
    ok, _ = check({**terminating, "admin_credentials_file": str(admins)})  # its own file wins
    assert ok is not None and ok("ops", "ops-secret") and not ok("alice", "alice-secret")
    ok, users = check({**base, "admin_credentials_file": str(admins), "admin_users": ["ops"]})
    assert ok is not None and ok("ops", "ops-secret") and users == frozenset({"ops"})
    oauth_only = {**base, "listener_security_protocol": "SASL_PLAINTEXT", "listener_sasl_mode": "terminate",
                  "listener_sasl_enabled_mechanisms": ["OAUTHBEARER"],
                  "sasl_oauthbearer_jwks_endpoint_url": "http://127.0.0.1:1/jwks"}
    ok, _ = check(oauth_only)
    assert ok is not None and not ok("alice", "alice-secret")  # closed, never open


def test_the_pages_script_parses(tmp_path: Path) -> None:
    """A syntax error would leave the page at "connecting" with nothing said: node checks the script."""
    import shutil
    import subprocess

    from gateway.ops.groups_page import PAGE

    node = shutil.which("node")
    if node is None:
        pytest.skip("no node on PATH to check the script with (the Chromium test still runs it)")
    script = tmp_path / "page.js"
    script.write_text(PAGE.split("<script>", 1)[1].split("</script>", 1)[0])
    done = subprocess.run([node, "--check", str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


async def test_a_connect_group_shows_its_type_epochs_and_workers(layer: Any) -> None:
    from .test_connect_groups_layer import _assigned

    got = await _assigned(layer)
    assert got.member_epoch == 1
    page = GroupsPage(layer)
    client = await client_for(page)
    try:
        overview = await (await client.get("/api/groups")).json()
        (row,) = overview["groups"]
        assert (row["group_id"], row["type"], row["state"], row["epoch"], row["assignment_epoch"]) == (
            "connect-cluster", "connect", "STABLE", 1, 1,
        )
        assert (row["members"], row["reconciled"], row["assignor"]) == (1, 1, "sessioned")
        assert overview["fleet"]["groups"]["connect"] == 1 and overview["fleet"]["members"]["connect"] == 1
        one = await (await client.get("/api/groups/connect-cluster")).json()
        (w,) = one["member_list"]
        assert (w["member_id"], w["protocol"], w["url"], w["member_epoch"], w["state"]) == (
            "w1", "connect", "http://w1:8083", 1, "STABLE",
        )
        assert w["assignment"] == {"connectors and tasks": ["A", "A-0"]} and (w["assigned"], w["target"]) == (2, 2)
        assert page.sample().groups["connect"] == 1
    finally:
        await client.close()
