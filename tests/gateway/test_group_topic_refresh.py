"""A group request that subscribes to a topic the coordinator's topic image lacks (created a moment
ago) refreshes the image before it is handled: classic JoinGroup (the topics of its protocols'
subscriptions) and ConsumerGroupHeartbeat (names, or a regex: a refresh of the whole image).

The upstream is a stand-in for the metadata fetch alone: it has the topic the image has not seen.
"""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.consumer.group import JoinGroupRequest, SyncGroupRequest

from gateway.groups.layer import GroupLayer
from gateway.groups.metadata_watch import TopicImage
from gateway.wire.api_keys import ApiKey
from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest
from translate.embedded import ConsumerProtocolSubscription, decode_assignment, encode_subscription

from ._groups_support import StubGateway, call, layer_on
from .test_groups_layer import MEMBER_ID_REQUIRED, settings

TOPIC_ID = uuid.UUID(int=0x7E57)


async def started_with_upstream_topics(image: TopicImage) -> tuple[GroupLayer, list[int]]:
    layer = layer_on(StubGateway(), settings(classic_groups="translate"))
    await layer.start()
    fetches: list[int] = []

    async def fetch() -> TopicImage:
        fetches.append(1)
        return dict(image)

    layer.watch.fetch = fetch  # type: ignore[method-assign]
    assert "fresh" not in layer.watch.topics
    return layer, fetches


async def test_a_classic_join_refreshes_the_image_for_the_topics_it_subscribes_to() -> None:
    layer, fetches = await started_with_upstream_topics({"fresh": (TOPIC_ID, 3)})
    try:
        sub = encode_subscription(ConsumerProtocolSubscription(["fresh"]), 1)
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=sub)]
        join: dict[str, Any] = {
            "group_id": "g", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000, "member_id": "",
            "protocol_type": "consumer", "protocols": protocols,
        }
        r = await call(layer, ApiKey.JOIN_GROUP, 5, JoinGroupRequest[5](**join))
        assert r.error_code == MEMBER_ID_REQUIRED
        join["member_id"] = r.member_id
        r = await call(layer, ApiKey.JOIN_GROUP, 5, JoinGroupRequest[5](**join))
        assert r.error_code == 0 and fetches
        s = await call(layer, ApiKey.SYNC_GROUP, 3, SyncGroupRequest[3](
            group_id="g", generation_id=r.generation_id, member_id=r.member_id, assignments=[]))
        assigned = {tp.topic: sorted(tp.partitions) for tp in decode_assignment(bytes(s.assignment)).assigned_partitions}
        assert assigned == {"fresh": [0, 1, 2]}
    finally:
        await layer.stop()


async def test_a_regex_heartbeat_refreshes_the_whole_image() -> None:
    layer, fetches = await started_with_upstream_topics({"fresh-1": (TOPIC_ID, 2)})
    try:
        req = ConsumerGroupHeartbeatRequest[1](
            group_id="cg", member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout_ms=5000,
            subscribed_topic_regex="fresh-.*", topic_partitions=[],
        )
        r = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, req)
        assert r.error_code == 0 and fetches
        assert "fresh-1" in layer.watch.topics
    finally:
        await layer.stop()
