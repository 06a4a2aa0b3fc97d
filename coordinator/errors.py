"""Kafka error codes the coordinator answers with (numbers as in Kafka's ``Errors`` enum).

A failed call is an ``ApiError`` carrying the code and a message; the gateway puts both in the
response. The codes the group coordinator produces, and those the gateway answers or reads in the
cluster's answers around it, are listed; ``Errors.of`` turns a code from the wire into a member.
"""

from __future__ import annotations

import enum


class Errors(enum.IntEnum):
    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    SASL_AUTHENTICATION_FAILED = 58
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNKNOWN_TOPIC_ID = 100
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128
    REBOOTSTRAP_REQUIRED = 129  # KIP-1102; ApiVersions v5 (KIP-1242) answers it to a client at the wrong node
    # groupgate's own codes for the connect group type (docs/connect.md): Kafka has no such group type,
    # so they sit far above Kafka's codes.
    COMPUTE_ASSIGNMENT = 1000
    INVALID_ASSIGNMENT = 1001

    @classmethod
    def of(cls, code: int) -> Errors | int:
        """A code read from the wire (an upstream answer): its member, or the bare int for a code this
        enum does not list (passed on to the client as it came)."""
        try:
            return cls(code)
        except ValueError:
            return int(code)


class ApiError(Exception):
    """A request the coordinator refuses: the error code and message go back to the client."""

    def __init__(self, error: Errors, message: str | None = None) -> None:
        super().__init__(message or error.name)
        self.error = error
        self.message = message
