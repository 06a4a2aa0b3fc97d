"""The gateway's counters, bumped on the request paths; gateway/ops/health.py's collectors read them, with
the gauges they compute at scrape time, into the prometheus_client registry that ``GET /metrics`` serves.

The request paths only increment: a plain int attribute or ``dict[int, int]`` keyed by api key, no
locks (one event loop), no label strings. Names, labels and escaping are produced when a scrape renders
them.
"""

from __future__ import annotations

import bisect
import gc
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from coordinator.connect.records import ConnectRecord, ConnectRecordType
from coordinator.outcome import ConversionRefused, GroupConverted
from coordinator.records import Record as ConsumerRecord
from coordinator.records import RecordType
from gateway.wire import codec
from translate.group_records import GroupMetadataRecord

PREFIX = "groupgate_"

# A group request's arrival to its response release: from a heartbeat answered at once to a JoinGroup
# parked for a whole rebalance (up to the rebalance timeout, minutes).
LATENCY_BUCKETS_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0
)
# One request handled by a shard's group service (Kafka's event-processing-time): microseconds to a
# large group's assignment.
EVENT_BUCKETS_S = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
# One write of a shard's appended records made durable (Kafka's batch-flush-time): an fsync of a local
# log, or a transactional commit on the state topic.
FLUSH_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)

# One collection of the cyclic garbage collector, during which nothing else runs: a young generation's in
# tens of microseconds, a full one of a large heap in tens of milliseconds.
GC_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)

Labels = tuple[tuple[str, str], ...]
API_SLOTS = max(codec.REQUESTS) + 1


def api_name(api_key: int) -> str:
    cls = codec.REQUESTS.get(api_key)
    name = getattr(cls, "__name__", "")
    return name.removesuffix("Request") if name.endswith("Request") else f"api_{api_key}"


class Histogram:
    """Observations in fixed buckets (upper bounds, seconds); cumulative counts only when rendered."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS_S) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf only)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1


class GatewayMetrics:
    """The passthrough's counters; one per Gateway. Connections cache the dicts they bump."""

    __slots__ = (
        "accept_errors",
        "bytes_received",
        "bytes_sent",
        "connections_closed_idle",
        "connections_closed_partial",
        "connections_refused",
        "connections_total",
        "errors",
        "forwarded",
        "local",
        "local_latency",
        "request_memory_exhausted",
        "upstream_connect_failures",
        "upstream_links",
        "upstream_unavailable_answers",
    )

    def __init__(self) -> None:
        self.connections_total = 0
        # gateway/net/limits.py: refused over max.connections, accepts failed for lack of descriptors,
        # closed idle / with a request frame incomplete too long, times the request memory budget filled.
        self.connections_refused = 0
        self.accept_errors = 0
        self.upstream_links = 0  # clients' upstream links open now (each holds a descriptor)
        self.connections_closed_idle = 0
        self.connections_closed_partial = 0
        self.request_memory_exhausted = 0
        self.bytes_received = 0  # from clients
        self.bytes_sent = 0  # to clients
        # Requests by api key: lists indexed by the key (an api key reaches them only once it is known to
        # the codec, so it is in range), cheaper to bump than a dict. errors: by api key, -1 for a frame
        # whose api key the gateway cannot read or does not know.
        self.forwarded = [0] * API_SLOTS
        self.local = [0] * API_SLOTS
        self.errors: defaultdict[int, int] = defaultdict(int)
        self.upstream_connect_failures = 0
        # requests for the cluster answered with a retriable error because no upstream link could be had
        self.upstream_unavailable_answers = 0
        # api key -> arrival of a locally answered request to its response (seconds)
        self.local_latency: dict[int, Histogram] = {}

    def latency(self, api_key: int) -> Histogram:
        h = self.local_latency.get(api_key)
        if h is None:
            h = self.local_latency[api_key] = Histogram()
        return h


class GroupStats:
    """What the group layer counts from its results: rebalances, members expired by timers."""

    __slots__ = (
        "_classic_generation", "_connect_epoch", "_consumer_epoch", "conversions", "conversions_refused", "event_time", "expired",
        "flush_time", "rebalances", "timers_fired",
    )

    def __init__(self) -> None:
        self.rebalances = {"classic": 0, "consumer": 0, "connect": 0}
        # Online conversions of groups with members, by (from type, to type); refused ones by (from, to, reason).
        self.conversions = {("classic", "consumer"): 0, ("consumer", "classic"): 0}
        self.conversions_refused: defaultdict[tuple[str, str, str], int] = defaultdict(int)
        self.event_time = Histogram(EVENT_BUCKETS_S)  # a request through a shard's group service
        self.flush_time = Histogram(FLUSH_BUCKETS_S)  # a shard's appended records made durable
        self.expired = {"classic": 0, "consumer": 0, "connect": 0}  # members removed by a timer, by group type
        self.timers_fired: defaultdict[str, int] = defaultdict(int)  # timer kind -> fired
        self._classic_generation: dict[str, int] = {}
        self._consumer_epoch: dict[str, int] = {}
        self._connect_epoch: dict[str, int] = {}

    def records(self, records: Iterable[Any]) -> None:
        """Count rebalances in a result's records: a new group epoch, a new classic generation."""
        for r in records:
            if isinstance(r, ConnectRecord):
                if r.type is not ConnectRecordType.GROUP_METADATA:
                    continue
                if r.value is None:
                    self._connect_epoch.pop(r.group_id, None)
                elif self._connect_epoch.get(r.group_id) != r.value.epoch:  # type: ignore[union-attr]
                    self._connect_epoch[r.group_id] = r.value.epoch  # type: ignore[union-attr]
                    self.rebalances["connect"] += 1
            elif isinstance(r, ConsumerRecord):
                if r.type is not RecordType.GROUP_METADATA:
                    continue
                if r.value is None:
                    self._consumer_epoch.pop(r.group_id, None)
                elif self._consumer_epoch.get(r.group_id) != r.value.epoch:  # type: ignore[union-attr]
                    self._consumer_epoch[r.group_id] = r.value.epoch  # type: ignore[union-attr]
                    self.rebalances["consumer"] += 1
            elif isinstance(r, GroupMetadataRecord):
                if r.value is None:
                    self._classic_generation.pop(r.group_id, None)
                elif r.value.generation > 0 and self._classic_generation.get(r.group_id) != r.value.generation:
                    self._classic_generation[r.group_id] = r.value.generation
                    self.rebalances["classic"] += 1

    def changes(self, changes: Iterable[Any]) -> None:
        """Count conversions and refused conversions in a result's changes."""
        for c in changes:
            if isinstance(c, GroupConverted):
                key = (c.from_type, c.to_type)
                self.conversions[key] = self.conversions.get(key, 0) + 1
            elif isinstance(c, ConversionRefused):
                self.conversions_refused[c.from_type, c.to_type, c.reason] += 1


class GcPauses:
    """How long each collection of the interpreter's garbage collector stopped the process, by generation
    (``gc.callbacks``). The serving process installs one (gateway/ops/cli.py); the scrape reads it."""

    def __init__(self) -> None:
        self.by_generation = [Histogram(GC_BUCKETS_S) for _ in range(3)]
        self._began = 0.0
        self.installed = False

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.by_generation[info["generation"]].observe(time.perf_counter() - self._began)

    def install(self) -> None:
        if not self.installed:
            gc.callbacks.append(self._callback)
            self.installed = True

    def uninstall(self) -> None:
        if self.installed:
            gc.callbacks.remove(self._callback)
            self.installed = False


# The process's one recorder: collections are the interpreter's, not a gateway's.
GC_PAUSES = GcPauses()
