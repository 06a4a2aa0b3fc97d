"""The start-up checks of the rights that start-up does not exercise itself (docs/gateway.md, "The rights of
the gateway's principal"): writing the state topic and joining the instances group, from the operations
Kafka reports the gateway's principal may do (KIP-430). Raises gateway.security.rights.MissingRight."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from coordinator.errors import Errors
from gateway.logging import get_logger
from gateway.net.upstream import UpstreamError
from gateway.security.rights import MissingRight, principal_of_config
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey
from translate.authorizer import Operation

if TYPE_CHECKING:
    from gateway.config.settings import GatewayConfig
    from gateway.net.upstream_client import UpstreamClient

log = get_logger("gateway.ops.rights_check")

# KIP-430: an authorized-operations field the broker did not compute.
_NOT_COMPUTED = -(2**31)


def _allowed(ops: int | set[int] | None, op: Operation) -> bool | None:
    """Whether ``op`` is among the authorized operations (the codec's set of operation codes, or the
    bit field; None: the broker did not say)."""
    if ops is None or ops == _NOT_COMPUTED:
        return None
    if isinstance(ops, int):
        return bool(ops & (1 << int(op)))
    return int(op) in ops


async def check_startup(config: GatewayConfig, client: UpstreamClient) -> None:
    """The rights the cluster state store and the instances group need that start-up does not exercise:
    raises MissingRight. Run once the gateway knows the brokers (after its listeners started)."""
    settings = config.coordinator
    principal = principal_of_config(config)
    if settings.effective_state_store == "kafka":
        await _check_state_topic(client, settings.state_topic, principal)
    if settings.instances_group is not None:
        await _check_instances_group(client, settings.instances_group, principal)


async def _check_state_topic(client: UpstreamClient, topic: str, principal: str | None) -> None:
    version = client.version(ApiKey.METADATA, 12)
    if version < 8:
        return  # no authorized operations before Metadata v8 (Kafka 2.3): the first write tells
    cls = codec.REQUESTS[ApiKey.METADATA]
    fields: dict[str, Any] = {"topics": [cls.MetadataRequestTopic(name=topic)], "allow_auto_topic_creation": False,
                              "include_topic_authorized_operations": True}
    if version >= 10:
        fields["topics"] = [cls.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=topic)]
    if version <= 10:
        fields["include_cluster_authorized_operations"] = False
    try:
        r = await client.send_any(ApiKey.METADATA, version, cls[version](**fields))
    except UpstreamError as e:
        log.info("cannot ask for the state topic's authorized operations", error=str(e))
        return
    for t in r.topics:
        if t.name != topic:
            continue
        if t.error_code == Errors.TOPIC_AUTHORIZATION_FAILED:
            raise MissingRight(principal, "DESCRIBE", f"topic {topic}", "find the state topic")
        for op, purpose in ((Operation.WRITE, "write the group state"), (Operation.READ, "read the group state")):
            if _allowed(t.authorized_operations, op) is False:
                raise MissingRight(principal, op.name, f"topic {topic}", purpose)


async def _check_instances_group(client: UpstreamClient, group: str, principal: str | None) -> None:
    missing = MissingRight(principal, "READ", f"group {group}", "join the instances group (instances_group)")
    version = client.version(ApiKey.FIND_COORDINATOR, 3)
    try:
        fc = await client.send_any(
            ApiKey.FIND_COORDINATOR, version, codec.REQUESTS[ApiKey.FIND_COORDINATOR][version](key=group, key_type=0)
        )
    except UpstreamError as e:
        log.info("cannot check the instances group's rights", error=str(e))
        return
    if fc.error_code == Errors.GROUP_AUTHORIZATION_FAILED:
        raise missing  # not even DESCRIBE, which READ implies
    if fc.error_code != 0:
        return  # the coordinator is not available yet: joining tells
    version = client.version(ApiKey.DESCRIBE_GROUPS, 5)
    if version < 3:
        return
    addr = client.directory.address(fc.node_id) or (fc.host, fc.port)
    req = codec.REQUESTS[ApiKey.DESCRIBE_GROUPS][version](groups=[group], include_authorized_operations=True)
    try:
        r = await client.send(addr, ApiKey.DESCRIBE_GROUPS, version, req)
    except UpstreamError as e:
        log.info("cannot check the instances group's rights", error=str(e))
        return
    for g in r.groups:
        if g.error_code == Errors.GROUP_AUTHORIZATION_FAILED or _allowed(g.authorized_operations, Operation.READ) is False:
            raise missing


__all__ = ["check_startup"]
