"""A shard's life as one transition table (gateway/groups/shard.py), in the manner of h11's state machines
and Kafka's CoordinatorRuntime states: a shard is in exactly one state, an event moves it along one row of
``TRANSITIONS``, and an event the table does not list for the current state is an error naming both.

States (what the shard's groups get):

- ACTIVE: served from memory. A shard starts here: its memory is empty until the runtime's load replays
  its log, and nothing is served before the runtime is ready.
- DRAINING: being handed over to another instance of the fleet: new requests are turned away
  (NOT_COORDINATOR), the ones in flight finish and their records are flushed.
- UNOWNED: another instance of the fleet owns it (gateway/fleet/membership.py).
- LOADING: being opened and replayed, taken over or re-read after a failure; not served yet.
- FAILED: a write failed: its memory, which held changes that are not durable, was dropped and the shard is
  re-read in the background with backoff.
- FENCED: a newer owner opened the shard, fencing this writer; never re-read by this process (its memory is
  stale), unless the fleet's assignment gives it back.
- CLOSED: the runtime stopped.

Each state but ACTIVE has a reason, the text a refused request's ShardUnloaded carries (and readiness
shows): the error that failed or fenced it, or why it is not served here.
"""

from __future__ import annotations

import enum

# Why a shard is not served while another instance of the fleet owns it (gateway/fleet/membership.py).
NOT_OWNED = "the shard is served by another instance of the fleet"
HANDING_OVER = "the shard is being handed over to another instance of the fleet"
LOADING_NOW = "the shard is being loaded"
STOPPED = "the coordinator runtime is stopped"


class ShardUnloaded(Exception):
    """The shard holding a group is not served from memory (a write failed and it is being re-read, a newer
    owner fenced it, or another instance owns it)."""


class ShardStalled(ShardUnloaded):
    """An answer waited longer than ``answer_stall_s`` for its shard's write (the state partition or the
    transaction coordinator moving): the client is told to retry (NOT_COORDINATOR), as Kafka's
    coordinator answers while its partition has no leader, instead of timing the request out itself.
    The shard stays loaded; the write goes on and is acknowledged to the next requests."""


class ShardState(enum.Enum):
    """What callers ask (plain attributes, read on every request): ``loaded``, its groups are in memory
    (served, or finishing the requests in flight while handed over); ``owned``, this instance owns it
    (serves it, will once (re)loaded, or was fenced holding it); ``will_serve``, owned and not fenced, so
    served now or once (re)loaded (a listing waits for it)."""

    # name = (label, loaded, owned, will_serve)
    ACTIVE = ("active", True, True, True)
    DRAINING = ("draining", True, False, False)
    UNOWNED = ("unowned", False, False, False)
    LOADING = ("loading", False, True, True)
    FAILED = ("failed", False, True, True)
    FENCED = ("fenced", False, True, False)
    CLOSED = ("closed", False, False, False)

    def __init__(self, label: str, loaded: bool, owned: bool, will_serve: bool) -> None:
        self.label = label
        self.loaded = loaded
        self.owned = owned
        self.will_serve = will_serve


class ShardEvent(enum.Enum):
    DISOWN = "disown"  # before the first load: the fleet has not assigned it to this instance
    TAKE_OVER = "take over"  # the fleet assigned it to this instance: open (fencing older writers), replay
    LOADED = "loaded"  # replayed (and a probe write worked): served again
    LOAD_FAILED = "load failed"  # the open or replay failed: retried with backoff
    RELOAD = "reload"  # a background attempt to re-read a failed shard begins
    WRITE_FAILED = "write failed"  # an append or sync failed (StateLogWriteFailed, a stall check's marker)
    FENCED = "fenced"  # a write found a newer owner (ShardFenced): on a request, a reload or a stall check
    HAND_OVER = "hand over"  # the fleet gave it to another instance
    HANDED_OVER = "handed over"  # drained and flushed: nothing of it is served or written here any more
    CLOSE = "close"  # the runtime stops


_S, _E = ShardState, ShardEvent

# (state, event) -> the next state. Anything not listed is a ShardStateError.
TRANSITIONS: dict[tuple[ShardState, ShardEvent], ShardState] = {
    # single instance: every shard served from the start; in a fleet none until assigned
    (_S.ACTIVE, _E.DISOWN): _S.UNOWNED,
    # a takeover (gateway/fleet/membership.py); a failed or fenced shard the assignment gives (back) to us is
    # opened again, since the assignment is the cluster's word. ACTIVE and LOADING: a second assignment of a
    # shard whose takeover was still under way opens it once more.
    (_S.UNOWNED, _E.TAKE_OVER): _S.LOADING,
    (_S.FAILED, _E.TAKE_OVER): _S.LOADING,
    (_S.FENCED, _E.TAKE_OVER): _S.LOADING,
    (_S.ACTIVE, _E.TAKE_OVER): _S.LOADING,
    (_S.LOADING, _E.TAKE_OVER): _S.LOADING,
    (_S.LOADING, _E.LOADED): _S.ACTIVE,
    (_S.LOADING, _E.LOAD_FAILED): _S.FAILED,
    # fenced right after a takeover served it (another instance opened it after us): opened again; a fence
    # met by the background reload that follows ends the retries
    (_S.FENCED, _E.LOAD_FAILED): _S.FAILED,
    # a failed write, a stall check's failed marker: dropped and re-read in the background
    (_S.ACTIVE, _E.WRITE_FAILED): _S.FAILED,
    (_S.FAILED, _E.RELOAD): _S.LOADING,
    # fenced by a newer owner: on a write, a stall check's marker, or the open of a reload
    (_S.ACTIVE, _E.FENCED): _S.FENCED,
    (_S.LOADING, _E.FENCED): _S.FENCED,
    # a hand-over: a served shard drains; one not served is let go at once
    (_S.ACTIVE, _E.HAND_OVER): _S.DRAINING,
    (_S.LOADING, _E.HAND_OVER): _S.UNOWNED,
    (_S.FAILED, _E.HAND_OVER): _S.UNOWNED,
    (_S.FENCED, _E.HAND_OVER): _S.UNOWNED,
    (_S.UNOWNED, _E.HAND_OVER): _S.UNOWNED,
    (_S.DRAINING, _E.HANDED_OVER): _S.UNOWNED,
    # a write failing while the shard drains ends the drain early; the shard is not re-read (it is not ours)
    (_S.DRAINING, _E.WRITE_FAILED): _S.UNOWNED,
    (_S.DRAINING, _E.FENCED): _S.UNOWNED,
    (_S.UNOWNED, _E.HANDED_OVER): _S.UNOWNED,
    # the runtime stops, whatever the shard is doing (twice is harmless)
    **{(s, _E.CLOSE): _S.CLOSED for s in ShardState},
}

# The reason a state gets when the event names none: None for ACTIVE, a fixed text for the states whose
# cause is always the same; FAILED, FENCED and LOADING keep the one they had (the error, or why not served).
_DEFAULT_REASON: dict[ShardState, str | None] = {
    ShardState.ACTIVE: None,
    ShardState.DRAINING: HANDING_OVER,
    ShardState.UNOWNED: NOT_OWNED,
    ShardState.CLOSED: STOPPED,
}


class ShardStateError(RuntimeError):
    """An event the transition table does not list for the shard's current state."""

    def __init__(self, shard: int, state: ShardState, event: ShardEvent) -> None:
        super().__init__(f"shard {shard}: no transition from {state.name} on {event.name}")
        self.state = state
        self.event = event


class ShardLife:
    """One shard's state and the reason for it; ``on(event)`` is the only way either changes."""

    __slots__ = ("reason", "shard", "state")

    def __init__(self, shard: int) -> None:
        self.shard = shard
        self.state = ShardState.ACTIVE
        self.reason: str | None = None

    def on(self, event: ShardEvent, reason: str | None = None) -> ShardState:
        """Move along the table's row for (state, event); ``reason`` overrides the new state's default."""
        try:
            new = TRANSITIONS[self.state, event]
        except KeyError:
            raise ShardStateError(self.shard, self.state, event) from None
        if reason is not None:
            self.reason = reason
        elif new in _DEFAULT_REASON:
            self.reason = _DEFAULT_REASON[new]
        elif self.reason is None:
            self.reason = LOADING_NOW  # LOADING from ACTIVE
        self.state = new
        return new


__all__ = [
    "HANDING_OVER", "NOT_OWNED", "STOPPED", "TRANSITIONS", "ShardEvent", "ShardLife", "ShardState",
    "ShardStateError", "ShardStalled", "ShardUnloaded",
]
