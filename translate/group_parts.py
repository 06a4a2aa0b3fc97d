"""What the group service is made of, as the modules that answer its requests see it.

``GroupService`` (translate/group_service.py) holds the group types side by side: the consumer groups'
coordinator (coordinator/), the connect groups' (coordinator/connect/), the classic groups, the translator of classic members inside consumer groups
and the converter between the two types. The request modules (classic_routing, consumer_heartbeat,
group_timers, offset_checks, group_deletion, group_views, group_replay) take these parts through
``GroupParts`` rather than the service itself, so none of them imports the entry point that calls them.
The lookups here are the ones several of them share.
"""

from __future__ import annotations

from typing import Protocol

from coordinator.connect.service import ConnectGroupCoordinator
from coordinator.model import ConsumerGroup
from coordinator.outcome import Outcome
from coordinator.service import ConsumerGroupCoordinator
from translate.classic_coordinator import ClassicGroupCoordinator
from translate.classic_member import ClassicMemberTranslator
from translate.connect_classic_worker import ConnectClassicWorkers
from translate.connect_conversion import ConnectConverter
from translate.conversion import GroupConverter
from translate.group_config import GroupServiceConfig


class GroupParts(Protocol):
    config: GroupServiceConfig
    coordinator: ConsumerGroupCoordinator
    connect: ConnectGroupCoordinator
    classic_groups: ClassicGroupCoordinator
    classic_members: ClassicMemberTranslator
    converter: GroupConverter
    connect_workers: ConnectClassicWorkers
    connect_converter: ConnectConverter


def consumer_group(svc: GroupParts, group_id: str) -> ConsumerGroup | None:
    if svc.classic_groups.group(group_id) is not None:
        return None
    return svc.coordinator.group(group_id)


def forget_if_unwritten(svc: GroupParts, group_id: str) -> None:
    """A consumer group created for a join that was refused (or answered MEMBER_ID_REQUIRED)
    has no record behind it: drop it so that state stays equal to the replay of records."""
    group = svc.coordinator.group(group_id)
    if group is not None and not group.members and group.group_epoch == 0 and group.assignment_epoch == 0:
        del svc.coordinator.state.groups[group_id]


def after_membership_change(svc: GroupParts, group_id: str, out: Outcome, now_ms: int) -> Outcome:
    """A classic member left, expired or was taken over: a join barrier waiting for it may end."""
    out.take(svc.classic_members.check_barrier(group_id, now_ms))
    return out
