"""Taking over groups that the cluster coordinated: members the clients abandoned upstream are removed there.

When a live group becomes managed (docs/operations.md, "Adopting a live group"), its clients keep
talking to the same coordinator address, now answered by the gateway. Their first group request
names a member id of the cluster's coordinator; the gateway does not know it and answers
UNKNOWN_MEMBER_ID, and the client joins the gateway's group with a new id. The old member still
exists on the cluster's coordinator until its session times out there, and while it does the cluster
refuses the gateway's simple commits (a group with members accepts no commit without a generation):
no offset reaches the cluster, and a client that is told UNKNOWN_MEMBER_ID for its commit drops its
brand-new membership of the gateway's group, which then waits a session timeout for it.

A member id that a client presents to the gateway, and the gateway does not know, is one that client
has left behind: nothing else will ever heartbeat for it. So the gateway removes exactly those ids
from the cluster's coordinator (LeaveGroup v3+, KIP-345's member identities), which empties the
upstream group at once instead of after a session timeout. Members that clients hold on the cluster
directly (clients that bypass the gateway) never present their ids here and are left alone.

KIP-848 members do the same with ConsumerGroupHeartbeat: after the move a member heartbeats with its
epoch (> 0) for a group the gateway does not hold. Kafka answers GROUP_ID_NOT_FOUND there (a group is
only created by epoch 0), and the Java consumer takes that as fatal; UNKNOWN_MEMBER_ID makes it give up
its partitions and join again with epoch 0 (keeping its own member id, KIP-1082). So, for managed groups
and with the setting on, the gateway answers UNKNOWN_MEMBER_ID and removes the member upstream with a
ConsumerGroupHeartbeat leave sent on its behalf, once per id. The leave carries epoch -1 even for a
static member (with its instance id): -2 would be a temporary leave, and the cluster would keep the
member, its partitions and its refusal of the gateway's simple commits until the session timeout.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from coordinator.errors import Errors
from gateway.logging import get_logger
from gateway.net.upstream import UpstreamError
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey

if TYPE_CHECKING:
    from coordinator.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
    from gateway.net.upstream_client import UpstreamClient

log = get_logger("gateway.groups.adoption")

LEAVE_EPOCH = -1  # a member that leaves for good, static or not (-2 is a static member's temporary leave)
_REASON = "the group is coordinated by groupgate now"
_REMEMBERED = 4096  # member ids already handled (each client presents its old id a few times)


class UpstreamLeaver:
    def __init__(
        self,
        client: UpstreamClient,
        *,
        enabled: bool,
        spawn: Callable[[Any], Any],
        counters: collections.Counter[str],
    ) -> None:
        self.client = client
        self.enabled = enabled  # coordinator.leave_abandoned_upstream_members
        self.spawn = spawn
        self.counters = counters
        # (group, member id) -> the kinds of leave already sent for it (True: ConsumerGroupHeartbeat, False:
        # LeaveGroup). Per kind: a commit cannot tell a KIP-848 member from a classic one, so the classic leave
        # it triggers must not stop the KIP-848 leave the member's heartbeat asks for later.
        self._seen: collections.OrderedDict[tuple[str, str], set[bool]] = collections.OrderedDict()

    def forget(self, managed: Callable[[str], bool]) -> None:
        """Forget the leaves sent for the groups now managed: a group adopted again after it was handed back
        has its members on the cluster's coordinator again (KIP-848 member ids are the clients' own and
        stay the same), and they must be removed there again."""
        for key in [k for k in self._seen if managed(k[0])]:
            del self._seen[key]

    def after_classic(self, request: object, body: object) -> None:
        """After a classic group request: an UNKNOWN_MEMBER_ID answer to a named member id."""
        member_id = getattr(request, "member_id", "")
        if getattr(body, "error_code", 0) == Errors.UNKNOWN_MEMBER_ID and isinstance(member_id, str):
            self.abandoned(str(getattr(request, "group_id", "")), member_id)

    def after_consumer(self, request: ConsumerGroupHeartbeatRequest, body: ConsumerGroupHeartbeatResponse) -> Any:
        """After a ConsumerGroupHeartbeat: a member (epoch > 0) of a group or member id the gateway lacks."""
        if request.member_epoch <= 0 or not request.member_id or not self.enabled:
            return body
        if body.error_code == Errors.GROUP_ID_NOT_FOUND:
            body = dataclasses.replace(
                body, error_code=Errors.UNKNOWN_MEMBER_ID, error_message=f"member {request.member_id} is unknown here: join again"
            )
        if body.error_code == Errors.UNKNOWN_MEMBER_ID:
            self.abandoned(request.group_id, request.member_id, consumer=True, instance_id=request.instance_id)
        return body

    def abandoned(self, group_id: str, member_id: str, consumer: bool = False, instance_id: str | None = None) -> None:
        """``member_id`` was presented for the managed group ``group_id`` and is unknown to the gateway."""
        if not member_id or not self.enabled:
            return
        key = (group_id, member_id)
        sent = self._seen.setdefault(key, set())
        if consumer in sent:
            return
        sent.add(consumer)
        if len(self._seen) > _REMEMBERED:
            self._seen.popitem(last=False)
        self.spawn(self._leave_consumer(group_id, member_id, instance_id) if consumer else self._leave(group_id, member_id))

    async def _leave_consumer(self, group_id: str, member_id: str, instance_id: str | None) -> None:
        """A ConsumerGroupHeartbeat leave for the member, sent to the upstream coordinator on its behalf."""
        client = self.client
        try:
            if not client.supports(ApiKey.CONSUMER_GROUP_HEARTBEAT):
                return  # the cluster has no KIP-848 coordinator: the member cannot be there
            version = client.version(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1)
            cls = codec.REQUESTS[ApiKey.CONSUMER_GROUP_HEARTBEAT][version]
            req = cls(group_id=group_id, member_id=member_id, member_epoch=LEAVE_EPOCH, instance_id=instance_id)
            r = await client.to_coordinator(group_id, ApiKey.CONSUMER_GROUP_HEARTBEAT, version, req, lambda r: r.error_code)
        except (TimeoutError, UpstreamError) as e:
            log.info("could not remove an abandoned member upstream", group_id=group_id, member_id=member_id, error=str(e))
            return
        if r.error_code == 0:
            self.counters["upstream_members_removed"] += 1
            log.warning(
                "removed a member the client left on the upstream coordinator",
                group_id=group_id,
                member_id=member_id,
                protocol="consumer",
            )
        elif r.error_code not in (Errors.UNKNOWN_MEMBER_ID, Errors.GROUP_ID_NOT_FOUND):
            log.info("upstream ConsumerGroupHeartbeat leave refused", group_id=group_id, member_id=member_id,
                     error=r.error_code)

    async def _leave(self, group_id: str, member_id: str) -> None:
        client = self.client
        try:
            version = client.version(ApiKey.LEAVE_GROUP, 5)
            if version < 3:
                return  # no member identities before v3: nothing safe to send
            cls = codec.REQUESTS[ApiKey.LEAVE_GROUP][version]
            identity = {"member_id": member_id, "group_instance_id": None}
            if version >= 5:
                identity["reason"] = _REASON
            req = cls(group_id=group_id, members=[cls.MemberIdentity(**identity)])
            r = await client.to_coordinator(group_id, ApiKey.LEAVE_GROUP, version, req, lambda r: r.error_code)
        except (TimeoutError, UpstreamError) as e:
            log.info("could not remove an abandoned member upstream", group_id=group_id, member_id=member_id, error=str(e))
            return
        errors = [m.error_code for m in r.members] or [r.error_code]
        if r.error_code == 0 and errors == [0]:
            self.counters["upstream_members_removed"] += 1
            log.warning(
                "removed a member the client left on the upstream coordinator",
                group_id=group_id,
                member_id=member_id,
            )
        elif errors != [Errors.UNKNOWN_MEMBER_ID]:
            log.info("upstream LeaveGroup refused", group_id=group_id, member_id=member_id, errors=errors)
