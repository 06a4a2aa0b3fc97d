"""`groupgate rehearse live --events kafka://BOOTSTRAP/TOPIC`: the report's key figures, kept current while
a rolling upgrade runs (the gateway producing its rebalance events to the topic, docs/gateway.md).

A Structured Streaming query reads the topic with Spark's Kafka connector. The metrics are not
incremental: a partition's unavailability, a member's rebalances and a group's time to stable depend on
the order of all of the group's events, and an event may still change an ownership interval opened long
before (no watermark can close one). So each micro-batch (``foreachBatch``) only appends its lines to the
query's own Parquet store under OUT/_events (one directory per batch id, overwritten when Spark replays a
batch after a restart, so a replay adds nothing twice), and the driver's loop recomputes the summary with
the batch pipeline (rehearsal/pipeline.py) from everything stored whenever a batch was added: the live
figures are exactly what ``groupgate rehearse report`` gives for the events read up to that batch. The
recomputation runs outside Spark's stream thread, whose small default stack the pipeline's deep plans
overflow, and a slow recomputation delays the figures, not the reading of the topic.
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
    from pyspark import SparkContext
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
    # A session of the embedding process (possibly started on another thread: the active session is
    # per thread) is left running.
    owned_session = SparkSession.getActiveSession() is None and SparkContext._active_spark_context is None
    try:
        spark = pipeline.spark_session(master, kafka=True)
    except pipeline.spark_kafka.ConnectorError as e:
        echo(f"error: {e}")
        return 2
    last_new = time.monotonic()
    stored: list[int] = []  # batch ids the stream has stored, in order (appended by Spark's stream thread)
    shown = -1

    def on_batch(batch: Any, batch_id: int) -> None:
        # Only stores the lines: the stream thread stays quick, and the recomputation runs in the loop below.
        # Overwrite: a batch Spark replays after a restart (same id, same offsets) replaces itself.
        batch.select("value").write.mode("overwrite").parquet(str(store / f"batch={batch_id}"))
        stored.append(batch_id)

    def refresh(batches: list[int]) -> None:
        # The stored batches by name: a plan over the whole store directory would look the same to Spark's
        # cache at every refresh, however many batches it holds.
        paths = [str(store / f"batch={b}") for b in sorted(set(batches))]
        batch_id = batches[-1]
        lines = spark.read.parquet(*paths).select("value", F.lit(source).alias("source"))
        metrics = pipeline.compute(pipeline.parse_lines(lines))
        try:
            summary = pipeline.summarize(metrics)
        finally:
            metrics.unpersist()
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
                # Seconds as any number (pyspark multiplies by 1000); its annotation says int.
                query.awaitTermination(min(1.0, trigger_s))  # type: ignore[arg-type]
            except Exception as e:  # the query failed (e.g. the connector): its error is the answer
                echo(f"error: {e}")
                code = 2
                break
            now = time.monotonic()
            batches = list(stored)  # a snapshot: Spark's stream thread appends meanwhile
            if batches and batches[-1] != shown:
                shown = batches[-1]
                try:
                    refresh(batches)
                except EventLogError as e:
                    echo(f"error: {e}")
                    code = 2
                    break
                now = last_new = time.monotonic()
            # Busy: Spark is in a micro-batch, which may be storing new events.
            busy = bool(query.status.get("isTriggerActive")) and query.status.get("isDataAvailable")
            if stop is not None and stop.is_set():
                break
            if max_s is not None and now - started >= max_s:
                echo(f"stopping: --max-s {max_s:g} reached")
                break
            if until_idle_s is not None and not busy and now - last_new >= until_idle_s:
                echo(f"stopping: no new events for {until_idle_s:g}s")
                break
    finally:
        query.stop()
        if owned_session:
            spark.stop()
    return code
