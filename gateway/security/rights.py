"""The rights (ACLs) the gateway's own principal needs on the cluster, and the start-up checks that name them.

docs/gateway.md "The rights of the gateway's principal" lists them per mode. A right that start-up needs
and the cluster refuses ends ``serve`` with exit status 2 and one line naming the principal, the operation,
the resource and what it is needed for (``MissingRight``); a right that only some requests need is warned
about, once, naming it (``warn_missing``). Each check is where the right is first used (state topic
creation and verification, shard open, DescribeAcls) or, for what start-up does not exercise (writing the
state topic, joining the instances group), gateway/ops/rights_check.py: the operations Kafka says the
principal is authorized for (KIP-430), asked for with Metadata and DescribeGroups.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gateway.logging import get_logger

if TYPE_CHECKING:
    from gateway.config.settings import GatewayConfig
    from gateway.security.sasl import Credentials

log = get_logger("gateway.security.rights")


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


__all__ = ["MissingRight", "principal_of", "principal_of_config", "warn_missing"]
