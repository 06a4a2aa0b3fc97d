"""A ClientConnection built without a gateway behind it, over a transport that records what it is told:
for the unit tests of the connection's own bookkeeping (the order and joining of answers, the bound on
local answers in progress)."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

from gateway.net.connection import ClientConnection


class RecordingTransport:
    def __init__(self) -> None:
        self.reading = True
        self.writes: list[bytes] = []

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))


def bare_connection() -> ClientConnection:
    conn = ClientConnection.__new__(ClientConnection)
    conn.transport = RecordingTransport()  # type: ignore[assignment]
    conn.pending = deque()
    conn.closed = False
    conn.close_after_flush = False
    conn._batching = False
    conn._flush_due = False
    conn._paused = set()
    conn.local_answers = 0
    conn.local_bytes = 0
    conn.tasks = set()
    conn.source = None  # type: ignore[assignment]
    conn.peer = ("127.0.0.1", 1)
    conn.metrics = SimpleNamespace(  # type: ignore[assignment]
        bytes_sent=0, local=[0] * 100, latency=lambda key: SimpleNamespace(observe=lambda s: None)
    )
    return conn
