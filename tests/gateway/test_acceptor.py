"""The gateway's own acceptor (gateway/net/acceptor.py), on asyncio's loop and on uvloop's: every waiting
connection is taken at once, served by the loop's transport, resource errors rest the listener."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable
from typing import Any

import pytest

from gateway.net import acceptor


def _loops() -> list[Any]:
    params: list[Any] = [pytest.param(asyncio.new_event_loop, id="asyncio")]
    try:
        import uvloop  # type: ignore[import-not-found]

        params.append(pytest.param(uvloop.new_event_loop, id="uvloop"))
    except ImportError:
        params.append(
            pytest.param(None, id="uvloop", marks=pytest.mark.skip(reason="uvloop is not installed"))
        )
    return params


class _Echo(asyncio.Protocol):
    made: list[_Echo] = []

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        _Echo.made.append(self)

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


def _run(new_loop: Callable[[], asyncio.AbstractEventLoop], coro: Any) -> Any:
    loop = new_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


@pytest.mark.parametrize("new_loop", _loops())
def test_every_connection_is_served_by_the_loops_transport_with_nodelay(new_loop) -> None:
    async def main() -> tuple[list[bytes], list[int], int]:
        _Echo.made.clear()
        listener = await acceptor.listen(_Echo, "127.0.0.1", 0, backlog=64)
        port = listener.sockets[0].getsockname()[1]
        streams = [await asyncio.open_connection("127.0.0.1", port) for _ in range(20)]
        for i, (_, w) in enumerate(streams):
            w.write(b"%03d" % i)
        echoed = [await asyncio.wait_for(r.readexactly(3), 5) for r, _ in streams]
        nodelay = [
            e.transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            for e in _Echo.made
        ]
        for _, w in streams:
            w.close()
        listener.close()
        await listener.wait_closed()
        return echoed, nodelay, listener.accepted

    echoed, nodelay, accepted = _run(new_loop, main())
    assert echoed == [b"%03d" % i for i in range(20)]
    assert accepted == 20
    assert len(nodelay) == 20 and all(nodelay)


@pytest.mark.parametrize("new_loop", _loops())
def test_one_wake_up_takes_every_waiting_connection_up_to_the_backlog(new_loop) -> None:
    """The property uvloop's own server lacks: connections queued while the loop was busy are all taken in
    the listener's next turn, not one per turn of the loop (at most the backlog: a listener never holds
    more waiting)."""

    async def main() -> tuple[int, int]:
        listener = await acceptor.listen(_Echo, "127.0.0.1", 0, backlog=64)
        sock = listener.sockets[0]
        clients = [socket.create_connection(sock.getsockname(), timeout=5) for _ in range(60)]  # queued by the kernel
        listener._accept(sock)  # one readiness of the listening socket
        first = listener.accepted
        listener._accept(sock)  # nothing left
        second = listener.accepted
        await asyncio.sleep(0.05)
        listener.close()
        await listener.wait_closed()
        for c in clients:
            c.close()
        return first, second

    first, second = _run(new_loop, main())
    assert (first, second) == (60, 60)


@pytest.mark.parametrize("new_loop", _loops())
def test_closing_stops_accepting_and_keeps_the_connections(new_loop) -> None:
    async def main() -> tuple[bytes, bool]:
        listener = await acceptor.listen(_Echo, "127.0.0.1", 0)
        addr = listener.sockets[0].getsockname()
        r, w = await asyncio.open_connection(*addr)
        w.write(b"a")
        await asyncio.wait_for(r.readexactly(1), 5)
        listener.close()
        await listener.wait_closed()
        w.write(b"b")
        still = await asyncio.wait_for(r.readexactly(1), 5)
        try:
            await asyncio.open_connection(*addr)
            refused = False
        except ConnectionRefusedError:
            refused = True
        w.close()
        return still, refused

    assert _run(new_loop, main()) == (b"b", True)


class _Exhausted(socket.socket):
    """A listening socket whose accept always fails as a process out of descriptors does."""

    def accept(self) -> Any:
        raise OSError(errno.EMFILE, "Too many open files")


@pytest.mark.parametrize("new_loop", _loops())
def test_out_of_descriptors_is_reported_once_and_the_listener_rests(new_loop, monkeypatch) -> None:
    monkeypatch.setattr(acceptor, "ACCEPT_RETRY_S", 0.3)

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        reports: list[float] = []

        def handler(_loop: Any, context: dict[str, Any]) -> None:
            assert context["exception"].errno == errno.EMFILE
            reports.append(loop.time())

        loop.set_exception_handler(handler)
        sock = _Exhausted(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        listener = acceptor.Listener(loop, _Echo, [sock], 8)
        client = socket.create_connection(sock.getsockname())  # readable until accepted: never
        began = loop.time()
        await asyncio.sleep(0.5)
        listener.close()
        client.close()
        return [t - began for t in reports]

    reports = _run(new_loop, main())
    # Not a report per turn of the loop: the first at once, the next after the rest.
    assert len(reports) == 2, reports
    assert reports[1] - reports[0] >= 0.25


def test_a_taken_port_fails_to_listen_and_leaves_nothing_open() -> None:
    async def main() -> None:
        listener = await acceptor.listen(_Echo, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        try:
            with pytest.raises(OSError) as e:
                await acceptor.listen(_Echo, "127.0.0.1", port, reuse_address=False)
            assert e.value.errno == errno.EADDRINUSE
            assert "address already in use" in str(e.value)  # asyncio's wording, which tools match
        finally:
            listener.close()

    asyncio.run(main())
