"""One client connection and the upstream connection that serves it.

Each client connection is bound to one upstream broker: the broker its listener maps to, or for the
bootstrap listener any live broker. Requests are pipelined upstream unchanged (the client's own correlation
ids, since the upstream connection is not shared) and responses go back strictly in request order: every
request that expects a response gets a Slot in ``pending``; a slot is filled by the upstream response or by
a local handler (the group layer), and ``flush`` writes the filled prefix. Clients rely on that order
(the Java client fails on an out-of-order correlation id).

Both sides are asyncio Protocols: no task per frame, frames are forwarded as the bytes that arrived.

The upstream link is opened on demand, by the first request for the cluster, and is not a precondition of
the client connection: what waits for it, and what is answered while there is none, is gateway/net/connection_link.py. The answers the gateway
gives itself (local handlers, UNSUPPORTED_VERSION) are gateway/net/connection_local.py; SASL is
gateway/net/connection_sasl.py.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections import deque
from collections.abc import Coroutine
from typing import Any

from gateway.logging import get_logger
from gateway.net import (
    connection_link,
    connection_local,
    connection_sasl,
    node_check,
    node_endpoints,
    rewrite,
    unreachable,
)
from gateway.net.contracts import ConnectionHost, RequestSource, Slot
from gateway.net.refusals import client_id_of
from gateway.net.upstream import set_nodelay
from gateway.net.upstream_link import UpstreamLink
from gateway.security.sasl import SASL_APIS, ClientSasl
from gateway.wire import codec, frames
from gateway.wire.api_keys import ApiKey

log = get_logger("gateway.net.connection")

_HEAD = struct.Struct(">hhi")
_INT32 = struct.Struct(">i")
# Pause reading from a client that has this many responses outstanding; resume below the low mark.
_MAX_PENDING = 1024
_LOW_PENDING = 256
# Answers ready together are written as one when each is smaller than this; larger ones on their own.
_JOINED_BELOW = 16 * 1024

_REWRITTEN = frozenset(
    {
        ApiKey.METADATA,
        ApiKey.FIND_COORDINATOR,
        ApiKey.DESCRIBE_CLUSTER,
        ApiKey.API_VERSIONS,
        ApiKey.SHARE_FETCH,
        ApiKey.SHARE_ACKNOWLEDGE,
    }
)
# Produce v10+ / Fetch v16+: responses that may carry leader endpoints (KIP-951), walked without decoding.
_ENDPOINTS_FROM = node_endpoints.ENDPOINTS_FROM


class ClientConnection(asyncio.Protocol):
    def __init__(self, gateway: ConnectionHost, node_id: int | None) -> None:
        self.gw = gateway
        self.node_id = node_id  # None: the bootstrap listener
        self.transport: asyncio.Transport | None = None
        self.buf = frames.FrameBuffer(gateway.config.max_frame_bytes)
        self.pending: deque[Slot] = deque()
        self.local_answers = 0  # local answers in progress (connection_local.MAX_LOCAL)
        self.local_bytes = 0  # their request frames' bytes (connection_local.MAX_LOCAL_BYTES)
        # While the requests of one read are handled, answers ready meanwhile wait to leave together.
        self._batching = False
        self._flush_due = False
        self.upstream: UpstreamLink | None = None
        self.closed = False
        # Set when the connection is to close once what is pending was written (a SASL refusal the
        # broker answers before closing); no further request is read.
        self.close_after_flush = False
        self.peer: Any = None
        self.tasks: set[asyncio.Task[Any]] = set()
        self._paused: set[str] = set()
        # Requests for the cluster that wait for the upstream link being opened: (frame, slot or None
        # for acks=0, api key, version, correlation id), in arrival order (gateway/net/connection_link.py).
        self.unlinked: deque[tuple[bytes, Slot | None, int, int, int]] = deque()
        self.linking = False
        self.relink_at = 0.0  # no new attempt before this (time.monotonic) after a failed one
        self.relink_backoff_s = connection_link.RELINK_BACKOFF_S
        # Counting on the request path: the gateway's counter objects, looked up once.
        self.metrics = gateway.metrics
        self._forwarded = gateway.metrics.forwarded
        # Limits (gateway/net/limits.py): the declared size of the request frame being read, reserved in the
        # gateway's request memory budget; traffic seen since the last idle sweep; the sweep's marks.
        self.limits = gateway.limits
        self.reserved = 0
        self.active = True
        self.idle_since = 0.0
        self.last_write_buffer = 0
        self.partial_seq = -1
        self.partial_since = 0.0
        # SASL listeners (gateway/net/connection_sasl.py): the client's exchange, followed or (termination)
        # answered by the gateway. None on PLAINTEXT/SSL listeners.
        self.sasl: ClientSasl | None = connection_sasl.client_sasl(gateway)
        self.terminating = gateway.sasl_terminator is not None
        # What the local handlers learn of this connection (net/contracts.py): never the connection itself.
        self.source = RequestSource(None, node_id, self.sasl)

    @property
    def principal(self) -> str | None:
        """``User:<name>`` once the client authenticated on a SASL listener; None otherwise (for the
        authorization of what the gateway answers itself; the client's host is ``peer[0]``)."""
        sasl = self.sasl
        return sasl.principal if sasl is not None and sasl.authenticated else None

    # --- lifecycle -------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.peer = self.source.peer = transport.get_extra_info("peername")
        if not self.limits.admit(self):
            return  # over max.connections: already closed, no upstream link opened
        if self._paused:
            # Admitted muted (the request memory budget is reached): uvloop starts reading once
            # connection_made returns, whatever was paused in it, so pause again on the next turn.
            asyncio.get_running_loop().call_soon(self._pause_again)
        set_nodelay(transport)
        self.gw.connections.add(self)
        self.metrics.connections_total += 1
        # Reading starts at once. The upstream link is opened by the first request for the cluster, which
        # waits in ``unlinked`` meanwhile: a connection the gateway answers itself throughout (a consumer's
        # connection to its group coordinator) never holds a link, nor its descriptor and the broker's.

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()
        for t in list(self.tasks):
            t.cancel()
        self.gw.connections.discard(self)
        self._release()

    def _release(self) -> None:
        """Drop everything a closed connection holds, so its memory goes back at once rather than when
        the garbage collector reaches the client <-> upstream link cycle."""
        self.limits.release(self)
        self.buf.clear()
        self.unlinked.clear()
        self.pending.clear()
        link, self.upstream = self.upstream, None  # the link's transport still reports its close to us
        if link is not None:
            link.inflight.clear()
            link.buf.clear()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.buf.buffered and not self.closed:
            log.info("client vanished mid-request", peer=self.peer, buffered_bytes=self.buf.buffered)
        self.close()

    def upstream_lost(self, link: UpstreamLink, exc: Exception | None) -> None:
        connection_link.link_lost(self, link, exc)

    def answer_unlinked(self, requests: list[tuple[Slot | None, bytes, int, int, int]]) -> None:
        """Answer requests the cluster could not be asked (gateway/net/connection_link.py)."""
        connection_link.answer_unlinked(self, requests)

    # --- flow control ----------------------------------------------------------------------------------

    def pause(self, reason: str) -> None:
        if not self._paused and self.transport is not None and not self.closed:
            self.transport.pause_reading()
        self._paused.add(reason)

    def _pause_again(self) -> None:
        if self._paused and self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume(self, reason: str) -> None:
        if reason not in self._paused:
            return
        self._paused.discard(reason)
        if not self._paused and self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        # The client does not read its responses (its write buffer is over the high-water mark): stop
        # reading upstream responses for it, and its further requests, whose answers would pile up too.
        self.pause("client-backpressure")
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        self.resume("client-backpressure")
        if self.upstream is not None and self.upstream.transport is not None and not self.closed:
            self.upstream.transport.resume_reading()

    # --- requests --------------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self.metrics.bytes_received += len(data)
        self.active = True
        buf = self.buf
        try:
            received = buf.feed(data)
        except frames.FrameTooLarge as e:
            self.gw.refusals.note(
                self.peer, None, "frame-too-large",
                f"a request frame of {e.size} bytes is over max_frame_bytes ({e.limit}); connection closed",
                size=e.size, limit=e.limit,
            )
            self.metrics.errors[-1] += 1
            self.close()
            return
        reserved = buf.reserved
        if reserved != self.reserved:
            # A frame spans reads: its declared size counts against queued.max.request.bytes until done.
            delta = reserved - self.reserved
            self.reserved = reserved
            self.limits.reserve(self, delta)
        if len(received) <= 1:
            if received and not self.closed:
                self.on_request(received[0])
            return
        # Several requests in one read (a pipelining client): the answers ready by the end of it leave in
        # one write rather than one each (flush).
        self._batching = True
        try:
            for f in received:
                if self.closed:
                    return
                self.on_request(f)
        finally:
            self._batching = False
            if self._flush_due:
                self._flush_due = False
                self.flush()

    def on_request(self, frame: bytes) -> None:
        if len(frame) < 14:  # size + api key + version + correlation id + client id length
            self.gw.refusals.note(
                self.peer, None, "frame-too-short",
                f"a request of {len(frame) - 4} bytes cannot hold a request header; connection closed",
                size=len(frame) - 4,
            )
            self.metrics.errors[-1] += 1
            self.close()
            return
        api_key, version, corr = _HEAD.unpack_from(frame, 4)
        if self.sasl is not None:
            if not connection_sasl.sasl_admits(self, frame, api_key, version):
                return
            if self.terminating and api_key in SASL_APIS:
                connection_sasl.answer_sasl(self, frame, api_key, version)
                return
        rng = self.gw.directory.api_ranges.get(api_key)
        if rng is None:
            self.metrics.errors[-1] += 1
            # Kafka closes the connection on an api key it does not know: there is no response format
            # (not even a header version) to answer in.
            self.gw.refusals.note(
                self.peer, client_id_of(frame), f"unknown-api-key:{api_key}",
                "an api key the gateway does not carry (not offered by the upstream, or its responses cannot "
                "be rewritten); connection closed as Kafka does",
                api_key=api_key, api_version=version,
            )
            self.close()
            return
        if not rng[0] <= version <= rng[1]:
            if api_key == ApiKey.API_VERSIONS and version > rng[1]:
                # KIP-511 negotiation, not a refusal: the client retries at the version the answer names.
                connection_local.answer_unsupported(self, api_key, version, corr, rng[1])
                return
            self.metrics.errors[api_key] += 1
            self.gw.refusals.note(
                self.peer, client_id_of(frame), f"unsupported-version:{api_key}",
                f"version {version} is outside the {rng[0]}-{rng[1]} the gateway advertises for api key {api_key}",
                api_key=api_key, api_version=version,
            )
            connection_local.answer_unsupported(self, api_key, version, corr, rng[1])
            return
        if api_key == ApiKey.API_VERSIONS and version >= node_check.CHECKED_FROM:
            forwarded = node_check.answer_or_forward(self, self.node_id, frame, version)  # KIP-1242: None: answered here
            if forwarded is None:
                return
            frame = forwarded
        handler = self.gw.local_handlers.get(api_key)
        if handler is not None:
            # A handler with ``claims`` answers only the requests it claims (e.g. groups the gateway
            # coordinates); the others pass through to the upstream as usual.
            claims = getattr(handler, "claims", None)
            claim = True if claims is None else claims(frame, api_key, version)
            if claim:
                connection_local.answer_locally(self, handler, frame, api_key, version, claim)
                return
        slot: Slot | None = Slot()
        if api_key == ApiKey.PRODUCE:
            try:
                acks = frames.produce_acks(frame, version, codec.request_header_flexible(api_key, version))
            except (frames.FrameError, struct.error) as e:
                self.gw.refusals.note(
                    self.peer, client_id_of(frame), "unparseable-produce",
                    f"Produce v{version} request whose acks cannot be read ({e}); connection closed",
                    api_key=api_key, api_version=version,
                )
                self.metrics.errors[api_key] += 1
                self.close()
                return
            if acks == 0:
                # acks=0: the broker sends nothing back, so nothing may wait in the response queue.
                slot = None
        if self.terminating:
            authorized = connection_sasl.authorize(self, frame, api_key, version, slot)
            if authorized is None:
                return
            frame = authorized
        if slot is not None:
            self.pending.append(slot)
            if len(self.pending) >= _MAX_PENDING:
                self.pause("pending")
        link = self.upstream
        if link is not None and link.renew_at is not None and time.monotonic() >= link.renew_at:
            connection_sasl.retire(self, link)
            link = None
        if link is not None and link.transport is not None:
            self.write_upstream(link, frame, slot, api_key, version, corr)
            return
        connection_link.wait_for_link(self, frame, slot, api_key, version, corr)

    def write_upstream(
        self, link: UpstreamLink, frame: bytes, slot: Slot | None, api_key: int, version: int, corr: int
    ) -> None:
        assert link.transport is not None
        if slot is not None:
            link.inflight.append((corr, slot, api_key, version, frame))
        link.transport.write(frame)
        self._forwarded[api_key] += 1

    # --- responses -------------------------------------------------------------------------------------

    def on_response(self, frame: bytes, link: UpstreamLink | None = None) -> None:
        if self.closed:
            return
        if link is None:
            link = self.upstream
        assert link is not None
        corr = _INT32.unpack_from(frame, 4)[0]
        if not link.inflight or link.inflight[0][0] != corr:
            log.error("upstream answered out of order; closing", peer=self.peer, correlation_id=corr)
            self.close()
            return
        _, slot, api_key, version, request = link.inflight.popleft()
        if link is not self.upstream and not link.inflight and link.transport is not None:
            link.transport.close()  # a retired link (SASL termination) has answered everything
        if self.sasl is not None and api_key in SASL_APIS:
            connection_sasl.follow_response(self, api_key, version, frame)
        first = _ENDPOINTS_FROM.get(api_key)
        if first is not None and version >= first:
            try:
                rewritten = node_endpoints.rewrite_frame(api_key, version, frame, self.gw.addr_of)
            except Exception:
                log.exception(
                    "cannot read leader endpoints of a response; closing",
                    peer=self.peer,
                    api_key=api_key,
                    api_version=version,
                )
                self.close()
                return
            if rewritten is not None:
                frame = rewritten
        elif api_key in _REWRITTEN:
            try:
                payload = self._rewrite(api_key, version, frame[4:])
                if api_key in unreachable.REPLAYED:
                    self.gw.replies.remember(request, payload)
                frame = frames.frame(payload)
            except Exception:
                # Never pass on a response that may still carry upstream addresses.
                log.exception(
                    "cannot rewrite response; closing", peer=self.peer, api_key=api_key, api_version=version
                )
                self.close()
                return
        if slot.merge is not None:
            try:
                frame = frames.frame(slot.merge(frame[4:]))
            except Exception:
                # Never pass on an answer from which the refusals of what was not forwarded are missing.
                log.exception("cannot merge refusals into a response; closing", peer=self.peer, api_key=api_key)
                self.close()
                return
        slot.data = frame
        self.flush()

    def _rewrite(self, api_key: int, version: int, payload: bytes) -> bytes:
        directory = self.gw.directory
        if api_key == ApiKey.API_VERSIONS:
            result = rewrite.rewrite_api_versions(payload, version, directory.local_api)
            directory.note_narrowed(result.narrowed)
            return result.payload
        result = rewrite.rewrite_response(api_key, payload, version, self.gw.addr_of, self.gw.listed_nodes())
        if result.brokers is not None:
            directory.observe(result.brokers)
        return result.payload

    def flush(self) -> None:
        if self._batching and not self.close_after_flush:
            self._flush_due = True  # at the end of the read being handled (data_received)
            return
        pending = self.pending
        transport = self.transport
        if transport is None or self.closed:
            return
        sent = 0
        small: list[bytes] = []  # answers of a few bytes each, joined into one write
        while pending and pending[0].data is not None:
            data: bytes = pending.popleft().data  # type: ignore[assignment]
            sent += len(data)
            if len(data) < _JOINED_BELOW:
                small.append(data)
                continue
            if small:
                transport.write(small[0] if len(small) == 1 else b"".join(small))
                small = []
            transport.write(data)  # a large answer (a Fetch's records) is not copied into a joined one
        if small:
            transport.write(small[0] if len(small) == 1 else b"".join(small))
        self.metrics.bytes_sent += sent
        if self.close_after_flush and not pending:
            self.close()  # asyncio writes what the transport buffered before closing the socket
            return
        if len(pending) < _LOW_PENDING:
            self.resume("pending")
