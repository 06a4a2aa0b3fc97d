"""The gateway's rebalance event log: the events translate/rebalance_events.py derives, as JSON lines.

Turned on with ``--rebalance-events PATH`` (``coordinator.rebalance_events``); every event is one JSON
object per line written through its own structlog logger (JSON renderer only: the line is exactly the
rehearsal event, docs/rehearsal-events.md), appended and flushed line by line, so that
``groupgate rehearse report PATH`` can analyse a real rolling upgrade through the gateway. When the
option is off nothing of this runs.

Appending to an existing log continues it: ``seq`` goes on from the number of lines already there, and
the ``client_mix`` each group of the same run was written with is kept (a group belongs to one fleet
variant within a run).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

import structlog

from translate.group_service import GroupService
from translate.rebalance_events import RebalanceEventDeriver

from .logging import get_logger

log = get_logger("gateway.rebalance_log")


def _existing(path: Path, run: str) -> tuple[int, dict[str, str]]:
    """(lines already in the log, group -> client_mix of ``run`` found there)."""
    lines = 0
    mixes: dict[str, str] = {}
    if not path.exists():
        return lines, mixes
    with path.open("rb") as f:
        for raw in f:
            lines += 1
            try:
                obj = json.loads(raw)
            except ValueError:
                continue  # e.g. a line torn by a crash; the validator reports it
            if isinstance(obj, dict) and obj.get("run") == run and isinstance(obj.get("group"), str):
                mix = obj.get("client_mix")
                if isinstance(mix, str):
                    mixes.setdefault(obj["group"], mix)
    return lines, mixes


class RebalanceEventLog:
    """``log = RebalanceEventLog(path, run, service)``; then call ``log.deriver`` instead of the service."""

    def __init__(self, path: str | Path, run: str, service: GroupService) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        first_seq, mixes = _existing(self.path, run)
        self._file: IO[str] = self._open()
        self.written = 0
        self.deriver = RebalanceEventDeriver(
            service, self._write, run, first_seq=first_seq, client_mixes=mixes, on_error=self._failed
        )
        log.info("writing rebalance events", path=str(self.path), run=run, first_seq=first_seq)

    def rebind(self, service: GroupService) -> None:
        """Derive events from a freshly loaded service (after the state log was re-read); seq and the
        groups' client_mix carry on."""
        old = self.deriver
        self.deriver = RebalanceEventDeriver(
            service, self._write, old.run, first_seq=old.seq, client_mixes=old.mixes, on_error=self._failed
        )

    def _open(self) -> IO[str]:
        f = self.path.open("a", encoding="utf-8")
        self._logger: Any = structlog.wrap_logger(
            structlog.WriteLogger(f), processors=[structlog.processors.JSONRenderer()]
        )
        return f

    def reopen(self) -> None:
        """Continue in a new file at the same path (after logrotate moved the old one away; SIGHUP).

        seq and the groups' client_mix carry on: the rotated files together are one log."""
        old = self._file
        self._file = self._open()
        old.close()
        log.info("rebalance event log reopened", path=str(self.path), written=self.written)

    def _write(self, event: dict[str, Any]) -> None:
        fields = dict(event)
        kind = fields.pop("event")  # structlog's message key is "event": the event type
        self._logger.info(kind, **fields)
        self.written += 1

    def _failed(self, exc: Exception) -> None:
        # The group call itself went through; only its events are missing from the log.
        log.error("rebalance events not written", path=str(self.path), error=repr(exc), failures=self.deriver.failures)

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()
