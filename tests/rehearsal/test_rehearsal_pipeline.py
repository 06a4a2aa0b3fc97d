"""The PySpark pipeline, run once through report_main over hand-built and random logs, must give the
oracle's numbers in every Parquet table and in summary.json; and the report must be there."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import rehearsal_compare as C
import rehearsal_scenarios as S

from rehearsal import events as E
from rehearsal import oracle, report_input
from rehearsal.cli import report_main
from rehearsal.tables import TABLES

RANDOM_SEEDS = (11, 12, 13, 14)


@dataclass
class Analysed:
    logs: Path
    out: Path
    output: list[str]
    code: int
    tables: dict[str, list[dict[str, Any]]]
    summary: dict[str, Any]
    reference: oracle.Metrics


@pytest.fixture(scope="module")
def analysed(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Analysed:
    logs = tmp_path_factory.mktemp("logs")
    for name, evs in S.hand_built().items():
        S.write_raw(logs / f"{name}.jsonl", evs)
    for seed in RANDOM_SEEDS:
        S.write_random(logs / "random", seed)
    out = tmp_path_factory.mktemp("out")
    output: list[str] = []
    code = report_main([str(logs)], str(out), None, None, echo=output.append)
    tables = {}
    if code == 0:
        tables = {name: [r.asDict() for r in spark.read.parquet(str(out / name)).collect()] for name in TABLES}
    summary = json.loads((out / "summary.json").read_text()) if code == 0 else {}
    reference = oracle.compute(E.read_events([logs]))
    return Analysed(logs, out, output, code, tables, summary, reference)


def only_runs(rows: list[dict[str, Any]], runs: set[str]) -> list[dict[str, Any]]:
    return [r for r in rows if r["run"] in runs]


@pytest.mark.parametrize("kind", ["hand_built", "random"])
def test_tables_equal_the_oracle(analysed: Analysed, kind: str) -> None:
    assert analysed.code == 0, analysed.output
    runs = set(S.hand_built()) if kind == "hand_built" else {r["run"] for r in analysed.reference.group_summary}
    if kind == "random":
        runs -= set(S.hand_built())
    diffs = []
    for name, cols in TABLES.items():
        mine = C.sorted_rows(only_runs(analysed.tables[name], runs), cols)
        ref = C.sorted_rows(only_runs(getattr(analysed.reference, name), runs), cols)
        assert ref or name == "double_ownership", f"{name}: the scenarios should produce rows"
        diffs += C.same(mine, ref, name)
    assert diffs == []


def test_random_logs_exercise_every_metric(analysed: Analysed) -> None:
    s = analysed.reference.summary
    assert s["double_ownership_violations"] > 1
    assert s["unavailable_ms"] > 0
    assert any(g["time_to_stable_ms"] is None for g in analysed.reference.group_summary)
    assert len(s["client_mixes"]) == 4
    # Some unavailability followed a fence (the crash share of the headline), some did not.
    assert any(m["crash_unavailable_ms"] > 0 for m in s["client_mixes"].values())
    assert any(m["clean_unavailable_ms"] > 0 for m in s["client_mixes"].values())


def test_summary_equals_the_oracle(analysed: Analysed) -> None:
    assert analysed.code == 0, analysed.output
    assert C.same(analysed.summary, C.as_reported(analysed.reference.summary, [str(analysed.logs)])) == []
    assert analysed.summary["double_ownership_violations"] == sum(
        1 for _ in analysed.reference.double_ownership
    )


def test_progress_lines_and_outputs(analysed: Analysed) -> None:
    assert analysed.code == 0, analysed.output
    text = "\n".join(analysed.output)
    for step in ("validating", "starting Spark", "writing Parquet", "done:"):
        assert step in text
    assert f"{analysed.reference.summary['events']} events" in text
    for name in TABLES:
        assert list((analysed.out / name).glob("*.parquet")), name


def test_report_has_the_sections_and_the_busiest_group(analysed: Analysed) -> None:
    html = (analysed.out / "report.html").read_text()
    for section in ('id="client-mixes"', 'id="unavailability"', 'id="timeline"', 'id="groups"', "<svg"):
        assert section in html
    for mix in ("classic-eager", "classic-cooperative", "translate", "consumer"):
        assert mix in html
    busiest = min(analysed.reference.group_summary, key=lambda g: (-g["rebalances"], g["run"], g["group"]))
    assert f"Ownership timeline: group {busiest['run']}/{busiest['group']}" in html
    assert "<script" not in html and "http" not in html  # self-contained


def test_report_histograms_equal_the_oracle(analysed: Analysed) -> None:
    html = (analysed.out / "report.html").read_text()
    ref = report_input.from_oracle(analysed.reference)
    shown = {}
    for figure in html.split("<figure><figcaption>")[1:]:
        mix = figure.split("</figcaption>", 1)[0]
        shown[mix] = [int(c) for c in re.findall(r" ms: (\d+) partitions</title>", figure)]
    assert shown == ref.histogram
    assert f"Partitions per bin of {ref.bin_width_ms:,.1f} ms" in html


def test_pipeline_rejects_bad_lines_itself(spark: Any, tmp_path: Path) -> None:
    from rehearsal import pipeline

    good = E.event_to_json(S.handover().events[0])
    (tmp_path / "log.jsonl").write_text(good + "\n" + good.replace('"ts_ms":0', '"ts_ms":"soon"') + "\n")
    with pytest.raises(E.EventLogError, match="invalid rebalance event.*soon"):
        pipeline.load_events(spark, [str(tmp_path)])


def test_report_main_stops_at_invalid_logs_before_spark(tmp_path: Path) -> None:
    (tmp_path / "log.jsonl").write_text('{"event": "member_joined"}\n')
    output: list[str] = []
    assert report_main([str(tmp_path)], str(tmp_path / "out"), None, None, echo=output.append) == 2
    assert any("log.jsonl:1: invalid member_joined event" in line for line in output)
    assert not (tmp_path / "out").exists()
    assert report_main([str(tmp_path / "nope")], str(tmp_path / "out"), None, None, echo=output.append) == 2


def test_kafka_source_needs_bootstrap_and_topic(spark: Any) -> None:
    # Reading a topic is tested against a real broker in test_rehearsal_kafka.py; here only the URI.
    from rehearsal import pipeline

    with pytest.raises(ValueError, match="kafka://BOOTSTRAP/TOPIC"):
        pipeline.load_events(spark, ["kafka://localhost:9092"])
