"""The metric families of the admin endpoint's scrape (gateway/ops/health.py) as prometheus_client builds
them: small builders for gauges, counters and the gateway's histograms, and the consumer lag families of
one lag snapshot (rendered apart from the live scrape: gateway/groups/lag.py takes the snapshots)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.metrics import PREFIX, Histogram

if TYPE_CHECKING:
    from gateway.groups.lag import LagSnapshot

Labels = tuple[str, ...]


def gauge(name: str, help_text: str, value: float | None = None, labels: Iterable[str] = (),
          samples: Iterable[tuple[Labels, float]] = ()) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, help_text, value=value, labels=None if value is not None else list(labels))
    for ls, v in samples:
        g.add_metric(list(ls), v)
    return g


def counter(name: str, help_text: str, value: float | None = None, labels: Iterable[str] = (),
            samples: Iterable[tuple[Labels, float]] = ()) -> CounterMetricFamily:
    c = CounterMetricFamily(name, help_text, value=value, labels=None if value is not None else list(labels))
    for ls, v in samples:
        c.add_metric(list(ls), v)
    return c


def histogram(name: str, help_text: str, labels: Iterable[str], series: Iterable[tuple[Labels, Histogram]]) -> HistogramMetricFamily:
    f = HistogramMetricFamily(name, help_text, labels=list(labels))
    for ls, h in series:
        cumulative = 0
        buckets = []
        for bound, n in zip((*h.bounds, math.inf), h.counts, strict=True):
            cumulative += n
            buckets.append(("+Inf" if math.isinf(bound) else repr(float(bound)), cumulative))
        f.add_metric(list(ls), buckets, h.sum)
    return f


def render_lag(snapshot: LagSnapshot | None) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LagCollector(snapshot))
    return generate_latest(registry)


class LagCollector(Collector):
    """kafka_exporter's lag and offset families (names and labels) of one lag snapshot
    (gateway/groups/lag.py), and when it was taken."""

    def __init__(self, snapshot: LagSnapshot | None) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset", "Committed offset of a managed group on a partition",
            labels=["consumergroup", "topic", "partition"],
        )
        current_sum = GaugeMetricFamily(
            "kafka_consumergroup_current_offset_sum", "Committed offsets of a managed group, summed per topic",
            labels=["consumergroup", "topic"],
        )
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag", "Log end offset minus committed offset of a managed group on a partition",
            labels=["consumergroup", "topic", "partition"],
        )
        lag_sum = GaugeMetricFamily(
            "kafka_consumergroup_lag_sum", "Lag of a managed group, summed per topic", labels=["consumergroup", "topic"],
        )
        snapshot = self.snapshot
        if snapshot is not None:
            for gid, rows in snapshot.groups.items():
                offsets: dict[str, int] = {}
                lags: dict[str, int] = {}
                for r in rows:
                    part = str(r.partition)
                    current.add_metric([gid, r.topic, part], r.committed)
                    lag.add_metric([gid, r.topic, part], r.lag)
                    offsets[r.topic] = offsets.get(r.topic, 0) + r.committed
                    lags[r.topic] = lags.get(r.topic, 0) + r.lag
                for topic, n in offsets.items():
                    current_sum.add_metric([gid, topic], n)
                    lag_sum.add_metric([gid, topic], lags[topic])
        yield current
        yield current_sum
        yield lag
        yield lag_sum
        yield gauge(
            PREFIX + "lag_snapshot_timestamp_seconds",
            "When the consumer lag above was computed, seconds since the epoch (0: not yet)",
            snapshot.taken_at if snapshot is not None else 0,
        )
        yield gauge(
            PREFIX + "lag_refresh_duration_seconds", "How long the refresh of the consumer lag above took",
            snapshot.took_s if snapshot is not None else 0,
        )
