"""Decoded ConsumerGroupHeartbeat request and response (v0 and v1), independent of the wire codec.

The gateway maps the wire messages to and from these types. Field names follow the protocol's
JSON schema in snake case; ``None`` means the field was null on the wire (Kafka's "unchanged").
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

# Member epochs with a special meaning in a heartbeat request (KIP-848, "Joining & Leaving").
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
# Heartbeat v1 requires the client to generate its member id (KIP-1082).
CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1


@dataclass(slots=True)
class TopicPartitions:
    topic_id: uuid.UUID
    partitions: Sequence[int]


@dataclass(slots=True)
class ConsumerGroupHeartbeatRequest:
    group_id: str
    member_id: str = ""
    member_epoch: int = 0
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: Sequence[str] | None = None
    subscribed_topic_regex: str | None = None  # v1+
    server_assignor: str | None = None
    topic_partitions: Sequence[TopicPartitions] | None = None
    # Not on the wire: the API version and the client's identity from the request header / connection.
    api_version: int = 1
    client_id: str = ""
    client_host: str = ""


@dataclass(slots=True)
class ConsumerGroupHeartbeatResponse:
    error_code: int = 0
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    # None: no assignment in the response (unchanged); else the member's assigned partitions.
    assignment: list[TopicPartitions] | None = None
    throttle_time_ms: int = 0
