"""The classic front sends each classic request to the classic group coordinator or to the
per-member translation, depending on what the group is."""

from __future__ import annotations

import itertools
import uuid

from coordinator.config import CoordinatorConfig
from coordinator.messages import ConsumerGroupHeartbeatRequest
from coordinator.service import ConsumerGroupCoordinator
from coordinator.timers import session_key
from translate.classic_messages import HeartbeatRequest, JoinGroupRequest, JoinGroupRequestProtocol
from translate.embedded import ConsumerProtocolSubscription, encode_subscription
from translate.errors import Errors
from translate.service import ClassicFront


def front() -> ClassicFront:
    coordinator = ConsumerGroupCoordinator(CoordinatorConfig())
    coordinator.on_metadata({"t": (uuid.UUID(int=7), 3)}, 0)
    ids = itertools.count(1)
    return ClassicFront(coordinator, lambda client: f"{client}-{next(ids)}")


def join(f: ClassicFront, group: str, member_id: str = "") -> object:
    metadata = encode_subscription(ConsumerProtocolSubscription(topics=["t"]), 0)
    request = JoinGroupRequest(
        group_id=group, session_timeout_ms=10000, member_id=member_id,
        protocols=[JoinGroupRequestProtocol("range", metadata)], api_version=3, client_id="c",
    )
    result = f.join_group(request, "k", 0)
    return result.responses[0].body if result.responses else None


def test_join_to_an_unknown_group_creates_a_classic_group() -> None:
    f = front()
    assert join(f, "fresh") is None  # parked behind the initial rebalance delay
    assert f.classic_groups.group("fresh") is not None
    assert f.coordinator.group("fresh") is None


def test_join_to_a_consumer_group_is_translated_per_member() -> None:
    f = front()
    f.coordinator.consumer_group_heartbeat(
        ConsumerGroupHeartbeatRequest(
            group_id="cg", member_id="new-1", member_epoch=0, rebalance_timeout_ms=30000,
            subscribed_topic_names=["t"], topic_partitions=[],
        ),
        0,
    )
    response = join(f, "cg")
    assert response is not None and response.error_code == Errors.NONE  # type: ignore[attr-defined]
    assert f.classic_groups.group("cg") is None
    group = f.coordinator.group("cg")
    assert group is not None and len(group.members) == 2
    member_id = response.member_id  # type: ignore[attr-defined]
    beat = f.heartbeat(HeartbeatRequest("cg", response.generation_id, member_id), "h", 0)  # type: ignore[attr-defined]
    assert beat.responses[0].body.error_code == Errors.NONE
    # The coordinator's session timer for the classic member fences it, and the front forgets
    # the member's join/sync timers with it.
    expired = f.on_timer(session_key("cg", member_id), 10_000)
    assert member_id not in group.members and expired.records


def test_refused_first_join_leaves_no_empty_classic_group() -> None:
    f = front()
    request = JoinGroupRequest(group_id="g", session_timeout_ms=10000, protocols=[], api_version=3)
    result = f.join_group(request, "k", 0)
    assert result.responses[0].body.error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    assert f.classic_groups.group("g") is None
