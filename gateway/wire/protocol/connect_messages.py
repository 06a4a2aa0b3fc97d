"""The connect group type's APIs (docs/connect.md) as kafka-python message classes, loaded from our JSON
schemas beside Kafka's: ConnectGroupHeartbeat (10000), ConnectGroupPrepareAssignment (10001) and
ConnectGroupInstallAssignment (10002).

The gateway's codec registers them (gateway/wire/codec.py); the group layer answers them for the groups
it coordinates (gateway/groups/handlers.py, mapped by gateway/wire/connect_codec.py) and ApiVersions
advertises them only where the gateway coordinates groups.
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

_SCHEMAS = "gateway.wire.protocol.schemas"

CONNECT_GROUP_HEARTBEAT = 10000
CONNECT_GROUP_PREPARE_ASSIGNMENT = 10001
CONNECT_GROUP_INSTALL_ASSIGNMENT = 10002


class ConnectGroupHeartbeatRequest(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


class ConnectGroupHeartbeatResponse(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


class ConnectGroupPrepareAssignmentRequest(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


class ConnectGroupPrepareAssignmentResponse(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


class ConnectGroupInstallAssignmentRequest(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


class ConnectGroupInstallAssignmentResponse(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


__all__ = [
    "CONNECT_GROUP_HEARTBEAT",
    "CONNECT_GROUP_INSTALL_ASSIGNMENT",
    "CONNECT_GROUP_PREPARE_ASSIGNMENT",
    "ConnectGroupHeartbeatRequest",
    "ConnectGroupHeartbeatResponse",
    "ConnectGroupInstallAssignmentRequest",
    "ConnectGroupInstallAssignmentResponse",
    "ConnectGroupPrepareAssignmentRequest",
    "ConnectGroupPrepareAssignmentResponse",
]
