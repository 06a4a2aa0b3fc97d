"""What one call into a GroupService says happened to its groups, as the rebalance event deriver reads it
(sans-I/O): the deriver's per-group memory (``GroupMemo``, ``MemberMemo``) and ``Seen``, the groups an outcome's
records and changes touched. Consumer groups change only through records; classic groups settle with a
record and announce the rest (a member removed, a rebalance started, a conversion) as ``Outcome.changes``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from coordinator.outcome import ConversionRefused, GroupConverted, MemberRemoved, Outcome, RebalanceStarted
from coordinator.records import Record, RecordType

TP = tuple[str, int]


def mix_of_protocol(protocol_name: str | None) -> str:
    """The classic client mix an assignor protocol name implies."""
    return "classic-cooperative" if protocol_name and "cooperative" in protocol_name.lower() else "classic-eager"


@dataclass(slots=True)
class MemberMemo:
    protocol: str
    epoch: int | None = None
    acked: set[TP] = field(default_factory=set)


@dataclass(slots=True)
class GroupMemo:
    members: dict[str, MemberMemo] = field(default_factory=dict)
    topics: dict[str, int] = field(default_factory=dict)  # declared with topic_metadata
    # The group as of the last call that changed it: its type, epoch (classic: generation) and whether it
    # was Stable. A consumer group changes only through records, a classic one's rebalance starts with a
    # RebalanceStarted change and settles with a record: every change passes through here.
    kind: str | None = None
    epoch: int = 0
    stable: bool = False


class Seen:
    """What one call's outcome says happened to its groups: consumer groups through their records
    (a member metadata tombstone removes a member, record 4 is the subscribed topics' metadata), classic
    groups and conversions through its ``changes``."""

    __slots__ = ("groups", "removed", "metadata", "started", "converted")

    def __init__(self, result: Outcome) -> None:
        self.groups: dict[str, None] = {}  # touched, in order
        self.removed: dict[str, set[str]] = {}
        self.metadata: set[str] = set()
        self.started: set[str] = set()
        self.converted: dict[str, GroupConverted] = {}
        for record in result.records:
            self.groups[record.group_id] = None
            if isinstance(record, Record) and record.value is None and record.type is RecordType.MEMBER_METADATA:
                self.removed.setdefault(record.group_id, set()).add(record.sub_key or "")
            elif isinstance(record, Record) and record.type is RecordType.PARTITION_METADATA:
                self.metadata.add(record.group_id)
        for change in result.changes:
            if isinstance(change, ConversionRefused):
                continue  # nothing changed
            self.groups[change.group_id] = None
            if isinstance(change, MemberRemoved):
                self.removed.setdefault(change.group_id, set()).add(change.member_id)
            elif isinstance(change, RebalanceStarted):
                self.started.add(change.group_id)
            elif isinstance(change, GroupConverted):
                self.converted[change.group_id] = change


def touched(seen: Seen, gids: list[str]) -> list[str]:
    """The groups the call changed: those it was made for first, in their order."""
    if not seen.groups:
        return []
    return [g for g in gids if g in seen.groups] + sorted(g for g in seen.groups if g not in gids)


def tps(parts: Iterable[TP]) -> list[dict[str, Any]]:
    return [{"topic": t, "partition": p} for t, p in sorted(parts)]
