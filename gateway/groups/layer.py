"""The gateway as the group coordinator: the group APIs' entry point and the wiring of its parts.

For the groups it manages (``coordinator.managed_groups``, an RE2 pattern over the whole group id) the
gateway answers FindCoordinator (key type GROUP) with one of its own broker listeners and then every
group API on every listener itself. Unmanaged groups, transactional coordinators and anything it cannot
decode as a group request of a managed group pass through to the upstream untouched.

This module builds the layer's parts and runs their life (start, stop, a fleet joined). One request's
way through them (``claims``, then ``handle``) is gateway/groups/dispatch.py; which groups are managed,
and the members of those handed back by a live change, is gateway/groups/managed.py.
"""

from __future__ import annotations

import collections
import concurrent.futures
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from coordinator.errors import Errors
from gateway.authz.acls import AclCache
from gateway.authz.data import DataAuthorizer
from gateway.authz.groups import GroupAuthorizer
from gateway.config.coordinator import CoordinatorSettings
from gateway.groups import dispatch
from gateway.groups.adoption import UpstreamLeaver
from gateway.groups.cluster import ROUTED_ONE, ClusterGroups
from gateway.groups.dispatch import Decoded, LocalHandler
from gateway.groups.fleet import Fleet, JoinFleet
from gateway.groups.handlers import GroupHandlers, Handler
from gateway.groups.lag import LagWatch
from gateway.groups.managed import ManagedGroups
from gateway.groups.metadata_watch import MetadataWatch, TopicImage
from gateway.groups.offsets import OffsetBridge
from gateway.groups.rebalance_log import RebalanceEventLog
from gateway.groups.request_authz import RequestAuthorization
from gateway.groups.runtime import CoordinatorRuntime, GroupCalls, ShardUnloaded
from gateway.logging import get_logger
from gateway.metrics import GroupStats
from gateway.net.contracts import HandlerChain
from gateway.net.upstream import UpstreamError
from gateway.net.upstream_client import UpstreamClient
from gateway.security.rights import MissingRight, principal_of_config
from gateway.state.file_store import FileStateStore
from gateway.state.store import StateStore
from gateway.wire import frames
from gateway.wire import group_codec as gc
from translate.group_service import GroupService

if TYPE_CHECKING:
    from gateway.config.settings import GatewayConfig
    from gateway.net.contracts import RequestSource
    from gateway.net.nodes import NodeTable
    from gateway.net.refusals import RefusalLog
    from gateway.net.upstream import BrokerDirectory

log = get_logger("gateway.groups.layer")

GroupsUnloaded = ShardUnloaded  # the name older callers know


class GroupLayer:
    """``layer = GroupLayer(config, settings, directory=..., nodes=...); await layer.open_state();
    gateway = Gateway(config, layer.chain(), directory=..., nodes=...); await gateway.start();
    await layer.start()``.

    It shares the gateway's broker directory (the cluster's brokers and API versions), its node table
    (the coordinator's address; the fleet's routes once joined) and its refusal log, and hands the gateway
    its handlers as a ``HandlerChain``: it never sees the gateway or a connection.
    """

    def __init__(
        self,
        config: GatewayConfig,
        settings: CoordinatorSettings,
        *,
        directory: BrokerDirectory,
        nodes: NodeTable,
        refusals: RefusalLog | None = None,
        join_fleet: JoinFleet | None = None,
    ) -> None:
        self.config = config
        self.directory = directory
        self.nodes = nodes
        self.refusals = refusals
        # Several instances (gateway/fleet/membership.py, given by the command that builds the gateway):
        # how this instance joins the instances group once its listeners are open.
        self._join_fleet = join_fleet
        self.settings = settings
        self.counters: collections.Counter[str] = collections.Counter()
        self.stats = GroupStats()  # rebalances and timer expirations, for /metrics
        # Which groups the gateway coordinates (changed live by set_managed_groups).
        self.managed_groups = ManagedGroups(settings.managed_groups, self.counters)
        timeout = lambda: config.upstream_request_timeout_s  # noqa: E731
        self.client = UpstreamClient(directory, timeout)
        self.forward = UpstreamClient(directory, timeout)  # client-driven traffic: links of its own
        self.watch = MetadataWatch(self.client, self._on_topics, settings.metadata_refresh_s)
        # Consumer lag for /metrics, on links of its own so that it never queues behind group traffic.
        self.lag = LagWatch(UpstreamClient(directory, timeout), self._lag_group_ids, settings.lag_refresh_s)
        self.events: RebalanceEventLog | None = None
        store: StateStore | None = None
        where: str | None = settings.state_dir
        kind = settings.effective_state_store
        if kind == "file":
            assert settings.state_dir is not None
            store = FileStateStore(
                Path(settings.state_dir), settings.state_topic_num_partitions,
                fsync=settings.fsync, fsync_interval_ms=settings.fsync_interval_ms,
            )
        elif kind == "kafka":
            from gateway.state.topic import KafkaStateStore  # the Kafka client library loads only when used

            store = KafkaStateStore.from_config(config, shards=settings.state_topic_num_partitions)
            where = f"topic {settings.state_topic}"
        # KIP-1263 offload: large groups' target computations run here, off the event loop (its threads
        # start on first use; a group's consumer.assignor.offload.enable may turn offload on for it alone).
        self.assignors = concurrent.futures.ThreadPoolExecutor(
            settings.background_threads, thread_name_prefix="groupgate-assignor"
        )
        self.runtime = CoordinatorRuntime(
            settings.state_topic_num_partitions,
            new_service=self._new_service,
            store=store,
            calls_for=self._calls_for,
            topics=lambda: self.watch.topics if self.watch.loaded else None,
            stats=self.stats,
            counters=self.counters,
            where=where,
            offload_executor=self.assignors,
        )
        self.fleet: Fleet | None = None
        if settings.instances_group is not None:
            if kind != "kafka":
                raise ValueError("instances_group needs the cluster state store (state_store \"kafka\")")
            # Shards are served only once the instances group assigned them (gateway/fleet/membership.py).
            self.runtime.serve_only_owned()
        self.cluster = ClusterGroups(
            self.client, self.forward, addr_of=nodes.addr_of, managed=self.managed,
            has_state=self.runtime.has_state, counters=self.counters, spawn=self.runtime.spawn,
            principal=principal_of_config(config),
        )
        self.adoption = UpstreamLeaver(
            self.client, enabled=settings.leave_abandoned_upstream_members, spawn=self.runtime.spawn,
            counters=self.counters,
        )
        self.offsets = OffsetBridge(
            self.client, watch=self.watch, groups=self.runtime, managed=self.managed, adoption=self.adoption,
            bypass_suspected=self.cluster.bypass_suspected, counters=self.counters,
            leave_abandoned=settings.leave_abandoned_upstream_members,
        )
        self.handlers = GroupHandlers(
            self.runtime, self.cluster, self.offsets, self.adoption, self.watch,
            managed=self.managed, home_node=self.home_node, addr_of=nodes.addr_of,
        )
        self.handler_table: dict[int, Handler] = self.handlers.table()
        self._api_keys = frozenset((*self.handler_table, *ROUTED_ONE))
        self._state_opened = False
        # Authorization of what the gateway answers itself (gateway/authz/groups.py): None when off.
        self.authorizer: GroupAuthorizer | None = None
        self._authorizes_passthrough = False  # set by chain()
        self._names_of: object = None
        self._names: dict[uuid.UUID, str] = {}
        self._unknown_id_refresh = float("-inf")
        if config.authorizes():
            self.acls = AclCache(
                self.client, frozenset(config.super_users), config.allow_everyone_if_no_acl_found,
                nodes=lambda: sorted(directory.brokers), principal=principal_of_config(config),
            )
            self.authorizer = GroupAuthorizer(
                self.acls, strict=config.authorization == "strict",
                refresh_interval_s=config.acl_refresh_interval_ms / 1000,
                principals_known=config.listener_sasl() or config.listener_tls_client_ca is None,
            )
        self.request_authz = RequestAuthorization(self.authorizer, self.watch, self.counters)

    def _new_service(self) -> GroupService:
        service_config, coordinator_config = self.settings.service_configs()
        return GroupService(
            service_config, coordinator_config, new_member_id=lambda client_id: f"{client_id}-{uuid.uuid4()}"
        )

    def _calls_for(self, service: GroupService, shard: int) -> GroupCalls:
        if not self.settings.rebalance_events:
            return service
        if self.events is None:
            self.events = RebalanceEventLog(self.settings.rebalance_events, self.settings.rebalance_run, service)
        return self.events.deriver_for(service, shard)

    # --- wiring ----------------------------------------------------------------------------------------

    def chain(self) -> HandlerChain:
        """What the gateway answers through this layer, for its construction: a handler per group API and
        their versions; under SASL termination, the authorization of what is passed through."""
        passthrough = None
        if self.authorizer is not None and self.config.listener_sasl_mode == "terminate":
            # Termination: the passed-through requests are authorized with the same ACLs.
            passthrough = DataAuthorizer(self.authorizer, self._topic_names, self._unknown_topic_id)
        self._authorizes_passthrough = passthrough is not None
        return HandlerChain(
            local_handlers={api_key: LocalHandler(self, api_key) for api_key in self._api_keys},
            local_api=gc.LOCAL_API,
            passthrough_authz=passthrough,
        )

    def _topic_names(self) -> dict[uuid.UUID, str]:
        """Topic id -> name of the topic image (rebuilt when the image changes)."""
        image = self.watch.topics
        if self._names_of is not image:
            self._names_of, self._names = image, {tid: name for name, (tid, _) in image.items()}
        return self._names

    def _unknown_topic_id(self) -> None:
        """A request named a topic id the image lacks (a topic just created): read the image again soon
        rather than at the next periodic refresh (at most once a second)."""
        now = time.monotonic()
        if now - self._unknown_id_refresh < 1.0:
            return
        self._unknown_id_refresh = now

        async def refresh() -> None:
            try:
                await self.watch.refresh()
            except UpstreamError as e:
                log.info("metadata refresh for an unknown topic id failed", error=str(e))

        self.runtime.spawn(refresh())

    @property
    def ready(self) -> bool:
        """Group state replayed and the layer answering (``start`` done)."""
        return self.runtime.ready.is_set()

    @property
    def unloaded(self) -> str | None:
        """Why a shard is not served from memory now (None: every shard is)."""
        return self.runtime.unloaded

    @property
    def foreign(self) -> dict[str, str]:
        return self.cluster.foreign

    def armed_timers(self) -> int:
        return self.runtime.armed_timers()

    def has_state(self, group_id: str) -> bool:
        return self.runtime.has_state(group_id)

    def managed(self, group_id: str) -> bool:
        return self.managed_groups.matches(group_id)

    def set_managed_groups(self, pattern: str) -> tuple[list[str], list[str]]:
        """Change which groups the gateway coordinates, live (SIGHUP: gateway/ops/reload.py); returns the
        groups held here that became managed and those handed back to the cluster's coordinator.

        A bad pattern raises ``ValueError`` and changes nothing. A group that becomes managed is adopted as
        at start (docs/operations.md, "Adopting a live group"): its clients' next requests are answered
        here, by member ids the gateway does not know. A group that stops being managed is handed back
        ("Backing out"): its requests pass through to the cluster from now on, which does not know the
        gateway's member ids either; the gateway's state of it is kept, and its members expire here by
        their session timers. Only the KIP-848 members' next heartbeat is answered here, UNKNOWN_MEMBER_ID,
        since the cluster may answer it GROUP_ID_NOT_FOUND, which the clients take as fatal."""
        was = self.managed_groups.replace(pattern)
        self.settings.managed_groups = pattern
        held = self.runtime.group_ids()
        adopted = sorted(g for g in held if self.managed(g) and not was(g))
        handed_back = sorted(g for g in held if was(g) and not self.managed(g))
        # A member adopted before and handed back since is on the cluster's coordinator again: removed again.
        self.adoption.forget(lambda g: self.managed(g) and not was(g))
        self.managed_groups.note_handed_back(handed_back, self.runtime.consumer_groups())
        return adopted, handed_back

    def managed_group_ids(self) -> list[str]:
        return sorted(g for g in self.runtime.group_ids() if self.managed(g))

    def home_node(self) -> int | None:
        """The broker listener named as every managed group's coordinator: the lowest served node id that
        the cluster's metadata lists now (the lowest served one when it lists none of them).

        A coordinator must be a node of the Metadata that clients get, as Kafka's always is (the leader of
        the group's ``__consumer_offsets`` partition). The gateway keeps a listener open for a broker that
        left the metadata (``broker_absent_grace_s``), but a client drops such a node: recent librdkafka
        (2.16 in the compatibility suite) decommissions every broker its last Metadata did not list, the
        group coordinator included, queries the coordinator again, is told the same node, and loops, its
        heartbeats cut off with the connection. So when the home node's broker dies (SIGKILL, a lost
        host), the groups' coordinator moves to the next listed node, as a Kafka coordinator moves with
        its partition's leadership; every listener answers the group APIs."""
        served = self.nodes.broker_ports
        if not served:
            return None
        directory = self.directory
        listed = [n for n in served if n in directory.brokers and n not in directory.absent_since]
        return min(listed or served)

    async def open_state(self) -> None:
        """Read the state store (no network): a damaged log or a store written with another shard count
        stops the start-up before anything else (StateLogCorrupt / StateStoreMismatch)."""
        if not self._state_opened:
            self._state_opened = True
            await self.runtime.load()

    async def start(self) -> None:
        """Replay the state, load topic metadata, re-arm timers, then serve."""
        if self.settings.effective_state_store == "memory":
            log.info("ephemeral_state: group state lives in memory and is lost on restart")
        await self.open_state()
        try:
            await self.watch.refresh()
        except UpstreamError as e:
            log.warning("initial topic metadata fetch failed; retrying in the background", error=str(e))
        if self.authorizer is not None:
            # Read before serving, so that the first requests are decided; a failure is logged and the
            # gateway serves on, refusing what needs authorization until a read succeeds.
            await self.acls.fresh()
            if self.acls.snapshot is None and not self.acls.open and self.acls.last_code == Errors.CLUSTER_AUTHORIZATION_FAILED:
                # Every request needing authorization would be refused until an operator grants it.
                raise MissingRight(principal_of_config(self.config), "DESCRIBE", "the cluster",
                                   "read the cluster's ACLs: authorization is on")
            if self.acls.snapshot is None and not self.acls.open:
                log.error(
                    "authorization is on but the cluster's ACLs cannot be read: every group request is refused "
                    "until they can (the gateway's principal needs DESCRIBE on the cluster; or set authorization)",
                    error=self.acls.last_error, authorization=self.config.authorization,
                )
            else:
                log.info(
                    "authorizing group requests with the cluster's ACLs"
                    + (" (and, in SASL termination, every request passed through)" if self._authorizes_passthrough else ""),
                    authorization=self.config.authorization, acls=len(self.acls.snapshot.bindings)
                    if self.acls.snapshot is not None else None,
                    **{"acl_refresh_interval_ms": self.config.acl_refresh_interval_ms},
                )
        self.runtime.start()
        if self.authorizer is not None:
            self.runtime.spawn(self.acls.refresh_forever(self.config.acl_refresh_interval_ms / 1000))
        if self.settings.effective_state_store == "kafka" and self.settings.state_answer_stall_ms > 0:
            # A state write waits for the cluster (a leader or transaction coordinator moving): answers
            # are not held past what clients wait for a heartbeat answer (docs/operations.md, "A broker
            # failure").
            self.runtime.answer_stall_s = self.settings.state_answer_stall_ms / 1000
        if self.settings.instances_group is not None and self.fleet is None:
            if self._join_fleet is None:
                raise ValueError("instances_group is set but the gateway was built without fleet membership")
            # Loaded already: a fleet's store is the cluster's.
            from gateway.state.topic import KafkaStateStore

            store = self.runtime.store
            if not isinstance(store, KafkaStateStore):
                raise ValueError("instances_group needs the cluster state store (state_store = \"kafka\")")
            self.fleet = self._join_fleet(
                self.runtime, self.settings, store, self.nodes.bootstrap, self._refresh_topics,
                self.nodes.listener_rule(),
            )
            self.handlers.fleet_coordinator = self.fleet.coordinator
            self.handlers.fleet = self.fleet
            # One node table in every instance's answers: brokers at the instance carrying them, and the
            # instances' coordinator nodes beside them.
            self.nodes.route_through(self.fleet)
            await self.fleet.start()
        if self.settings.effective_state_store == "kafka" and self.settings.state_stall_check_ms > 0:
            self.runtime.watch_stalls(self.settings.state_stall_check_ms / 1000)
        spawn = self.runtime.spawn
        spawn(self.watch.run_forever())
        if self.settings.upstream_check_s > 0:
            spawn(self.cluster.check_forever(self.settings.upstream_check_s, self.managed_group_ids))
        spawn(self.runtime.expire_forever(self.settings.offsets_retention_check_interval_ms / 1000))
        if self.settings.lag_refresh_s > 0:
            spawn(self.lag.run_forever())
        log.info(
            "group coordinator ready",
            managed_groups=self.settings.managed_groups,
            classic_groups=self.settings.classic_groups,
            **{
                "group.initial.rebalance.delay.ms": self.settings.initial_rebalance_delay_ms,
                "state.topic.num.partitions": self.settings.state_topic_num_partitions,
            },
            groups=self.runtime.group_count(),
        )

    async def leave_fleet(self) -> None:
        """Hand this instance's shards over to the others of the fleet and leave it (SIGTERM): drained
        while the client connections are still open."""
        if self.fleet is not None:
            await self.fleet.stop()

    async def _refresh_topics(self) -> None:
        try:
            await self.watch.refresh()
        except UpstreamError as e:
            log.warning("topic metadata refresh before a shard take-over failed", error=str(e))

    async def stop(self) -> None:
        await self.leave_fleet()
        await self.runtime.stop()
        # A computation still running finishes on its thread; its result is never installed.
        self.assignors.shutdown(wait=False, cancel_futures=True)
        self.client.close()
        self.forward.close()
        self.lag.client.close()
        if self.events is not None:
            self.events.close()

    def _lag_group_ids(self) -> list[str]:
        """The managed groups whose shards this instance serves (each instance of a fleet reports its own)."""
        return [g for g in self.runtime.group_ids() if self.managed(g)]

    def _on_topics(self, image: TopicImage) -> None:
        self.runtime.on_metadata(image)

    def expire_empty_groups(self) -> None:
        self.runtime.expire_empty_groups()

    # --- request entry (gateway/groups/dispatch.py) ---------------------------------------------------

    def claims(self, frame: bytes, api_key: int, version: int) -> bool | Decoded:
        """Whether this request is the group layer's (else it passes through to the upstream)."""
        return dispatch.claims(self, frame, api_key, version)

    async def handle(
        self, conn: RequestSource, header: frames.RequestHeader, payload: bytes, decoded: Decoded | None = None
    ) -> bytes:
        return await dispatch.handle(self, conn, header, payload, decoded)


__all__ = ["GroupLayer", "GroupsUnloaded"]
