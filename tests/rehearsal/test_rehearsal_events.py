"""The rebalance event schema: round trips, the writer's numbering, and clear errors for bad lines."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import rehearsal_scenarios as S

from rehearsal import events as E

GOOD = {
    "event": "partitions_assigned", "ts_ms": 5, "run": "r", "group": "g", "member": "m",
    "protocol": "consumer", "client_mix": "consumer", "partitions": [{"topic": "t", "partition": 0}],
}  # fmt: skip
GROUP_LEVEL = {k: v for k, v in GOOD.items() if k not in ("member", "partitions")}


def every_event_type() -> list[E.Event]:
    g = S.GroupLog("r", "g", "translate")
    g.topic(0, "t", 2).join(1, "a").sent(2, "a", 3, "t-0").assign(3, "a", "t-0").revoke(4, "a", "t-0")
    g.stable(5, "t-0", "t-1").disturb(6).timer(7, "session", "a").fence(8, "a").leave(9, "a")
    g.add(E.GroupConverted, 10, from_type="classic", to_type="consumer")
    g.add(E.RebalanceStarted, 11, reason="new member")
    return g.events


def test_every_event_type_is_covered_by_the_ordering_rank() -> None:
    kinds = {ev.event for ev in every_event_type()}
    assert kinds == set(E.EVENT_RANK)


def test_writer_round_trip_and_numbering(tmp_path: Path) -> None:
    path = tmp_path / "log" / "events.jsonl"
    evs = every_event_type()
    with E.EventWriter(path) as w:
        written = [w.write(ev) for ev in evs]
    assert [ev.seq for ev in written] == list(range(len(evs)))
    assert list(E.read_events([path])) == written
    # Appending continues the numbering so that seq stays unique within the file.
    with E.EventWriter(path) as w:
        again = w.write(evs[0])
    assert again.seq == len(evs)
    lines = path.read_text().splitlines()
    assert len(lines) == len(evs) + 1
    assert json.loads(lines[0]) == {**E.event_to_dict(written[0])}
    assert "member" not in json.loads(lines[0])  # None fields are left out


def test_structlog_helper_writes_lines_the_reader_accepts(tmp_path: Path) -> None:
    buf = io.StringIO()
    logger = E.structlog_event_logger(buf)
    evs = every_event_type()
    for ev in evs:
        E.log_event(logger, ev)
    path = tmp_path / "structlog.jsonl"
    path.write_text(buf.getvalue())
    assert list(E.read_events([path])) == evs


def test_structlog_envelope_keys_are_ignored() -> None:
    line = json.dumps({**GOOD, "level": "info", "timestamp": "2026-01-01T00:00:00Z"})
    assert E.parse_event(line).event == "partitions_assigned"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"ts_ms": "5"}, "ts_ms"),
        ({"ts_ms": 1.5}, "ts_ms"),
        ({"ts_ms": -1}, "ts_ms"),
        ({"member": None}, "member"),
        ({"client_mix": "classic"}, "client_mix"),
        ({"protocol": "eager"}, "protocol"),
        ({"partitions": [{"topic": "t", "partition": -1}]}, "partition"),
        ({"partitions": [{"topic": "t"}]}, "partition"),
        ({"member_id": "m"}, "member_id"),
        ({"event": "partition_assigned"}, "unknown event type 'partition_assigned'"),
    ],
)
def test_bad_lines_name_file_line_and_field(change: dict[str, object], expected: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + json.dumps({**GOOD, **change}) + "\n")
    with pytest.raises(E.EventLogError) as info:
        list(E.read_events([path]))
    assert info.value.line_no == 3
    assert str(info.value).startswith(f"{path}:3: ")
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({**GROUP_LEVEL, "event": "group_converted", "from_type": "classic", "to_type": "classic"}),
         "from_type != to_type"),
        (json.dumps({**GROUP_LEVEL, "event": "topic_metadata", "topic": "t", "num_partitions": 0}),
         "num_partitions"),
        (json.dumps({**GOOD, "event": "assignment_sent"}), "member_epoch"),
    ],
)  # fmt: skip
def test_bad_line_messages(line: str, expected: str) -> None:
    with pytest.raises(E.EventLogError, match=expected):
        E.parse_event(line, "x.jsonl", 1)


def test_validate_logs_collects_errors_and_checks_one_mix_per_group(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    lines = [GOOD, {**GOOD, "ts_ms": "x"}, {**GOOD, "client_mix": "translate"}, {**GOOD, "group": "other"}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    errors = E.validate_logs([path])
    assert [e.line_no for e in errors] == [2, 3]
    assert "a group belongs to one fleet variant" in errors[1].message


def test_event_files_walks_directories_and_skips_hidden(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    for name in ["b/2.jsonl", "a.jsonl", ".hidden", "_SUCCESS", "b/1.jsonl"]:
        (tmp_path / name).write_text("")
    found = [p.relative_to(tmp_path).as_posix() for p in E.event_files([tmp_path])]
    assert found == ["a.jsonl", "b/1.jsonl", "b/2.jsonl"]
    with pytest.raises(FileNotFoundError):
        E.event_files([tmp_path / "missing"])


def test_validate_main(tmp_path: Path) -> None:
    from rehearsal.cli import validate_main

    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps(GOOD) + "\n")
    out: list[str] = []
    assert validate_main([str(path)], echo=out.append) == 0
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "partitions": None}) + "\n")
    assert validate_main([str(path)], echo=out.append) == 2
    assert any(":2: invalid partitions_assigned event" in line for line in out)
    assert validate_main([str(tmp_path / "missing")], echo=out.append) == 2
