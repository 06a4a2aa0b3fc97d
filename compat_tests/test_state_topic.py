"""The cluster state store (gateway/state/topic.py) against a real 3-node KRaft cluster, replication factor 3.

Each test uses a topic and transactional-id prefix of its own, so they share the session's cluster safely.
What is checked is what the runtime relies on: the topic is made and verified as configured; a shard opened
afresh replays exactly the committed records; a new owner fences the old one and nothing the old one writes
afterwards is visible; concurrent syncs share transactions; and a sync that returned survives the loss of
the partition's leader.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import ConfigResource, NewTopic

from compat_tests.harness.admin import admin, wait_for_leaders
from compat_tests.harness.cluster import CLUSTER_CONFIG, KafkaCluster
from coordinator import records as rec
from coordinator.records import codec as consumer_codec
from gateway.ops.cli import build_parser
from gateway.ops.cli import main as cli_main
from gateway.ops.state_cli import group_of_key
from gateway.state.log import FileStateLog, Record, StateLogWriteFailed
from gateway.state.store import ShardFenced, shard_of
from gateway.state.topic import KafkaStateStore, StateTopicMismatch, read_partition
from translate.group_records import GroupMetadataRecord, GroupMetadataValue, encode_record

pytestmark = pytest.mark.timeout(120)

SHARDS = 3
TXN_STATE_PARTITIONS = CLUSTER_CONFIG["transaction.state.log.num.partitions"]


# What the command imports on first use. pytest rewrites the asserts of every module of this distribution
# (it carries a pytest11 plugin), so a module's first import parses its source; on Python 3.11 a parse that
# overlaps another in a second thread (a traceback formatted on a client's thread, another import) can
# fail with "AST constructor recursion depth mismatch" (the AST state is shared by the threads; see
# CPython gh-106905). The tests below run the command in a worker thread, so these are imported first,
# in the main thread.
_COMMAND_MODULES = (
    "coordinator.connect.codec", "coordinator.records.codec", "gateway.logging", "gateway.state.repair",
    "translate.group_records", "translate.group_service",
)


@pytest.fixture(scope="module", autouse=True)
def _command_imported_in_the_main_thread() -> None:
    for name in _COMMAND_MODULES:
        importlib.import_module(name)
    build_parser()  # and the subcommands' plugins (groupgate.commands)


def _store(kafka3: KafkaCluster, topic: str, **kw: object) -> KafkaStateStore:
    kw.setdefault("shards", SHARDS)
    kw.setdefault("transactional_id_prefix", f"{topic}-")
    return KafkaStateStore(kafka3.bootstrap, topic=topic, **kw)  # type: ignore[arg-type]


async def _fresh_replay(kafka3: KafkaCluster, topic: str, shard: int) -> list[Record]:
    """What a new owner of ``shard`` replays (it fences the current owner: use at the end of a test)."""
    store = _store(kafka3, topic, transactional_id_prefix=f"{topic}-")
    await store.open()
    try:
        return list((await store.open_shard(shard)).replay())
    finally:
        await store.close()


async def test_open_creates_the_topic_verifies_it_and_refuses_a_partition_mismatch(
    kafka3: KafkaCluster, names: Callable[[str], str]
) -> None:
    topic = names("state")
    store = _store(kafka3, topic)
    await store.open()
    assert store.topic_check is not None and store.topic_check.created
    # Seen independently of the store, through librdkafka's admin client.
    client = admin(kafka3.bootstrap)
    md = client.list_topics(topic, timeout=10).topics[topic]
    assert len(md.partitions) == SHARDS
    assert all(len(p.replicas) == 3 for p in md.partitions.values())
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = client.describe_configs([res])[res].result(timeout=10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["min.insync.replicas"].value == "2"
    assert configs["unclean.leader.election.enable"].value == "false"

    again = _store(kafka3, topic)
    await again.open()
    assert again.topic_check is not None and not again.topic_check.created
    assert again.topic_check.partitions == SHARDS and again.topic_check.warnings == ()

    with pytest.raises(StateTopicMismatch, match=f"has {SHARDS} partitions but the store runs {SHARDS + 1} shards"):
        await _store(kafka3, topic, shards=SHARDS + 1).open()
    await store.close()


async def test_open_refuses_a_topic_that_is_not_compacted_and_warns_on_low_replication(
    kafka3: KafkaCluster, names: Callable[[str], str]
) -> None:
    client = admin(kafka3.bootstrap)
    deleting, thin = names("delete"), names("thin")
    futures = client.create_topics(
        [
            NewTopic(deleting, num_partitions=SHARDS, replication_factor=3, config={"cleanup.policy": "delete"}),
            NewTopic(thin, num_partitions=SHARDS, replication_factor=1, config={"cleanup.policy": "compact"}),
        ]
    )
    for f in futures.values():
        f.result(timeout=30)
    wait_for_leaders(client, deleting, SHARDS)
    wait_for_leaders(client, thin, SHARDS)
    with pytest.raises(StateTopicMismatch, match="cleanup.policy='delete'"):
        await _store(kafka3, deleting).open()
    store = _store(kafka3, thin)
    await store.open()
    assert store.topic_check is not None
    assert any("replication factor 1" in w for w in store.topic_check.warnings), store.topic_check


async def test_a_fresh_owner_replays_exactly_the_committed_records_in_order(
    kafka3: KafkaCluster, names: Callable[[str], str]
) -> None:
    topic = names("state")
    store = _store(kafka3, topic)
    await store.open()
    shard = await store.open_shard(1)
    assert list(shard.replay()) == []
    written = [
        Record(b"group-a", b"v1"),
        Record(b"member-a-1", b"m1"),
        Record(b"group-a", b"v2"),
        Record(b"member-a-1", None),  # a tombstone
        Record(b"group-b", b""),  # an empty value is not a tombstone
    ]
    shard.append(written[:2])
    await shard.sync()
    shard.append(written[2:4])
    shard.append(written[4:])
    await shard.sync()
    await shard.sync()  # nothing new: returns at once
    await store.close()

    assert await _fresh_replay(kafka3, topic, 1) == written
    assert await _fresh_replay(kafka3, topic, 0) == []  # other shards untouched


async def test_a_new_owner_fences_the_old_one_and_nothing_it_writes_later_is_visible(
    kafka3: KafkaCluster, names: Callable[[str], str]
) -> None:
    topic = names("state")
    a_store, b_store = _store(kafka3, topic), _store(kafka3, topic)
    await a_store.open()
    await b_store.open()
    a = await a_store.open_shard(2)
    a.append([Record(b"k", b"before")])
    await a.sync()
    a.append([Record(b"k", b"appended-before-takeover")])  # queued, not yet synced

    b = await b_store.open_shard(2)
    assert list(b.replay()) == [Record(b"k", b"before")]

    a.append([Record(b"k", b"after-takeover")])
    with pytest.raises(ShardFenced):
        await a.sync()
    with pytest.raises(ShardFenced):  # the shard refuses every later append
        a.append([Record(b"k", b"later")])
    with pytest.raises(ShardFenced):
        await a.sync()

    b.append([Record(b"k", b"by-new-owner")])
    await b.sync()
    assert await read_partition(_store(kafka3, topic), 2) == [Record(b"k", b"before"), Record(b"k", b"by-new-owner")]
    await a_store.close()
    await b_store.close()


async def test_a_transaction_open_at_takeover_is_aborted(kafka3: KafkaCluster, names: Callable[[str], str]) -> None:
    """A zombie caught mid-transaction (records sent, not committed) when the new owner opens the shard:
    the new owner's replay and every later reader skip those records, and the zombie cannot commit them."""
    topic = names("state")
    a_store, b_store = _store(kafka3, topic), _store(kafka3, topic)
    await a_store.open()
    await b_store.open()
    a = await a_store.open_shard(0)
    a.append([Record(b"k", b"committed")])
    await a.sync()
    # Drive the zombie's producer by hand to stop it between produce and commit (on the store's own loop,
    # where its clients live).
    producer, on_clients = a._producer, a_store.clients.run

    async def produce_uncommitted() -> None:
        if not producer._txn_manager.is_in_transaction():  # else the store opened it ahead of its next write
            await producer.begin_transaction()
        await (await producer.send(topic, key=b"k", value=b"in-flight", partition=0))

    await on_clients(produce_uncommitted())
    # A reader meanwhile stops at the last stable offset: the open transaction is neither returned nor
    # waited for.
    assert await read_partition(_store(kafka3, topic), 0, timeout_ms=20_000) == [Record(b"k", b"committed")]

    b = await b_store.open_shard(0)
    assert list(b.replay()) == [Record(b"k", b"committed")]
    with pytest.raises(Exception):  # noqa: B017 - the client's own fencing error
        await on_clients(producer.commit_transaction())
    assert await read_partition(_store(kafka3, topic), 0) == [Record(b"k", b"committed")]
    await a_store.close()
    await b_store.close()


def _end_offset(kafka3: KafkaCluster, topic: str, partition: int) -> int:
    """The partition's high watermark, as librdkafka reads it (records and transaction markers both count)."""
    consumer = Consumer({"bootstrap.servers": kafka3.bootstrap, "group.id": f"{topic}-watermarks"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1])
    finally:
        consumer.close()


async def test_a_transaction_opened_ahead_holds_nothing_back_is_committed_empty_when_idle_and_fenced_at_takeover(
    kafka3: KafkaCluster, names: Callable[[str], str]
) -> None:
    """After a commit the shard's producer opens the next transaction and adds the partition: a reader is
    not held back by it, one left idle is committed empty on the cluster (one marker, no record), the next
    write commits as usual, and a new owner fences the old one with such a transaction open."""
    topic = names("state")
    store = _store(kafka3, topic, preopen_idle_s=1.0)
    await store.open()
    shard = await store.open_shard(1)
    shard.append([Record(b"k", b"first")])
    await shard.sync()
    assert shard._open  # set on the store's loop before the sync returned: the next one is open
    assert await read_partition(_store(kafka3, topic), 1, timeout_ms=20_000) == [Record(b"k", b"first")]
    written = _end_offset(kafka3, topic, 1)
    assert written == 2  # the record and its transaction's commit marker
    deadline = time.monotonic() + 20
    while _end_offset(kafka3, topic, 1) == written and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert _end_offset(kafka3, topic, 1) == written + 1  # the empty commit's marker
    assert not shard._open and shard.transactions == 1
    await asyncio.sleep(1.5)
    assert _end_offset(kafka3, topic, 1) == written + 1  # nothing opened again while idle

    shard.append([Record(b"k", b"second")])
    await shard.sync()
    assert shard._open and shard.transactions == 2
    successor = _store(kafka3, topic)
    await successor.open()
    taken = await successor.open_shard(1)  # InitProducerId aborts the transaction opened ahead
    assert list(taken.replay()) == [Record(b"k", b"first"), Record(b"k", b"second")]
    shard.append([Record(b"k", b"after-takeover")])
    with pytest.raises(ShardFenced):
        await shard.sync()
    await store.close()
    await successor.close()
    assert await read_partition(_store(kafka3, topic), 1) == [Record(b"k", b"first"), Record(b"k", b"second")]


async def test_concurrent_syncs_share_transactions(kafka3: KafkaCluster, names: Callable[[str], str]) -> None:
    topic = names("state")
    store = _store(kafka3, topic)
    await store.open()
    shard = await store.open_shard(0)
    calls = 200

    async def one(i: int) -> None:
        shard.append([Record(f"key-{i}".encode(), f"value-{i}".encode())])
        await shard.sync()

    await asyncio.gather(*(one(i) for i in range(calls)))
    assert 1 <= shard.transactions < calls, shard.transactions
    assert store.transactions == shard.transactions
    await store.close()
    replayed = await _fresh_replay(kafka3, topic, 0)
    assert replayed == [Record(f"key-{i}".encode(), f"value-{i}".encode()) for i in range(calls)]


@pytest.mark.parametrize("victim", ["partition-leader", "transaction-coordinator"])
async def test_no_acknowledged_record_is_lost_when_a_broker_is_killed_mid_stream(
    kafka3: KafkaCluster, names: Callable[[str], str], victim: str
) -> None:
    """SIGKILL the broker leading the shard's partition, or the one coordinating its transactional id (the
    leader of its __transaction_state partition), while four writers append and sync: every sync that
    returned is in the log afterwards, in order per writer, and appends succeed again once the role moved."""
    topic = names("state")
    store = _store(kafka3, topic)
    await store.open()
    shard_no = 1
    shard = await store.open_shard(shard_no)
    acked: list[Record] = []
    stop = asyncio.Event()
    counter = iter(range(1_000_000))

    async def writer(w: int) -> None:
        while not stop.is_set():
            r = Record(f"w{w}-{next(counter)}".encode(), b"x" * 50)
            shard.append([r])
            await shard.sync()
            acked.append(r)
            await asyncio.sleep(0.005)

    async def until(n: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(acked) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {len(acked)} of {n} appends acknowledged within {timeout_s}s")
            await asyncio.sleep(0.05)

    writers = [asyncio.create_task(writer(w)) for w in range(4)]
    killed = None
    try:
        await until(40, 20)
        txn_partition = shard_of(store.transactional_id(shard_no), int(TXN_STATE_PARTITIONS))
        if victim == "partition-leader":
            killed = await asyncio.to_thread(kafka3.leader, topic, shard_no)
        else:
            killed = await asyncio.to_thread(kafka3.leader, "__transaction_state", txn_partition)
        await asyncio.to_thread(kafka3.kill, killed)
        at_kill = len(acked)
        assert await asyncio.to_thread(kafka3.wait_leader, topic, shard_no, not_on=killed) != killed
        assert await asyncio.to_thread(kafka3.wait_leader, "__transaction_state", txn_partition, not_on=killed) != killed
        # Appends go on once leadership has moved (the client retries across the change).
        await until(at_kill + 60, 40)
    finally:
        stop.set()
        results = await asyncio.gather(*writers, return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    assert not failures, failures
    await store.close()
    try:
        replayed = await _fresh_replay(kafka3, topic, shard_no)
        assert set(acked) <= set(replayed)
        missing = [r for r in acked if r not in set(replayed)]
        assert not missing
        # Per writer, the log order is the acknowledgement order.
        for w in range(4):
            mine = [r for r in acked if r.key.startswith(f"w{w}-".encode())]
            assert [r for r in replayed if r in set(mine)] == mine
    finally:
        if killed is not None:
            await asyncio.to_thread(kafka3.restart, killed)


async def test_not_enough_replicas_is_retried_within_the_bound_then_fails_the_shard(
    kafka3: KafkaCluster, names: Callable[[str], str]
) -> None:
    """min.insync.replicas 3 with one follower down: the partition answers NOT_ENOUGH_REPLICAS, which the
    client retries until the store's write bound, then the sync fails (not as fencing). Once the node is
    back, a re-opened shard replays what was committed and writes again."""
    topic = names("state")
    store = _store(kafka3, topic, min_insync_replicas=3, write_timeout_ms=4_000)
    await store.open()
    shard = await store.open_shard(0)
    shard.append([Record(b"k", b"1")])
    await shard.sync()
    leader = await asyncio.to_thread(kafka3.leader, topic, 0)
    # Not the transaction coordinator of the shard's transactional id either (the leader of its
    # __transaction_state partition, placed as groups are), so that only the ISR is short.
    txn_partition = shard_of(store.transactional_id(0), int(TXN_STATE_PARTITIONS))
    coordinator = await asyncio.to_thread(kafka3.leader, "__transaction_state", txn_partition)
    follower = next(n for n in kafka3.brokers if n not in (leader, coordinator))
    await asyncio.to_thread(kafka3.kill, follower)
    try:
        deadline = time.monotonic() + 30
        while follower in await asyncio.to_thread(kafka3.isr, topic, 0):
            assert time.monotonic() < deadline, "the killed follower never left the ISR"
            await asyncio.sleep(0.3)
        shard.append([Record(b"k", b"2")])
        with pytest.raises(StateLogWriteFailed, match="not committed within 4s") as info:
            await shard.sync()
        assert not isinstance(info.value, ShardFenced)
        with pytest.raises(StateLogWriteFailed):
            shard.append([Record(b"k", b"3")])
    finally:
        await asyncio.to_thread(kafka3.restart, follower)
    deadline = time.monotonic() + 60
    while len(await asyncio.to_thread(kafka3.isr, topic, 0)) < 3:
        assert time.monotonic() < deadline, "the restarted follower never rejoined the ISR"
        await asyncio.sleep(0.3)
    again = await store.open_shard(0)
    replayed = list(again.replay())
    # The timed-out transaction's outcome was unknown: its commit may have completed once the ISR was
    # whole again, or the re-open aborted it. Either way the re-opened shard holds a settled answer.
    assert replayed in ([Record(b"k", b"1")], [Record(b"k", b"1"), Record(b"k", b"2")]), replayed
    again.append([Record(b"k", b"4")])
    await again.sync()
    await store.close()
    assert await _fresh_replay(kafka3, topic, 0) == [*replayed, Record(b"k", b"4")]


async def test_a_failed_write_leaves_the_shard_refusing_until_reopened(
    kafka3: KafkaCluster, names: Callable[[str], str]
) -> None:
    """A record larger than the topic accepts fails its transaction: sync raises, the shard takes no more
    writes, and a re-open replays only what was committed before."""
    topic = names("state")
    store = _store(kafka3, topic, write_timeout_ms=20_000)
    await store.open()
    shard = await store.open_shard(0)
    shard.append([Record(b"ok", b"1")])
    await shard.sync()
    shard.append([Record(b"huge", b"x" * 2_000_000)])
    with pytest.raises(StateLogWriteFailed):
        await shard.sync()
    with pytest.raises(StateLogWriteFailed):
        shard.append([Record(b"after", b"2")])
    await store.close()
    assert await _fresh_replay(kafka3, topic, 0) == [Record(b"ok", b"1")]


async def test_state_import_copies_a_state_dir_idempotently_and_inspect_export_read_it(
    kafka3: KafkaCluster, names: Callable[[str], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = names("state")
    groups = [f"{topic}-g{i}" for i in range(6)]
    live: list[Record] = []
    file_log = FileStateLog(tmp_path / "state")
    for i, g in enumerate(groups):
        recs = [
            consumer_codec.encode(rec.Record(rec.RecordType.GROUP_METADATA, g, None, rec.GroupMetadataValue(i + 1))),
            consumer_codec.encode(
                rec.Record(rec.RecordType.TARGET_ASSIGNMENT_METADATA, g, None, rec.TargetAssignmentMetadataValue(i, 0))
            ),
        ]
        file_log.append([Record(k, v) for k, v in recs])
        live.extend(Record(k, v) for k, v in recs)
    classic = f"{topic}-classic"
    classic_kv = encode_record(GroupMetadataRecord(classic, GroupMetadataValue("consumer", 3, "range", None)))
    gone = consumer_codec.encode(rec.Record(rec.RecordType.GROUP_METADATA, f"{topic}-gone", None, rec.GroupMetadataValue(9)))
    file_log.append([Record(*classic_kv), Record(gone[0], gone[1]), Record(gone[0], None)])
    live.append(Record(*classic_kv))
    await file_log.sync()
    file_log.close()

    base = ["state", "import", "--state-dir", str(tmp_path / "state"), "--upstream", kafka3.bootstrap, "--topic", topic]
    assert await asyncio.to_thread(cli_main, [*base, "--shards", str(SHARDS)]) == 0
    out = capsys.readouterr().out
    assert f"{len(live)} live records, {len(live)} written, 0 already there" in out, out

    async def topic_content() -> list[list[Record]]:
        reader = _store(kafka3, topic)
        return [await read_partition(reader, s) for s in range(SHARDS)]

    first = await topic_content()
    for shard, records in enumerate(first):
        for r in records:
            assert shard_of(group_of_key(r.key), SHARDS) == shard
    assert sorted((r.key, r.value) for shard in first for r in shard) == sorted((r.key, r.value) for r in live)

    # Again: nothing new is written, the topic holds the same records.
    assert await asyncio.to_thread(cli_main, base) == 0
    out = capsys.readouterr().out
    assert f"{len(live)} live records, 0 written, {len(live)} already there" in out, out
    assert await topic_content() == first

    exported = [json.loads(line) for line in await _cli_lines(capsys, ["state", "export", "--upstream", kafka3.bootstrap,
                                                                       "--topic", topic])]
    assert sorted((base64.b64decode(e["key"]), base64.b64decode(e["value"])) for e in exported) == sorted(
        (r.key, r.value) for r in live
    )

    inspected = [json.loads(line) for line in await _cli_lines(capsys, ["state", "inspect", "--upstream", kafka3.bootstrap,
                                                                        "--topic", topic, "--group", groups[2]])]
    assert [(e["type"], e["group_id"]) for e in inspected] == [
        ("GROUP_METADATA", groups[2]),
        ("TARGET_ASSIGNMENT_METADATA", groups[2]),
    ]
    assert inspected[0]["value"]["epoch"] == 3 and inspected[0]["shard"] == shard_of(groups[2], SHARDS)
    classic_line = [json.loads(line) for line in await _cli_lines(
        capsys, ["state", "inspect", "--upstream", kafka3.bootstrap, "--topic", topic, "--group", classic]
    )]
    assert classic_line[0]["type"] == "CLASSIC_GROUP_METADATA" and classic_line[0]["value"]["generation"] == 3

    assert await asyncio.to_thread(cli_main, ["state", "export", "--upstream", kafka3.bootstrap, "--topic",
                                              names("missing")]) == 1
    assert "there is no state topic" in capsys.readouterr().err


async def _cli_lines(capsys: pytest.CaptureFixture[str], argv: list[str]) -> list[str]:
    assert await asyncio.to_thread(cli_main, argv) == 0
    return [line for line in capsys.readouterr().out.splitlines() if line.strip()]


async def test_state_verify_inspect_export_read_the_topic_and_name_a_corrupted_record(
    kafka: KafkaCluster, names: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    """On the session's single broker: what a store wrote verifies clean and reads back in the file format;
    a garbage value produced under a valid key makes verify fail naming the shard and offset."""
    import confluent_kafka

    topic = names("state")
    groups = [f"{topic}-g{i}" for i in range(6)]
    store = _store(kafka, topic)  # type: ignore[arg-type]
    await store.open()
    written: dict[int, list[Record]] = {}
    for g in groups:
        kv = consumer_codec.encode(rec.Record(rec.RecordType.GROUP_METADATA, g, None, rec.GroupMetadataValue(5)))
        written.setdefault(shard_of(g, SHARDS), []).append(Record(*kv))
    for shard, records in written.items():
        log = await store.open_shard(shard)
        log.append(records)
        await log.sync()
    await store.close()
    capsys.readouterr()  # the store's own log lines
    where = ["--upstream", kafka.bootstrap, "--topic", topic]

    verified = [json.loads(line) for line in await _cli_lines(capsys, ["state", "verify", *where, "--shards",
                                                                       str(SHARDS), "--json"])]
    assert [(v["shard"], v["records"], v["groups"], v["problems"]) for v in verified] == [
        (s, len(written.get(s, [])), len(written.get(s, [])), []) for s in range(SHARDS)
    ]
    exported = [json.loads(line) for line in await _cli_lines(capsys, ["state", "export", *where])]
    assert {(e["shard"], e["group_id"], e["type"]) for e in exported} == {
        (shard_of(g, SHARDS), g, "GROUP_METADATA") for g in groups
    }
    shard = shard_of(groups[0], SHARDS)
    inspected = [json.loads(line) for line in await _cli_lines(capsys, ["state", "inspect", *where, "--shard",
                                                                        str(shard)])]
    assert [(i["group_id"], i["value"]["epoch"]) for i in inspected] == [
        (consumer_codec.decode(r.key, r.value).group_id, 5) for r in written[shard]
    ]
    assert all(isinstance(i["offset"], int) for i in inspected)

    # The gateway is configured for another shard count: the topic does not match it.
    assert await asyncio.to_thread(cli_main, ["state", "verify", *where, "--shards", str(SHARDS + 1)]) == 3
    assert f"has {SHARDS} partitions; the gateway is configured for {SHARDS + 1} shards" in capsys.readouterr().out

    # A plain (non-transactional) producer writes a garbage value under a valid key.
    delivered: list[int] = []
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka.bootstrap, "acks": "all"})
    producer.produce(topic, key=written[shard][0].key, value=b"\xff\xff garbage", partition=shard,
                     on_delivery=lambda err, msg: delivered.append(msg.offset()) if err is None else None)
    assert await asyncio.to_thread(producer.flush, 10) == 0
    (bad_offset,) = delivered
    assert await asyncio.to_thread(cli_main, ["state", "verify", *where, "--shards", str(SHARDS)]) == 3
    out = capsys.readouterr().out
    assert f"shard {shard}: {len(written[shard]) + 1} records" in out and "1 problem" in out, out
    assert f"problem: offset {bad_offset}: the value of a GROUP_METADATA record of group '{groups[0]}' does not decode" in out
    assert out.count("no problems") == SHARDS - 1
