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

from coordinator.errors import Errors
from gateway.logging import get_logger
from gateway.net.upstream import UpstreamError
from gateway.net.upstream_client import UpstreamClient
from gateway.security.rights import warn_missing
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey
from translate.authorizer import AclBinding, AclSnapshot, Operation, PatternType, Permission, ResourceType

log = get_logger("gateway.authz.acls")



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
    v = client.version(ApiKey.DESCRIBE_ACLS, 3)
    req = codec.REQUESTS[ApiKey.DESCRIBE_ACLS][v](
        resource_type_filter=int(ResourceType.ANY),
        resource_name_filter=None,
        pattern_type_filter=int(PatternType.ANY),
        principal_filter=None,
        host_filter=None,
        operation=int(Operation.ANY),
        permission_type=int(Permission.ANY),
    )
    r = await client.send_any(ApiKey.DESCRIBE_ACLS, v, req)
    if r.error_code != 0:
        raise AclReadError("DescribeAcls", r.error_code, r.error_message)
    return AclSnapshot(tuple(bindings_of(r)), frozenset(super_users), allow_everyone_if_no_acl_found)


# Authorizers whose decisions translate/authorizer.py reproduces from DescribeAcls (KRaft's, and the ZooKeeper
# era's, which shares its rules).
KNOWN_AUTHORIZERS = frozenset(
    {"org.apache.kafka.metadata.authorizer.StandardAuthorizer", "kafka.security.authorizer.AclAuthorizer"}
)
BROKER_RESOURCE = 4  # ConfigResource.Type.BROKER


async def read_authorizer_class(client: UpstreamClient, directory_nodes: list[int]) -> str | None:
    """The brokers' ``authorizer.class.name`` (None: none configured, i.e. no authorization), asked of one
    broker about itself (a broker describes only its own static configs). Raises AclReadError."""
    for node in directory_nodes:
        v = client.version(ApiKey.DESCRIBE_CONFIGS, 4)
        cls = codec.REQUESTS[ApiKey.DESCRIBE_CONFIGS][v]
        res = cls.DescribeConfigsResource(resource_type=BROKER_RESOURCE, resource_name=str(node),
                                          configuration_keys=["authorizer.class.name"])
        fields: dict[str, Any] = {"resources": [res]}
        if v >= 1:
            fields["include_synonyms"] = False
        if v >= 3:
            fields["include_documentation"] = False
        r = await client.send_any(ApiKey.DESCRIBE_CONFIGS, v, cls(**fields), node_id=node)
        for result in r.results:
            if result.error_code != 0:
                raise AclReadError("DescribeConfigs authorizer.class.name", result.error_code, result.error_message)
            for c in result.configs:
                if c.name == "authorizer.class.name":
                    return c.value or None
        return None
    raise AclReadError("DescribeConfigs authorizer.class.name", -1, "no broker known yet")


class AclCache:
    """The last snapshot read, and since when (``time.monotonic``); None until the first read succeeds.

    ``open``: the cluster runs no authorizer (DescribeAcls answers SECURITY_DISABLED): it allows everything,
    so the gateway does too. ``fresh()`` reads again now (reads are coalesced: at most one at a time, and a
    caller waits for one that started after it asked); ``refresh_forever`` every ``interval_s``."""

    def __init__(
        self, client: UpstreamClient, super_users: frozenset[str] = frozenset(), allow_everyone: bool = False,
        nodes: Any = None, principal: str | None = None,
    ) -> None:
        self.client = client
        self.super_users = super_users
        self.allow_everyone = allow_everyone
        self.snapshot: AclSnapshot | None = None
        self.read_at: float | None = None
        self.last_error = ""
        self.open = False
        # The brokers' authorizer.class.name once read ("" while unknown; None: none configured).
        self.authorizer_class: str | None = ""
        self.nodes = nodes  # () -> node ids of the brokers, for reading authorizer.class.name
        self.principal = principal  # the gateway's User:<name>, for the warnings naming a right
        self.last_code: int | None = None  # the error code of the last failed DescribeAcls
        self.reads = 0
        self._task: asyncio.Future[None] | None = None
        self._task_started = 0.0

    async def refresh(self) -> AclSnapshot | None:
        if self.authorizer_class == "" and self.nodes is not None:
            try:
                self.authorizer_class = await read_authorizer_class(self.client, list(self.nodes()))
                log.info("the brokers' authorizer", **{"authorizer.class.name": self.authorizer_class})
                if self.authorizer_class is not None and self.authorizer_class not in KNOWN_AUTHORIZERS:
                    log.warning(
                        "the brokers run an authorizer the gateway cannot reproduce; its decisions are "
                        "approximated from DescribeAcls (authorization=strict refuses instead)",
                        authorizer=self.authorizer_class,
                    )
            except AclReadError as e:
                if e.error_code == Errors.CLUSTER_AUTHORIZATION_FAILED:
                    warn_missing(
                        self.principal, "DESCRIBE_CONFIGS", "the cluster",
                        "the brokers' authorizer (authorizer.class.name) cannot be identified; decisions assume "
                        "Kafka's StandardAuthorizer (authorization=strict refuses every request meanwhile)",
                    )
                else:
                    log.info("cannot read the brokers' authorizer.class.name", error=str(e))
            except UpstreamError as e:
                log.info("cannot read the brokers' authorizer.class.name", error=str(e))
        try:
            snap = await read_snapshot(self.client, self.super_users, self.allow_everyone)
        except AclReadError as e:
            if e.error_code != Errors.SECURITY_DISABLED:
                self.last_code = e.error_code
                raise
            # No authorizer on the cluster: it authorizes nothing, neither does the gateway.
            if not self.open:
                log.info("the cluster runs no authorizer (DescribeAcls: SECURITY_DISABLED): everything is allowed")
            self.open, self.read_at, self.last_error = True, time.monotonic(), ""
            self.reads += 1
            return None
        self.snapshot, self.read_at, self.last_error, self.open = snap, time.monotonic(), "", False
        self.last_code = None
        self.reads += 1
        return snap

    async def _read_logged(self) -> None:
        try:
            await self.refresh()
        except Exception as e:  # noqa: BLE001 - keep the last snapshot; the next round tries again
            if str(e) != self.last_error:
                log.warning("cannot read the cluster's ACLs; keeping the last ones", error=str(e),
                            have_snapshot=self.snapshot is not None or self.open)
            self.last_error = str(e)

    async def fresh(self) -> None:
        """A read that started after this call (coalesced with others' waits); failures are logged."""
        asked = time.monotonic()
        while True:
            task = self._task
            if task is None:
                self._task_started = time.monotonic()
                task = self._task = asyncio.ensure_future(self._read_logged())
                task.add_done_callback(self._done)
            started = self._task_started
            await asyncio.shield(task)
            if started >= asked:
                return

    def _done(self, task: asyncio.Future[None]) -> None:
        if self._task is task:
            self._task = None

    def age_s(self) -> float | None:
        return None if self.read_at is None else time.monotonic() - self.read_at

    async def refresh_forever(self, interval_s: float) -> None:
        while True:
            await self.fresh()
            await asyncio.sleep(interval_s)
