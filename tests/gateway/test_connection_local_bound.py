"""ClientConnection's bound on the answers it computes itself: a connection stops being read while its local
answers in progress are many, or their requests large (what such an answer holds while it runs grows with
its request), and is read again once they finish."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from gateway.net import connection_local
from gateway.net.connection_local import MAX_LOCAL, MAX_LOCAL_BYTES
from tests.gateway.connection_fakes import RecordingTransport, bare_connection


def _frame(body_bytes: int, corr: int) -> bytes:
    # DescribeGroups v0: a request header without tagged fields, then a body the handler below ignores.
    payload = struct.pack(">hhih", 15, 0, corr, 1) + b"c" + b"g" * body_bytes
    return struct.pack(">i", len(payload)) + payload


def _run(requests: list[int]) -> tuple[list[bool], bool, RecordingTransport]:
    """Starts a local answer per request size, all waiting on one event; whether the connection was still
    being read after each, then whether it is read again once it is set and they are answered."""

    async def main() -> tuple[list[bool], bool, RecordingTransport]:
        conn = bare_connection()
        gate = asyncio.Event()

        async def handler(source: Any, header: Any, payload: bytes) -> bytes:
            await gate.wait()
            return b"answer"

        reading = []
        for i, size in enumerate(requests):
            connection_local.answer_locally(conn, handler, _frame(size, i), 15, 0)  # type: ignore[arg-type]
            reading.append(conn.transport.reading)  # type: ignore[union-attr]
        gate.set()
        for _ in range(5):
            await asyncio.sleep(0)
        transport: RecordingTransport = conn.transport  # type: ignore[assignment]
        assert b"".join(transport.writes) == (struct.pack(">i", 6) + b"answer") * len(requests)
        assert not conn.pending and not conn.local_answers and not conn.local_bytes
        return reading, transport.reading, transport

    return asyncio.run(main())


def test_a_large_local_request_in_progress_stops_the_reading_until_it_is_answered():
    reading, after, _ = _run([MAX_LOCAL_BYTES // 2, MAX_LOCAL_BYTES // 2])
    assert reading == [True, False]  # the two together reach the byte bound
    assert after


def test_many_small_local_requests_in_progress_stop_the_reading_at_the_count():
    reading, after, _ = _run([10] * MAX_LOCAL)
    assert reading == [True] * (MAX_LOCAL - 1) + [False]
    assert after
