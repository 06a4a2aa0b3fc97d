"""Refused requests are logged once per client and kind, in bounded memory."""

from __future__ import annotations

import struct

from structlog.testing import capture_logs

from gateway.net.refusals import RefusalLog, client_id_of


def _frame(api_key: int, version: int, client_id: str | None) -> bytes:
    cid = b"" if client_id is None else client_id.encode()
    body = struct.pack(">hhih", api_key, version, 1, -1 if client_id is None else len(cid)) + cid
    return struct.pack(">i", len(body)) + body


def test_client_id_is_read_from_any_request_header() -> None:
    assert client_id_of(_frame(1, 16, "app-1")) == "app-1"
    assert client_id_of(_frame(9999, 0, None)) is None
    assert client_id_of(_frame(1, 16, "app-1")[:15]) is None  # truncated: no guess


def test_each_client_and_kind_is_logged_once() -> None:
    refusals = RefusalLog()
    peer = ("10.0.0.7", 5000)
    with capture_logs() as logs:
        assert refusals.note(peer, "a", "unsupported-version:1", "v16 outside 4-15")
        assert not refusals.note(("10.0.0.7", 5001), "a", "unsupported-version:1", "v17 outside 4-15")
        assert refusals.note(peer, "a", "unknown-api-key:9999", "unknown")
        assert refusals.note(peer, "b", "unsupported-version:1", "v16 outside 4-15")
        assert refusals.note(("10.0.0.8", 5000), "a", "unsupported-version:1", "v16 outside 4-15")
    assert [(e["kind"], e["client_id"], e["peer"]) for e in logs] == [
        ("unsupported-version:1", "a", "10.0.0.7"),
        ("unknown-api-key:9999", "a", "10.0.0.7"),
        ("unsupported-version:1", "b", "10.0.0.7"),
        ("unsupported-version:1", "a", "10.0.0.8"),
    ]
    assert all(e["log_level"] == "warning" and e["reason"] for e in logs)
    assert (refusals.logged, refusals.repeats) == (4, 1)


def test_memory_stays_bounded_with_many_clients() -> None:
    refusals = RefusalLog(capacity=100)
    with capture_logs():
        for i in range(10_000):
            refusals.note(("10.0.0.1", i), f"client-{i}", "unsupported-version:1", "r")
        assert len(refusals) == 100
        # The most recently seen are remembered; the oldest were forgotten and would be logged again.
        assert not refusals.note(("10.0.0.1", 0), "client-9999", "unsupported-version:1", "r")
        assert refusals.note(("10.0.0.1", 0), "client-0", "unsupported-version:1", "r")
