"""The group APIs the gateway answers itself are offered at the versions Kafka 4.4.0 offers, and a
request the gateway refuses is logged once per client and kind, with the reason."""

from __future__ import annotations

import json
import socket
import struct
import time
from pathlib import Path

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from coordinator.errors import Errors
from gateway.wire import codec
from gateway.wire.connect_codec import CONNECT_API
from gateway.wire.group_codec import LOCAL_API

from .harness.probe import roundtrip, split_address

# DescribeQuorum v2 is above what the gateway offers (KIP-853 controller endpoints) and has a top-level
# error code, so it is answered UNSUPPORTED_VERSION on an open connection.
DESCRIBE_QUORUM = 55


def _ranges(bootstrap: str) -> dict[int, tuple[int, int]]:
    req = ApiVersionsRequest[3](client_software_name="compat", client_software_version="1")
    r = roundtrip(bootstrap, req, ApiVersionsResponse, 3)
    return {a.api_key: (a.min_version, a.max_version) for a in r.api_keys}


def test_group_apis_are_offered_up_to_the_versions_of_the_broker(kafka, gateway) -> None:
    broker, ours = _ranges(kafka.bootstrap), _ranges(gateway.bootstrap)
    for api_key, versions in CONNECT_API.items():
        # The connect group type's APIs are the gateway's own (docs/connect.md): no Kafka has them.
        assert api_key not in broker and ours[api_key] == versions, (api_key, ours.get(api_key))
    for api_key in LOCAL_API.keys() - CONNECT_API.keys():
        assert api_key in broker, f"api key {api_key} is not one of Kafka 4.4.0's"
        lo, hi = broker[api_key]
        # The same newest version as the broker; the oldest may reach further back, never less far.
        assert ours[api_key][1] == hi and ours[api_key][0] <= lo, (api_key, ours[api_key], broker[api_key])


def _request(api_key: int, version: int, client_id: str) -> bytes:
    """A request header (v2) with an empty tagged-field section and no body: enough to be refused."""
    cid = client_id.encode()
    body = struct.pack(">hhih", api_key, version, 1, len(cid)) + cid + b"\x00"
    return struct.pack(">i", len(body)) + body


def _send(bootstrap: str, frame: bytes, answered: bool) -> None:
    with socket.create_connection(split_address(bootstrap), timeout=10) as sock:
        sock.sendall(frame)
        if answered:
            (size,) = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
            payload = sock.recv(size, socket.MSG_WAITALL)
            _, msg = codec.decode_response(DESCRIBE_QUORUM, 2, payload)
            assert msg.error_code == Errors.UNSUPPORTED_VERSION
        else:
            assert sock.recv(1) == b""  # closed, as Kafka closes on an api key it does not know


def _refusals(log: Path, deadline_s: float = 10.0, want: int = 0) -> list[dict[str, object]]:
    end = time.monotonic() + deadline_s
    while True:
        out = []
        for line in log.read_text().splitlines():
            if "request refused" not in line:
                continue
            out.append(json.loads(line[line.index("{"):]))
        if len(out) >= want or time.monotonic() > end:
            return out
        time.sleep(0.1)


def test_each_refusal_is_logged_once_per_client_and_kind(kafka, tmp_path: Path) -> None:
    from .harness.gateway_proc import GatewayProcess

    with GatewayProcess(kafka.bootstrap, extra_args=["--log-format", "json"], log_dir=tmp_path) as gw:
        for _ in range(3):
            _send(gw.bootstrap, _request(DESCRIBE_QUORUM, 2, "app-a"), answered=True)  # above what it offers
            _send(gw.bootstrap, _request(9999, 0, "app-a"), answered=False)  # an api key nobody knows
        _send(gw.bootstrap, _request(DESCRIBE_QUORUM, 2, "app-b"), answered=True)
        for _ in range(2):
            _send(gw.bootstrap, struct.pack(">i", 3) + b"abc", answered=False)  # too short for a header
        got = _refusals(gw.log_path, want=4)
        time.sleep(0.5)  # anything logged late would show now
        got = _refusals(gw.log_path)
    assert sorted((e["client_id"] or "", e["kind"]) for e in got) == [
        ("", "frame-too-short"),
        ("app-a", "unknown-api-key:9999"),
        ("app-a", f"unsupported-version:{DESCRIBE_QUORUM}"),
        ("app-b", f"unsupported-version:{DESCRIBE_QUORUM}"),
    ]
    assert all(e["reason"] and e["peer"] == "127.0.0.1" for e in got)
