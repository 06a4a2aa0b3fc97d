"""The connect group type's ConnectGroupHeartbeat (docs/connect.md) as kafka-python message classes,
loaded from our JSON schemas beside Kafka's.

Not on the wire yet: the gateway does not answer it, and the codec leaves its key out
(``messages.NOT_WIRED``) even where this module was imported, so it is never decoded or advertised.
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

_SCHEMAS = "gateway.wire.protocol.schemas"

CONNECT_GROUP_HEARTBEAT = 10000


class ConnectGroupHeartbeatRequest(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


class ConnectGroupHeartbeatResponse(ApiMessage, load_json=_SCHEMAS):  # type: ignore[call-arg,misc]
    pass


__all__ = ["CONNECT_GROUP_HEARTBEAT", "ConnectGroupHeartbeatRequest", "ConnectGroupHeartbeatResponse"]
