"""SASL on a client connection (gateway/net/connection.py), kept off its passthrough path.

A SASL listener (gateway/security/sasl.py) follows the client's exchange with the cluster to learn its principal and
refuses requests before authentication. With listener_sasl_mode=terminate (gateway/security/sasl_server.py) the
gateway answers the exchange itself, its upstream links authenticate with the gateway's own credentials
and are renewed before their session ends, and the requests it passes through are authorized for the
client's principal (gateway/authz/data.py), since the cluster sees only the gateway's.

A connection on a PLAINTEXT/SSL listener never calls in here; a passthrough SASL connection only for the
state check and the SASL responses; the rest only when ``connection.terminating``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gateway.logging import get_logger
from gateway.net.contracts import ClientSide, ConnectionHost, LinkOf, Slot
from gateway.net.refusals import client_id_of
from gateway.security.sasl import ClientSasl
from gateway.security.sasl_server import TerminatingSasl
from gateway.wire import codec, frames
from gateway.wire import group_codec as gc
from gateway.wire.api_keys import ApiKey

log = get_logger("gateway.net.connection")


def client_sasl(gateway: ConnectionHost) -> ClientSasl | None:
    """The SASL state of a new connection: the terminator's, one following the cluster's exchange on a
    passthrough SASL listener, or None on PLAINTEXT/SSL listeners."""
    terminator = gateway.sasl_terminator
    if terminator is not None:
        return terminator.connection()
    if gateway.config.listener_sasl():
        return ClientSasl(gateway.config.sasl_oauthbearer_sub_claim_name)
    return None


def sasl_admits(conn: ClientSide, frame: bytes, api_key: int, version: int) -> bool:
    """Kafka's server-side SASL states: a request the connection may not send now closes it (answered
    first with the broker's error response where the broker answers one)."""
    assert conn.sasl is not None
    if conn.close_after_flush:
        return False  # refused already: the broker reads nothing more from the connection either
    verdict = conn.sasl.on_request(api_key, version, frame[4:], int(time.monotonic() * 1000))
    if verdict.ok:
        return True
    answer = None if verdict.answer_error is None else error_answer(api_key, version, frame, verdict.answer_error)
    conn.gw.refusals.note(
        conn.peer, client_id_of(frame), "sasl-state",
        f"{verdict.reason}; connection closed as Kafka does"
        + (f" (after answering error {verdict.answer_error})" if answer is not None else ""),
        api_key=api_key, api_version=version,
    )
    conn.metrics.errors[api_key] += 1
    if answer is None:
        conn.close()
        return False
    # Written after whatever is still owed to the client (a SaslHandshake answer), then the close.
    conn.pending.append(Slot(frames.frame(answer)))
    conn.close_after_flush = True
    conn.flush()
    return False


def error_answer(api_key: int, version: int, frame: bytes, error: int) -> bytes | None:
    """The response payload a Kafka 4.3 broker builds with ``AbstractRequest.getErrorResponse`` for
    ``error``: the top-level error code, or the error on every group, topic or partition the request
    names (Metadata: each named topic, without partitions). None where the gateway cannot build it (an
    undecodable request, an API without such a response here): the connection then closes unanswered."""
    try:
        header, msg = codec.decode_request(api_key, version, frame[4:])
    except Exception:  # noqa: BLE001 - Kafka could not parse it either (it closes without an answer)
        return None
    corr = header.correlation_id
    top = codec.error_response(api_key, version, corr, error)
    if top is not None:
        return top
    if api_key == ApiKey.METADATA:
        cls = codec.RESPONSES[ApiKey.METADATA]
        tcls = cls.MetadataResponseTopic
        topics = []
        for t in msg.topics or ():
            fields: dict[str, Any] = {"name": t.name or "", "error_code": error, "is_internal": False, "partitions": []}
            if version >= 10:
                fields["topic_id"] = t.topic_id
            topics.append(tcls(**fields))
        return codec.encode_response(api_key, version, corr, cls[version](topics=topics))
    try:
        body = gc.refusal(api_key, version, msg, error)
    except Exception:  # noqa: BLE001 - no response to build: closed unanswered
        return None
    return None if body is None else codec.encode_response(api_key, version, corr, body)


def follow_response(conn: ClientSide, api_key: int, version: int, frame: bytes) -> None:
    """Passthrough SASL: the cluster's SaslHandshake / SaslAuthenticate answer, read for the principal."""
    sasl = conn.sasl
    assert sasl is not None
    was = sasl.principal if sasl.authenticated else None
    sasl.on_response(api_key, version, frame[4:], int(time.monotonic() * 1000))
    if sasl.authenticated and sasl.principal != was:
        log.debug("client authenticated", peer=conn.peer, principal=sasl.principal,
                  mechanism=sasl.mechanism, reauthentications=sasl.reauthentications)
    elif sasl.state == "failed":
        log.info("client SASL authentication refused by the cluster", peer=conn.peer, mechanism=sasl.mechanism)


# --- termination --------------------------------------------------------------------------------------


def retire(conn: ClientSide, link: LinkOf) -> None:
    """The link's session is about to end; later requests go to a new link, and this one closes once it
    answered what it carries."""
    conn.upstream = None
    if not link.inflight and link.transport is not None:
        link.transport.close()


def retired_link_lost(conn: ClientSide, link: LinkOf) -> None:
    """A link retired at the end of its session broke before answering all it carried."""
    inflight = list(link.inflight)
    link.inflight.clear()
    if inflight:
        conn.answer_unlinked([(slot, frame, api_key, version, corr) for corr, slot, api_key, version, frame in inflight])


def authorize(conn: ClientSide, frame: bytes, api_key: int, version: int, slot: Slot | None) -> bytes | None:
    """The cluster sees the gateway's principal, so the gateway checks the client's (gateway/authz/data.py).
    The frame to forward, or None when the request was answered (or the connection closed) here."""
    gw = conn.gw
    authz = gw.data_authz
    if authz is None:
        if gw.config.authorizes():
            # Authorization is on but its ACL cache is not installed: fail closed.
            conn.close()
            return None
        return frame  # authorization off: the operator accepted the gateway's rights for everyone
    principal = conn.principal or "User:ANONYMOUS"
    host = conn.peer[0] if conn.peer else ""
    try:
        verdict = authz.check(principal, host, api_key, version, frame, acks0=slot is None)
    except Exception:
        log.exception("cannot authorize a request; closing", peer=conn.peer, api_key=api_key, api_version=version)
        conn.close()
        return None
    if verdict is None:
        return frame
    if verdict.refused:
        conn.metrics.errors[api_key] += 1
        gw.refusals.note(
            conn.peer, client_id_of(frame), f"not-authorized:{api_key}", verdict.reason,
            api_key=api_key, api_version=version, principal=principal,
        )
    if verdict.close:
        conn.close()
        return None
    if verdict.answer is not None:
        if slot is not None:
            slot.data = frames.frame(verdict.answer)
            conn.pending.append(slot)
            conn.flush()
        return None
    if slot is not None:
        slot.merge = verdict.merge
    return verdict.forward if verdict.forward is not None else frame


def answer_sasl(conn: ClientSide, frame: bytes, api_key: int, version: int) -> None:
    """The gateway answers the client's SaslHandshake / SaslAuthenticate."""
    sasl = conn.sasl
    assert isinstance(sasl, TerminatingSasl)
    slot = Slot()
    conn.pending.append(slot)

    async def run() -> None:
        try:
            out = await sasl.answer(api_key, version, frame[4:], int(time.monotonic() * 1000))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("SASL request could not be answered; closing", peer=conn.peer, api_key=api_key)
            conn.close()
            return
        slot.data = frames.frame(out)
        conn.metrics.local[api_key] += 1
        if sasl.state == "failed":
            log.info("client SASL authentication refused", peer=conn.peer, mechanism=sasl.mechanism,
                     reason=sasl.refusal)
        elif sasl.authenticated and api_key != ApiKey.SASL_HANDSHAKE:
            log.debug("client authenticated", peer=conn.peer, principal=sasl.principal,
                      mechanism=sasl.mechanism, reauthentications=sasl.reauthentications)
        conn.flush()
        if sasl.state == "failed" and not conn.pending:
            conn.close()  # as a broker does after a failed exchange (the answer is written first)

    conn.spawn(run())


__all__ = [
    "answer_sasl", "authorize", "client_sasl", "error_answer", "follow_response", "retire", "retired_link_lost",
    "sasl_admits",
]
