"""`groupgate rehearse live --events kafka://BOOTSTRAP/TOPIC`: the report's key figures, kept current while
a rolling upgrade runs (the gateway producing its rebalance events to the topic, docs/gateway.md).

A Structured Streaming query reads the topic with Spark's Kafka connector. The metrics are not
incremental: a partition's unavailability, a member's rebalances and a group's time to stable depend on
the order of all of the group's events, and an event may still change an ownership interval opened long
before (no watermark can close one). So each micro-batch (``foreachBatch``) appends its lines to the
query's own Parquet store under OUT/_events (one directory per batch id, overwritten when Spark replays a
batch after a restart, so a replay adds nothing twice) and the batch pipeline (rehearsal/pipeline.py)
recomputes the summary from everything stored: the live figures are, at every trigger, exactly what
``groupgate rehearse report`` gives for the events read so far.
"""

from __future__ import annotations

import functools
import html
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rehearsal.events import EventLogError

LIVE_JSON = "live.json"
LIVE_HTML = "live.html"


def _atomic_write(path: Path, text: str) -> None:
    """Readers (a browser, a test, a dashboard) never see a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _ratio(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.3f}%"


def headline(summary: dict[str, Any]) -> str:
    """One line of key figures: events, groups, members, then per client mix the unavailable share,
    rebalances per member (p50) and time to stable (p50)."""
    parts = [
        f"{summary['events']} events",
        f"{summary['groups']} groups",
        f"{summary['members']} members",
        f"{summary['double_ownership_violations']} double ownership",
    ]
    for mix, m in summary["client_mixes"].items():
        tts = m["time_to_stable_ms"]["p50"]
        parts.append(
            f"{mix}: unavailable {_ratio(m['unavailability_ratio'])}, "
            f"rebalances/member p50 {m['rebalances_per_member']['p50']}, "
            f"time to stable p50 {'-' if tts is None else f'{tts:.0f} ms'}, never stable {m['groups_never_stable']}"
        )
    return "; ".join(parts)


def render_html(live: dict[str, Any], refresh_s: int) -> str:
    """A small page that reloads itself every refresh_s seconds (no scripts)."""
    s = live["summary"]
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(v))}</td>"
            for v in (
                mix,
                m["groups"],
                m["members"],
                m["partitions"],
                _ratio(m["unavailability_ratio"]),
                m["unavailability_ms"]["p99"],
                m["rebalances_per_member"]["p50"],
                m["time_to_stable_ms"]["p50"],
                m["groups_never_stable"],
                m["double_ownership_violations"],
            )
        )
        + "</tr>"
        for mix, m in s["client_mixes"].items()
    )
    runs = "".join(
        f"<tr><td>{html.escape(run)}</td><td>{r['groups']}</td><td>{r['time_to_stable_ms']}</td></tr>"
        for run, r in s["runs"].items()
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="{refresh_s}">
<title>groupgate rehearsal: live</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:.2em .8em;text-align:right}}</style></head>
<body><h1>Rolling upgrade, live</h1>
<p>{html.escape(live['source'])}: batch {live['batch_id']}, {s['events']} events, {s['groups']} groups,
{s['members']} members, {s['partitions']} partitions, updated {html.escape(live['updated'])}</p>
<table><tr><th>client mix</th><th>groups</th><th>members</th><th>partitions</th><th>unavailable share</th>
<th>partition unavailable p99 (ms)</th><th>rebalances per member p50</th><th>time to stable p50 (ms)</th>
<th>never stable</th><th>double ownership</th></tr>{rows}</table>
<h2>Runs</h2><table><tr><th>run</th><th>groups</th><th>time to stable (ms)</th></tr>{runs}</table>
</body></html>
"""


def live_main(
    source: str,
    out: str,
    master: str | None = None,
    *,
    trigger_s: float = 5.0,
    until_idle_s: float | None = None,
    max_s: float | None = None,
    starting_offsets: str = "earliest",
    stop: threading.Event | None = None,
    echo: Callable[[str], None] = functools.partial(print, flush=True),
) -> int:
    """Follow kafka://BOOTSTRAP/TOPIC, writing OUT/live.json and OUT/live.html after every micro-batch.

    Ends after max_s seconds, or until_idle_s seconds after the last new event (counted from the start
    while none has come), or when stop is set; 0 then, 2 for a bad source or bad event lines."""
    try:
        from rehearsal import pipeline
    except ImportError as e:  # pragma: no cover - depends on the installation
        echo(f"error: the live view needs PySpark (pip install 'groupgate[rehearsal]'; Java 17): {e}")
        return 2
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    try:
        servers, topic = pipeline.parse_kafka_uri(source)
    except ValueError as e:
        echo(f"error: {e}")
        return 2
    started = time.monotonic()
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    store = out_dir / "_events"
    owned_session = SparkSession.getActiveSession() is None
    try:
        spark = pipeline.spark_session(master, kafka=True)
    except pipeline.spark_kafka.ConnectorError as e:
        echo(f"error: {e}")
        return 2
    last_new = [time.monotonic()]
    failure: list[str] = []

    def on_batch(batch: Any, batch_id: int) -> None:
        # Overwrite: a batch Spark replays after a restart (same id, same offsets) replaces itself.
        batch.select("value").write.mode("overwrite").parquet(str(store / f"batch={batch_id}"))
        lines = spark.read.parquet(str(store)).select("value", F.lit(source).alias("source"))
        try:
            events = pipeline.parse_lines(lines)
        except EventLogError as e:
            failure.append(str(e))
            raise
        metrics = pipeline.compute(events)
        try:
            summary = pipeline.summarize(metrics)
        finally:
            for df in (*metrics.tables().values(), metrics.events):
                df.unpersist()
            if owned_session:
                spark.catalog.clearCache()
        now = time.time()
        live = {
            "source": source,
            "batch_id": batch_id,
            "updated_ms": int(now * 1000),
            "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            "summary": summary,
        }
        _atomic_write(out_dir / LIVE_JSON, json.dumps(live, indent=2, sort_keys=True) + "\n")
        _atomic_write(out_dir / LIVE_HTML, render_html(live, max(1, round(trigger_s))))
        last_new[0] = time.monotonic()
        echo(f"[{time.monotonic() - started:6.1f}s] batch {batch_id}: {headline(summary)}")

    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", starting_offsets)
        # Records deleted by retention before they were read are a gap in the view, not a reason to stop.
        .option("failOnDataLoss", "false")
        .load()
        .select(F.col("value").cast("string").alias("value"))
    )
    echo(f"following {source} with Spark ({master or 'local[*]'}), a trigger every {trigger_s:g}s; {out_dir}/{LIVE_JSON}")
    query = (
        stream.writeStream.foreachBatch(on_batch)
        .trigger(processingTime=f"{max(trigger_s, 0.1)} seconds")
        .option("checkpointLocation", str(out_dir / "_checkpoint"))
        .start()
    )
    code = 0
    try:
        while query.isActive:
            try:
                query.awaitTermination(min(1.0, trigger_s))
            except Exception as e:  # the query failed (bad lines, the connector): its error is the answer
                echo(f"error: {failure[0] if failure else e}")
                code = 2
                break
            now = time.monotonic()
            if stop is not None and stop.is_set():
                break
            if max_s is not None and now - started >= max_s:
                echo(f"stopping: --max-s {max_s:g} reached")
                break
            if until_idle_s is not None and now - last_new[0] >= until_idle_s:
                echo(f"stopping: no new events for {until_idle_s:g}s")
                break
    finally:
        query.stop()
        if owned_session:
            spark.stop()
    return code
