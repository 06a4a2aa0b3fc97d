"""Rebalance event log: the schema, a writer and a validating reader.

A rehearsal (the fleet simulator, or the gateway itself) writes one JSON object per line. The analysis
(rehearsal/oracle.py in plain Python, rehearsal/pipeline.py in PySpark) rebuilds from these lines who owned
which partition when. The field table and the ownership semantics are in docs/rehearsal-events.md.

Ownership is taken from what clients ACKNOWLEDGE (partitions_assigned / partitions_revoked), not from
what the coordinator told them (assignment_sent): under KIP-848 a member keeps a partition until it
acknowledges the revocation (KIP-848 "Assignment Reconciliation"), so the acknowledged view is the one
that can show two owners or no owner.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Annotated, Any, Literal, TextIO

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

SCHEMA_VERSION = 1

Protocol = Literal["classic", "consumer", "connect"]
# Which fleet variant a group belongs to. "translate" is a classic fleet whose group the gateway runs as a
# consumer group (classic members inside a consumer group, KIP-848 "Upgrade and Downgrade"); "connect" is
# a connect group (Kafka Connect workers on the new protocol, docs/connect.md).
ClientMix = Literal["classic-eager", "classic-cooperative", "translate", "consumer", "connect"]
# The consumer groups' mixes, which the report compares side by side.
CLIENT_MIXES: tuple[str, ...] = ("classic-eager", "classic-cooperative", "translate", "consumer")
CONNECT_MIX = "connect"
KNOWN_MIXES: tuple[str, ...] = (*CLIENT_MIXES, CONNECT_MIX)
PROTOCOLS: tuple[str, ...] = ("classic", "consumer", "connect")

# A connect group's units of work ride in the partition-shaped fields: a connector is
# {"topic": "connector:<name>", "partition": 0}, task n of a connector {"topic": "task:<name>", "partition": n}.
# Kafka topic names cannot hold ":", so the prefixes never collide with a consumer group's topics.
CONNECTOR_PREFIX = "connector:"
TASK_PREFIX = "task:"


def unit_kind(topic: str) -> str:
    """What a partition-shaped unit is: ``connector``, ``task`` (connect groups) or ``partition``."""
    if topic.startswith(CONNECTOR_PREFIX):
        return "connector"
    if topic.startswith(TASK_PREFIX):
        return "task"
    return "partition"

# Keys a structlog pipeline may add around an event; the reader drops them before validation.
ENVELOPE_KEYS = frozenset({"level", "timestamp", "logger", "log_level"})

# Events that end a member's ownership of everything it holds.
MEMBER_GONE_EVENTS = ("member_left", "member_fenced")

# Order of events that share (ts_ms, seq): revocations and departures before assignments, so that a
# handover logged at one instant is neither a gap nor a double ownership. Both the oracle and the
# pipeline sort events by (ts_ms, seq, EVENT_RANK[event]).
EVENT_RANK: dict[str, int] = {
    "partitions_revoked": 0,
    "member_left": 1,
    "member_fenced": 2,
    "timer_expired": 3,
    "disturbance": 4,
    "topic_metadata": 5,
    "group_converted": 6,
    "rebalance_started": 7,
    "member_joined": 8,
    "assignment_sent": 9,
    "partitions_assigned": 10,
    "group_stable": 11,
}
EVENT_TYPES: tuple[str, ...] = tuple(EVENT_RANK)


class TopicPartition(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    topic: str = Field(min_length=1)
    partition: int = Field(ge=0, le=2**31 - 1)


class _Event(BaseModel):
    """Fields every event carries."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    ts_ms: int = Field(ge=0, description="virtual or wall clock, milliseconds")
    seq: int = Field(default=0, ge=0, description="writer's line counter; orders events with equal ts_ms")
    run: str = Field(min_length=1, description="rehearsal id")
    group: str = Field(min_length=1)
    member: str | None = None
    protocol: Protocol = Field(description="protocol of the member (member events) or the group")
    client_mix: ClientMix = Field(description="fleet variant of the group; constant within (run, group)")
    member_epoch: int | None = Field(default=None, description="member epoch, or generation for classic")
    group_epoch: int | None = None


class _MemberEvent(_Event):
    member: str = Field(min_length=1)


class MemberJoined(_MemberEvent):
    event: Literal["member_joined"] = "member_joined"
    instance_id: str | None = None  # static membership, KIP-345


class MemberLeft(_MemberEvent):
    event: Literal["member_left"] = "member_left"
    reason: str | None = None


class MemberFenced(_MemberEvent):
    event: Literal["member_fenced"] = "member_fenced"
    reason: str | None = None


class AssignmentSent(_MemberEvent):
    """The assignment the coordinator told the member (its target or an intermediate step)."""

    event: Literal["assignment_sent"] = "assignment_sent"
    member_epoch: int
    partitions: list[TopicPartition]


class PartitionsAssigned(_MemberEvent):
    """The member acknowledged that it now owns these partitions (in addition to what it owned)."""

    event: Literal["partitions_assigned"] = "partitions_assigned"
    partitions: list[TopicPartition]


class PartitionsRevoked(_MemberEvent):
    """The member acknowledged that it gave these partitions up."""

    event: Literal["partitions_revoked"] = "partitions_revoked"
    partitions: list[TopicPartition]


class GroupConverted(_Event):
    event: Literal["group_converted"] = "group_converted"
    from_type: Literal["classic", "consumer"]  # conversions are between the consumer group types
    to_type: Literal["classic", "consumer"]

    @model_validator(mode="after")
    def _changes_type(self) -> GroupConverted:
        if self.from_type == self.to_type:
            raise ValueError("group_converted needs from_type != to_type")
        return self


class GroupStable(_Event):
    """Every member reached the group's target assignment (consumer) or the group went Stable (classic)."""

    event: Literal["group_stable"] = "group_stable"
    # Optional declaration of the partitions the group consumes; they count as existing (docs).
    partitions: list[TopicPartition] | None = None


class RebalanceStarted(_Event):
    """Classic: the group entered PreparingRebalance. Consumer: the group epoch was bumped."""

    event: Literal["rebalance_started"] = "rebalance_started"
    reason: str | None = None


class TimerExpired(_Event):
    event: Literal["timer_expired"] = "timer_expired"
    kind: str = Field(min_length=1, description="session, rebalance, join, sync, revocation, ...")


class TopicMetadata(_Event):
    """Declares that a topic the group subscribes to has partitions 0..num_partitions-1."""

    event: Literal["topic_metadata"] = "topic_metadata"
    topic: str = Field(min_length=1)
    num_partitions: int = Field(ge=1, le=2**31 - 1)


class Disturbance(_Event):
    """Something the rehearsal did to the fleet (rolling upgrade step, restart, ...): starts time to stable."""

    event: Literal["disturbance"] = "disturbance"
    kind: str = Field(min_length=1)


Event = Annotated[
    MemberJoined
    | MemberLeft
    | MemberFenced
    | AssignmentSent
    | PartitionsAssigned
    | PartitionsRevoked
    | GroupConverted
    | GroupStable
    | RebalanceStarted
    | TimerExpired
    | TopicMetadata
    | Disturbance,
    Field(discriminator="event"),
]

_EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


class EventLogError(ValueError):
    """A line of an event log is not a valid rebalance event."""

    def __init__(self, source: str, line_no: int | None, message: str) -> None:
        super().__init__(f"{source}:{line_no}: {message}" if line_no is not None else f"{source}: {message}")
        self.source = source
        self.line_no = line_no
        self.message = message


def _describe(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"])
        # The discriminator puts the event type first in the location; it helps the reader.
        parts.append(f"{loc}: {e['msg']}" if loc else e["msg"])
    return "; ".join(parts)


def parse_event(line: str, source: str = "<line>", line_no: int = 0) -> Event:
    """One JSON line to an event; raises EventLogError that names the file, line and field."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise EventLogError(source, line_no, f"not JSON: {e.msg} at column {e.colno}") from None
    if not isinstance(obj, dict):
        raise EventLogError(source, line_no, f"expected a JSON object, got {type(obj).__name__}")
    for key in ENVELOPE_KEYS & obj.keys():
        del obj[key]
    kind = obj.get("event")
    if kind not in EVENT_RANK:
        raise EventLogError(source, line_no, f"unknown event type {kind!r}; known: {', '.join(EVENT_TYPES)}")
    try:
        return _EVENT_ADAPTER.validate_python(obj)
    except ValidationError as e:
        raise EventLogError(source, line_no, f"invalid {kind} event: {_describe(e)}") from None


def event_to_dict(event: Event) -> dict[str, Any]:
    """The JSON object of an event, without the fields left at None."""
    return event.model_dump(mode="json", exclude_none=True)


def event_to_json(event: Event) -> str:
    return json.dumps(event_to_dict(event), separators=(",", ":"))


def event_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Files named by paths; directories are walked (names starting with '.' or '_' skipped), sorted."""
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = []
            for root, dirs, files in os.walk(path):
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
                found += [Path(root, f) for f in files if not f.startswith((".", "_"))]
            out += sorted(found)
        elif path.exists():
            out.append(path)
        else:
            raise FileNotFoundError(f"no such event log: {path}")
    return out


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return path.open(encoding="utf-8")


def iter_lines(paths: Iterable[str | os.PathLike[str]]) -> Iterator[tuple[str, int, str]]:
    """(source, line number from 1, line) of every non-blank line of the event logs."""
    for path in event_files(paths):
        with _open_text(path) as f:
            for no, line in enumerate(f, start=1):
                if line.strip():
                    yield str(path), no, line


def read_events(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Event]:
    """Validated events of the logs in file order; stops at the first bad line with EventLogError."""
    for source, no, line in iter_lines(paths):
        yield parse_event(line, source, no)


def validate_logs(paths: Iterable[str | os.PathLike[str]], max_errors: int = 20) -> list[EventLogError]:
    """All line errors (up to max_errors) plus the checks that span lines: one client_mix per group."""
    errors: list[EventLogError] = []
    mix_of: dict[tuple[str, str], str] = {}
    for source, no, line in iter_lines(paths):
        try:
            ev = parse_event(line, source, no)
        except EventLogError as e:
            errors.append(e)
        else:
            first = mix_of.setdefault((ev.run, ev.group), ev.client_mix)
            if first != ev.client_mix:
                errors.append(
                    EventLogError(
                        source,
                        no,
                        f"group {ev.group!r} of run {ev.run!r} has client_mix {ev.client_mix!r} "
                        f"but earlier lines say {first!r}; a group belongs to one fleet variant",
                    )
                )
        if len(errors) >= max_errors:
            break
    return errors


class EventWriter:
    """Appends events as JSON lines; numbers them (seq) so that equal timestamps keep the writer's order."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Continue the numbering of an existing file so that seq stays unique within it.
        self._seq = 0
        if self.path.exists():
            with self.path.open("rb") as f:
                self._seq = sum(1 for _ in f)
        self._file: IO[str] = self.path.open("a", encoding="utf-8")

    def write(self, event: Event) -> Event:
        stamped = event.model_copy(update={"seq": self._seq})
        self._seq += 1
        self._file.write(event_to_json(stamped) + "\n")
        return stamped

    def write_all(self, events: Iterable[Event]) -> None:
        for ev in events:
            self.write(ev)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def structlog_event_logger(stream: TextIO) -> Any:
    """A structlog logger whose lines are exactly rebalance events (JSON renderer, no other processors)."""
    import structlog

    return structlog.wrap_logger(
        structlog.PrintLogger(stream), processors=[structlog.processors.JSONRenderer()]
    )


def log_event(logger: Any, event: Event) -> None:
    """Log an event through structlog; structlog's message key is "event", which is the event type."""
    fields = event_to_dict(event)
    kind = fields.pop("event")
    logger.info(kind, **fields)
