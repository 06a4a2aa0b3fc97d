"""Kafka's ACL decision, as StandardAuthorizer makes it, over ACL bindings the cluster reports (sans-I/O).

The gateway answers some requests itself (the group APIs of the groups it coordinates) and must authorize
them exactly as the cluster would. It reads the cluster's ACLs (DescribeAcls) and decides here:

- ``super.users`` (principals such as ``User:admin``) may do everything;
- an ACL applies to a resource through its pattern: LITERAL (the same name, or the name ``*`` matching
  every resource of the type) or PREFIXED (the name starts with it);
- an ACL applies to a principal that is the same, or to every user through ``User:*``; to a host that is
  the client's address, or to every host through ``*``;
- an ACL's operation ALL covers every operation; an ALLOW of READ, WRITE, DELETE or ALTER also allows
  DESCRIBE, and an ALLOW of ALTER_CONFIGS also allows DESCRIBE_CONFIGS (a DENY implies nothing);
- a matching DENY wins over any ALLOW;
- when no ACL at all is bound to a pattern matching the resource (whatever its principal or operation),
  ``allow.everyone.if.no.acl.found`` decides; when some are but none allows, the answer is no.

Codes are Kafka's (AclOperation, ResourceType, PatternType, AclPermissionType), as DescribeAcls carries
them, so a response decodes straight into ``AclBinding``s.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
IMPLIES_DESCRIBE = frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER})
IMPLIES_DESCRIBE_CONFIGS = frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS})
# The operations a group supports, in the order of their bits in a describe answer's authorized operations.
GROUP_OPERATIONS = (
    Operation.READ,
    Operation.DESCRIBE,
    Operation.DELETE,
    Operation.DESCRIBE_CONFIGS,
    Operation.ALTER_CONFIGS,
)


@dataclass(frozen=True)
class AclBinding:
    """One ACL as DescribeAcls lists it: a resource pattern and an access control entry."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.resource_name in (name, WILDCARD)
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return False  # UNKNOWN/ANY/MATCH are filter types, never a stored binding's

    def verdict(self, principal: str, host: str, operation: Operation) -> Permission | None:
        """ALLOW/DENY when this entry applies to the action, else None (the resource is matched already)."""
        # Kafka matches the principal itself and User:* (whatever the principal's own type).
        if self.principal not in (principal, WILDCARD_PRINCIPAL):
            return None
        if self.host not in (WILDCARD, host):
            return None
        if self.operation != Operation.ALL:
            if self.permission == Permission.ALLOW:
                if operation == Operation.DESCRIBE:
                    applies = self.operation in IMPLIES_DESCRIBE
                elif operation == Operation.DESCRIBE_CONFIGS:
                    applies = self.operation in IMPLIES_DESCRIBE_CONFIGS
                else:
                    applies = self.operation == operation
            else:
                applies = self.operation == operation
            if not applies:
                return None
        return self.permission if self.permission in (Permission.ALLOW, Permission.DENY) else None


@dataclass(frozen=True)
class AclSnapshot:
    """The cluster's ACLs at one moment, with the broker settings that shape decisions."""

    bindings: tuple[AclBinding, ...]
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False

    @classmethod
    def of(
        cls, bindings: Iterable[AclBinding], super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False
    ) -> AclSnapshot:
        return cls(tuple(bindings), frozenset(super_users), allow_everyone_if_no_acl_found)

    def authorize(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool:
        """Whether ``principal`` (e.g. ``User:alice``) from ``host`` (the client's IP address as text) may
        perform ``operation`` on the resource."""
        if principal in self.super_users:
            return True
        bound = False
        allowed = False
        for acl in self.bindings:
            if not acl.matches_resource(resource_type, name):
                continue
            bound = True
            v = acl.verdict(principal, host, operation)
            if v == Permission.DENY:
                return False
            if v == Permission.ALLOW:
                allowed = True
        if allowed:
            return True
        return self.allow_everyone_if_no_acl_found and not bound

    def authorized_operations(
        self, principal: str, host: str, resource_type: ResourceType, name: str, supported: Iterable[Operation]
    ) -> int:
        """The bit field of a describe answer (KIP-430): bit ``op`` set for each supported, allowed op."""
        bits = 0
        for op in supported:
            if self.authorize(principal, host, op, resource_type, name):
                bits |= 1 << int(op)
        return bits

    def group_authorized_operations(self, principal: str, host: str, group_id: str) -> int:
        return self.authorized_operations(principal, host, ResourceType.GROUP, group_id, GROUP_OPERATIONS)
