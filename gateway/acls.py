"""The cluster's ACLs as the gateway reads them, for the decisions of translate/authorizer.py.

DescribeAcls (everything: any resource, pattern, principal, host, operation, permission) under the gateway's
own principal, which needs DESCRIBE on the cluster. The two broker settings that shape decisions,
``super.users`` and ``allow.everyone.if.no.acl.found``, cannot be read from the cluster: they are the
authorizer's settings, and a broker's DescribeConfigs answer lists them with a null value (Kafka 4.3.1,
compat_tests/test_sasl.py). The gateway has to be told them. ``AclCache`` keeps the last snapshot and refreshes it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from translate.authorizer import AclBinding, AclSnapshot, Operation, PatternType, Permission, ResourceType

from . import codec
from .logging import get_logger
from .upstream_client import UpstreamClient

log = get_logger("gateway.acls")

DESCRIBE_ACLS = 29


class AclReadError(Exception):
    """The cluster would not list its ACLs or settings to the gateway (error code and message)."""

    def __init__(self, what: str, error_code: int, message: str | None) -> None:
        super().__init__(f"{what}: error {error_code}" + (f" ({message})" if message else ""))
        self.error_code = error_code


def bindings_of(response: Any) -> list[AclBinding]:
    """The bindings of a DescribeAcls response."""
    out = []
    for res in response.resources:
        pattern = getattr(res, "pattern_type", PatternType.LITERAL)  # v0 knows only literal names
        for a in res.acls:
            out.append(
                AclBinding(
                    ResourceType(res.resource_type),
                    res.resource_name,
                    PatternType(pattern),
                    a.principal,
                    a.host,
                    Operation(a.operation),
                    Permission(a.permission_type),
                )
            )
    return out


async def read_snapshot(
    client: UpstreamClient, super_users: frozenset[str] = frozenset(), allow_everyone_if_no_acl_found: bool = False
) -> AclSnapshot:
    """The cluster's ACLs, with the two broker settings as the gateway is configured with them."""
    v = client.version(DESCRIBE_ACLS, 3)
    req = codec.REQUESTS[DESCRIBE_ACLS][v](
        resource_type_filter=int(ResourceType.ANY),
        resource_name_filter=None,
        pattern_type_filter=int(PatternType.ANY),
        principal_filter=None,
        host_filter=None,
        operation=int(Operation.ANY),
        permission_type=int(Permission.ANY),
    )
    r = await client.send_any(DESCRIBE_ACLS, v, req)
    if r.error_code != 0:
        raise AclReadError("DescribeAcls", r.error_code, r.error_message)
    return AclSnapshot(tuple(bindings_of(r)), frozenset(super_users), allow_everyone_if_no_acl_found)


class AclCache:
    """The last snapshot read, and since when (``time.monotonic``); None until the first read succeeds."""

    def __init__(
        self, client: UpstreamClient, super_users: frozenset[str] = frozenset(), allow_everyone: bool = False
    ) -> None:
        self.client = client
        self.super_users = super_users
        self.allow_everyone = allow_everyone
        self.snapshot: AclSnapshot | None = None
        self.read_at: float | None = None
        self.last_error = ""

    async def refresh(self) -> AclSnapshot:
        snap = await read_snapshot(self.client, self.super_users, self.allow_everyone)
        self.snapshot, self.read_at, self.last_error = snap, time.monotonic(), ""
        return snap

    async def refresh_forever(self, interval_s: float) -> None:
        while True:
            try:
                await self.refresh()
            except Exception as e:  # noqa: BLE001 - keep the last snapshot; the next round tries again
                if str(e) != self.last_error:
                    log.warning("cannot read the cluster's ACLs; keeping the last ones", error=str(e))
                self.last_error = str(e)
            await asyncio.sleep(interval_s)
