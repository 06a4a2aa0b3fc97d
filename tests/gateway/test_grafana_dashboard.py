"""deploy/grafana/groupgate.json references only metrics the gateway exports, with labels they carry.

The exported names come from the registry of a running group layer (gateway/ops/health.py): every family
its collectors yield, counters with their ``_total`` and histograms with ``_bucket``/``_sum``/``_count``.
Every PromQL expression of the dashboard (panel targets and template queries) is stripped of strings,
label matchers, ranges and ``by``/``without`` clauses; what is left that is not a PromQL function,
keyword or number must be an exported sample name, and the labels matched or grouped on must be labels
of the families the expression reads (or the scrape's own: instance, job; ``le`` of a histogram).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gateway.ops.health import Health

from ._groups_support import StubGateway
from .test_groups_layer import started

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "groupgate.json"

PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile", "count_values",
    "group", "rate", "irate", "increase", "delta", "idelta", "deriv", "histogram_quantile", "time", "vector",
    "scalar", "abs", "clamp_min", "clamp_max", "label_values", "label_replace", "sort", "sort_desc",
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool",
    "max_over_time", "min_over_time", "avg_over_time", "absent", "changes", "resets",
}
SCRAPE_LABELS = {"instance", "job"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring)\s*\(([^)]*)\)")
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
_IDENT = re.compile(r"(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)")


def exported(health: Health) -> dict[str, set[str]]:
    """Sample name -> its labels, for every family the registry exports."""
    out: dict[str, set[str]] = {}
    for family in health.families():
        labels: set[str] = set()
        for s in family.samples:
            labels |= set(s.labels)
        labels |= set(getattr(family, "_labelnames", ()))
        if family.type == "counter":
            out[family.name + "_total"] = labels
        elif family.type == "histogram":
            out[family.name + "_bucket"] = labels | {"le"}
            out[family.name + "_sum"] = labels
            out[family.name + "_count"] = labels
        else:
            out[family.name] = labels
    return out


def expressions(dashboard: dict[str, Any]) -> Iterator[str]:
    for panel in dashboard["panels"]:
        for target in panel.get("targets", ()):
            yield target["expr"]
    for var in dashboard["templating"]["list"]:
        if var.get("type") == "query":
            query = var["query"]
            yield query["query"] if isinstance(query, dict) else query


def problems(expr: str, names: dict[str, set[str]]) -> list[str]:
    """What ``expr`` references that the gateway does not export."""
    out: list[str] = []
    text = _STRING.sub('""', expr)
    text = _RANGE.sub("", text)
    read: list[str] = []
    for m in _SELECTOR.finditer(text):
        read.append(m.group(1))
        for label in _MATCHER_LABEL.findall(m.group(2)):
            if m.group(1) in names and label not in names[m.group(1)] | SCRAPE_LABELS:
                out.append(f"{m.group(1)} has no label {label!r}")
    text = _SELECTOR.sub(lambda m: m.group(1), text)
    grouped: list[str] = []
    for m in _GROUPING.finditer(text):
        grouped += [x.strip() for x in m.group(2).split(",") if x.strip()]
    text = _GROUPING.sub(" ", text)
    if text.lstrip().startswith("label_values("):
        inner = text.strip()[len("label_values("):-1]
        metric, _, label = inner.partition(",")
        text, grouped = metric, [*grouped, label.strip()]
    for ident in _IDENT.findall(text):
        if ident in PROMQL_WORDS or ident.startswith("__"):
            continue
        read.append(ident)
        if ident not in names:
            out.append(f"{ident} is not exported")
    if not read:
        out.append("reads no metric")
    known = set().union(*(names.get(n, set()) for n in read)) | SCRAPE_LABELS
    out += [f"no family it reads has the label {label!r}" for label in grouped if label not in known]
    return out


async def test_the_dashboard_references_only_exported_metrics() -> None:
    layer = await started()
    try:
        names = exported(Health(StubGateway(), layer))  # type: ignore[arg-type]
    finally:
        await layer.stop()
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = list(expressions(dashboard))
    assert len(exprs) >= 15
    found = {e: p for e in exprs if (p := problems(e, names))}
    assert not found, found
    # What the dashboard must show (issue of operators: lag, members per protocol, rebalances, appends).
    text = "\n".join(exprs)
    for needed in (
        "kafka_consumergroup_lag", "groupgate_group_members", "consumer_group_rebalances_total",
        "batch_flush_time_seconds_bucket",
    ):
        assert needed in text, needed


async def test_the_check_catches_a_name_or_label_the_gateway_does_not_export() -> None:
    layer = await started()
    try:
        names = exported(Health(StubGateway(), layer))  # type: ignore[arg-type]
    finally:
        await layer.stop()
    assert problems('sum by (consumergroup) (kafka_consumergroup_lag{topic="t"})', names) == []
    assert problems("rate(groupgate_group_coordinator_rebalances_total[5m])", names) == [
        "groupgate_group_coordinator_rebalances_total is not exported"
    ]
    assert problems('kafka_consumergroup_lag{group="g"}', names) == ["kafka_consumergroup_lag has no label 'group'"]
    assert problems("sum by (protocol) (groupgate_groups)", names) == ["no family it reads has the label 'protocol'"]
    assert problems("groupgate_group_coordinator_event_queue_size", names) == []
    assert problems("label_values(kafka_consumergroup_members, topic)", names) == [
        "no family it reads has the label 'topic'"
    ]
