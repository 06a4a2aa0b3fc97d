"""Kafka's own group coordinator serde (4.3.1 jars) reads groupgate's records and writes the same bytes.

Skipped without a JDK or without the Kafka jars (``make kafka`` fetches them).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from cg_helpers import Driver

from coordinator.model import ClassicMemberMetadata, ConsumerGroupMember
from coordinator.records.codec import encode

HERE = Path(__file__).resolve().parent
G = "grp"


def _classpath() -> str:
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("no JDK (javac/java) on PATH")
    from gateway.ops import kafka_dist

    dist = kafka_dist.broker()
    if not dist.is_fetched():
        pytest.skip("Kafka jars not fetched (make kafka)")
    return str(dist.classpath())


def _scenario() -> Driver:
    """Traffic producing every record type, tombstones, a regex and a classic member."""
    d = Driver()
    d.topics({"foo": 3, "bar-1": 2})
    d.hb(G, "A", 0, instance_id="ia", rack_id="r1", client_id="cid", client_host="/10.0.0.1")
    d.hb(G, "B", 0, subscribed_topic_names=None, subscribed_topic_regex="bar-.*", server_assignor="sticky-test")
    d.hb(G, "A", 2, {"foo": [0, 1, 2]})
    c = d.coord
    tx = c.begin()
    c.upsert_member(tx, G, ConsumerGroupMember(
        "K", client_id="legacy", client_host="/10.0.0.2", subscribed_topic_names=frozenset({"foo"}),
        rebalance_timeout_ms=5000, classic_metadata=ClassicMemberMetadata(10_000, (("range", b"\x00\x03ab"),)),
    ), 0)
    c.reconcile_member(tx, G, "K", {}, 0)
    d.records.extend(tx.records)
    d.hb(G, "B", -1)
    # A group whose last member leaves: record 3 carries groupgate's EmptySinceMs tagged field.
    d.now = 1_234_567
    d.hb("emptied", "E", 0)
    d.hb("emptied", "E", -1)
    return d


def test_kafka_reads_and_rewrites_our_records_identically(tmp_path: Path) -> None:
    classpath = _classpath()
    subprocess.run(["javac", "-d", str(tmp_path), "-cp", classpath, str(HERE / "java" / "RecordRoundTrip.java")], check=True)
    d = _scenario()
    lines = []
    for r in d.records:
        k, v = encode(r)
        lines.append(f"{k.hex()} {'-' if v is None else v.hex()}")
    assert {r.type for r in d.records} >= {3, 4, 5, 6, 7, 8, 16}
    assert any(r.value is None for r in d.records)
    proc = subprocess.run(
        ["java", "-cp", f"{tmp_path}:{classpath}", "RecordRoundTrip"],
        input="\n".join(lines) + "\n", capture_output=True, text=True, check=True,
    )
    out = proc.stdout.strip().split("\n")
    assert len(out) == len(lines)
    for ours, theirs in zip(lines, out, strict=True):
        assert theirs.split("\t")[0] == ours
    text = proc.stdout
    # Fields Kafka decoded (not kept as unknown tagged fields).
    assert "classicMemberMetadata=ClassicMemberMetadata(sessionTimeoutMs=10000" in text
    assert "subscribedTopicRegex='bar-.*'" in text
    assert "ConsumerGroupRegularExpressionValue(topics=[bar-1], version=1, timestamp=0)" in text
    assert "instanceId='ia'" in text and "rackId='r1'" in text
    # Kafka keeps the empty-since tag as an unknown tagged field and writes it back unchanged (above).
    emptied = [r for r in d.records if r.group_id == "emptied" and r.type == 3 and r.value is not None]
    assert emptied[-1].value.empty_since_ms == 1_234_567  # type: ignore[union-attr]
