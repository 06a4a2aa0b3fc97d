"""ClientConnection.flush: the answers ready at the head of the queue leave in order, small ones joined
into one write, large ones on their own; answers ready while one read's requests are handled wait for
the end of that read."""

from __future__ import annotations

from types import SimpleNamespace

from gateway.net.connection import _JOINED_BELOW
from gateway.net.contracts import Slot
from gateway.wire import frames
from tests.gateway.connection_fakes import bare_connection


def test_small_answers_ready_together_leave_in_one_write_in_order():
    conn = bare_connection()
    slots = [Slot(), Slot(), Slot(), Slot()]
    conn.pending.extend(slots)
    slots[1].data = b"b"
    conn.flush()
    assert conn.transport.writes == []  # the first answer is not ready: nothing may overtake it
    slots[0].data = b"a"
    slots[3].data = b"d"
    conn.flush()
    assert conn.transport.writes == [b"ab"] and list(conn.pending) == slots[2:]
    slots[2].data = b"c"
    conn.flush()
    assert conn.transport.writes == [b"ab", b"cd"]
    assert conn.metrics.bytes_sent == 4


def test_a_large_answer_is_written_on_its_own_between_the_joined_ones():
    conn = bare_connection()
    big = b"x" * _JOINED_BELOW
    conn.pending.extend(Slot(d) for d in (b"1", b"2", big, b"3"))
    conn.flush()
    assert conn.transport.writes == [b"12", big, b"3"]


def test_answers_ready_while_a_read_is_handled_leave_together_at_its_end():
    conn = bare_connection()
    conn.buf = frames.FrameBuffer(1 << 20)
    conn.reserved = 0
    conn.active = False
    conn.limits = SimpleNamespace(reserve=lambda c, delta: None)  # type: ignore[assignment]
    conn.metrics.bytes_received = 0
    writes_seen: list[int] = []

    def on_request(frame: bytes) -> None:  # each request answered at once, as a local handler that never waits
        writes_seen.append(len(conn.transport.writes))
        conn.pending.append(Slot(frames.frame(frame[4:].upper())))
        conn.flush()

    conn.on_request = on_request  # type: ignore[method-assign]
    conn.data_received(b"".join(frames.frame(r) for r in (b"r1", b"r2", b"r3")))
    assert writes_seen == [0, 0, 0]  # none written while the read was being handled
    assert conn.transport.writes == [b"".join(frames.frame(r) for r in (b"R1", b"R2", b"R3"))]
    conn.data_received(frames.frame(b"r4"))  # a read of one request: its answer at once
    assert conn.transport.writes[1:] == [frames.frame(b"R4")]
    assert not conn._batching and not conn._flush_due
