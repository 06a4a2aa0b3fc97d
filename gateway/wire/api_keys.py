"""Kafka's API keys that the gateway names in its code, said once. An ``IntEnum``: a member is the key's
number wherever an int is expected (frame headers, dict keys, comparisons), and prints as its name."""

from __future__ import annotations

import enum


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    DELETE_GROUPS = 42
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60
    # KIP-848 consumer groups: answered by the gateway for the groups it manages.
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    # KIP-932 share groups and KIP-1071 streams groups: routed to the cluster's coordinators and leaders.
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    STREAMS_GROUP_HEARTBEAT = 88
    STREAMS_GROUP_DESCRIBE = 89
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92
    STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE = 93  # KIP-1331 (Kafka 4.4), routed like the streams heartbeat
    # groupgate's own: the connect group type (docs/connect.md), answered where the gateway coordinates.
    CONNECT_GROUP_HEARTBEAT = 10000
    CONNECT_GROUP_PREPARE_ASSIGNMENT = 10001
    CONNECT_GROUP_INSTALL_ASSIGNMENT = 10002
