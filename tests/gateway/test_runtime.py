"""The coordinator runtime's shards (gateway/groups/runtime.py): placement, isolation of a failing shard, fencing."""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.admin import DescribeGroupsRequest
from kafka.protocol.consumer.group import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from coordinator.messages import ConsumerGroupHeartbeatRequest
from coordinator.records.codec import group_of_key
from gateway.groups.layer import GroupLayer
from gateway.groups.runtime import CoordinatorRuntime, ShardUnloaded
from gateway.groups.shard_state import ShardState
from gateway.state.file_store import FileStateStore, shard_dir
from gateway.state.log import FileStateLog, Record
from gateway.state.store import ShardFenced, shard_of
from gateway.wire.api_keys import ApiKey
from translate.group_service import GroupService

from ._groups_support import call
from .test_groups_layer import started

NOT_COORDINATOR = 16
COORDINATOR_NOT_AVAILABLE = 15


def groups_in_distinct_shards(shards: int, n: int) -> list[str]:
    """``n`` group ids, each in a shard of its own."""
    out: dict[int, str] = {}
    i = 0
    while len(out) < n:
        gid = f"g-{i}"
        out.setdefault(shard_of(gid, shards), gid)
        i += 1
    return list(out.values())


async def member(layer: GroupLayer, group: str) -> tuple[str, int]:
    """One classic member joins and syncs: the group is Stable and its record written."""
    protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
    r = await call(layer, ApiKey.JOIN_GROUP, 3, JoinGroupRequest[3](
        group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id="",
        protocol_type="consumer", protocols=protocols,
    ))
    assert r.error_code == 0
    s = await call(layer, ApiKey.SYNC_GROUP, 2, SyncGroupRequest[2](
        group_id=group, generation_id=r.generation_id, member_id=r.member_id,
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=r.member_id, assignment=b"a")],
    ))
    assert s.error_code == 0
    return r.member_id, r.generation_id


def shard_groups(state: Path, shard: int) -> set[str]:
    log = FileStateLog(shard_dir(state, shard))
    try:
        return {group_of_key(r.key) for r in log.replay()}
    finally:
        log.close()


async def test_a_groups_records_go_to_its_shards_log_only(tmp_path: Path) -> None:
    state = tmp_path / "state"
    a, b, c = groups_in_distinct_shards(4, 3)
    layer = await started(state_dir=str(state), **{"state.topic.num.partitions": 4})
    try:
        assert layer.runtime.shard_count == 4 and len(layer.runtime.shards) == 4
        for g in (a, b, c):
            await member(layer, g)
            assert layer.runtime.shard_for(g).index == shard_of(g, 4)
            assert layer.runtime.shard_for(g).service.group_kind(g) == "classic"
            # No other shard's service holds it.
            assert [s.index for s in layer.runtime.shards if s.service.group_kind(g)] == [shard_of(g, 4)]
    finally:
        await layer.stop()
    for g in (a, b, c):
        assert shard_groups(state, shard_of(g, 4)) == {g}
    empty = {0, 1, 2, 3} - {shard_of(g, 4) for g in (a, b, c)}
    assert all(shard_groups(state, n) == set() for n in empty)


def _fail_writes_of(monkeypatch: pytest.MonkeyPatch, fd: int) -> list[int]:
    import gateway.state.log as mod

    real_write = mod.os.write
    calls: list[int] = []

    def write(f: int, data: Any) -> int:
        if f != fd:
            return real_write(f, data)
        calls.append(len(data))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(mod.os, "write", write)
    return calls


async def test_a_failing_shard_log_unloads_only_its_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    healthy, failing = groups_in_distinct_shards(4, 2)
    layer = await started(state_dir=str(state), **{"state.topic.num.partitions": 4})
    layer.runtime.reload_backoff_s = (0.05, 0.2)
    try:
        kept, kept_gen = await member(layer, healthy)
        lost, lost_gen = await member(layer, failing)
        bad = layer.runtime.shard_for(failing)
        assert bad.log is not None
        calls = _fail_writes_of(monkeypatch, bad.log._fd)  # type: ignore[attr-defined]
        # A new member of the failing group writes a record: its shard cannot take it.
        protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
        j = await call(layer, ApiKey.JOIN_GROUP, 3, JoinGroupRequest[3](
            group_id=failing, session_timeout_ms=10000, rebalance_timeout_ms=10000, member_id=lost,
            protocol_type="consumer", protocols=protocols,
        ))
        s = await call(layer, ApiKey.SYNC_GROUP, 2, SyncGroupRequest[2](
            group_id=failing, generation_id=j.generation_id, member_id=lost,
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=lost, assignment=b"b")],
        ))
        assert calls, "the failure was injected"
        assert NOT_COORDINATOR in (j.error_code, s.error_code)
        assert bad.state in (ShardState.FAILED, ShardState.LOADING)  # re-read in the background
        assert [sh.index for sh in layer.runtime.shards if sh.state is not ShardState.ACTIVE] == [bad.index]
        # The failing shard's group is told to go away and come back ...
        h = await call(layer, ApiKey.HEARTBEAT, 2, HeartbeatRequest[2](group_id=failing, generation_id=lost_gen, member_id=lost))
        assert h.error_code == NOT_COORDINATOR
        f = await call(layer, ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest[3](key=failing, key_type=0))
        assert f.error_code == COORDINATOR_NOT_AVAILABLE
        # ... while the other shard's group is served as before, timers and all.
        h = await call(layer, ApiKey.HEARTBEAT, 2, HeartbeatRequest[2](group_id=healthy, generation_id=kept_gen, member_id=kept))
        assert h.error_code == 0
        f = await call(layer, ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest[3](key=healthy, key_type=0))
        assert f.error_code == 0
        d = await call(layer, ApiKey.DESCRIBE_GROUPS, 5, DescribeGroupsRequest[5](groups=[healthy]))
        assert [m.member_id for m in d.groups[0].members] == [kept]
        assert layer.runtime.shard_for(healthy).timers  # its session timer still armed

        monkeypatch.undo()  # the disk works again: the shard is re-read by itself
        for _ in range(100):
            if bad.state is ShardState.ACTIVE:
                break
            await asyncio.sleep(0.05)
        assert bad.state is ShardState.ACTIVE
        h = await call(layer, ApiKey.HEARTBEAT, 2, HeartbeatRequest[2](group_id=failing, generation_id=lost_gen, member_id=lost))
        assert h.error_code in (0, 27)  # acknowledged membership survived (27: a rebalance restarted on load)
    finally:
        await layer.stop()


class _FencingLog:
    """A ShardLog (gateway/state/store.py) whose owner was fenced once ``fence`` is set."""

    def __init__(self, shard: int, records: list[Record]) -> None:
        self.shard = shard
        self.records = records
        self.fenced = False

    def replay(self) -> Iterator[Record]:
        return iter(list(self.records))

    def append(self, records: Iterable[Record]) -> None:
        if self.fenced:
            raise ShardFenced(f"shard {self.shard}: a newer owner took it over")
        self.records.extend(records)

    def unsynced(self) -> bool:
        return True  # every sync runs, as a log that cannot tell

    async def sync(self) -> None:
        # As the cluster store: a sync with nothing appended writes nothing, so it cannot notice fencing.
        pass

    def close(self) -> None:
        pass


class _Store:
    def __init__(self, shards: int) -> None:
        self.shards = shards
        self.logs = {n: _FencingLog(n, []) for n in range(shards)}
        self.opened: list[int] = []

    async def open(self) -> None:
        pass

    async def open_shard(self, shard: int) -> _FencingLog:
        self.opened.append(shard)
        return self.logs[shard]

    async def close(self) -> None:
        pass


def _join(group: str, member_id: str) -> ConsumerGroupHeartbeatRequest:
    """A KIP-848 member joining (epoch 0): the group and member records are written at once."""
    return ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=0, rebalance_timeout_ms=30000,
        subscribed_topic_names=["t"], topic_partitions=[],
    )


async def _running(
    store: _Store, new_service: Callable[[], GroupService] = GroupService, **settings: Any
) -> CoordinatorRuntime:
    """A runtime of ``store``'s shards, its settings (``reload_backoff_s``, ``stall_grace_ms``, ...)
    set before its first load, loaded and started."""
    runtime = CoordinatorRuntime(store.shards, new_service=new_service, store=store)  # type: ignore[arg-type]
    for name, value in settings.items():
        setattr(runtime, name, value)
    await runtime.load()
    runtime.start()
    return runtime


async def test_a_fenced_shard_stays_unloaded_and_the_others_serve() -> None:
    store = _Store(3)
    runtime = await _running(store, reload_backoff_s=(0.01, 0.02))
    try:
        fenced_group, other = groups_in_distinct_shards(3, 2)
        victim = runtime.shard_for(fenced_group)
        store.logs[victim.index].fenced = True
        with pytest.raises(ShardUnloaded):
            await runtime.call(fenced_group, _join(fenced_group, "m1"))
        assert victim.state is ShardState.FENCED
        await asyncio.sleep(0.1)
        assert victim.state is ShardState.FENCED and store.opened.count(victim.index) == 1  # never re-opened
        with pytest.raises(ShardUnloaded):
            await runtime.call(fenced_group, _join(fenced_group, "m2"))
        reply = await runtime.call(other, _join(other, "m3"))  # another shard serves on
        assert reply.error_code == 0 and reply.member_epoch == 1
        assert [group_of_key(r.key) for r in store.logs[runtime.shard_of(other)].records] and all(
            group_of_key(r.key) == other for r in store.logs[runtime.shard_of(other)].records
        )
        assert runtime.counters["shards_fenced"] == 1
    finally:
        await runtime.stop()


def _heartbeat(group: str, member_id: str, epoch: int) -> ConsumerGroupHeartbeatRequest:
    """A steady KIP-848 heartbeat: nothing changed, nothing to write."""
    return ConsumerGroupHeartbeatRequest(group_id=group, member_id=member_id, member_epoch=epoch)


async def test_after_a_stall_a_shard_taken_over_meanwhile_answers_nothing_from_memory() -> None:
    """A paused process (its loop stood still past the stall threshold) writes an owner marker to each
    shard it holds before serving again: the shard a newer owner fenced meanwhile is unloaded instead of
    answering a heartbeat from its stale memory; the others prove their ownership and serve on."""
    from gateway.state.store import OWNER_MARKER_KEY

    store = _Store(3)
    runtime = await _running(store)
    runtime.watch_stalls(5.0)
    try:
        taken, kept = groups_in_distinct_shards(3, 2)
        for g in (taken, kept):
            assert (await runtime.call(g, _join(g, "m1"))).error_code == 0
        # A heartbeat that writes nothing is served from memory while the process is not stalled.
        fenced_log = store.logs[runtime.shard_of(taken)]
        fenced_log.fenced = True
        assert (await runtime.call(taken, _heartbeat(taken, "m1", 1))).error_code == 0
        assert runtime.stalls is not None
        runtime.stalls.last_tick -= 10.0  # the process stood still for 10 s (SIGSTOP)
        with pytest.raises(ShardUnloaded):
            await runtime.call(taken, _heartbeat(taken, "m1", 1))
        assert runtime.shard_for(taken).state is ShardState.FENCED
        assert (await runtime.call(kept, _heartbeat(kept, "m1", 1))).error_code == 0
        assert store.logs[runtime.shard_of(kept)].records[-1].key == OWNER_MARKER_KEY
        assert runtime.counters["stall_checks"] == 1 and runtime.counters["shards_fenced"] == 1
    finally:
        await runtime.stop()


class _CountingLog(_FencingLog):
    """Its syncs counted; ``unsynced`` as the stores' logs say it: records appended since the last sync."""

    def __init__(self, shard: int) -> None:
        super().__init__(shard, [])
        self.syncs = 0
        self.pending = 0

    def append(self, records: Iterable[Record]) -> None:
        batch = list(records)
        super().append(batch)
        self.pending += len(batch)

    def unsynced(self) -> bool:
        return self.pending > 0

    async def sync(self) -> None:
        self.syncs += 1
        self.pending = 0


async def test_an_answer_that_appends_nothing_waits_for_no_write() -> None:
    """A join appends records and its answer waits for their write (one flush observed); a steady
    heartbeat appends nothing and is answered without a sync (Kafka's flush time counts real writes)."""
    store = _Store(1)
    log_ = store.logs[0] = _CountingLog(0)
    runtime = await _running(store)
    try:
        syncs, flushes = log_.syncs, runtime.stats.flush_time.count
        assert (await runtime.call("g", _join("g", "m1"))).error_code == 0
        assert (log_.syncs, runtime.stats.flush_time.count) == (syncs + 1, flushes + 1)
        for _ in range(3):
            assert (await runtime.call("g", _heartbeat("g", "m1", 1))).error_code == 0
        assert (log_.syncs, runtime.stats.flush_time.count) == (syncs + 1, flushes + 1)
        log_.pending = 1  # another request's records still on their way: the next answer waits for them
        assert (await runtime.call("g", _heartbeat("g", "m1", 1))).error_code == 0
        assert log_.syncs == syncs + 2
    finally:
        await runtime.stop()


def test_the_shard_count_setting_takes_kafkas_name_and_defaults_to_50() -> None:
    from gateway.config.coordinator import CoordinatorSettings

    assert CoordinatorSettings().state_topic_num_partitions == 50
    assert CoordinatorSettings.model_validate({"state.topic.num.partitions": 7}).state_topic_num_partitions == 7
    with pytest.raises(ValueError):
        CoordinatorSettings.model_validate({"state.topic.num.partitions": 0})


def test_the_runtime_refuses_a_store_of_another_shard_count(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        CoordinatorRuntime(4, new_service=GroupService, store=FileStateStore(tmp_path, 8))


async def test_a_claimed_request_is_decoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``claims`` decodes to decide (a managed_groups pattern) and hands its decode to the handler."""
    from gateway.groups.dispatch import Decoded
    from gateway.wire import codec, frames

    from ._groups_support import StubConnection, request_payload

    layer = await started(managed_groups="app-.*")
    try:
        real = codec.decode_request
        decodes: list[int] = []

        def counting(api_key: int, version: int, payload: bytes) -> Any:
            decodes.append(api_key)
            return real(api_key, version, payload)

        monkeypatch.setattr(codec, "decode_request", counting)
        payload = request_payload(FindCoordinatorRequest[3](key="app-1", key_type=0), 3)
        claim = layer.claims(len(payload).to_bytes(4, "big") + payload, ApiKey.FIND_COORDINATOR, 3)
        assert isinstance(claim, Decoded)
        header = frames.parse_request_header(payload, codec.request_header_flexible(ApiKey.FIND_COORDINATOR, 3))
        out = await layer.handle(StubConnection(), header, payload, claim)  # type: ignore[arg-type]
        assert codec.decode_response(ApiKey.FIND_COORDINATOR, 3, out)[1].error_code == 0
        assert decodes == [ApiKey.FIND_COORDINATOR]  # once, by claims
        other = request_payload(FindCoordinatorRequest[3](key="other", key_type=0), 3)
        assert not layer.claims(len(other).to_bytes(4, "big") + other, ApiKey.FIND_COORDINATOR, 3)  # passes through
    finally:
        await layer.stop()


class _StallingLog(_FencingLog):
    """A ShardLog whose writes complete only while ``flowing`` is set (a state partition without a
    leader holds every sync back, the syncs that write nothing included)."""

    def __init__(self, shard: int, flowing: asyncio.Event) -> None:
        super().__init__(shard, [])
        self.flowing = flowing

    async def sync(self) -> None:
        await self.flowing.wait()


async def test_a_stalled_write_postpones_session_expiry_until_it_completes() -> None:
    """Members whose heartbeat answers a stalled write holds back are not expired while it is stalled
    (their clients wait for the answer before sending another heartbeat); once it completes, the
    postponed session timers run again, delayed by as long as the stall lasted, and still expire a member
    that does not come back."""
    from coordinator.config import CoordinatorConfig

    flowing = asyncio.Event()
    flowing.set()
    store = _Store(1)
    store.logs = {0: _StallingLog(0, flowing)}  # type: ignore[dict-item]

    def service() -> GroupService:
        return GroupService(coordinator_config=CoordinatorConfig(session_timeout_ms=400, heartbeat_interval_ms=100))

    runtime = await _running(store, service, stall_grace_ms=100)
    shard = runtime.shards[0]
    try:
        first = await runtime.call("g", _join("g", "m1"))
        assert first.error_code == 0
        flowing.clear()  # the partition loses its leader
        joining = asyncio.ensure_future(runtime.call("g", _join("g", "m2")))  # its records wait
        held = asyncio.ensure_future(runtime.call("g", _heartbeat("g", "m1", first.member_epoch)))
        await asyncio.sleep(1.0)  # more than twice the session timeout
        assert not joining.done() and not held.done()
        assert shard.service.member_count("g") == (2, "consumer"), "members expired while their answers were held"
        assert runtime.counters["timers_postponed"] >= 2 and shard.postponed

        flowing.set()  # a new leader: the write completes, the held answers are released
        assert (await joining).error_code == 0
        reply = await held
        assert reply.error_code == 0
        assert not shard.postponed and len(shard.timers) >= 2
        assert (await runtime.call("g", _heartbeat("g", "m1", reply.member_epoch))).error_code == 0
        assert shard.service.member_count("g") == (2, "consumer")
        # Postponed, not cancelled: the members that heartbeat no more are expired after all.
        for _ in range(60):
            if shard.service.member_count("g")[0] == 0:
                break
            await asyncio.sleep(0.05)
        assert shard.service.member_count("g")[0] == 0
    finally:
        flowing.set()
        await runtime.stop()


async def test_an_answer_held_by_a_stalled_write_is_not_held_past_the_bound() -> None:
    """With ``answer_stall_s`` set (the cluster store), a request whose answer waits for a stalled write
    is answered ShardStalled (NOT_COORDINATOR: the client retries, as it does while Kafka's coordinator
    moves) once the bound passes, instead of hanging until the client times it out; the shard stays
    loaded, and the write, once it completes, leaves the change in place."""
    from gateway.groups.runtime import ShardStalled

    flowing = asyncio.Event()
    flowing.set()
    store = _Store(1)
    store.logs = {0: _StallingLog(0, flowing)}  # type: ignore[dict-item]
    runtime = await _running(store, answer_stall_s=0.2)
    shard = runtime.shards[0]
    try:
        first = await runtime.call("g", _join("g", "m1"))
        assert first.error_code == 0
        flowing.clear()  # the partition loses its leader
        started = asyncio.get_running_loop().time()
        with pytest.raises(ShardStalled):
            await asyncio.wait_for(runtime.call("g", _join("g", "m2")), 5)
        assert asyncio.get_running_loop().time() - started < 2.0
        with pytest.raises(ShardStalled):  # a heartbeat that writes nothing waits for the same write
            await asyncio.wait_for(runtime.call("g", _heartbeat("g", "m1", first.member_epoch)), 5)
        assert shard.state is ShardState.ACTIVE and runtime.counters["stalled_answers"] == 2
        # While the write stays stalled, a request is refused as it arrives and changes nothing: the
        # join of m3 is answered at once and m3 is not in the group.
        started = asyncio.get_running_loop().time()
        with pytest.raises(ShardStalled):
            await asyncio.wait_for(runtime.call("g", _join("g", "m3")), 5)
        assert asyncio.get_running_loop().time() - started < 0.15
        assert shard.service.member_count("g") == (2, "consumer")
        assert runtime.counters["stalled_answers"] == 3
        flowing.set()  # a new leader: the write completes
        await asyncio.sleep(0.05)
        assert shard.service.member_count("g") == (2, "consumer")
        again = await runtime.call("g", _heartbeat("g", "m2", 1))  # the retry is answered at once
        assert again.error_code == 0
    finally:
        flowing.set()
        await runtime.stop()


@pytest.mark.timeout(60)  # before the fix the join never settled: fail in a minute, not the suite's five
def test_a_group_is_served_on_uvloop_where_timers_are_rearmed_and_cancelled(tmp_path: Path) -> None:
    """uvloop's timer handles are not asyncio's class: a join, a sync and heartbeats re-arm and cancel the
    member's timers on them (a JoinGroup once answered UNKNOWN_SERVER_ERROR on uvloop)."""
    uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed")

    async def scenario() -> None:
        assert "uvloop" in type(asyncio.get_running_loop()).__module__
        layer = await started(state_dir=str(tmp_path / "state"))
        try:
            member_id, generation = await member(layer, "g-uv")
            for _ in range(3):
                h = await call(layer, ApiKey.HEARTBEAT, 1, HeartbeatRequest[1](
                    group_id="g-uv", generation_id=generation, member_id=member_id))
                assert h.error_code == 0
        finally:
            await layer.stop()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())


async def test_heartbeats_keep_one_session_timer_that_expires_the_member_after_the_last_one() -> None:
    """Each heartbeat moves the member's session deadline later: the shard keeps the timer it armed
    (no new timer per heartbeat), and the member is still expired a session after its last heartbeat."""
    from coordinator.config import CoordinatorConfig
    from coordinator.timers import session_key

    def service() -> GroupService:
        return GroupService(coordinator_config=CoordinatorConfig(session_timeout_ms=300, heartbeat_interval_ms=50))

    runtime = await _running(_Store(1), service)
    shard = runtime.shards[0]
    try:
        first = await runtime.call("g", _join("g", "m1"))
        assert first.error_code == 0
        timer = shard.timers[session_key("g", first.member_id)]
        epoch = first.member_epoch
        for _ in range(12):  # 0.6 s of heartbeats: twice the session timeout
            await asyncio.sleep(0.05)
            reply = await runtime.call("g", _heartbeat("g", first.member_id, epoch))
            assert reply.error_code == 0
            epoch = reply.member_epoch
        assert shard.service.member_count("g")[0] == 1, "expired while it heartbeat"
        assert shard.timers[session_key("g", first.member_id)] is timer
        for _ in range(100):
            if shard.service.member_count("g")[0] == 0:
                break
            await asyncio.sleep(0.05)
        assert shard.service.member_count("g")[0] == 0
        assert session_key("g", first.member_id) not in shard.timers
    finally:
        await runtime.stop()
