"""Liveness, readiness and the metrics of one gateway process (``GET /metrics``, ``/healthz``, ``/readyz`` on
the admin listener, gateway/ops/admin_http.py).

The metrics are a prometheus_client ``CollectorRegistry`` of custom collectors that compute every family
when a scrape asks, reading the gateway and the group layer through read-only views (``GatewayView``,
``GroupsView``): the request paths only bump the counters of gateway/metrics.py, and the consumer lag is
the last snapshot the group layer's background watch took (gateway/groups/lag.py), so a scrape never
waits on the cluster. ``generate_latest`` writes the text format.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from coordinator.model import GroupState
from gateway.metrics import GC_PAUSES, PREFIX, GatewayMetrics, GroupStats, api_name
from gateway.ops.metric_families import Labels, LagCollector, counter, gauge, histogram, render_lag
from translate.classic_group import ClassicGroupState

if TYPE_CHECKING:
    import collections

    from gateway.config.settings import GatewayConfig
    from gateway.groups.lag import LagSnapshot
    from gateway.groups.runtime import CoordinatorRuntime
    from gateway.net.limits import ConnectionLimits
    from gateway.net.upstream import BrokerDirectory

CONTENT_TYPE = CONTENT_TYPE_LATEST


# --- what a scrape reports ----------------------------------------------------------------------------


class GatewayView(Protocol):
    """What readiness and /metrics read of the gateway (gateway/net/server.py ``Gateway``): read-only."""

    @property
    def config(self) -> GatewayConfig: ...
    @property
    def metrics(self) -> GatewayMetrics: ...
    @property
    def limits(self) -> ConnectionLimits: ...
    @property
    def directory(self) -> BrokerDirectory: ...
    @property
    def connections(self) -> Collection[Any]: ...
    @property
    def serving(self) -> bool: ...
    @property
    def tls_handshake_failures(self) -> int | None: ...


class _Loaded(Protocol):
    @property
    def loaded(self) -> bool: ...


class GroupsView(Protocol):
    """What readiness and /metrics read of the group layer (gateway/groups/layer.py ``GroupLayer``): read-only."""

    @property
    def ready(self) -> bool: ...
    @property
    def watch(self) -> _Loaded: ...
    @property
    def stats(self) -> GroupStats: ...
    @property
    def counters(self) -> collections.Counter[str]: ...
    @property
    def runtime(self) -> CoordinatorRuntime: ...

    def managed(self, group_id: str) -> bool: ...

    def armed_timers(self) -> int: ...


class LagView(Protocol):
    """The group layer's background lag watch (gateway/groups/lag.py ``LagWatch``): read-only."""

    @property
    def snapshot(self) -> LagSnapshot: ...
    @property
    def interval_s(self) -> float: ...
    @property
    def failures(self) -> int: ...

    on_snapshot: Callable[[LagSnapshot], Awaitable[None]] | None  # told of every new snapshot


class Health:
    """Liveness, readiness and the metrics of one gateway process (and its group layer, if any), read
    through the narrow views above: nothing here changes the gateway or the groups.

    A scrape is ``generate_latest`` of the live registry, followed by the text of the lag families as
    ``generate_latest`` wrote it for the watch's latest snapshot. That text changes only when the snapshot
    does, so it is written once per snapshot (on a worker thread, as soon as the watch hands a new one
    over: ``on_lag_snapshot``), not once per scrape: with 10,000 groups it is most of a scrape's samples."""

    def __init__(self, gw: GatewayView, layer: GroupsView | None = None) -> None:
        self.gw = gw
        self.layer = layer
        self.started_at = time.time()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(GatewayCollector(self))
        self._scan: GroupScan | None = None
        self._lag: LagView | None = None
        self._lag_text: tuple[object, bytes] | None = None  # (snapshot, its families' text)
        if layer is not None:
            self.registry.register(GroupsCollector(self, layer))
            self._lag = getattr(layer, "lag", None)
            self.registry.register(MembersCollector(self, self._lag))
            if self._lag is not None:
                self._lag.on_snapshot = self.on_lag_snapshot

    def not_ready(self) -> list[str]:
        """Why the gateway does not serve yet (empty: ready)."""
        reasons: list[str] = []
        gw, layer = self.gw, self.layer
        down = gw.directory.unreachable_for()
        if down is not None and down > gw.config.upstream_connect_timeout_s:
            reasons.append(f"upstream unreachable for {down:.0f}s: {gw.directory.last_error}")
        if not gw.serving:
            reasons.append("listeners not open yet")
        if layer is not None:
            if not layer.ready:
                reasons.append("group state not replayed yet")
            elif not layer.watch.loaded:
                reasons.append("topic metadata not fetched yet")
        return reasons

    def group_scan(self) -> GroupScan:
        """The managed groups, scanned once per scrape (every collector of one scrape shares it)."""
        if self._scan is None:
            assert self.layer is not None
            self._scan = GroupScan(self.layer)
        return self._scan

    def render(self) -> bytes:
        """One scrape, in the Prometheus text format."""
        self._scan = None
        try:
            return generate_latest(self.registry) + self.lag_text()
        finally:
            self._scan = None

    def lag_text(self) -> bytes:
        """The lag families of the watch's latest snapshot that has been written out (written here when
        none has been yet)."""
        if self.layer is None:
            return b""
        cached = self._lag_text
        if cached is None:
            snapshot = self._lag.snapshot if self._lag is not None else None
            cached = self._lag_text = (snapshot, render_lag(snapshot))
        return cached[1]

    async def on_lag_snapshot(self, snapshot: LagSnapshot) -> None:
        """A new lag snapshot: write its families out on a worker thread; scrapes meanwhile serve the
        previous one's (with its timestamp)."""
        text = await asyncio.to_thread(render_lag, snapshot)
        self._lag_text = (snapshot, text)

    def families(self) -> list[Metric]:
        """Every family a scrape exports now (for checks of what dashboards reference)."""
        self._scan = None
        try:
            live = list(self.registry.collect())
        finally:
            self._scan = None
        snapshot = self._lag.snapshot if self._lag is not None else None
        return live + (list(LagCollector(snapshot).collect()) if self.layer is not None else [])


class GatewayCollector(Collector):
    """The passthrough: connections, limits, requests, bytes, the upstream."""

    def __init__(self, health: Health) -> None:
        self.health = health

    def collect(self) -> Iterator[Metric]:
        p = PREFIX
        health = self.health
        gw, m = health.gw, health.gw.metrics
        yield gauge(p + "ready", "1 when /readyz answers 200 (serving), else 0", 0 if health.not_ready() else 1)
        yield gauge(p + "start_time_seconds", "Process start time, seconds since the epoch", health.started_at)
        yield gauge(p + "client_connections", "Client connections open now", len(gw.connections))
        yield counter(p + "client_connections_total", "Client connections accepted", m.connections_total)
        limits = gw.limits
        yield gauge(
            p + "client_connections_max",
            "Client connections allowed at once: max.connections, lowered to what RLIMIT_NOFILE serves",
            limits.max_connections,
        )
        yield gauge(
            p + "client_upstream_links",
            "Upstream connections open for client connections (each holds a descriptor, as its client does)",
            m.upstream_links,
        )
        yield counter(
            p + "client_connections_refused_total",
            "Client connections closed because max.connections was reached or no descriptor was left for them"
            " or their upstream link",
            m.connections_refused,
        )
        yield counter(
            p + "client_accept_errors_total",
            "Accepts that failed for lack of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM)",
            m.accept_errors,
        )
        yield counter(
            p + "client_connections_closed_total",
            "Client connections closed by the gateway's timeouts: idle (connections.max.idle.ms), "
            "partial_request (a request frame incomplete for partial_request_timeout_ms)",
            labels=("reason",),
            samples=[(("idle",), m.connections_closed_idle), (("partial_request",), m.connections_closed_partial)],
        )
        yield gauge(
            p + "queued_request_bytes",
            "Bytes reserved by request frames being read (declared sizes), all client connections together",
            limits.reserved,
        )
        yield gauge(
            p + "queued_request_bytes_max", "queued.max.request.bytes (-1: unbounded)",
            -1 if limits.budget is None else limits.budget,
        )
        yield gauge(p + "client_connections_muted", "Client connections not read while the budget is full", len(limits.muted))
        yield counter(
            p + "request_memory_exhausted_total",
            "Times the request memory budget filled and connections without a request in progress were muted",
            m.request_memory_exhausted,
        )
        yield counter(p + "client_received_bytes_total", "Bytes received from clients", m.bytes_received)
        yield counter(p + "client_sent_bytes_total", "Bytes sent to clients", m.bytes_sent)
        if gw.tls_handshake_failures is not None:
            yield counter(
                p + "client_tls_handshake_failures_total",
                "Client connections closed because their TLS handshake failed or timed out",
                gw.tls_handshake_failures,
            )
        yield counter(
            p + "requests_total",
            "Client requests by api and outcome: forwarded upstream, answered locally, or error",
            labels=("api", "outcome"),
            samples=_requests(m),
        )
        yield gauge(p + "upstream_brokers", "Upstream brokers known from metadata", len(gw.directory.brokers))
        yield gauge(
            p + "upstream_reachable", "0 while every recent attempt to reach the upstream failed, else 1",
            0 if gw.directory.unreachable_for() is not None else 1,
        )
        yield counter(
            p + "upstream_connect_failures_total", "Failed attempts to open a client's upstream connection",
            m.upstream_connect_failures,
        )
        yield counter(
            p + "upstream_unavailable_answers_total",
            "Client requests for the cluster answered with a retriable error because no upstream link could be opened",
            m.upstream_unavailable_answers,
        )
        yield counter(
            p + "upstream_metadata_failures_total", "Upstream metadata refreshes that reached no broker",
            gw.directory.refresh_failures,
        )
        yield histogram(
            p + "local_request_duration_seconds",
            "Time from a locally answered (group) request's arrival to its response release",
            ("api",),
            [((api_name(k),), h) for k, h in sorted(m.local_latency.items())],
        )
        if GC_PAUSES.installed:
            yield histogram(
                p + "gc_pause_seconds",
                "How long each collection of the interpreter's garbage collector stopped the gateway, by generation",
                ("generation",),
                [((str(g),), h) for g, h in enumerate(GC_PAUSES.by_generation)],
            )


# Kafka's state tags on consumer-group-count and classic-group-count.
_KAFKA_CONSUMER_STATE = {s: s.value.lower() for s in GroupState}
_KAFKA_CLASSIC_STATE = {
    ClassicGroupState.EMPTY: "empty",
    ClassicGroupState.PREPARING_REBALANCE: "preparing_rebalance",
    ClassicGroupState.COMPLETING_REBALANCE: "completing_rebalance",
    ClassicGroupState.STABLE: "stable",
    ClassicGroupState.DEAD: "dead",
}
KAFKA = PREFIX + "group_coordinator_"
# Refused conversions, by reason (coordinator/outcome.py ConversionRefused): every series from the start.
REFUSAL_REASONS = ("policy", "protocol_type", "group_max_size", "member_metadata", "assignment_userdata")


class GroupScan:
    """One pass over the managed groups this instance serves, shared by the families a scrape builds."""

    __slots__ = ("classic_state", "consumer_state", "members", "members_of")

    def __init__(self, layer: GroupsView) -> None:
        classic_state = dict.fromkeys(ClassicGroupState, 0)
        consumer_state = dict.fromkeys(GroupState, 0)
        members = dict.fromkeys((("classic", "classic"), ("consumer", "classic"), ("consumer", "consumer")), 0)
        members_of: dict[str, int] = {}
        runtime = layer.runtime
        managed = layer.managed
        for cg in runtime.classic_groups():
            gid = cg.group_id
            if managed(gid):
                classic_state[cg.state] += 1
                n = len(cg.members)
                members["classic", "classic"] += n
                members_of[gid] = n
        for g in runtime.consumer_groups():
            gid = g.group_id
            if not managed(gid):
                continue
            consumer_state[g.state()] += 1
            classic = 0
            for mm in g.members.values():
                if mm.classic_metadata is not None:
                    classic += 1
            n = len(g.members)
            members["consumer", "classic"] += classic
            members["consumer", "consumer"] += n - classic
            members_of[gid] = n
        self.classic_state = classic_state
        self.consumer_state = consumer_state
        self.members = members
        self.members_of = members_of


class GroupsCollector(Collector):
    """The group layer: groups, members, rebalances, conversions, the state log, shards; and Kafka's
    group-coordinator metrics under their own names (docs/operations.md, "Kafka's metric names")."""

    def __init__(self, health: Health, layer: GroupsView) -> None:
        self.health = health
        self.layer = layer

    def collect(self) -> Iterator[Metric]:
        p = PREFIX
        layer = self.layer
        stats = layer.stats
        scan = self.health.group_scan()
        yield gauge(
            p + "groups", "Managed groups by type (classic, consumer) and state", labels=("type", "state"),
            samples=sorted(
                [(("classic", s.value), n) for s, n in scan.classic_state.items()]
                + [(("consumer", s.value), n) for s, n in scan.consumer_state.items()]
            ),
        )
        yield gauge(
            p + "group_members",
            "Members of managed groups by group type and the protocol the member speaks (classic members of a "
            "consumer group are translated)",
            labels=("group_type", "protocol"),
            samples=[((t, pr), n) for (t, pr), n in sorted(scan.members.items())],
        )
        yield counter(
            p + "group_rebalances_total", "Rebalances started: consumer group epoch bumps, classic group generations",
            labels=("type",), samples=[((t,), n) for t, n in sorted(stats.rebalances.items())],
        )
        yield counter(
            p + "group_conversions_total",
            "Groups with members converted online between the classic and the consumer protocol, by direction",
            labels=("from_type", "to_type"),
            samples=[((f, t), n) for (f, t), n in sorted(stats.conversions.items())],
        )
        refused = dict.fromkeys((("classic", "consumer", r) for r in REFUSAL_REASONS), 0)
        refused.update(stats.conversions_refused)
        yield counter(
            p + "group_conversions_refused_total",
            "Conversions of a group with members refused (the joining member got an error), by direction and reason",
            labels=("from_type", "to_type", "reason"),
            samples=[(k, n) for k, n in sorted(refused.items())],
        )
        yield counter(
            p + "group_members_expired_total",
            "Members removed by a timer (session expiry, rebalance or join/sync deadline), by group type",
            labels=("type",), samples=[((t,), n) for t, n in sorted(stats.expired.items())],
        )
        yield counter(
            p + "group_timers_fired_total", "Group coordinator timers fired, by kind",
            labels=("kind",), samples=[((k,), n) for k, n in sorted(stats.timers_fired.items())],
        )
        yield gauge(p + "group_timers", "Group coordinator timers armed now", layer.armed_timers())
        c = layer.counters
        yield counter(
            p + "offset_commits_total",
            "Offset commits of managed groups: accepted (written upstream), rejected (fenced by the group "
            "state), failed (the upstream could not take it)",
            labels=("outcome",),
            samples=[(("accepted",), c["commits"]), (("rejected",), c["commits_fenced"]), (("failed",), c["commits_failed"])],
        )
        yield counter(
            p + "group_layer_events_total",
            "Group layer events: invalid or failed requests, state log failures, clients bypassing the gateway, "
            "members of adopted groups removed upstream, requests refused by authorization",
            labels=("event",), samples=[((name,), c[name]) for name in _EVENTS],
        )
        authorizer = getattr(layer, "authorizer", None)
        if authorizer is not None:
            # Decisions are as old as this (docs/gateway.md, "Authorization of what the gateway answers itself").
            age = authorizer.cache.age_s()
            yield gauge(
                p + "acl_snapshot_age_seconds",
                "Seconds since the cluster's ACLs were last read (-1: never; every request needing authorization is refused)",
                -1 if age is None else round(age, 3),
            )
        runtime = layer.runtime
        totals = runtime.log_totals()
        yield counter(p + "state_log_appends_total", "Records appended to the group state log", totals["entries_appended"])
        yield counter(p + "state_log_appended_bytes_total", "Bytes appended to the group state log", totals["bytes_appended"])
        yield counter(p + "state_log_fsyncs_total", "fsync calls of the group state log", totals["fsyncs"])
        yield counter(p + "state_log_compactions_total", "Compactions of the group state log", totals["compactions"])
        yield gauge(p + "state_log_bytes", "Size of the group state log's segments", totals["file_bytes"])
        shards = runtime.shards
        yield gauge(p + "state_shards", "Shards of the group state (state.topic.num.partitions)", len(shards))
        yield gauge(
            p + "state_shards_unloaded",
            "Shards whose groups are not served now: being re-read after a failed write, or fenced",
            sum(1 for _ in runtime.unserved()),
        )
        # Several instances (instances_group): the shards this one owns; every shard otherwise.
        yield gauge(p + "state_shards_owned", "Shards of the group state this instance owns", sum(1 for s in shards if s.state.owned))
        fleet = getattr(layer, "fleet", None)
        yield gauge(
            p + "instances_group_generation",
            "Generation of the instances group this instance last joined (-1: not joined; 0 without instances_group)",
            int(getattr(fleet, "generation", -1)) if fleet is not None else 0,
        )
        yield from self._kafka(scan, stats, runtime)

    def _kafka(self, scan: GroupScan, stats: GroupStats, runtime: CoordinatorRuntime) -> Iterator[Metric]:
        """Kafka's group-coordinator-metrics, one to one (docs/operations.md has the mapping table)."""
        yield gauge(
            KAFKA + "group_count", "Kafka group-count: managed groups by protocol", labels=("protocol",),
            samples=[(("classic",), sum(scan.classic_state.values())), (("consumer",), sum(scan.consumer_state.values()))],
        )
        yield gauge(
            KAFKA + "consumer_group_count", "Kafka consumer-group-count: consumer groups by state", labels=("state",),
            samples=[((_KAFKA_CONSUMER_STATE[s],), n) for s, n in scan.consumer_state.items()],
        )
        yield gauge(
            KAFKA + "classic_group_count", "Kafka classic-group-count: classic groups by state", labels=("state",),
            samples=[((_KAFKA_CLASSIC_STATE[s],), n) for s, n in scan.classic_state.items()],
        )
        yield counter(
            KAFKA + "consumer_group_rebalances_total",
            "Kafka consumer-group-rebalance-count (its -rate is rate() of this): consumer group epoch bumps",
            stats.rebalances["consumer"],
        )
        yield counter(
            KAFKA + "classic_group_completed_rebalances_total",
            "Kafka classic-group-completed-rebalance-count: classic generations completed",
            stats.rebalances["classic"],
        )
        yield histogram(
            KAFKA + "event_processing_time_seconds",
            "Kafka event-processing-time: one request handled by a shard's group service, its records appended",
            (), [((), stats.event_time)],
        )
        yield histogram(
            KAFKA + "batch_flush_time_seconds",
            "Kafka batch-flush-time: a shard's appended records made durable",
            (), [((), stats.flush_time)],
        )
        yield gauge(
            KAFKA + "event_queue_size",
            "Kafka event-queue-size: group requests handed to the shards and not answered yet",
            sum(len(s.waiting) for s in runtime.shards),
        )


class MembersCollector(Collector):
    """kafka_exporter's member count per group, right for KIP-848 groups (the gateway's own count, live),
    and the lag watch's failures."""

    def __init__(self, health: Health, lag: LagView | None) -> None:
        self.health = health
        self.lag = lag

    def collect(self) -> Iterator[Metric]:
        members = GaugeMetricFamily(
            "kafka_consumergroup_members", "Members of a managed consumer group (classic or consumer protocol)",
            labels=["consumergroup"],
        )
        for gid, n in sorted(self.health.group_scan().members_of.items()):
            members.add_metric([gid], n)
        yield members
        yield counter(
            PREFIX + "lag_refresh_failures_total", "Consumer lag refreshes that failed (the previous values stay)",
            self.lag.failures if self.lag is not None else 0,
        )


_EVENTS = (
    "invalid_requests", "failed_requests", "state_log_failures", "bypass_suspected", "bypass_detected",
    "upstream_members_removed", "commits_unknown_group", "fetches_unknown_member",
    "groups_unloaded", "unloaded_requests", "authorization_refusals", "timers_postponed", "stalled_answers",
    # KIP-1263 offload: target computations handed to worker threads, and what became of them
    "assignments_offloaded", "assignments_installed", "assignments_discarded", "assignments_failed",
)


def _requests(m: GatewayMetrics) -> Iterator[tuple[Labels, float]]:
    for outcome, table in (("forwarded", m.forwarded), ("local", m.local)):
        for key, n in enumerate(table):
            if n:
                yield (api_name(key), outcome), n
    for key in sorted(m.errors):
        yield ("unknown" if key < 0 else api_name(key), "error"), m.errors[key]
