"""The rehearsal metrics with PySpark (DataFrame API), for event logs of any size.

Same definitions as rehearsal/oracle.py (docs/rehearsal-events.md, "Metrics"), computed set-wise:
events are exploded to one row per (member, partition) change, ordered per (member, partition) by
(ts_ms, seq, rank), and window functions find where ownership starts and ends. Unavailability is the
group window minus the union of ownership intervals, found with a running maximum of interval ends.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from rehearsal import spark_kafka
from rehearsal.events import CONNECT_MIX, EVENT_RANK, KNOWN_MIXES, PROTOCOLS, EventLogError, event_files
from rehearsal.tables import (
    CHANGE_EVENTS,
    CRASH_REASONS,
    PERCENTILES,
    TABLES,
    add_connect,
    add_crash_split,
    fleet_summary,
)

G = ["run", "group"]
ORDER = ["ts_ms", "seq", "rank", "id"]
KAFKA_SCHEME = "kafka://"

_TP = T.StructType([T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType())])
EVENT_SCHEMA = T.StructType(
    [
        T.StructField("ts_ms", T.LongType()),
        T.StructField("seq", T.LongType()),
        T.StructField("event", T.StringType()),
        T.StructField("run", T.StringType()),
        T.StructField("group", T.StringType()),
        T.StructField("member", T.StringType()),
        T.StructField("protocol", T.StringType()),
        T.StructField("client_mix", T.StringType()),
        T.StructField("member_epoch", T.LongType()),
        T.StructField("group_epoch", T.LongType()),
        T.StructField("partitions", T.ArrayType(_TP)),
        T.StructField("from_type", T.StringType()),
        T.StructField("to_type", T.StringType()),
        T.StructField("kind", T.StringType()),
        T.StructField("topic", T.StringType()),
        T.StructField("num_partitions", T.IntegerType()),
        T.StructField("reason", T.StringType()),
        T.StructField("instance_id", T.StringType()),
    ]
)

_MEMBER_EVENTS = (
    "member_joined", "member_left", "member_fenced", "assignment_sent", "partitions_assigned",
    "partitions_revoked",
)  # fmt: skip
_PARTITION_EVENTS = ("assignment_sent", "partitions_assigned", "partitions_revoked")


def spark_session(
    master: str | None = None, *, kafka: bool = False, conf: dict[str, str] | None = None
) -> SparkSession:
    """A session for the analysis; local[*] unless a master is given. kafka adds the Kafka connector.

    A session that is already active (an embedding application's, or a test's) is returned as it is:
    its master and settings are its owner's choice, and the connector cannot be added to it (with kafka,
    a session without it is an error: spark_kafka.ConnectorError)."""
    active = SparkSession.getActiveSession()
    if active is not None:
        if kafka and not spark_kafka.has_connector(active):
            raise spark_kafka.ConnectorError(
                "the active Spark session was started without Spark's Kafka connector: give it "
                "spark.jars=<rehearsal.spark_kafka.connector_jars()> when it starts"
            )
        return active
    master = master or "local[*]"
    builder = (
        SparkSession.builder.appName("groupgate-rehearsal")
        .master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if master.startswith("local"):
        # Rehearsal logs are small next to Spark's default of 200 shuffle partitions for one machine.
        builder = builder.config("spark.sql.shuffle.partitions", "8")
        # In local mode the driver runs every task, and Spark's default heap (1g) makes the cached event
        # tables of a few million events spill to disk. A quarter of the machine's memory, at most 8g.
        builder = builder.config("spark.driver.memory", _local_driver_memory())
    conf = dict(conf or {})
    if kafka:
        # The connector's jars, fetched with Maven into the cache once (rehearsal/spark_kafka.py).
        jars = [str(p) for p in spark_kafka.connector_jars()]
        conf["spark.jars"] = ",".join(filter(None, [conf.get("spark.jars", ""), *jars]))
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _local_driver_memory() -> str:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "1g"
    return f"{max(1, min(8, total // 4 // 2**30))}g"


def parse_kafka_uri(uri: str) -> tuple[str, str]:
    """kafka://host:port[,host:port]/topic -> (bootstrap servers, topic)."""
    rest = uri[len(KAFKA_SCHEME) :]
    servers, _, topic = rest.partition("/")
    if not uri.startswith(KAFKA_SCHEME) or not servers or not topic:
        raise ValueError(f"expected kafka://BOOTSTRAP/TOPIC, got {uri!r}")
    return servers, topic


def _kafka_lines(spark: SparkSession, uri: str) -> DataFrame:
    """kafka://host:port[,host:port]/topic -> the topic's record values, from earliest to latest."""
    servers, topic = parse_kafka_uri(uri)
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
        .select(F.col("value").cast("string").alias("value"), F.lit(uri).alias("source"))
    )


def _file_inputs(paths: list[str]) -> list[str]:
    """Local paths expanded like the oracle's reader does; URIs (hdfs://, s3a://, file://) passed through."""
    local = [p for p in paths if "://" not in p]
    remote = [p for p in paths if "://" in p]
    return [str(f) for f in event_files(local)] + remote


def _invalid(e: Column) -> Column:
    """Lines the rest of the pipeline cannot interpret (the full check is events.validate_logs)."""
    ev = e["event"]
    bad_tp = F.exists(
        F.coalesce(e["partitions"], F.array().cast(T.ArrayType(_TP))),
        lambda p: p["topic"].isNull() | (p["topic"] == "") | p["partition"].isNull() | (p["partition"] < 0),
    )
    return (
        e.isNull()
        | e["ts_ms"].isNull()
        | (e["ts_ms"] < 0)
        | (F.coalesce(e["seq"], F.lit(0)) < 0)
        | F.coalesce(e["run"], F.lit("")).eqNullSafe("")
        | F.coalesce(e["group"], F.lit("")).eqNullSafe("")
        | ~F.coalesce(ev.isin(*EVENT_RANK), F.lit(False))
        | ~F.coalesce(e["client_mix"].isin(*KNOWN_MIXES), F.lit(False))
        | ~F.coalesce(e["protocol"].isin(*PROTOCOLS), F.lit(False))
        | (ev.isin(*_MEMBER_EVENTS) & F.coalesce(e["member"], F.lit("")).eqNullSafe(""))
        | (ev.isin(*_PARTITION_EVENTS) & e["partitions"].isNull())
        | ((ev == "topic_metadata") & (e["topic"].isNull() | ~F.coalesce(e["num_partitions"] >= 1, F.lit(False))))
        | bad_tp
    )


def load_events(spark: SparkSession, paths: list[str], *, check: bool = True) -> DataFrame:
    """Events of JSON-lines files/dirs and kafka://BOOTSTRAP/TOPIC sources, with ordering keys.

    check: fail on lines the pipeline cannot interpret (one Spark job); callers that already ran the
    stricter events.validate_logs over the same files may skip it."""
    files = _file_inputs([p for p in paths if not p.startswith(KAFKA_SCHEME)])
    sources = []
    if files:
        sources.append(spark.read.text(files).select("value", F.input_file_name().alias("source")))
    sources += [_kafka_lines(spark, p) for p in paths if p.startswith(KAFKA_SCHEME)]
    if not sources:
        raise ValueError("no event log given")
    lines = sources[0]
    for more in sources[1:]:
        lines = lines.unionByName(more)
    return parse_lines(lines, check=check)


def parse_lines(lines: DataFrame, *, check: bool = True) -> DataFrame:
    """Event lines (columns ``value`` and ``source``) -> events with ordering keys; check as in load_events.

    The live view (rehearsal/live.py) parses the lines it accumulated from a stream with this too."""
    parsed = lines.filter(F.trim("value") != "").select(
        "value", "source", F.from_json("value", EVENT_SCHEMA, {"mode": "PERMISSIVE"}).alias("e")
    )
    bad = parsed.filter(_invalid(F.col("e"))).select("source", "value").limit(3).collect() if check else []
    if bad:
        shown = "; ".join(f"{r['value'].strip()[:200]}" for r in bad)
        raise EventLogError(bad[0]["source"], None, f"invalid rebalance event(s): {shown}")
    rank = F.create_map(*[F.lit(x) for kv in EVENT_RANK.items() for x in kv])
    return parsed.select("e.*").select(
        "*",
        F.coalesce(F.col("seq"), F.lit(0)).alias("seq_"),
        rank[F.col("event")].alias("rank"),
        F.monotonically_increasing_id().alias("id"),
    ).drop("seq").withColumnRenamed("seq_", "seq")


@dataclass(slots=True)
class SparkMetrics:
    ownership_intervals: DataFrame
    partition_unavailability: DataFrame
    double_ownership: DataFrame
    member_rebalances: DataFrame
    group_summary: DataFrame
    events: DataFrame

    # Intermediate results compute() cached beside the tables (released by unpersist()).
    cached: list[DataFrame] = field(default_factory=list)
    # Per client_mix: unavailable ms that followed an ownership ended by a crash or fence.
    crash_gaps: DataFrame | None = None

    def tables(self) -> dict[str, DataFrame]:
        return {name: getattr(self, name).select(*cols) for name, cols in TABLES.items()}

    def unpersist(self) -> None:
        """Release everything compute() cached (a long-lived session computing again and again)."""
        for df in (*self.cached, self.ownership_intervals, self.partition_unavailability, self.double_ownership,
                   self.member_rebalances, self.group_summary, self.events):  # fmt: skip
            df.unpersist()


def _ownership_changes(events: DataFrame) -> DataFrame:
    """Rows where a member's ownership of a partition starts (is_start) or ends, with the next change."""
    acked = events.filter(F.col("event").isin("partitions_assigned", "partitions_revoked")).select(
        *G, "member", *ORDER, "event", F.explode("partitions").alias("tp")
    )
    acked = acked.select(*G, "member", *ORDER, "event", "tp.topic", "tp.partition")
    held = acked.filter(F.col("event") == "partitions_assigned").select(*G, "member", "topic", "partition")
    # Leaving or being fenced ends ownership of whatever the member holds: an end row for every
    # partition it ever acknowledged; rows for partitions it does not hold are no-ops below.
    gone = (
        events.filter(F.col("event").isin("member_left", "member_fenced"))
        .select(*G, "member", *ORDER, "event", "reason")
        .join(held.distinct(), [*G, "member"])
    )
    # Whether an end is a crash: the member was fenced or died without leaving (tables.CRASH_REASONS).
    gone = gone.withColumn(
        "crash", (F.col("event") == "member_fenced") | F.coalesce(F.col("reason").isin(*CRASH_REASONS), F.lit(False))
    ).drop("reason")
    acked = acked.withColumn("crash", F.lit(False))
    rows = acked.unionByName(gone).withColumn("is_start", F.col("event") == "partitions_assigned")
    w = Window.partitionBy(*G, "member", "topic", "partition").orderBy(*ORDER)
    prev = F.lag("is_start").over(w)
    changes = rows.withColumn("prev", prev).filter(
        (F.col("is_start") & (F.col("prev").isNull() | ~F.col("prev"))) | (~F.col("is_start") & F.col("prev"))
    )
    return changes.select(
        "*", F.lead("ts_ms").over(w).alias("next_ts"), F.lead("event").over(w).alias("next_event"),
        F.lead("crash").over(w).alias("next_crash"),
    ).drop("prev", "crash")


def _existing_partitions(events: DataFrame) -> DataFrame:
    acked = events.filter(F.col("event") == "partitions_assigned")
    declared = events.filter((F.col("event") == "group_stable") & F.col("partitions").isNotNull())
    from_lists = acked.unionByName(declared).select(*G, F.explode("partitions").alias("tp"))
    from_lists = from_lists.select(*G, "tp.topic", "tp.partition")
    from_topics = events.filter(F.col("event") == "topic_metadata").select(
        *G, "topic", F.explode(F.sequence(F.lit(0), F.col("num_partitions") - 1)).alias("partition")
    )
    return from_lists.unionByName(from_topics).distinct()


def _unavailability(existing: DataFrame, info: DataFrame, intervals: DataFrame) -> DataFrame:
    key = [*G, "topic", "partition"]
    spans = intervals.select(*key, "start_ms", "end_ms")
    j = existing.join(info, G).join(spans, key, "left")
    before = Window.partitionBy(*key).orderBy("start_ms", "end_ms").rowsBetween(Window.unboundedPreceding, -1)
    cursor = F.greatest(F.coalesce(F.max("end_ms").over(before), F.col("start")), F.col("start"))
    gap = F.col("start_ms") - cursor
    j = j.withColumn("gap", F.when(gap > 0, gap))
    agg = j.groupBy(*key, "client_mix", "start", "end").agg(
        F.coalesce(F.sum("gap"), F.lit(0)).alias("inner"),
        F.count("gap").alias("inner_gaps"),
        F.coalesce(F.max("gap"), F.lit(0)).alias("inner_longest"),
        F.max("end_ms").alias("last_end"),
    )
    tail = F.col("end") - F.greatest(F.coalesce(F.col("last_end"), F.col("start")), F.col("start"))
    agg = agg.withColumn("tail", F.when(tail > 0, tail).otherwise(F.lit(0)))
    unavailable = F.col("inner") + F.col("tail")
    return agg.select(
        *G, "client_mix", "topic", "partition",
        F.col("start").alias("window_start_ms"), F.col("end").alias("window_end_ms"),
        (F.col("end") - F.col("start")).alias("window_ms"),
        (F.col("end") - F.col("start") - unavailable).alias("owned_ms"),
        unavailable.alias("unavailable_ms"),
        (F.col("inner_gaps") + F.when(F.col("tail") > 0, 1).otherwise(0)).alias("gaps"),
        F.greatest("inner_longest", "tail").alias("longest_gap_ms"),
    )  # fmt: skip


def _crash_gaps(existing: DataFrame, info: DataFrame, intervals: DataFrame) -> DataFrame:
    """Per client_mix, the unavailable ms charged to crashes: each gap belongs to the ownership whose end
    opened it (the running maximum of (end, ended by a crash), as oracle._crash_gaps)."""
    key = [*G, "topic", "partition"]
    spans = intervals.select(*key, "start_ms", "end_ms", "ended_by_crash")
    j = existing.join(info, G).join(spans, key, "left")
    before = Window.partitionBy(*key).orderBy("start_ms", "end_ms").rowsBetween(Window.unboundedPreceding, -1)
    opened = F.max(F.struct("end_ms", "ended_by_crash")).over(before)
    cursor = F.greatest(F.coalesce(opened["end_ms"], F.col("start")), F.col("start"))
    gap = F.col("start_ms") - cursor
    j = j.withColumn("gap", F.when((gap > 0) & F.coalesce(opened["ended_by_crash"], F.lit(False)), gap))
    agg = j.groupBy(*key, "client_mix", "start", "end").agg(
        F.coalesce(F.sum("gap"), F.lit(0)).alias("inner"),
        F.max(F.struct("end_ms", "ended_by_crash")).alias("last"),
    )
    tail = F.col("end") - F.greatest(F.coalesce(F.col("last.end_ms"), F.col("start")), F.col("start"))
    crashed_tail = F.when((tail > 0) & F.coalesce(F.col("last.ended_by_crash"), F.lit(False)), tail).otherwise(0)
    return agg.groupBy("client_mix").agg(F.sum(F.col("inner") + crashed_tail).alias("crash_unavailable_ms"))


def _double_ownership(intervals: DataFrame) -> DataFrame:
    # Pairs are only looked for where one exists: sorted by start, an interval overlaps an earlier one
    # exactly when it starts before the latest end so far. One window pass finds those partitions, so the
    # pairwise self-join (quadratic in a partition's intervals) runs on violating partitions alone.
    key = [*G, "topic", "partition"]
    before = Window.partitionBy(*key).orderBy("start_ms", "end_ms").rowsBetween(Window.unboundedPreceding, -1)
    violating = (
        intervals.select(*key, (F.col("start_ms") < F.max("end_ms").over(before)).alias("overlaps"))
        .filter("overlaps")
        .select(*key)
        .distinct()
    )
    suspects = intervals.join(violating, key, "left_semi")
    a, b = suspects.alias("a"), suspects.alias("b")
    lo = F.greatest(F.col("a.start_ms"), F.col("b.start_ms"))
    hi = F.least(F.col("a.end_ms"), F.col("b.end_ms"))
    cond = [F.col(f"a.{c}") == F.col(f"b.{c}") for c in [*G, "topic", "partition"]]
    pairs = a.join(b, [*cond, F.col("a.member") < F.col("b.member"), lo < hi])
    return pairs.select(
        *[F.col(f"a.{c}").alias(c) for c in [*G, "client_mix", "topic", "partition"]],
        F.col("a.member").alias("member_a"), F.col("b.member").alias("member_b"),
        lo.alias("overlap_start_ms"), hi.alias("overlap_end_ms"), (hi - lo).alias("overlap_ms"),
    )  # fmt: skip


def _count(event: str) -> Column:
    return F.sum(F.when(F.col("event") == event, 1).otherwise(0))


def _member_rebalances(events: DataFrame, changes: DataFrame, info: DataFrame) -> DataFrame:
    k = [*G, "member"]
    base = events.filter(F.col("member").isNotNull()).groupBy(*k).agg(
        _count("assignment_sent").alias("assignments_received"),
        _count("member_joined").alias("joins"),
        _count("member_left").alias("leaves"),
        _count("member_fenced").alias("fenced"),
    )
    # A rebalance of a member = one acknowledged assignment change event that changed what it owns.
    effective = (
        changes.filter(F.col("event").isin("partitions_assigned", "partitions_revoked"))
        .select(*k, "id")
        .distinct()
        .groupBy(*k)
        .agg(F.count("*").alias("rebalances"))
    )
    moved = changes.groupBy(*k).agg(
        F.sum(F.col("is_start").cast("long")).alias("partitions_gained"),
        F.sum((~F.col("is_start")).cast("long")).alias("partitions_lost"),
    )
    out = base.join(effective, k, "left").join(moved, k, "left").join(info.select(*G, "client_mix"), G)
    return out.fillna(0, subset=["rebalances", "partitions_gained", "partitions_lost"])


def _group_summary(
    events: DataFrame, info: DataFrame, unavail: DataFrame, overlaps: DataFrame, members: DataFrame,
    changes: DataFrame,
) -> DataFrame:
    facts = events.groupBy(*G).agg(
        F.count("*").alias("events"),
        F.countDistinct("member").alias("members"),
        F.min(F.when(F.col("event") == "disturbance", F.col("ts_ms"))).alias("disturbed"),
        F.max(F.when(F.col("event").isin(*CHANGE_EVENTS), F.col("ts_ms"))).alias("last_change"),
        _count("group_converted").alias("conversions"),
        _count("member_fenced").alias("fenced"),
        _count("timer_expired").alias("timers_expired"),
    )
    g = info.join(facts, G).withColumn("first_disturbance_ms", F.coalesce("disturbed", "start"))
    stables = events.filter(F.col("event") == "group_stable").select(*G, "ts_ms")
    last_stable = (
        stables.join(g.select(*G, "first_disturbance_ms"), G)
        .filter(F.col("ts_ms") >= F.col("first_disturbance_ms"))
        .groupBy(*G)
        .agg(F.max("ts_ms").alias("last_stable_ms"))
    )
    # Convergence: the last ownership change (a start or an end) from the first disturbance on.
    moved = (
        changes.select(*G, "ts_ms")
        .join(g.select(*G, "first_disturbance_ms"), G)
        .filter(F.col("ts_ms") >= F.col("first_disturbance_ms"))
        .groupBy(*G)
        .agg(F.max("ts_ms").alias("last_move_ms"))
    )
    parts = unavail.groupBy(*G).agg(
        F.count("*").alias("partitions"),
        F.sum("unavailable_ms").alias("unavailable_ms"),
        F.max("unavailable_ms").alias("max_partition_unavailable_ms"),
    )
    doubles = overlaps.groupBy(*G).agg(
        F.count("*").alias("double_ownership_violations"), F.sum("overlap_ms").alias("double_ownership_ms")
    )
    rebalances = members.groupBy(*G).agg(F.sum("rebalances").alias("rebalances"))
    g = (
        g.join(last_stable, G, "left")
        .join(moved, G, "left")
        .join(parts, G, "left")
        .join(doubles, G, "left")
        .join(rebalances, G, "left")
        .fillna(
            0,
            subset=[
                "partitions", "unavailable_ms", "max_partition_unavailable_ms",
                "double_ownership_violations", "double_ownership_ms", "rebalances",
            ],
        )  # fmt: skip
    )
    duration = F.col("end") - F.col("start")
    capacity = F.col("partitions") * duration
    stable = F.col("last_stable_ms")
    converged = F.when(stable.isNotNull(), F.coalesce(F.col("last_move_ms"), F.col("first_disturbance_ms")))
    return g.select(
        *G, "client_mix", "events", F.col("start").alias("start_ms"), F.col("end").alias("end_ms"),
        duration.alias("duration_ms"), "members", "partitions", "rebalances", "unavailable_ms",
        "max_partition_unavailable_ms",
        F.when(capacity > 0, F.col("unavailable_ms") / capacity).alias("unavailability_ratio"),
        "double_ownership_violations", "double_ownership_ms", "first_disturbance_ms", "last_stable_ms",
        converged.alias("converged_ms"), (converged - F.col("first_disturbance_ms")).alias("time_to_stable_ms"),
        (stable.isNotNull() & (F.col("last_change").isNull() | (stable >= F.col("last_change")))).alias(
            "stable_at_end"
        ),
        "conversions", "fenced", "timers_expired",
    )  # fmt: skip


def compute(events: DataFrame) -> SparkMetrics:
    events = events.cache()
    info = events.groupBy(*G).agg(
        F.min("ts_ms").alias("start"), F.max("ts_ms").alias("end"), F.min("client_mix").alias("client_mix")
    )
    changes = _ownership_changes(events).cache()
    intervals = (
        changes.filter("is_start")
        .join(info, G)
        .select(
            *G, "client_mix", "topic", "partition", "member",
            F.col("ts_ms").alias("start_ms"),
            F.coalesce("next_ts", "end").alias("end_ms"),
            (F.coalesce("next_ts", "end") - F.col("ts_ms")).alias("duration_ms"),
            F.coalesce("next_event", F.lit("end_of_log")).alias("ended_by"),
            F.col("next_ts").isNull().alias("open_at_end"),
            F.coalesce("next_crash", F.lit(False)).alias("ended_by_crash"),
        )  # fmt: skip
        .cache()
    )
    crash_gaps = _crash_gaps(_existing_partitions(events), info, intervals)
    intervals = intervals.drop("ended_by_crash")
    unavail = _unavailability(_existing_partitions(events), info, intervals).cache()
    overlaps = _double_ownership(intervals).cache()
    members = _member_rebalances(events, changes, info).cache()
    groups = _group_summary(events, info, unavail, overlaps, members, changes).cache()
    return SparkMetrics(intervals, unavail, overlaps, members, groups, events, [changes], crash_gaps)


def _distribution(column: str, prefix: str) -> list[Column]:
    ps = ", ".join(str(p) for _, p in PERCENTILES)
    return [
        F.expr(f"percentile({column}, array({ps}))").alias(f"{prefix}_pct"),
        F.max(F.col(column).cast("double")).alias(f"{prefix}_max"),
        F.avg(column).alias(f"{prefix}_mean"),
    ]


def _dist_dict(row: Any, prefix: str) -> dict[str, float | None]:
    pct = row[f"{prefix}_pct"]
    out: dict[str, float | None] = {
        name: (float(pct[i]) if pct is not None else None) for i, (name, _) in enumerate(PERCENTILES)
    }
    out["max"] = row[f"{prefix}_max"]
    out["mean"] = row[f"{prefix}_mean"]
    return out


def summarize(m: SparkMetrics) -> dict[str, Any]:
    """Fleet-wide figures: the distributions in Spark, the rest from the (one row per group) summary."""
    groups = [r.asDict() for r in m.group_summary.collect()]
    partitions_by_mix = {
        r["client_mix"]: {
            "partitions": r["partitions"],
            "unavailable_ms": r["unavailable_ms"],
            "window_ms": r["window_ms"],
            "distribution": _dist_dict(r, "u"),
        }
        for r in m.partition_unavailability.groupBy("client_mix")
        .agg(
            F.count("*").alias("partitions"),
            F.sum("unavailable_ms").alias("unavailable_ms"),
            F.sum("window_ms").alias("window_ms"),
            *_distribution("unavailable_ms", "u"),
        )
        .collect()
    }
    rebalances_by_mix = {
        r["client_mix"]: _dist_dict(r, "r")
        for r in m.member_rebalances.groupBy("client_mix").agg(*_distribution("rebalances", "r")).collect()
    }
    crash = {r["client_mix"]: r["crash_unavailable_ms"] for r in m.crash_gaps.collect()} if m.crash_gaps else {}
    summary = add_crash_split(
        fleet_summary(groups, partitions_by_mix, rebalances_by_mix), crash,
        {mix: p["window_ms"] for mix, p in partitions_by_mix.items()},
    )
    # Connect groups' figures from their rows (a connector or task per row; small next to the fleet).
    connect = F.col("client_mix") == CONNECT_MIX
    units = [r.asDict() for r in m.partition_unavailability.filter(connect)
             .select("run", "group", "client_mix", "topic", "window_ms", "unavailable_ms").collect()]
    workers = [r.asDict() for r in m.member_rebalances.filter(connect)
               .select("run", "group", "client_mix", "rebalances").collect()]
    return add_connect(summary, units, workers)


def write(m: SparkMetrics, summary: dict[str, Any], out: str | os.PathLike[str]) -> dict[str, str]:
    """Parquet tables under out/<table>/ and out/summary.json; returns where each went."""
    paths = {}
    for name, df in m.tables().items():
        path = os.path.join(str(out), name)
        df.write.mode("overwrite").parquet(path)
        paths[name] = path
    Path(out).mkdir(parents=True, exist_ok=True)
    summary_path = Path(out, "summary.json")
    summary_path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    paths["summary"] = str(summary_path)
    return paths
