"""A synthetic KIP-848 load: many members, each on its own connection, joining one group and then
heartbeating as fast as the coordinator answers (one request in flight per member), for a fixed time.

Requests are built and read with the gateway's own codec (gateway.wire.codec, the ConsumerGroupHeartbeat
schema of gateway.wire.protocol); the same generator runs against a Kafka broker and against the gateway, so
their figures compare like for like. Members acknowledge whatever assignment they are given on their
next heartbeat, as a client that revokes and assigns instantly would (KIP-848 "Reconciliation").
"""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from compat_tests.harness.probe import roundtrip, split_address
from gateway.wire import codec
from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest

CONSUMER_GROUP_HEARTBEAT = 68
UNKNOWN_MEMBER_ID = 25
FENCED_MEMBER_EPOCH = 110


@dataclass
class LoadResult:
    members: int
    seconds: float
    heartbeats: int  # answered without error inside the measured window
    errors: dict[int, int] = field(default_factory=dict)
    joined: int = 0

    @property
    def per_second(self) -> float:
        return self.heartbeats / self.seconds if self.seconds > 0 else 0.0


def heartbeat_version(address: str) -> int:
    resp = roundtrip(
        address,
        ApiVersionsRequest[3](client_software_name="load", client_software_version="1"),
        ApiVersionsResponse,
        3,
    )
    for k in resp.api_keys:
        if k.api_key == CONSUMER_GROUP_HEARTBEAT:
            return min(int(k.max_version), 1)
    raise RuntimeError(f"{address} does not advertise ConsumerGroupHeartbeat")


class _Member:
    def __init__(self, index: int, group: str, topic: str, version: int) -> None:
        self.group, self.topic, self.version = group, topic, version
        self.client_id = f"hb-load-{index}"
        # v1+: the client names itself (KIP-1082); v0: the coordinator does.
        self.member_id = str(uuid.uuid4()) if version >= 1 else ""
        self.epoch = 0
        self.ack: list[Any] | None = None
        self.correlation = 0

    def request(self) -> bytes:
        joining = self.epoch == 0
        req = ConsumerGroupHeartbeatRequest[self.version](  # type: ignore[misc]
            group_id=self.group,
            member_id=self.member_id,
            member_epoch=self.epoch,
            rebalance_timeout_ms=30000 if joining else -1,
            subscribed_topic_names=[self.topic] if joining else None,
            topic_partitions=[] if joining else self.ack,
        )
        self.ack = None
        self.correlation += 1
        req.with_header(correlation_id=self.correlation, client_id=self.client_id)
        return bytes(req.encode(version=self.version, header=True, framed=True))

    def answer(self, payload: bytes) -> int:
        _, body = codec.decode_response(CONSUMER_GROUP_HEARTBEAT, self.version, payload)
        if body.error_code in (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH):
            self.epoch = 0
            self.member_id = str(uuid.uuid4()) if self.version >= 1 else ""
            return int(body.error_code)
        if body.error_code != 0:
            return int(body.error_code)
        if body.member_id:
            self.member_id = body.member_id
        self.epoch = body.member_epoch
        if body.assignment is not None:
            self.ack = [
                ConsumerGroupHeartbeatRequest.TopicPartitions(
                    topic_id=t.topic_id, partitions=list(t.partitions)
                )
                for t in body.assignment.topic_partitions
            ]
        return 0


async def _run_member(m: _Member, address: str, start: float, stop: float, result: LoadResult) -> None:
    host, port = split_address(address)
    reader, writer = await asyncio.open_connection(host, port)
    counted_join = False
    try:
        while time.monotonic() < stop:
            writer.write(m.request())
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            code = m.answer(await reader.readexactly(size))
            if code:
                result.errors[code] = result.errors.get(code, 0) + 1
                continue
            if not counted_join:
                counted_join = True
                result.joined += 1
            if start <= time.monotonic() < stop:
                result.heartbeats += 1
    finally:
        writer.close()


async def run_load(
    address: str, group: str, topic: str, members: int, seconds: float, warmup_s: float = 3.0
) -> LoadResult:
    """``members`` heartbeat loops against the coordinator at ``address``; counts from warm-up to the end."""
    version = heartbeat_version(address)
    t0 = time.monotonic()
    start, stop = t0 + warmup_s, t0 + warmup_s + seconds
    result = LoadResult(members, seconds, 0)
    await asyncio.gather(
        *(
            _run_member(_Member(i, group, topic, version), address, start, stop, result)
            for i in range(members)
        )
    )
    return result
