"""A shard's life as one transition table (gateway/groups/shard_state.py): every listed row, and every
unlisted (state, event) refused with an error naming both."""

from __future__ import annotations

import ast
import asyncio
import itertools
from pathlib import Path

import pytest

from gateway.groups.runtime import CoordinatorRuntime
from gateway.groups.shard_state import (
    HANDING_OVER,
    NOT_OWNED,
    STOPPED,
    TRANSITIONS,
    ShardEvent,
    ShardLife,
    ShardState,
    ShardStateError,
    ShardUnloaded,
)
from gateway.state.store import ShardFenced
from translate.group_service import GroupService

S, E = ShardState, ShardEvent

# The table written out once more, row by row: a row added, removed or changed fails here first.
EXPECTED = {
    (S.ACTIVE, E.DISOWN): S.UNOWNED,
    (S.UNOWNED, E.TAKE_OVER): S.LOADING,
    (S.FAILED, E.TAKE_OVER): S.LOADING,
    (S.FENCED, E.TAKE_OVER): S.LOADING,
    (S.ACTIVE, E.TAKE_OVER): S.LOADING,
    (S.LOADING, E.TAKE_OVER): S.LOADING,
    (S.LOADING, E.LOADED): S.ACTIVE,
    (S.LOADING, E.LOAD_FAILED): S.FAILED,
    (S.FENCED, E.LOAD_FAILED): S.FAILED,
    (S.ACTIVE, E.WRITE_FAILED): S.FAILED,
    (S.FAILED, E.RELOAD): S.LOADING,
    (S.ACTIVE, E.FENCED): S.FENCED,
    (S.LOADING, E.FENCED): S.FENCED,
    (S.ACTIVE, E.HAND_OVER): S.DRAINING,
    (S.LOADING, E.HAND_OVER): S.UNOWNED,
    (S.FAILED, E.HAND_OVER): S.UNOWNED,
    (S.FENCED, E.HAND_OVER): S.UNOWNED,
    (S.UNOWNED, E.HAND_OVER): S.UNOWNED,
    (S.DRAINING, E.HANDED_OVER): S.UNOWNED,
    (S.DRAINING, E.WRITE_FAILED): S.UNOWNED,
    (S.DRAINING, E.FENCED): S.UNOWNED,
    (S.UNOWNED, E.HANDED_OVER): S.UNOWNED,
    **{(s, E.CLOSE): S.CLOSED for s in ShardState},
}


def _in(state: ShardState, reason: str | None = "why") -> ShardLife:
    life = ShardLife(7)
    life.state, life.reason = state, (None if state is S.ACTIVE else reason)
    return life


def test_the_table_is_the_one_written_out() -> None:
    assert TRANSITIONS == EXPECTED


@pytest.mark.parametrize(("state", "event"), sorted(EXPECTED, key=lambda k: (k[0].label, k[1].value)))
def test_every_listed_transition(state: ShardState, event: ShardEvent) -> None:
    life = _in(state)
    assert life.on(event) is EXPECTED[state, event]
    assert life.state is EXPECTED[state, event]
    assert (life.reason is None) == (life.state is S.ACTIVE)


UNLISTED = [(s, e) for s, e in itertools.product(ShardState, ShardEvent) if (s, e) not in EXPECTED]


@pytest.mark.parametrize(("state", "event"), UNLISTED)
def test_an_unlisted_transition_is_an_error_naming_the_state_and_the_event(state: ShardState, event: ShardEvent) -> None:
    life = _in(state)
    with pytest.raises(ShardStateError) as raised:
        life.on(event)
    assert str(raised.value) == f"shard 7: no transition from {state.name} on {event.name}"
    assert (raised.value.state, raised.value.event) == (state, event)
    assert life.state is state and life.reason == (None if state is S.ACTIVE else "why")  # unchanged


def test_a_shard_starts_active_and_closed_is_the_end() -> None:
    life = ShardLife(0)
    assert (life.state, life.reason) == (S.ACTIVE, None)
    life.on(E.CLOSE)
    assert (life.state, life.reason) == (S.CLOSED, STOPPED)
    assert all((S.CLOSED, e) not in TRANSITIONS for e in ShardEvent if e is not E.CLOSE)


def test_reasons_follow_the_state() -> None:
    life = ShardLife(0)
    life.on(E.HAND_OVER)
    assert life.reason == HANDING_OVER
    life.on(E.HANDED_OVER)
    assert life.reason == NOT_OWNED
    life.on(E.TAKE_OVER)
    assert (life.state, life.reason) == (S.LOADING, NOT_OWNED)  # not served, for the reason it had
    life.on(E.LOAD_FAILED, "StateLogWriteFailed: disk full")
    life.on(E.RELOAD)
    assert (life.state, life.reason) == (S.LOADING, "StateLogWriteFailed: disk full")
    life.on(E.LOAD_FAILED)  # a failed re-read keeps the first error
    assert (life.state, life.reason) == (S.FAILED, "StateLogWriteFailed: disk full")
    life.on(E.RELOAD)
    life.on(E.LOADED)
    assert (life.state, life.reason) == (S.ACTIVE, None)
    life.on(E.TAKE_OVER)  # a second take-over of a shard already served
    assert life.reason is not None


def test_the_predicates_callers_ask() -> None:
    assert {s for s in ShardState if s.loaded} == {S.ACTIVE, S.DRAINING}
    assert {s for s in ShardState if s.owned} == {S.ACTIVE, S.LOADING, S.FAILED, S.FENCED}
    assert {s for s in ShardState if s.will_serve} == {S.ACTIVE, S.LOADING, S.FAILED}


def test_a_shard_never_imports_the_runtime() -> None:
    """Shards get a ShardContext; the runtime imports them, never the other way round."""
    groups = Path(__file__).resolve().parents[2] / "gateway" / "groups"
    for name in ("shard.py", "shard_reload.py", "shard_state.py", "shard_context.py", "stall_check.py"):
        tree = ast.parse((groups / name).read_text())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert "gateway.groups.runtime" not in imported, name


# --- the table at work in a shard --------------------------------------------------------------------


class _Log:
    """A ShardLog whose next sync fails once ``failing`` is set; counts its opens through the store."""

    def __init__(self) -> None:
        self.failing: BaseException | None = None
        self.closed = False

    def replay(self):  # type: ignore[no-untyped-def]
        return iter(())

    def append(self, records) -> None:  # type: ignore[no-untyped-def]
        list(records)

    def unsynced(self) -> bool:
        return True  # every sync runs, as a log that cannot tell

    async def sync(self) -> None:
        await asyncio.sleep(0)
        if self.failing is not None:
            raise self.failing

    def close(self) -> None:
        self.closed = True


class _Store:
    shards = 1

    def __init__(self) -> None:
        self.opened = 0
        self.log = _Log()

    async def open(self) -> None:
        pass

    async def open_shard(self, shard: int) -> _Log:
        self.opened += 1
        self.log = _Log()
        return self.log

    async def close(self) -> None:
        pass


async def test_a_write_failing_while_the_shard_drains_lets_it_go_without_re_reading_it() -> None:
    """The shard belongs to another instance by then: re-opening it would fence its new owner."""
    store = _Store()
    rt = CoordinatorRuntime(1, new_service=GroupService, store=store)  # type: ignore[arg-type]
    rt.reload_backoff_s = (0.01, 0.02)
    await rt.load()
    rt.start()
    shard = rt.shards[0]
    try:
        store.log.failing = ShardFenced("a newer owner")
        release = asyncio.ensure_future(rt.release([0], timeout_s=1.0))
        while shard.state is S.ACTIVE:
            await asyncio.sleep(0)
        assert shard.state is S.DRAINING
        with pytest.raises(ShardUnloaded, match="handed over"):
            shard.check_loaded()
        shard.unload(ShardFenced("a newer owner"), shard.log)  # what a failed sync of a request does
        assert shard.state is S.UNOWNED and rt.counters["shards_fenced"] == 1
        await release
        assert (shard.state, shard.reason) == (S.UNOWNED, NOT_OWNED)
        await asyncio.sleep(0.1)
        assert store.opened == 1 and shard.reload_task is None and rt.held() == []
    finally:
        await rt.stop()
    assert shard.state is S.CLOSED


async def test_a_failed_write_re_reads_the_shard_through_loading() -> None:
    store = _Store()
    rt = CoordinatorRuntime(1, new_service=GroupService, store=store)  # type: ignore[arg-type]
    rt.reload_backoff_s = (0.01, 0.02)
    await rt.load()
    rt.start()
    shard = rt.shards[0]
    try:
        shard.unload(OSError("disk full"), shard.log)
        assert (shard.state, shard.reason) == (S.FAILED, "OSError: disk full")
        assert rt.unloaded == "OSError: disk full"
        for _ in range(100):
            if shard.state is S.ACTIVE:
                break
            await asyncio.sleep(0.01)
        assert shard.state is S.ACTIVE and store.opened == 2 and rt.unloaded is None
    finally:
        await rt.stop()
