"""Limits of the client listeners: how many connections, how many request bytes held, how long idle.

- ``max.connections``: a connection over the cap is accepted and closed at once (before its upstream link
  exists), counted, and reported by one warning per interval rather than one per connection. The
  descriptors of RLIMIT_NOFILE bound it too, so the gateway never runs into EMFILE on accept or on
  connecting upstream, where a refusal would look like an unreachable cluster: a client costs one
  descriptor, and one more once its upstream link is open (the first request for the cluster opens it;
  a connection the gateway answers itself throughout, such as a consumer's connection to its group
  coordinator, never has one). A connection is admitted while clients and links together leave a
  descriptor for it; a link is opened while they leave one for the link, else its client connection is
  closed and counted as refused, as if it had been over the cap.
- ``queued.max.request.bytes``: request bytes held by all connections together. As in Kafka's memory
  pool, a connection reserves the declared size of a request frame once it has read the size and keeps
  reading until the frame is complete; while the reservations reach the budget, every connection that
  holds no reservation is muted (reading paused) and all are unmuted once the reservations fall below
  it. Holders keep reading, so the budget always drains; a reservation is released when its frame
  completes or its connection closes. A connection whose next frame begins while the budget is reached
  (several connections' first chunks can arrive in one turn of the event loop, uvloop's especially) is
  paused with its size read but not reserved: it waits, holding one read chunk, and is admitted as room
  appears, in arrival order, while the reservations stay under the budget (the last admitted one may
  overshoot it, as Kafka's pool lets its last allocation do).
- ``connections.max.idle.ms`` and ``partial_request_timeout_ms``: a periodic sweep closes connections
  with no traffic and nothing outstanding for that long, and connections whose current request frame has
  been incomplete for that long (a slowloris client trickling bytes is active, never idle).

The hot path pays a flag store and an integer comparison per chunk read; the bookkeeping runs in the
sweep and on the rare transitions of the budget.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import resource
import time
from typing import TYPE_CHECKING, Any

from gateway.logging import get_logger

# A connection closed with this much of a request frame unread gives the memory back to the OS (glibc's
# malloc_trim), a moment after the close so that a burst of closes trims once.
TRIM_FROM_BYTES = 1 << 20
TRIM_DELAY_S = 0.5


def _libc_malloc_trim() -> Any:
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    try:
        libc = ctypes.CDLL(None)
        return libc.malloc_trim
    except (OSError, AttributeError):
        return None


_malloc_trim = _libc_malloc_trim()

if TYPE_CHECKING:
    from gateway.config.settings import GatewayConfig
    from gateway.metrics import GatewayMetrics
    from gateway.net.contracts import ClientSide

log = get_logger("gateway.net.limits")

# Descriptors kept free for everything that is not a client connection or its upstream link: listeners,
# the admin endpoint and its connections, the state log, the gateway's own upstream clients, log files,
# and the sockets of one accept batch (asyncio accepts up to 100 per wake-up before any is refused).
MIN_RESERVED_DESCRIPTORS = 160
MAX_RESERVED_DESCRIPTORS = 256
# At most one warning per this many seconds for refused connections and accept errors (with a count).
WARN_INTERVAL_S = 30.0
# The sweep runs this many times per (smallest) timeout, within these bounds.
SWEEPS_PER_TIMEOUT = 4
MIN_SWEEP_S = 0.05
MAX_SWEEP_S = 5.0

_ACCEPT_RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def descriptor_limit() -> int | None:
    """The soft RLIMIT_NOFILE of this process, or None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def descriptor_budget(nofile: int | None) -> int | None:
    """The descriptors of ``nofile`` that client connections and their upstream links may hold together
    (None: unlimited)."""
    if nofile is None:
        return None
    reserved = min(MAX_RESERVED_DESCRIPTORS, max(MIN_RESERVED_DESCRIPTORS, nofile // 4))
    return max(2, nofile - reserved)


def connection_cap(max_connections: int, nofile: int | None) -> int:
    """``max.connections`` lowered to what ``nofile`` descriptors can serve (one per client; its link, when
    it has one, is counted as it opens)."""
    budget = descriptor_budget(nofile)
    return max_connections if budget is None else max(1, min(max_connections, budget))


class _RateLimitedLog:
    """One log line per interval: the first event logs at once, later ones are counted into the next."""

    def __init__(self, event: str, level: str = "warning") -> None:
        self.event = event
        self._emit = getattr(log, level)
        self._last = -float("inf")
        self._suppressed = 0

    def __call__(self, **fields: Any) -> None:
        now = time.monotonic()
        if now - self._last < WARN_INTERVAL_S:
            self._suppressed += 1
            return
        self._emit(self.event, suppressed_since_last=self._suppressed, **fields)
        self._last = now
        self._suppressed = 0


class ConnectionLimits:
    """One per Gateway: admission, the request memory budget, the idle and partial-request sweep."""

    def __init__(self, config: GatewayConfig, metrics: GatewayMetrics, connections: set[Any]) -> None:
        self.metrics = metrics
        self.connections: set[ClientSide] = connections  # the gateway's open connections (not a copy)
        self.nofile = descriptor_limit()
        self.max_connections = connection_cap(config.max_connections, self.nofile)
        self.descriptors = descriptor_budget(self.nofile)  # for clients and their links together
        budget = config.queued_max_request_bytes
        self.budget: int | None = budget if budget > 0 else None
        self.reserved = 0  # bytes reserved by request frames being read, all connections together
        self._trim_pending = False
        self.exhausted = False
        self.muted: set[ClientSide] = set()
        # Connections whose frame began while the budget was reached: paused, their size not reserved yet
        # (dicts keep arrival order: the first to wait is the first admitted).
        self.waiting: dict[ClientSide, None] = {}
        idle = config.connections_max_idle_ms
        partial = config.partial_request_timeout_ms
        self.idle_s: float | None = idle / 1000 if idle > 0 else None
        self.partial_s: float | None = partial / 1000 if partial > 0 else None
        self._refused_warning = _RateLimitedLog("connection refused: max.connections reached; closing it at once")
        self._link_refused_warning = _RateLimitedLog(
            "connection closed: no descriptor left for its upstream link (RLIMIT_NOFILE)"
        )
        self._accept_warning = _RateLimitedLog("cannot accept connections: out of descriptors or memory")
        self._budget_info = _RateLimitedLog(
            "request memory budget reached; reading paused for connections without a request in progress",
            level="info",
        )

    # --- admission -------------------------------------------------------------------------------------

    def admit(self, conn: ClientSide) -> bool:
        """Whether a freshly accepted connection may stay; a refused one is closed here."""
        open_now = len(self.connections)
        descriptors = self.descriptors
        if open_now >= self.max_connections or (
            descriptors is not None and open_now + self.metrics.upstream_links >= descriptors
        ):
            self.metrics.connections_refused += 1
            self._refused_warning(
                peer=conn.peer, open_connections=open_now, max_connections=self.max_connections,
                upstream_links=self.metrics.upstream_links,
            )
            conn.closed = True
            assert conn.transport is not None
            conn.transport.close()
            return False
        if self.exhausted:
            conn.pause("memory")
            self.muted.add(conn)
        return True

    def link_allowed(self, conn: ClientSide) -> bool:
        """Whether ``conn`` (admitted) may open its upstream link now; when the descriptors would run out
        it may not, and it is closed here (counted as refused: its client reconnects, as after a refusal
        at accept). The link is counted once it is open (gateway/net/upstream_link.py)."""
        descriptors = self.descriptors
        if descriptors is None or len(self.connections) + self.metrics.upstream_links < descriptors:
            return True
        self.metrics.connections_refused += 1
        self._link_refused_warning(
            peer=conn.peer, open_connections=len(self.connections), upstream_links=self.metrics.upstream_links,
            nofile=self.nofile,
        )
        conn.close()
        return False

    def loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> bool:
        """Handles the event loop's report of a failed accept (EMFILE and the like): counted and one
        rate-limited warning instead of a traceback per attempt. False for anything else. Matched by the
        error, not the message, which differs between asyncio's loop and uvloop."""
        exc = context.get("exception")
        if not isinstance(exc, OSError) or exc.errno not in _ACCEPT_RESOURCE_ERRORS:
            return False
        self.metrics.accept_errors += 1
        self._accept_warning(
            error=str(exc),
            message=context.get("message"),
            nofile=self.nofile,
            open_connections=len(self.connections),
        )
        return True

    # --- request memory ----------------------------------------------------------------------------------

    def reserve(self, conn: ClientSide, delta: int) -> None:
        """``conn``'s reservation changed by ``delta`` (its new value is already in ``conn.reserved``)."""
        budget = self.budget
        if conn in self.waiting:
            # Not counted while it waits (see the module's docstring); a frame that completed within the
            # chunk already read leaves nothing to wait for but it stays muted until the budget frees.
            if conn.reserved == 0:
                del self.waiting[conn]
            return
        if budget is not None and delta > 0 and conn.reserved == delta and self.reserved >= budget:
            # A new frame while the budget is reached: it waits for room, reading paused.
            self.waiting[conn] = None
            conn.pause("memory")
            self.muted.add(conn)
            return
        self.reserved += delta
        if budget is None:
            return
        if self.exhausted:
            if self.reserved < budget:
                self._unmute()
            elif conn.reserved == 0 and not conn.closed:
                # Its frame is done; the next one needs memory the pool does not have.
                conn.pause("memory")
                self.muted.add(conn)
        elif self.reserved >= budget:
            self._mute()

    def release(self, conn: ClientSide) -> None:
        """At close: give back the connection's reservation and forget it. A large request abandoned half
        read also gives its memory back to the OS, not only to the allocator (``_trim_soon``)."""
        self.muted.discard(conn)
        if conn.reserved:
            if conn.reserved >= TRIM_FROM_BYTES:
                self._trim_soon()
            if conn in self.waiting:
                del self.waiting[conn]
                conn.reserved = 0  # it waited: nothing of it was counted
                return
            delta, conn.reserved = -conn.reserved, 0
            self.reserve(conn, delta)

    def _trim_soon(self) -> None:
        """Return the allocator's free memory to the OS a moment from now, once for every close in between.
        glibc raises its mmap threshold to the size of large buffers it has freed, so later large frames
        come from the heap; freed, they stay in the process (RSS) until malloc_trim hands the free pages
        back. A frame read in full is freed and reused as usual; only abandoned ones trigger this."""
        if self._trim_pending or _malloc_trim is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._trim_pending = True

        def trim() -> None:
            self._trim_pending = False
            assert _malloc_trim is not None
            _malloc_trim(0)

        loop.call_later(TRIM_DELAY_S, trim)

    def _mute(self) -> None:
        self.exhausted = True
        self.metrics.request_memory_exhausted += 1
        muted = self.muted
        for c in self.connections:
            if c.reserved == 0 and not c.closed:
                c.pause("memory")
                muted.add(c)
        self._budget_info(
            reserved_bytes=self.reserved,
            queued_max_request_bytes=self.budget,
            muted=len(muted),
        )

    def _unmute(self) -> None:
        self.exhausted = False
        budget = self.budget
        # The waiting frames first, in arrival order, while there is room; the rest keep waiting.
        for c in list(self.waiting):
            if budget is not None and self.reserved >= budget:
                break
            del self.waiting[c]
            if c.closed:
                continue
            self.reserved += c.reserved
            self.muted.discard(c)
            c.resume("memory")
        if budget is not None and self.reserved >= budget:
            self.exhausted = True
            return
        muted, self.muted = self.muted, set()
        for c in muted:
            c.resume("memory")

    # --- idle and partial requests -------------------------------------------------------------------

    def sweep_interval(self) -> float | None:
        timeouts = [t for t in (self.idle_s, self.partial_s) if t is not None]
        if not timeouts:
            return None
        return min(MAX_SWEEP_S, max(MIN_SWEEP_S, min(timeouts) / SWEEPS_PER_TIMEOUT))

    async def sweep_forever(self) -> None:
        interval = self.sweep_interval()
        if interval is None:
            return
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            self.sweep(loop.time())

    def sweep(self, now: float) -> None:
        idle_s, partial_s = self.idle_s, self.partial_s
        metrics = self.metrics
        for c in list(self.connections):
            if c.closed:
                continue
            transport = c.transport
            wbuf = transport.get_write_buffer_size() if transport is not None else 0
            if c.active or c.pending or wbuf != c.last_write_buffer:
                # Traffic since the last sweep, or a request still awaiting its answer (a Fetch long-poll,
                # a JoinGroup parked for a rebalance): not idle.
                c.active = False
                c.last_write_buffer = wbuf
                c.idle_since = now
            elif idle_s is not None and now - c.idle_since >= idle_s:
                metrics.connections_closed_idle += 1
                log.info(
                    "idle connection closed (connections.max.idle.ms)",
                    peer=c.peer,
                    idle_s=round(now - c.idle_since, 3),
                )
                c.close()
                continue
            buf = c.buf
            if partial_s is None or not buf.buffered:
                continue
            if buf.partials != c.partial_seq:
                c.partial_seq = buf.partials
                c.partial_since = now
            elif now - c.partial_since >= partial_s:
                metrics.connections_closed_partial += 1
                log.warning(
                    "request frame not completed in time (partial_request_timeout_ms); closing",
                    peer=c.peer,
                    buffered_bytes=buf.buffered,
                    frame_bytes=buf.reserved,
                )
                c.close()
