"""Which groups the gateway coordinates, and the members of the groups it handed back to the cluster.

``coordinator.managed_groups`` is an RE2 pattern over the whole group id; the group layer
(gateway/groups/layer.py ``set_managed_groups``) may replace it live. A group that stops being managed is
handed back: its requests pass through to the cluster's coordinator from then on, except the next
ConsumerGroupHeartbeat of each KIP-848 member the gateway held of it, answered UNKNOWN_MEMBER_ID once
here, since the cluster may answer it GROUP_ID_NOT_FOUND, which the clients take as fatal.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from typing import Any

import re2

from coordinator.errors import Errors
from gateway.logging import get_logger
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey

log = get_logger("gateway.groups.layer")

_HANDED_BACK_KEPT = 10_000  # handed-back groups whose KIP-848 members are still to be told


class ManagedGroups:
    """The managed-groups pattern in force, and the members of handed-back groups still to be told."""

    def __init__(self, pattern: str, counters: collections.Counter[str]) -> None:
        self.match_all = pattern == ".*"
        self._pattern = re2.compile(pattern)
        self._counters = counters
        # Groups handed back to the cluster's coordinator by a live change of the pattern: group id -> the
        # KIP-848 member ids the gateway held then, each answered UNKNOWN_MEMBER_ID once on its next
        # ConsumerGroupHeartbeat.
        self.handed_back: dict[str, set[str]] = {}

    def matches(self, group_id: str) -> bool:
        return self.match_all or self._pattern.fullmatch(group_id) is not None

    def replace(self, pattern: str) -> Callable[[str], bool]:
        """Manage the groups ``pattern`` matches from now on; returns whether a group was managed before.
        A bad pattern raises ``ValueError`` and changes nothing."""
        try:
            compiled = re2.compile(pattern)
        except re2.error as e:
            raise ValueError(f"managed_groups is not a valid RE2 pattern: {e}") from None
        old_all, old = self.match_all, self._pattern

        def was(g: str) -> bool:
            return old_all or old.fullmatch(g) is not None

        self._pattern, self.match_all = compiled, pattern == ".*"
        return was

    def note_handed_back(self, handed_back: Iterable[str], consumer_groups: Iterable[Any]) -> None:
        """After ``replace``: forget the members of groups managed again, and keep those of the KIP-848
        groups just handed back (``consumer_groups``: the runtime's)."""
        for g in [g for g in self.handed_back if self.matches(g)]:
            del self.handed_back[g]
        gone = set(handed_back)
        for group in consumer_groups:
            if group.group_id in gone and group.members:
                self.handed_back[group.group_id] = set(group.members)
        while len(self.handed_back) > _HANDED_BACK_KEPT:  # members that never came back: oldest forgotten
            del self.handed_back[next(iter(self.handed_back))]

    def handed_back_member(self, msg: Any) -> bool:
        """A ConsumerGroupHeartbeat (epoch > 0) of a member the gateway held when its group was handed back."""
        members = self.handed_back.get(msg.group_id)
        return members is not None and msg.member_epoch > 0 and msg.member_id in members

    def tell_handed_back(self, msg: Any, version: int, corr: int) -> bytes:
        """The answer to such a heartbeat: rejoin at the cluster's coordinator (the member is then forgotten)."""
        members = self.handed_back[msg.group_id]
        members.discard(msg.member_id)
        if not members:
            del self.handed_back[msg.group_id]
        self._counters["handed_back_members"] += 1
        log.info("told a member of a handed-back group to join the cluster's coordinator",
                 group_id=msg.group_id, member_id=msg.member_id)
        return codec.encode_response(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, corr, codec.RESPONSES[
            ApiKey.CONSUMER_GROUP_HEARTBEAT][version](
            error_code=Errors.UNKNOWN_MEMBER_ID,
            error_message=f"group {msg.group_id} is coordinated by the cluster again: join it with epoch 0",
        ))  # fmt: skip


__all__ = ["ManagedGroups"]
