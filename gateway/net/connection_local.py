"""Answers a client connection (gateway/net/connection.py) gets from the gateway itself rather than from
the cluster: a local handler's (the group layer's), in its place in the response order and bounded per
connection, and UNSUPPORTED_VERSION for a version outside what the gateway advertises.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from coordinator.errors import Errors
from gateway.logging import get_logger
from gateway.net import eager, rewrite
from gateway.net.contracts import ClientSide, LocalHandler, RequestSource, Slot
from gateway.net.refusals import client_id_of
from gateway.wire import codec, frames
from gateway.wire.api_keys import ApiKey

log = get_logger("gateway.net.connection")

# Answers the gateway computes itself that one connection may have in progress at once. Kafka handles one
# request per connection at a time; a client that pipelines slow local requests (a DescribeGroups of many
# groups the cluster is asked about) without reading must not pile up their answers in memory.
MAX_LOCAL = 16
# ... and their request bytes: what a local answer holds while it runs grows with its request (a DescribeGroups
# naming 2,000 groups looks each one's coordinator up), so a count alone let 16 requests of 0.8 MB each hold
# ~10 MB apiece, past the request memory budget, on a loop that overlaps their lookups more (uvloop).
MAX_LOCAL_BYTES = 1024 * 1024


class Answering(ClientSide, Protocol):
    """A client connection (gateway/net/connection.py ``ClientConnection``) as its local answers see it."""

    source: RequestSource  # what a local handler learns of the connection
    tasks: set[asyncio.Task[Any]]
    local_answers: int  # local answers in progress (MAX_LOCAL)
    local_bytes: int  # their request frames' bytes (MAX_LOCAL_BYTES)


def answer_locally(
    conn: Answering, handler: LocalHandler, frame: bytes, api_key: int, version: int, claim: Any = True
) -> None:
    """Answer the request with ``handler`` in its place in the response order; ``claim``: what the
    handler's ``claims`` returned; anything but True is what it decoded of the frame, handed back to it
    so that the request is decoded once."""
    payload = frame[4:]
    # What the handler's ``claims`` decoded carries the header it read (gateway/groups/dispatch.py Decoded).
    header: frames.RequestHeader | None = getattr(claim, "header", None)
    try:
        if header is None:
            header = frames.parse_request_header(payload, codec.request_header_flexible(api_key, version))
    except frames.FrameError as e:
        conn.gw.refusals.note(
            conn.peer, client_id_of(frame), f"unparseable-header:{api_key}",
            f"v{version} request header does not parse ({e}); connection closed",
            api_key=api_key, api_version=version,
        )
        conn.metrics.errors[api_key] += 1
        conn.close()
        return
    slot = Slot()
    conn.pending.append(slot)
    metrics = conn.metrics
    arrived = time.perf_counter()
    conn.local_answers += 1
    size = len(frame)
    conn.local_bytes += size
    if conn.local_answers >= MAX_LOCAL or conn.local_bytes >= MAX_LOCAL_BYTES:
        conn.pause("local")

    async def run() -> None:
        try:
            if claim is True:
                response = await handler(conn.source, header, payload)
            else:
                response = await handler(conn.source, header, payload, claim)  # type: ignore[call-arg]
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("local handler failed; closing", peer=conn.peer, api_key=api_key)
            metrics.errors[api_key] += 1
            conn.close()
            return
        finally:
            conn.local_answers -= 1
            conn.local_bytes -= size
            if conn.local_answers < MAX_LOCAL and conn.local_bytes < MAX_LOCAL_BYTES:
                conn.resume("local")
        slot.data = frames.frame(response)
        metrics.local[api_key] += 1
        metrics.latency(api_key).observe(time.perf_counter() - arrived)
        conn.flush()

    # Stepped at once: an answer that needs no waiting (most do not) is written before the next request
    # is read, without a task; one that waits carries on in a task (gateway/net/eager.py).
    done, task = eager.start(run())
    if not done:
        conn.tasks.add(task)
        task.add_done_callback(conn.tasks.discard)


def answer_unsupported(conn: Answering, api_key: int, version: int, corr: int, max_version: int) -> None:
    """A version outside what the gateway advertises: UNSUPPORTED_VERSION in the API's own format (for
    ApiVersions, the answer that names the versions); closed where the API has no top-level error code."""
    if api_key == ApiKey.API_VERSIONS:
        payload: bytes | None = rewrite.api_versions_unsupported(corr, max_version)
    else:
        payload = codec.error_response(api_key, version, corr, Errors.UNSUPPORTED_VERSION)
    if payload is None:
        # Already logged (once per client) as a refusal; this is the per-request detail.
        log.debug(
            "unsupported version without a top-level error code; closing",
            peer=conn.peer,
            api_key=api_key,
            api_version=version,
        )
        conn.close()
        return
    conn.pending.append(Slot(frames.frame(payload)))
    conn.flush()

__all__ = ["MAX_LOCAL", "MAX_LOCAL_BYTES", "Answering", "answer_locally", "answer_unsupported"]
