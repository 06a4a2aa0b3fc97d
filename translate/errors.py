"""Kafka error codes the classic protocol front can answer with.

The numbers are Kafka's own (org.apache.kafka.common.protocol.Errors); clients act on the number,
so they must never drift. Only the codes this layer produces are listed.
"""

from __future__ import annotations

import enum


class Errors(enum.IntEnum):
    NONE = 0
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    FENCED_INSTANCE_ID = 82
    GROUP_MAX_SIZE_REACHED = 81
    UNRELEASED_INSTANCE_ID = 111
    STALE_MEMBER_EPOCH = 113


class ApiError(Exception):
    """A request that fails with a Kafka error code (raised inside handlers, turned into a response)."""

    def __init__(self, error: Errors, message: str = "") -> None:
        super().__init__(message or error.name)
        self.error = error
        self.message = message
