"""The gateway's rebalance events (``--rebalance-events``): JSON lines in the rehearsal schema
(docs/rehearsal-events.md), read back as dicts."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

Event = dict[str, Any]


def parse_events(lines: Iterable[str]) -> list[Event]:
    """One dict per complete JSON line; a last line still being written is left out."""
    out: list[Event] = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # the writer's current line, not flushed whole yet
    return out


def select(events: Iterable[Event], group: str | None = None, event: str | None = None) -> list[Event]:
    """The events of ``group`` (any when None) of type ``event`` (any when None), in order."""
    return [e for e in events if (group is None or e.get("group") == group) and (event is None or e.get("event") == event)]


def wait_for_events(
    read: Callable[[], list[Event]],
    predicate: Callable[[list[Event]], bool],
    timeout_s: float = 30.0,
    what: str = "the expected rebalance events",
) -> list[Event]:
    """Read the events again until ``predicate`` holds of them; returns them."""
    deadline = time.monotonic() + timeout_s
    events = read()
    while not predicate(events):
        if time.monotonic() > deadline:
            tail = "\n".join(json.dumps(e) for e in events[-10:])
            raise TimeoutError(f"{what}: not seen within {timeout_s}s; the last events:\n{tail}")
        time.sleep(0.2)
        events = read()
    return events
