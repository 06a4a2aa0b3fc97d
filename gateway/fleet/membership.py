"""Several instances of the gateway sharing the shards, with the upstream cluster as the arbiter.

Each instance is a member of a classic consumer group (``instances_group``) subscribed to the state
topic: the topic's partitions are the shards, so the group's assignment is the split of the shards. The
classic protocol works on every cluster (no KIP-848 needed), the group coordinator of the cluster notices
a member that stops heartbeating after ``session.timeout.ms`` (``instances_session_timeout_ms``) and a
member that leaves (SIGTERM) at once.

- Member metadata (the JoinGroup userData of the custom assignor, gateway/fleet/assignor.py): the
  instance's advertised address, the shards it holds and the epoch of the assignment it got them in.
- The leader's assignment: a member's shards, and in its userData the table every member gets (member id
  -> address, the owner of each shard).
- A rebalance is a handover. The protocol is eager (aiokafka revokes everything before every join), but
  an instance keeps serving its shards through a rebalance unless it lost its membership; the assignor
  never gives a shard to one member while another claims it. A shard missing from an instance's new
  assignment is handed over (no new requests, in-flight ones finish, appends flushed, then the memory is
  dropped: ``CoordinatorRuntime.release``) before the callback returns, and the instance then rejoins so
  the next round gives the shard to its new owner. A shard new in an assignment is loaded in the
  background (``CoordinatorRuntime.acquire``): opening it initialises the shard's transactional id, which
  fences the previous owner's producer, and only then is it read and served.
- Membership lost (the cluster expired this member: its heartbeats did not get through): every shard is
  released at once, since the others may be taking them over; the stall check and the per-shard fencing
  guard the rest (docs/ARCHITECTURE.md).

The consumer never reads the state topic: its partitions are paused as soon as they are assigned.

The consumer runs on the state store's client loop (``KafkaStateStore.clients``, gateway/loop_thread.py),
not on the gateway's: its heartbeats must reach the cluster within the session timeout however busy the
gateway's loop is, or the cluster expires a healthy instance and its shards move (a full core with
thousands of connections makes a turn of the gateway's loop last long). The rebalance callbacks cross to
the gateway's loop for what touches the runtime (hand-over, take-over), and the consumer's own calls made
from there (pause, rejoin) cross back. The assignor's ``metadata`` reads what the runtime holds from the
client loop: it is called after the revoke callback has finished on the gateway's loop, and the runtime's
shard list is only read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata

from gateway.fleet.assignor import PROTOCOL_NAME, FleetAssignment, MemberClaim, assign
from gateway.logging import get_logger
from gateway.loop_thread import LoopThread
from gateway.net.routes import ListenerRule, pick, serving

if TYPE_CHECKING:
    from gateway.config.coordinator import CoordinatorSettings
    from gateway.groups.runtime import CoordinatorRuntime
    from gateway.state.topic import KafkaStateStore

log = get_logger("gateway.fleet.membership")

# Node ids of the instances' coordinator nodes in FindCoordinator answers: far above any broker's id,
# and far below Integer.MAX_VALUE (the Java client keys its coordinator connection MAX_VALUE - node id,
# which must not meet a broker's id).
COORDINATOR_NODE_BASE = 1 << 30

# An instance polls nothing (the partitions are paused), so the consumer's own max.poll.interval.ms
# check, which makes an idle consumer leave its group, must never fire.
_NEVER_MS = 2_147_483_647


class ShardAssignor(AbstractPartitionAssignor):
    """The fleet's assignor as aiokafka calls it: metadata at each join, assign on the leader, the
    member's own assignment after each sync."""

    name = PROTOCOL_NAME

    def __init__(self, fleet: FleetMembership) -> None:
        self.fleet = fleet

    def metadata(self, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:  # type: ignore[override]
        rule = self.fleet.listeners
        claim = MemberClaim(self.fleet.endpoint, tuple(self.fleet.runtime.held()), self.fleet.epoch, self.fleet.slot,
                            None if rule is None else rule.encode())
        return ConsumerProtocolMemberMetadata(0, sorted(topics), claim.encode())

    def assign(  # type: ignore[override]
        self, cluster: Any, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        claims = {m: MemberClaim.decode(meta.user_data) for m, meta in members.items()}
        out = assign(self.fleet.shards, claims)
        topic = self.fleet.topic
        log.info(
            "instances group assignment", epoch=next(iter(out.values())).epoch if out else 0,
            members={claims[m].endpoint or m: list(a.shards) for m, a in out.items()},
        )
        return {m: ConsumerProtocolMemberAssignment(0, [(topic, list(a.shards))], a.encode()) for m, a in out.items()}

    def on_assignment(self, assignment: ConsumerProtocolMemberAssignment) -> None:  # type: ignore[override]
        shards = tuple(sorted(tp.partition for tp in assignment.partitions()))
        self.fleet.table = FleetAssignment.decode(shards, assignment.user_data)


class _Listener(ConsumerRebalanceListener):
    def __init__(self, fleet: FleetMembership) -> None:
        self.fleet = fleet

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.fleet.at_home(self.fleet.before_join())

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.fleet.at_home(self.fleet.assigned(list(assigned)))


class FleetMembership:
    """``fleet = FleetMembership(runtime, settings, store, endpoint); await fleet.start(); ...;
    await fleet.stop()`` (hands every shard over, then leaves the group)."""

    def __init__(
        self,
        runtime: CoordinatorRuntime,
        settings: CoordinatorSettings,
        store: KafkaStateStore,
        endpoint: str,
        refresh_topics: Callable[[], Awaitable[None]] | None = None,
        listeners: ListenerRule | None = None,
    ) -> None:
        assert settings.instances_group is not None
        self.runtime = runtime
        self.settings = settings
        self.store = store
        self.group = settings.instances_group
        self.topic = store.topic
        self.shards = runtime.shard_count
        self.endpoint = endpoint
        # How this instance numbers its broker listeners, published so that every instance can name them.
        self.listeners = listeners
        self._routes: tuple[FleetAssignment, dict[str, ListenerRule]] | None = None
        # Before a shard is taken over: the topic image must hold every topic its groups subscribe to
        # (one created since the last periodic refresh too), or loading would see them vanish and bump
        # the groups' epochs, a rebalance the failover must not cause.
        self.refresh_topics = refresh_topics
        self.epoch = 0  # of the latest assignment this instance got (its claims' epoch)
        self.slot = -1  # its coordinator node's slot, claimed again at every join (kept while it stays)
        self.table: FleetAssignment | None = None
        self.assignments = 0  # assignments received (for tests and /metrics)
        self._loading: dict[int, asyncio.Task[None]] = {}
        # Take-overs open a producer and a reader each: a few at a time, as the runtime's own load does.
        self._opening = asyncio.Semaphore(8)
        # How long a handover may take: within the rebalance timeout, which is what the others wait.
        self.drain_s = min(settings.instances_rebalance_timeout_ms, settings.instances_session_timeout_ms) / 2000
        self._consumer: AIOKafkaConsumer | None = None
        self._stopping = False
        # The consumer's loop (the store's clients') and the gateway's, where the runtime is used.
        self._clients: LoopThread = store.clients
        self._home: asyncio.AbstractEventLoop | None = None

    # --- lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        s = self.settings
        self._home = asyncio.get_running_loop()
        await self._clients.run(self._open())
        log.info("joining the instances group", group=self.group, topic=self.topic, endpoint=self.endpoint,
                 session_timeout_ms=s.instances_session_timeout_ms)

    async def _open(self) -> None:
        """Create, start and subscribe the consumer (on the loop it will run on)."""
        s = self.settings
        self._consumer = AIOKafkaConsumer(
            group_id=self.group,
            client_id=f"{self.store.client_id}-instances",
            enable_auto_commit=False,
            partition_assignment_strategy=(ShardAssignor(self),),
            session_timeout_ms=s.instances_session_timeout_ms,
            heartbeat_interval_ms=s.instances_heartbeat_interval_ms,
            rebalance_timeout_ms=s.instances_rebalance_timeout_ms,
            max_poll_interval_ms=_NEVER_MS,
            **self.store._client_kwargs(),
        )
        await self._consumer.start()
        self._consumer.subscribe([self.topic], listener=_Listener(self))

    async def at_home(self, coro: Coroutine[Any, Any, None]) -> None:
        """``coro`` run on the gateway's loop, awaited from the consumer's."""
        home = self._home
        if home is None or home is asyncio.get_running_loop():
            await coro
            return
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, home))

    async def stop(self) -> None:
        """Hand every held shard over (drained, flushed), then leave the group so that the others take
        them at once instead of after the session timeout."""
        if self._stopping:
            return
        self._stopping = True
        consumer, self._consumer = self._consumer, None
        await self._cancel_loads(self.runtime.held())
        await self.runtime.release(self.runtime.held(), self.drain_s)
        if consumer is not None:
            try:
                await self._clients.run(consumer.stop())  # LeaveGroup
            except Exception as e:  # noqa: BLE001 - the session timeout takes over then
                log.warning("leaving the instances group failed", error=repr(e))
        log.info("left the instances group", group=self.group)

    @property
    def generation(self) -> int:
        """The instances group's generation this instance last joined (-1: not joined), for /metrics."""
        coordinator = getattr(self._consumer, "_coordinator", None)
        return int(getattr(coordinator, "generation", -1) or -1) if coordinator is not None else -1

    # --- rebalance callbacks ---------------------------------------------------------------------------

    def _member_id(self) -> str:
        return str(getattr(getattr(self._consumer, "_coordinator", None), "member_id", "") or "")

    def _lost(self) -> bool:
        """Whether the cluster no longer knows this member (expired or fenced): a rejoin then starts
        without an id, and the shards may already be assigned elsewhere."""
        consumer = self._consumer
        coordinator = getattr(consumer, "_coordinator", None)
        return coordinator is not None and not getattr(coordinator, "member_id", "")

    async def before_join(self) -> None:
        held = self.runtime.held()
        if held and (self._lost() or self._stopping):
            log.warning("instances group membership lost: handing every shard over", shards=held)
            await self._cancel_loads(held)
            await self.runtime.release(held, self.drain_s)
            self.epoch, self.slot = 0, -1

    async def assigned(self, assigned: Iterable[TopicPartition]) -> None:
        if self._stopping:
            return  # leaving: whatever this round gave goes to the others next round
        tps = list(assigned)
        consumer = self._consumer
        if consumer is not None and tps:
            self._clients.call_soon(consumer.pause, *tps)  # on its loop; never fetched: the instances group only splits the shards
        mine = {tp.partition for tp in tps if tp.topic == self.topic}
        table = self.table
        self.epoch = table.epoch if table is not None else self.epoch
        if table is not None and self._member_id() in table.slots:
            self.slot = table.slots[self._member_id()]
        self.assignments += 1
        held = set(self.runtime.held())
        drop = sorted(held - mine)
        take = sorted(mine - held)
        if drop:
            # Before the callback returns (and before this instance rejoins): the next round gives these
            # shards to their new owners only once nobody claims them.
            await self._cancel_loads(drop)
            await self.runtime.release(drop, self.drain_s)
            self._rejoin()
        for shard in take:
            task = self.runtime.spawn(self._take_over(shard))
            self._loading[shard] = task
        log.info("instances group assignment received", epoch=self.epoch, shards=sorted(mine), handed_over=drop,
                 taking_over=take, instances=len(table.endpoints) if table is not None else None)

    async def _take_over(self, shard: int) -> None:
        try:
            if self.refresh_topics is not None:
                await self.refresh_topics()  # concurrent take-overs share one refresh
            async with self._opening:
                await self.runtime.acquire([shard])
        finally:
            if self._loading.get(shard) is asyncio.current_task():
                del self._loading[shard]

    def _rejoin(self) -> None:
        # aiokafka has no public call for it; its coordinator's request_rejoin is what a metadata change
        # uses. The next round assigns the released shards.
        coordinator = getattr(self._consumer, "_coordinator", None)
        if coordinator is not None:
            self._clients.call_soon(coordinator.request_rejoin)  # on the consumer's loop

    async def _cancel_loads(self, shards: Iterable[int]) -> None:
        tasks = [t for n in shards if (t := self._loading.get(n)) is not None and not t.done()]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    # --- the table -------------------------------------------------------------------------------------

    def coordinator(self, shard: int) -> tuple[int, str, int] | None:
        """The coordinator node of ``shard``'s owner as every instance names it: its advertised bootstrap
        address (whose listener answers every group API itself) and a node id from the instance's slot,
        which it keeps while it stays in the group. None while the shard is in transit."""
        table = self.table
        if table is None or shard >= len(table.owners):
            return None
        owner = table.owners[shard]
        if owner is None or owner not in table.endpoints or owner not in table.slots:
            return None
        host, _, port = table.endpoints[owner].rpartition(":")
        return COORDINATOR_NODE_BASE + table.slots[owner], host, int(port)

    def _rules(self) -> dict[str, ListenerRule]:
        """Instance address -> its listener rule, over the current table (computed once per assignment)."""
        table = self.table
        if table is None:
            return {}
        cached = self._routes
        if cached is not None and cached[0] is table:
            return cached[1]
        rules: dict[str, ListenerRule] = {}
        for member, raw in sorted(table.listeners.items()):
            endpoint = table.endpoints.get(member)
            rule = ListenerRule.decode(raw)
            if endpoint and rule is not None:
                rules[endpoint] = rule  # one address, one instance (a restarted one may be listed twice)
        self._routes = (table, rules)
        return rules

    def broker_address(self, node_id: int) -> tuple[str, int] | None:
        """Broker ``node_id``'s listener on the instance a rendezvous hash picks over the current table
        (gateway/net/routes.py), as every instance names it; None: this instance's own listener (no
        table yet, or this instance is the one picked)."""
        # Only over the instances that serve it: one whose listener for it could not open says so
        # (ListenerRule.unserved), and the others then name their own.
        rules = serving(node_id, self._rules())
        chosen = pick(node_id, rules)
        if chosen is None or chosen == self.endpoint:
            return None
        return rules[chosen].address(node_id)

    def coordinator_nodes(self) -> list[tuple[int, str, int]]:
        """Every instance's coordinator node (id from its slot, its advertised bootstrap address), listed
        beside the brokers in Metadata and DescribeCluster so that admin clients asking every node (for
        ListGroups) reach every instance."""
        table = self.table
        if table is None:
            return []
        out = {}
        for member, slot in table.slots.items():
            endpoint = table.endpoints.get(member)
            if not endpoint:
                continue
            host, _, port = endpoint.rpartition(":")
            out[COORDINATOR_NODE_BASE + slot] = (COORDINATOR_NODE_BASE + slot, host, int(port))
        return [out[n] for n in sorted(out)]

    def owns(self, shard: int) -> bool:
        """Whether the current table gives ``shard`` to this instance."""
        return self.owner_endpoint(shard) == self.endpoint

    def owner_endpoint(self, shard: int) -> str | None:
        """The advertised address of the instance the last assignment gave ``shard`` to (None: in transit
        or not known yet)."""
        table = self.table
        if table is None or shard >= len(table.owners):
            return None
        owner = table.owners[shard]
        return None if owner is None else table.endpoints.get(owner)


__all__ = ["COORDINATOR_NODE_BASE", "FleetMembership", "ShardAssignor"]
