"""The rights (ACLs) the gateway's own principal needs on the cluster, and the start-up checks that name them.

docs/gateway.md "The rights of the gateway's principal" lists them per mode. A right that start-up needs
and the cluster refuses ends ``serve`` with exit status 2 and one line naming the principal, the operation,
the resource and what it is needed for (``MissingRight``); a right that only some requests need is warned
about, once, naming it (``warn_missing``). Each check is where the right is first used (state topic
creation and verification, shard open, DescribeAcls) or, for what start-up does not exercise (writing the
state topic, joining the instances group), ``check_startup``: the operations Kafka says the principal is
authorized for (KIP-430), asked for with Metadata and DescribeGroups.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from coordinator.errors import Errors
from gateway.logging import get_logger
from gateway.net.upstream import UpstreamError
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey
from translate.authorizer import Operation

if TYPE_CHECKING:
    from gateway.config.settings import GatewayConfig
    from gateway.net.upstream_client import UpstreamClient
    from gateway.security.sasl import Credentials

log = get_logger("gateway.security.rights")

# KIP-430: an authorized-operations field the broker did not compute.
_NOT_COMPUTED = -(2**31)


class MissingRight(Exception):
    """The cluster refused the gateway's principal a right start-up needs: a configuration error (exit 2)."""

    def __init__(self, principal: str | None, operation: str, resource: str, purpose: str) -> None:
        self.principal, self.operation, self.resource, self.purpose = principal, operation, resource, purpose
        who = f"the gateway's principal {principal}" if principal else "the gateway's principal"
        super().__init__(f"{who} lacks {operation} on {resource} (needed to {purpose})")


def principal_of(sasl: Credentials | None) -> str | None:
    """``User:<name>`` of the gateway's own SASL credentials (None: OAUTHBEARER, whose principal is the
    token's, or no SASL: the cluster's mapping of the connection)."""
    if isinstance(sasl, tuple):
        return f"User:{sasl[1]}"
    return None


def principal_of_config(config: GatewayConfig) -> str | None:
    if config.upstream_sasl_mechanism in (None, "OAUTHBEARER") or not config.upstream_sasl_username:
        return None
    return f"User:{config.upstream_sasl_username}"


_warned: set[tuple[str, str]] = set()


def warn_missing(principal: str | None, operation: str, resource: str, consequence: str, **fields: Any) -> None:
    """A right some requests need was refused: one warning per operation and resource kind."""
    key = (operation, resource.split(" ", 1)[0])
    if key in _warned:
        return
    _warned.add(key)
    who = f"the gateway's principal {principal}" if principal else "the gateway's principal"
    log.warning(f"{who} lacks {operation} on {resource}: {consequence}", **fields)


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


__all__ = ["MissingRight", "check_startup", "principal_of", "principal_of_config", "warn_missing"]
