"""The gateway's own Kafka client towards the upstream cluster (offsets, lookups, merges).

The group layer keeps offsets in the real cluster and asks it about groups it does not manage, so it
needs requests of its own, apart from the clients' pipelines: one pipelined connection per upstream
broker address, correlation ids of our own, and a cache of each group's upstream coordinator
(FindCoordinator), dropped when the upstream answers NOT_COORDINATOR and friends.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import Callable
from typing import Any

from coordinator.errors import Errors
from gateway.logging import get_logger
from gateway.net.upstream import (
    BrokerDirectory,
    UpstreamAuthError,
    UpstreamError,
    open_authenticated,
    set_nodelay,
    upstream_credentials,
)
from gateway.security.tls import note_upstream_failure
from gateway.wire import codec, frames
from gateway.wire.api_keys import ApiKey

log = get_logger("gateway.net.upstream_client")

_CLIENT_ID = "groupgate-coordinator"
# Errors after which the coordinator of a group must be looked up again (Kafka's client does the same).
# The cluster's answers that say the group's coordinator is elsewhere (or not ready): look it up again.
COORDINATOR_MOVED = frozenset(
    {Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE, Errors.COORDINATOR_LOAD_IN_PROGRESS}
)
RAW = -1  # a request forwarded as the client's bytes, answered with the upstream's bytes
_CORR = struct.Struct(">i")


# A link whose SASL session has a lifetime (KIP-368) is replaced at this fraction of it: a broker closes a
# connection that sends a request after its session expired, and re-authenticating in place would have to
# stop the pipeline; a fresh link is simpler.
_RENEW_AT = 0.8


class _Link:
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, session_lifetime_ms: int = 0
    ) -> None:
        self.reader = reader
        self.writer = writer
        now = asyncio.get_running_loop().time()
        self.renew_at = now + session_lifetime_ms * _RENEW_AT / 1000 if session_lifetime_ms > 0 else None
        self.retired = False
        # correlation id -> (future, api key, version); api key RAW: the future gets the payload undecoded
        self.waiting: dict[int, tuple[asyncio.Future[Any], int, int]] = {}
        self.corr = itertools.count(1)
        self.closed = False
        self.task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        error: Exception = LostInFlight("upstream connection closed")
        try:
            while True:
                size = int.from_bytes(await self.reader.readexactly(4), "big")
                payload = await self.reader.readexactly(size)
                corr = frames.response_correlation_id(payload)
                entry = self.waiting.pop(corr, None)
                if entry is None:
                    continue
                if self.retired and not self.waiting:
                    self.close()  # replaced: its last answer is in
                fut, api_key, version = entry
                if fut.done():
                    continue
                if api_key == RAW:
                    fut.set_result(payload)
                    continue
                try:
                    fut.set_result(codec.decode_response(api_key, version, payload)[1])
                except Exception as e:  # noqa: BLE001 - an undecodable answer fails that request only
                    fut.set_exception(UpstreamError(f"undecodable response to api {api_key} v{version}: {e}"))
        except (OSError, asyncio.IncompleteReadError) as e:
            error = LostInFlight(f"upstream connection lost: {e}")
        finally:
            self.close(error)

    def send(self, api_key: int, version: int, msg: Any, checked: bool = False) -> asyncio.Future[Any]:
        if self.closed:
            raise UpstreamError("upstream connection closed")
        # The link is shared by every group's requests: one the broker cannot parse makes it close the
        # connection under all of them. Such a request fails alone, before it is written.
        null = None if checked else codec.null_field(msg, version)
        if null is not None:
            raise RefusedRequest(f"api {api_key} v{version}: {null} is null")
        corr = next(self.corr)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[corr] = (fut, api_key, version)
        msg.with_header(correlation_id=corr, client_id=_CLIENT_ID)
        self.writer.write(bytes(msg.encode(version=version, header=True, framed=True)))
        return fut

    def send_raw(self, payload: bytes) -> asyncio.Future[bytes]:
        """A client's request (header + body, no size prefix) under a correlation id of this link."""
        if self.closed:
            raise UpstreamError("upstream connection closed")
        corr = next(self.corr)
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.waiting[corr] = (fut, RAW, 0)
        self.writer.write(frames.frame(payload[:4] + _CORR.pack(corr) + payload[8:]))
        return fut

    def close(self, error: Exception | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        self.writer.close()
        for fut, _, _ in self.waiting.values():
            if not fut.done():
                fut.set_exception(error or UpstreamError("upstream connection closed"))
        self.waiting.clear()
        if self.task is not asyncio.current_task():
            self.task.cancel()


def _time_out(fut: asyncio.Future[Any], timed_out: list[bool]) -> None:
    if not fut.done():
        timed_out.append(True)
        fut.cancel()


async def _within(fut: asyncio.Future[Any], timeout_s: float) -> Any:
    """``asyncio.wait_for`` of a link's answer, without its extra future and callbacks: the answer is
    cancelled past ``timeout_s`` (the link then ignores it when it comes) and TimeoutError raised."""
    timed_out: list[bool] = []
    handle = asyncio.get_running_loop().call_later(timeout_s, _time_out, fut, timed_out)
    try:
        return await fut
    except asyncio.CancelledError:
        if not timed_out:
            raise  # the caller was cancelled
        raise TimeoutError from None
    finally:
        handle.cancel()


class UpstreamClient:
    def __init__(self, directory: BrokerDirectory, timeout_s: Callable[[], float]) -> None:
        self.directory = directory
        self.timeout_s = timeout_s
        # (host, port, lane) -> link: lane 0 carries every request but commit write-throughs, which are spread
        # over lanes of their own (gateway/groups/commit_batch.py) since a broker serves a connection serially.
        self._links: dict[tuple[str, int, int], _Link] = {}
        self._connecting: dict[tuple[str, int, int], asyncio.Future[_Link]] = {}
        self._coordinators: dict[str, tuple[str, int]] = {}

    def version(self, api_key: int, wanted: int) -> int:
        """The highest version <= wanted that the upstream speaks (wanted when it is not known yet)."""
        rng = self.directory.upstream_api.get(api_key)
        if rng is None:
            return wanted
        if rng[1] < wanted and rng[1] < rng[0]:
            raise UpstreamError(f"upstream does not speak api {api_key}")
        return max(rng[0], min(wanted, rng[1]))

    def supports(self, api_key: int) -> bool:
        return api_key in self.directory.upstream_api

    async def _link(self, addr: tuple[str, int], lane: int = 0) -> _Link:
        key = (addr[0], addr[1], lane)
        link = self._links.get(key)
        if link is not None and not link.closed:
            if link.renew_at is None or asyncio.get_running_loop().time() < link.renew_at:
                return link
            # Its SASL session nears its end: new requests go to a fresh link; this one closes once the
            # answers it still owes are in.
            del self._links[key]
            link.retired = True
            if not link.waiting:
                link.close()
        pending = self._connecting.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[_Link] = asyncio.get_running_loop().create_future()
        self._connecting[key] = fut
        try:
            tls = self.directory.tls
            # SASL-authenticated when the gateway has upstream credentials (docs/gateway.md, "SASL").
            reader, writer, lifetime_ms = await asyncio.wait_for(
                open_authenticated(addr[0], addr[1], tls, upstream_credentials(self.directory.config)),
                self.directory.config.upstream_connect_timeout_s,
            )
            set_nodelay(writer.transport)
            link = _Link(reader, writer, lifetime_ms)
            self._links[key] = link
            fut.set_result(link)
            return link
        except UpstreamAuthError as e:
            log.error("upstream refused the gateway's SASL credentials", error=str(e))
            fut.set_exception(e)
            fut.exception()
            raise
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as e:
            note_upstream_failure(self.directory.tls, addr[0], addr[1], e)
            err = UpstreamError(f"{addr[0]}:{addr[1]}: {type(e).__name__}: {e}")
            fut.set_exception(err)
            fut.exception()  # retrieved: nobody else may be waiting
            raise err from e
        finally:
            self._connecting.pop(key, None)

    async def send(
        self,
        addr: tuple[str, int],
        api_key: int,
        version: int,
        msg: Any,
        idempotent: bool = True,
        lane: int = 0,
        checked: bool = False,
    ) -> Any:
        """One request and its response. A read that was on a link that broke under it (another
        request's timeout, the broker closing it) is sent once more on a fresh link; a write (a commit)
        is not, since it may have been applied: its caller answers its client with a retriable error
        (LostInFlight) and the client commits again, in its own order."""
        for attempt in (0, 1):
            link = await self._link(addr, lane)
            try:
                return await _within(link.send(api_key, version, msg, checked), self.timeout_s())
            except TimeoutError as e:
                link.close(LostInFlight("request timed out"))
                raise LostInFlight(f"{addr[0]}:{addr[1]}: api {api_key} timed out") from e
            except LostInFlight:
                if not idempotent or attempt:
                    raise
                log.info("upstream link lost under a request; sending it again", api_key=api_key, addr=addr)
        raise AssertionError("unreachable")

    async def send_raw(self, addr: tuple[str, int], payload: bytes) -> bytes:
        """Forward a client's request payload; the response payload, with the link's correlation id."""
        link = await self._link(addr)
        try:
            return await _within(link.send_raw(payload), self.timeout_s())
        except TimeoutError as e:
            link.close(LostInFlight("request timed out"))
            raise LostInFlight(f"{addr[0]}:{addr[1]}: forwarded request timed out") from e

    async def send_any(self, api_key: int, version: int, msg: Any, node_id: int | None = None) -> Any:
        """To broker ``node_id`` when given and known, else to any live broker."""
        targets = []
        if node_id is not None:
            addr = self.directory.address(node_id)
            if addr is not None:
                targets.append(addr)
        targets.extend(a for a in self.directory.candidates() if a not in targets)
        errors = []
        for addr in targets:
            try:
                return await self.send(addr, api_key, version, msg)
            except RefusedRequest:
                raise
            except UpstreamError as e:
                errors.append(str(e))
        raise UpstreamError("no upstream broker answered: " + "; ".join(errors))

    # --- group coordinators ----------------------------------------------------------------------------

    async def coordinator(self, group_id: str) -> tuple[str, int]:
        addr = self._coordinators.get(group_id)
        if addr is not None:
            return addr
        version = self.version(ApiKey.FIND_COORDINATOR, 3)
        msg = codec.REQUESTS[ApiKey.FIND_COORDINATOR][version](key=group_id, key_type=0)
        r = await self.send_any(ApiKey.FIND_COORDINATOR, version, msg)
        if r.error_code != 0:
            raise CoordinatorMoved(r.error_code)
        # The upstream names its own broker address; prefer the directory's entry for that node.
        addr = self.directory.address(r.node_id) or (r.host, r.port)
        self._coordinators[group_id] = addr
        return addr

    def forget_coordinator(self, group_id: str) -> None:
        self._coordinators.pop(group_id, None)

    async def to_coordinator(
        self,
        group_id: str,
        api_key: int,
        version: int,
        msg: Any,
        error_of: Callable[[Any], int],
        attempts: int = 5,
        idempotent: bool = True,
        lane: int = 0,
        checked: bool = False,
    ) -> Any:
        """Send to the group's upstream coordinator, looking it up again while it moves.

        ``msg`` is a message object, or the bytes of a client's request (header + body) to forward as
        they are (the answer is then the response payload, still under this link's correlation id).
        ``idempotent=False`` (commits, forwarded client requests): sent at most once: a request lost in
        flight is not sent again (a later request of the same group may already have overtaken it).
        ``lane``: which of the connections to that broker carries it (0 unless a caller spreads its load).
        ``checked``: the caller built ``msg`` only from requests that passed ``codec.null_field`` already."""
        last: Exception | None = None
        for attempt in range(attempts):
            try:
                addr = await self.coordinator(group_id)
                if isinstance(msg, bytes):
                    r = await self.send_raw(addr, msg)
                else:
                    r = await self.send(addr, api_key, version, msg, idempotent=idempotent, lane=lane, checked=checked)
            except CoordinatorMoved as e:
                last = e
            except RefusedRequest:
                raise
            except LostInFlight as e:
                self.forget_coordinator(group_id)
                if not idempotent:
                    raise
                last = e
            except UpstreamError as e:
                last = e
                self.forget_coordinator(group_id)
            else:
                if error_of(r) not in COORDINATOR_MOVED:
                    return r
                last = CoordinatorMoved(error_of(r))
                self.forget_coordinator(group_id)
            await asyncio.sleep(min(0.05 * 2**attempt, 1.0))
        assert last is not None
        raise last

    def close(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()


class CoordinatorMoved(UpstreamError):
    def __init__(self, error_code: int) -> None:
        super().__init__(f"upstream coordinator error {error_code}")
        self.error_code = error_code


class RefusedRequest(UpstreamError):
    """A request the gateway will not send upstream (it would break the shared link); nothing was sent."""


class LostInFlight(UpstreamError):
    """The request was written, then its link broke or it timed out: the broker may have applied it."""
