"""Unique topic and group names, so tests sharing one session broker never see each other's data."""

from __future__ import annotations

import itertools
import os
import re

_counter = itertools.count(1)


def unique(prefix: str) -> str:
    """``prefix`` made safe for Kafka names, plus the pid and a per-process counter."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "-", prefix)[:120]
    return f"{safe}-{os.getpid()}-{next(_counter)}"
