"""Kafka's dynamic group configs, as the cluster stores them, for the consumer groups the gateway coordinates.

Kafka 4.x keeps per-group settings (``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``,
``consumer.assignment.interval.ms`` of KIP-1263; ``kafka-configs --entity-type groups`` or an Admin
client's IncrementalAlterConfigs on a GROUP resource) in the cluster's metadata. IncrementalAlterConfigs
passes through the gateway, so those values land in the cluster; this module reads them back with
DescribeConfigs (resource type GROUP) and hands them to the coordinator's ``CoordinatorConfig``, whose
``session_timeout_for`` / ``heartbeat_interval_for`` / ``assignment_interval_for`` are evaluated on
every heartbeat, as Kafka evaluates a group's config.

When: before the first member of a consumer group the gateway does not hold yet joins (so its first
answer already carries the group's values, as on Kafka), and for every consumer group the gateway
holds every ``cluster_group_configs_refresh_ms`` (a change reaches live groups within that time; Kafka
applies it at once).

Precedence, per group and name: the gateway's ``[coordinator.group_configs."<group>"]`` value (an
operator override), else the cluster's dynamic group config (config source GROUP_CONFIG), else the
gateway's ``group.consumer.*`` default; the result is clamped into the gateway's
``group.consumer.min/max.*`` bounds as Kafka's GroupConfig.evaluate clamps it. A cluster without GROUP
config resources (before Kafka 3.8) or that refuses DescribeConfigs keeps the TOML values and defaults:
the refusal is logged once per kind.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import DescribeConfigsRequest

from coordinator.config import CONSUMER_ASSIGNOR_OFFLOAD_ENABLE, GROUP_CONFIG_NAMES, group_config_error
from coordinator.errors import Errors
from gateway.logging import get_logger
from gateway.net.upstream import UpstreamError
from gateway.net.upstream_client import UpstreamClient
from gateway.security.rights import principal_of_config, warn_missing
from gateway.wire.api_keys import ApiKey

if TYPE_CHECKING:
    from coordinator.config import CoordinatorConfig
    from gateway.groups.layer import GroupLayer

log = get_logger("gateway.groups.cluster_configs")

GROUP_RESOURCE = 32  # ConfigResource.Type.GROUP
GROUP_CONFIG_SOURCE = 8  # DescribeConfigsResponse ConfigSource.GROUP_CONFIG: set on the group itself
_BATCH = 100  # resources per DescribeConfigs request


def cluster_values(configs: Iterable[Any]) -> dict[str, int]:
    """The consumer group configs set on the group itself, from one DescribeConfigs result (the
    cluster's defaults, source DEFAULT_CONFIG, stay the gateway's own ``group.consumer.*``)."""
    out: dict[str, int] = {}
    for c in configs:
        if c.name in GROUP_CONFIG_NAMES and c.config_source == GROUP_CONFIG_SOURCE and c.value is not None:
            if c.name == CONSUMER_ASSIGNOR_OFFLOAD_ENABLE:  # a boolean: "true" / "false"
                if c.value.lower() in ("true", "false"):
                    out[c.name] = int(c.value.lower() == "true")
                continue
            try:
                out[c.name] = int(c.value)
            except ValueError:
                continue
    return out


def effective(config: CoordinatorConfig, overrides: dict[str, int], cluster: dict[str, int]) -> tuple[dict[str, int], str | None]:
    """What the coordinator gets for one group: the operator's overrides over the cluster's values.
    A combination that is not a valid group config (a session timeout not above the heartbeat
    interval) keeps the overrides alone, with the reason."""
    merged = {**cluster, **overrides}
    # The cluster validated its values against its own bounds; the gateway's bounds clamp them later.
    err = group_config_error(
        merged, session_timeout_ms=config.session_timeout_ms, heartbeat_interval_ms=config.heartbeat_interval_ms, bounds={}
    )
    return (dict(overrides), err) if err is not None else (merged, None)


class ClusterGroupConfigs:
    def __init__(self, layer: GroupLayer) -> None:
        self.layer = layer
        self.refresh_ms = layer.settings.cluster_group_configs_refresh_ms
        self.overrides = {gid: dict(c) for gid, c in layer.settings.group_configs.items()}
        self.cluster: dict[str, dict[str, int]] = {}  # group id -> the cluster's values last read
        self._reading: dict[str, asyncio.Future[None]] = {}
        self._refused: set[str] = set()  # kinds of refusal already logged
        # After a refusal, joins stop waiting for reads until the next periodic refresh has tried again.
        self._joins_skip_until = 0.0
        # A link of its own: a cluster that closes the connection on a request it cannot parse (one
        # without GROUP resources) breaks nothing the group layer has in flight.
        config = layer.config
        self.client = UpstreamClient(layer.directory, lambda: config.upstream_request_timeout_s)

    @property
    def enabled(self) -> bool:
        return self.refresh_ms > 0

    def install(self) -> None:
        """Read a new group's configs before its first join (the group handlers' join hook); refresh the
        held groups periodically."""
        if not self.enabled:
            return
        self.layer.handlers.before_join = self.before_join
        self.layer.runtime.spawn(self.refresh_forever())

    def close(self) -> None:
        self.client.close()

    def _config(self, group_id: str) -> CoordinatorConfig:
        return self.layer.runtime.group_config(group_id)

    def _held(self) -> list[str]:
        """The consumer groups of the shards served now."""
        return sorted(g.group_id for g in self.layer.runtime.consumer_groups())

    async def before_join(self, group_id: str) -> None:
        """A join: the group's configs are read first unless the gateway holds the group already."""
        if group_id in self.cluster or self.layer.runtime.has_state(group_id):
            return
        if not self.layer.managed(group_id) or time.monotonic() < self._joins_skip_until:
            return
        pending = self._reading.get(group_id)
        if pending is None:
            pending = asyncio.ensure_future(self.read([group_id]))
            self._reading[group_id] = pending
            pending.add_done_callback(lambda _f: self._reading.pop(group_id, None))
        # A join waits at most the upstream request timeout; it then goes on with what is known.
        try:
            await asyncio.shield(pending)
        except Exception:
            log.exception("reading a group's configs from the cluster failed; its join goes on with the known ones")

    async def refresh_forever(self) -> None:
        first = True  # the groups loaded from the state log are read at once
        while True:
            if not first:
                await asyncio.sleep(self.refresh_ms / 1000)
            first = False
            held = self._held()
            # Forget the values of groups that are gone (deleted or expired): read again on their next join.
            for gid in set(self.cluster) - set(held):
                del self.cluster[gid]
                self._set(gid, dict(self.overrides.get(gid, {})))
            try:
                await self.read(held)
            except Exception:
                log.exception("reading the groups' configs from the cluster failed; trying again at the next refresh")

    async def read(self, group_ids: list[str]) -> None:
        """DescribeConfigs of ``group_ids`` (GROUP resources) and the result applied to the coordinator."""
        client = self.client
        if not group_ids or not client.supports(ApiKey.DESCRIBE_CONFIGS):
            return
        version = client.version(ApiKey.DESCRIBE_CONFIGS, 4)
        cls = DescribeConfigsRequest[version]
        for start in range(0, len(group_ids), _BATCH):
            batch = group_ids[start : start + _BATCH]
            req = cls(
                resources=[
                    cls.DescribeConfigsResource(
                        resource_type=GROUP_RESOURCE, resource_name=g, configuration_keys=list(GROUP_CONFIG_NAMES)
                    )
                    for g in batch
                ],
                include_synonyms=False,
                include_documentation=False,
            )
            try:
                r = await client.send_any(ApiKey.DESCRIBE_CONFIGS, version, req)
            except (UpstreamError, TimeoutError) as e:
                self._refusal("unreachable", f"DescribeConfigs failed: {e}")
                return
            for result in r.results:
                if result.error_code == Errors.GROUP_AUTHORIZATION_FAILED:
                    # Loud, once: every group then runs on the gateway's own defaults.
                    warn_missing(
                        principal_of_config(self.layer.config), "DESCRIBE_CONFIGS", f"group {result.resource_name}",
                        "the cluster's per-group configs (kafka-configs --entity-type groups) cannot be read; the "
                        "gateway's configured values and defaults apply to the groups it cannot read",
                        group_id=result.resource_name,
                    )
                    continue
                if result.error_code != 0:
                    # INVALID_REQUEST / UNSUPPORTED_VERSION: a cluster without GROUP config resources.
                    self._refusal(f"error {result.error_code}", result.error_message or "")
                    continue
                self.apply(result.resource_name, cluster_values(result.configs))

    def apply(self, group_id: str, cluster: dict[str, int]) -> None:
        """The cluster's values for ``group_id`` read: what the coordinator evaluates from now on."""
        config = self._config(group_id)
        previous = self.cluster.get(group_id)
        self.cluster[group_id] = cluster
        values, err = effective(config, self.overrides.get(group_id, {}), cluster)
        if err is not None:
            log.warning("the cluster's group configs are not used for this group", group_id=group_id, reason=err, cluster=cluster)
        self._set(group_id, values)
        if previous is not None and previous != cluster:
            log.info("group configs changed in the cluster", group_id=group_id, configs=cluster, effective=values)

    def _set(self, group_id: str, values: dict[str, int]) -> None:
        config = self._config(group_id)
        if values:
            config.group_configs[group_id] = values
        else:
            config.group_configs.pop(group_id, None)

    def _refusal(self, kind: str, reason: str) -> None:
        self._joins_skip_until = time.monotonic() + self.refresh_ms / 1000
        if kind not in self._refused:
            self._refused.add(kind)
            log.warning(
                "cannot read group configs from the cluster; the configured ones and defaults apply",
                kind=kind, reason=reason,
            )
