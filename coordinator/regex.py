"""Regular-expression subscriptions (KIP-848 "Regex Based Subscription"), evaluated with RE2 like Kafka's
RE2/J: a topic matches when the whole name matches the pattern.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any

import re2

from coordinator.errors import ApiError, Errors


@lru_cache(maxsize=1024)
def compile_regex(pattern: str) -> Any:
    """The compiled pattern; INVALID_REGULAR_EXPRESSION when RE2 rejects it."""
    try:
        return re2.compile(pattern)
    except Exception as e:  # re2.error and friends
        raise ApiError(Errors.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {e}.") from None


def resolve(pattern: str, topic_names: Iterable[str]) -> frozenset[str]:
    compiled = compile_regex(pattern)
    return frozenset(t for t in topic_names if compiled.fullmatch(t) is not None)
