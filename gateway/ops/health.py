"""Liveness, readiness and the Prometheus text exposition of one gateway process (``GET /metrics``,
``/healthz``, ``/readyz`` on the admin listener, gateway/ops/admin_http.py).

It reads the gateway and the group layer through read-only views (``GatewayView``, ``GroupsView``):
the request paths only bump the counters of gateway/metrics.py, and everything here is computed when a
scrape or a probe asks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from coordinator.model import GroupState
from gateway.metrics import PREFIX, GatewayMetrics, GroupStats, Histogram, Labels, api_name
from translate.classic_group import ClassicGroupState

if TYPE_CHECKING:
    import collections

    from gateway.config.settings import GatewayConfig
    from gateway.groups.runtime import CoordinatorRuntime
    from gateway.net.limits import ConnectionLimits
    from gateway.net.upstream import BrokerDirectory

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# --- exposition ---------------------------------------------------------------------------------------


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def _labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


class Exposition:
    """Builds the text of one scrape: each family's HELP and TYPE, then its samples."""

    def __init__(self) -> None:
        self._lines: list[str] = []

    def _head(self, name: str, kind: str, help_text: str) -> str:
        full = PREFIX + name
        self._lines.append(f"# HELP {full} {help_text.replace(chr(92), chr(92) * 2).replace(chr(10), ' ')}")
        self._lines.append(f"# TYPE {full} {kind}")
        return full

    def family(self, name: str, kind: str, help_text: str, samples: Iterable[tuple[Labels, float]]) -> None:
        full = self._head(name, kind, help_text)
        for labels, value in samples:
            self._lines.append(f"{full}{_labels(labels)} {_number(value)}")

    def gauge(self, name: str, help_text: str, value: float) -> None:
        self.family(name, "gauge", help_text, [((), value)])

    def counter(self, name: str, help_text: str, value: float) -> None:
        self.family(name, "counter", help_text, [((), value)])

    def histogram(self, name: str, help_text: str, series: Iterable[tuple[Labels, Histogram]]) -> None:
        full = self._head(name, "histogram", help_text)
        for labels, h in series:
            cumulative = 0
            for bound, n in zip((*h.bounds, math.inf), h.counts, strict=True):
                cumulative += n
                le = (*labels, ("le", _number(bound)))
                self._lines.append(f"{full}_bucket{_labels(le)} {cumulative}")
            self._lines.append(f"{full}_sum{_labels(labels)} {_number(h.sum)}")
            self._lines.append(f"{full}_count{_labels(labels)} {h.count}")

    def text(self) -> str:
        return "\n".join(self._lines) + "\n"


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


class Health:
    """Liveness, readiness and the metrics of one gateway process (and its group layer, if any), read
    through the narrow views above: nothing here changes the gateway or the groups."""

    def __init__(self, gw: GatewayView, layer: GroupsView | None = None) -> None:
        self.gw = gw
        self.layer = layer
        self.started_at = time.time()

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

    def render(self) -> str:
        out = Exposition()
        self._gateway(out)
        if self.layer is not None:
            self._groups(out, self.layer)
        return out.text()

    def _gateway(self, out: Exposition) -> None:
        gw, m = self.gw, self.gw.metrics
        out.gauge("ready", "1 when /readyz answers 200 (serving), else 0", 0 if self.not_ready() else 1)
        out.gauge("start_time_seconds", "Process start time, seconds since the epoch", self.started_at)
        out.gauge("client_connections", "Client connections open now", len(gw.connections))
        out.counter("client_connections_total", "Client connections accepted", m.connections_total)
        limits = gw.limits
        out.gauge(
            "client_connections_max",
            "Client connections allowed at once: max.connections, lowered to what RLIMIT_NOFILE serves",
            limits.max_connections,
        )
        out.counter(
            "client_connections_refused_total",
            "Client connections closed at once because max.connections was reached",
            m.connections_refused,
        )
        out.counter(
            "client_accept_errors_total",
            "Accepts that failed for lack of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM)",
            m.accept_errors,
        )
        out.family(
            "client_connections_closed_total",
            "counter",
            "Client connections closed by the gateway's timeouts: idle (connections.max.idle.ms), "
            "partial_request (a request frame incomplete for partial_request_timeout_ms)",
            [
                ((("reason", "idle"),), m.connections_closed_idle),
                ((("reason", "partial_request"),), m.connections_closed_partial),
            ],
        )
        out.gauge(
            "queued_request_bytes",
            "Bytes reserved by request frames being read (declared sizes), all client connections together",
            limits.reserved,
        )
        out.gauge(
            "queued_request_bytes_max",
            "queued.max.request.bytes (-1: unbounded)",
            -1 if limits.budget is None else limits.budget,
        )
        out.gauge("client_connections_muted", "Client connections not read while the budget is full", len(limits.muted))
        out.counter(
            "request_memory_exhausted_total",
            "Times the request memory budget filled and connections without a request in progress were muted",
            m.request_memory_exhausted,
        )
        out.counter("client_received_bytes_total", "Bytes received from clients", m.bytes_received)
        out.counter("client_sent_bytes_total", "Bytes sent to clients", m.bytes_sent)
        if gw.tls_handshake_failures is not None:
            out.counter(
                "client_tls_handshake_failures_total",
                "Client connections closed because their TLS handshake failed or timed out",
                gw.tls_handshake_failures,
            )
        out.family(
            "requests_total",
            "counter",
            "Client requests by api and outcome: forwarded upstream, answered locally, or error",
            _requests(m),
        )
        out.gauge("upstream_brokers", "Upstream brokers known from metadata", len(gw.directory.brokers))
        out.gauge(
            "upstream_reachable",
            "0 while every recent attempt to reach the upstream failed, else 1",
            0 if gw.directory.unreachable_for() is not None else 1,
        )
        out.counter(
            "upstream_connect_failures_total",
            "Failed attempts to open a client's upstream connection",
            m.upstream_connect_failures,
        )
        out.counter(
            "upstream_unavailable_answers_total",
            "Client requests for the cluster answered with a retriable error because no upstream link could be opened",
            m.upstream_unavailable_answers,
        )
        out.counter(
            "upstream_metadata_failures_total",
            "Upstream metadata refreshes that reached no broker",
            gw.directory.refresh_failures,
        )
        out.histogram(
            "local_request_duration_seconds",
            "Time from a locally answered (group) request's arrival to its response release",
            [((("api", api_name(k)),), h) for k, h in sorted(m.local_latency.items())]
        )

    def _groups(self, out: Exposition, layer: GroupsView) -> None:
        stats = layer.stats
        # Every series from the first scrape on, at 0 until something counts.
        groups = dict.fromkeys(_GROUP_SERIES, 0)
        members = dict.fromkeys((("classic", "classic"), ("consumer", "classic"), ("consumer", "consumer")), 0)
        runtime = layer.runtime
        for cg in runtime.classic_groups():
            if layer.managed(cg.group_id):
                groups["classic", cg.state.value] += 1
                members["classic", "classic"] += len(cg.members)
        for g in runtime.consumer_groups():
            if not layer.managed(g.group_id):
                continue
            groups["consumer", g.state().value] += 1
            classic = sum(1 for mm in g.members.values() if mm.classic_metadata is not None)
            members["consumer", "classic"] += classic
            members["consumer", "consumer"] += len(g.members) - classic
        out.family(
            "groups",
            "gauge",
            "Managed groups by type (classic, consumer) and state",
            [((("type", t), ("state", s)), n) for (t, s), n in sorted(groups.items())]
        )
        out.family(
            "group_members",
            "gauge",
            "Members of managed groups by group type and the protocol the member speaks",
            [((("group_type", t), ("protocol", p)), n) for (t, p), n in sorted(members.items())]
        )
        out.family(
            "group_rebalances_total",
            "counter",
            "Rebalances started: consumer group epoch bumps, classic group generations",
            [((("type", t),), n) for t, n in sorted(stats.rebalances.items())]
        )
        out.family(
            "group_members_expired_total",
            "counter",
            "Members removed by a timer (session expiry, rebalance or join/sync deadline), by group type",
            [((("type", t),), n) for t, n in sorted(stats.expired.items())]
        )
        out.family(
            "group_timers_fired_total",
            "counter",
            "Group coordinator timers fired, by kind",
            [((("kind", k),), n) for k, n in sorted(stats.timers_fired.items())]
        )
        out.gauge("group_timers", "Group coordinator timers armed now", layer.armed_timers())
        c = layer.counters
        out.family(
            "offset_commits_total",
            "counter",
            "Offset commits of managed groups: accepted (written upstream), rejected (fenced by the group "
            "state), failed (the upstream could not take it)",
            [
                ((("outcome", "accepted"),), c["commits"]),
                ((("outcome", "rejected"),), c["commits_fenced"]),
                ((("outcome", "failed"),), c["commits_failed"]),
            ],
        )
        out.family(
            "group_layer_events_total",
            "counter",
            "Group layer events: invalid or failed requests, state log failures, clients bypassing the gateway, "
            "members of adopted groups removed upstream, requests refused by authorization",
            _events(c),
        )
        authorizer = getattr(layer, "authorizer", None)
        if authorizer is not None:
            # Decisions are as old as this (docs/gateway.md, "Authorization of what the gateway answers itself").
            age = authorizer.cache.age_s()
            out.gauge(
                "acl_snapshot_age_seconds",
                "Seconds since the cluster's ACLs were last read (-1: never; every request needing authorization is refused)",
                -1 if age is None else round(age, 3),
            )
        totals = layer.runtime.log_totals()
        out.counter("state_log_appends_total", "Records appended to the group state log", totals["entries_appended"])
        out.counter("state_log_appended_bytes_total", "Bytes appended to the group state log", totals["bytes_appended"])
        out.counter("state_log_fsyncs_total", "fsync calls of the group state log", totals["fsyncs"])
        out.counter("state_log_compactions_total", "Compactions of the group state log", totals["compactions"])
        out.gauge("state_log_bytes", "Size of the group state log's segments", totals["file_bytes"])
        shards = layer.runtime.shards
        out.gauge("state_shards", "Shards of the group state (state.topic.num.partitions)", len(shards))
        out.gauge(
            "state_shards_unloaded",
            "Shards whose groups are not served now: being re-read after a failed write, or fenced",
            sum(1 for _ in layer.runtime.unserved()),
        )
        # Several instances (instances_group): the shards this one owns; every shard otherwise.
        out.gauge("state_shards_owned", "Shards of the group state this instance owns", sum(1 for s in shards if s.state.owned))


_GROUP_SERIES = [("classic", s.value) for s in ClassicGroupState] + [("consumer", s.value) for s in GroupState]
_EVENTS = (
    "invalid_requests", "failed_requests", "state_log_failures", "bypass_suspected", "bypass_detected",
    "upstream_members_removed", "commits_unknown_group", "fetches_unknown_member",
    "groups_unloaded", "unloaded_requests", "authorization_refusals", "timers_postponed", "stalled_answers",
    # KIP-1263 offload: target computations handed to worker threads, and what became of them
    "assignments_offloaded", "assignments_installed", "assignments_discarded", "assignments_failed",
)


def _events(counters: Any) -> Iterator[tuple[Labels, float]]:
    for name in _EVENTS:
        yield (("event", name),), counters[name]


def _requests(m: GatewayMetrics) -> Iterator[tuple[Labels, float]]:
    for outcome, table in (("forwarded", m.forwarded), ("local", m.local)):
        for key, n in enumerate(table):
            if n:
                yield (("api", api_name(key)), ("outcome", outcome)), n
    for key in sorted(m.errors):
        yield (("api", "unknown" if key < 0 else api_name(key)), ("outcome", "error")), m.errors[key]

