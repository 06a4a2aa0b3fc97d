"""A client connection's upstream link (gateway/net/connection.py): opened on demand, and what is owed to
the client while there is none.

The upstream link is not a precondition of the client connection (docs/operations.md, "Broker outages"):
the connection reads from the start and the local handlers (group requests of managed groups) answer
with or without a link. A request for the cluster waits for the link, which is opened on demand; when
it cannot be opened, or breaks with requests in flight, those requests are answered by
gateway/net/unreachable.py in their own format with a retriable error, and the client connection is closed
only when its API leaves nothing to answer with. So a broker outage never takes a group coordinator's
connection down.
"""

from __future__ import annotations

import struct
import time
from collections import deque
from typing import Protocol

from gateway.logging import get_logger
from gateway.net import connection_sasl, unreachable
from gateway.net.contracts import ClientSide, Slot
from gateway.net.upstream_link import UpstreamLink, dial
from gateway.security.sasl import SASL_APIS
from gateway.wire import frames

log = get_logger("gateway.net.connection")

# After a failed attempt to open the upstream link, requests for the cluster are answered with errors
# at once for this long (doubling per failure up to the max) instead of each trying to connect again.
RELINK_BACKOFF_S = 0.25
_RELINK_BACKOFF_MAX_S = 2.0


class Unlinked(ClientSide, Protocol):
    """A client connection (gateway/net/connection.py ``ClientConnection``) as its link's opening sees it."""

    node_id: int | None  # None: the bootstrap listener
    # Requests for the cluster that wait for the link being opened: (frame, slot or None for acks=0, api
    # key, version, correlation id), in arrival order.
    unlinked: deque[tuple[bytes, Slot | None, int, int, int]]
    linking: bool  # an attempt to open the link is under way
    relink_at: float  # no new attempt before this (time.monotonic) after a failed one
    relink_backoff_s: float

    def write_upstream(
        self, link: UpstreamLink, frame: bytes, slot: Slot | None, api_key: int, version: int, corr: int
    ) -> None: ...


def wait_for_link(conn: Unlinked, frame: bytes, slot: Slot | None, api_key: int, version: int, corr: int) -> None:
    """A request for the cluster while the connection has no link: it waits for the link being opened
    (opened now if no attempt is under way), or is answered at once while the backoff runs."""
    if not conn.linking and time.monotonic() < conn.relink_at:
        # The broker refused the link a moment ago: answer now rather than dial it per request.
        answer_unlinked(conn, [(slot, frame, api_key, version, corr)])
        return
    conn.unlinked.append((frame, slot, api_key, version, corr))
    if not conn.linking:
        conn.linking = True
        conn.spawn(open_link(conn))


async def open_link(conn: Unlinked) -> None:
    """Open the connection's upstream link (to its listener's broker; any live one for the bootstrap
    listener), then send what waited for it; or, when none can be had, answer that with retriable errors
    and hold further attempts off for a backoff."""
    if not conn.gw.limits.link_allowed(conn):
        conn.linking = False
        return  # closed: every descriptor is held by clients and their links
    directory = conn.gw.directory
    if conn.node_id is None:
        targets = directory.candidates()
    else:
        addr = directory.address(conn.node_id)
        targets = [] if addr is None else [addr]
    link, errors, exhausted = await dial(conn, targets)
    if link is not None:
        conn.linking = False
        if conn.closed:
            assert link.transport is not None
            link.transport.close()
            return
        conn.upstream = link
        conn.relink_backoff_s = RELINK_BACKOFF_S
        directory.upstream_ok()
        waiting, conn.unlinked = conn.unlinked, deque()
        for frame, slot, api_key, version, corr in waiting:
            if conn.closed:
                return
            conn.write_upstream(link, frame, slot, api_key, version, corr)
        return
    conn.linking = False
    if not targets:
        # The listener's broker left the metadata: no broker to wait for. Closing makes the client
        # refresh metadata through another connection and move on.
        log.warning("upstream broker not in metadata; closing client connection", peer=conn.peer, node_id=conn.node_id)
        conn.close()
        return
    if conn.node_id is None and not exhausted:
        # Every known broker failed: the cluster is unreachable (readiness). One broker down (a broker
        # listener's connection) is not: clients of the others are still served.
        directory.upstream_failed("; ".join(errors))
    conn.relink_at = time.monotonic() + conn.relink_backoff_s
    conn.relink_backoff_s = min(conn.relink_backoff_s * 2, _RELINK_BACKOFF_MAX_S)
    waiting, conn.unlinked = conn.unlinked, deque()
    if waiting:
        log.info(
            "upstream broker unreachable; answering requests for the cluster with retriable errors",
            peer=conn.peer,
            node_id=conn.node_id,
            requests=len(waiting),
            errors=errors,
        )
    answer_unlinked(conn, [(slot, frame, api_key, version, corr) for frame, slot, api_key, version, corr in waiting])


def link_lost(conn: Unlinked, link: UpstreamLink, exc: Exception | None) -> None:
    """An upstream link of the connection closed: what it carried is answered as if it had found no link
    (a client that authenticated through that link, SASL passthrough, is closed instead)."""
    if conn.closed:
        return
    if link is not conn.upstream:
        connection_sasl.retired_link_lost(conn, link)
        return
    conn.upstream = None
    if conn.sasl is not None and not conn.terminating:
        # The client authenticated on that link, not on the next one: it must reconnect and authenticate
        # again (a broker also closes after a failed exchange or an expired session).
        log.info("upstream connection of a SASL client lost; closing the client connection",
                 peer=conn.peer, node_id=conn.node_id, principal=conn.sasl.principal)
        conn.close()
        return
    conn.resume("upstream-backpressure")  # that link will not drain any more
    inflight = list(link.inflight)
    link.inflight.clear()
    # The link is opened again by the next request for the cluster. What was in flight on it is
    # answered like a request that found no link: a retriable error in its own format, so the client
    # keeps this connection (and its group coordinator, if it shares one) and retries.
    log.warning(
        "upstream connection lost; answering its in-flight requests with retriable errors",
        peer=conn.peer,
        node_id=conn.node_id,
        inflight=len(inflight),
        error=str(exc) if exc else None,
    )
    answer_unlinked(conn, [(slot, frame, api_key, version, corr) for corr, slot, api_key, version, frame in inflight])


def answer_unlinked(conn: Unlinked, requests: list[tuple[Slot | None, bytes, int, int, int]]) -> None:
    """Answer requests the cluster could not be asked (gateway/net/unreachable.py); close the connection
    when one of them has no answer (an acks=0 Produce, a Metadata never seen before, ...)."""
    gw = conn.gw
    for slot, frame, api_key, version, corr in requests:
        payload = None
        # SASL: an error answer to SaslHandshake/SaslAuthenticate would be an authentication failure,
        # fatal to Java clients; a closed connection is retried, like a broker that is down.
        if slot is not None and not (conn.sasl is not None and api_key in SASL_APIS):
            try:
                payload = unreachable.answer(frame, api_key, version, corr, gw.replies, gw.directory.api_ranges)
                if payload is not None and slot.merge is not None:
                    # Termination: a remembered answer is the cluster's (maybe to another principal's
                    # identical request); the client's refusals and filtering apply to it as well.
                    payload = slot.merge(payload)
            except (ValueError, struct.error, IndexError) as e:
                # A request that does not read as its schema says (the broker would close too).
                log.info("unreadable request while the upstream is unreachable", peer=conn.peer,
                         api_key=api_key, api_version=version, error=str(e))
            except Exception:  # noqa: BLE001 - an answer we cannot build: the connection closes below
                log.exception("cannot build an error response", peer=conn.peer, api_key=api_key)
        if payload is None:
            log.warning(
                "no answer possible without the upstream; closing client connection",
                peer=conn.peer,
                node_id=conn.node_id,
                api_key=api_key,
                api_version=version,
            )
            conn.close()
            return
        assert slot is not None
        slot.data = frames.frame(payload)
        conn.metrics.upstream_unavailable_answers += 1
    conn.flush()


__all__ = ["RELINK_BACKOFF_S", "Unlinked", "answer_unlinked", "link_lost", "open_link", "wait_for_link"]
