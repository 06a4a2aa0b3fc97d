"""Requests the gateway refuses or cannot carry, logged once per client and kind.

A client that keeps sending something the gateway refuses (a version it does not speak, an api key it
does not know, a commit its coordinator fences) would otherwise either flood the log or, as before,
leave no trace at all. The first refusal of each kind for a client is logged with its reason; repeats
are only counted. The memory is bounded: the least recently seen (client, kind) pairs are forgotten
first, so a client forgotten that way is logged once more, and many clients never grow it.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from gateway.logging import get_logger

log = get_logger("gateway.net.refusals")

DEFAULT_CAPACITY = 4096


def client_id_of(frame: bytes) -> str | None:
    """The client id of a request frame (size prefix included), without trusting the rest of it: request
    headers v1 and v2 carry it right after the correlation id, as a nullable int16-length string."""
    if len(frame) < 14:
        return None
    n = int.from_bytes(frame[12:14], "big", signed=True)
    if n < 0 or len(frame) < 14 + n:
        return None
    return frame[14 : 14 + n].decode("utf-8", "replace")


def peer_host(peer: Any) -> str:
    return str(peer[0]) if isinstance(peer, tuple) and peer else str(peer or "")


class RefusalLog:
    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._seen: OrderedDict[tuple[str, str | None, str], None] = OrderedDict()
        self.logged = 0
        self.repeats = 0

    def __len__(self) -> int:
        return len(self._seen)

    def note(self, peer: Any, client_id: str | None, kind: str, reason: str, **fields: Any) -> bool:
        """Record one refusal; True when it was logged (the first of its kind for this client)."""
        key = (peer_host(peer), client_id, kind)
        if key in self._seen:
            self._seen.move_to_end(key)
            self.repeats += 1
            return False
        self._seen[key] = None
        if len(self._seen) > self.capacity:
            self._seen.popitem(last=False)
        self.logged += 1
        log.warning(
            "request refused",
            kind=kind,
            reason=reason,
            client_id=client_id,
            peer=peer_host(peer),
            **fields,
            note="logged once per client and kind",
        )
        return True
