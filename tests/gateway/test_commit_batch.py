"""Merging of concurrent offset commits of one group into one upstream OffsetCommit (commit_batch.py):
which commits merge, the merged request, each client's own answer, and order per partition."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections import deque
from typing import Any

import pytest

from coordinator.errors import Errors
from gateway.groups.commit_batch import CommitWrites, Pending, answers, merged_request, take_batch
from gateway.net.upstream_client import LostInFlight
from gateway.wire import codec
from gateway.wire import group_codec as gc
from gateway.wire.api_keys import ApiKey

REQ = codec.REQUESTS[ApiKey.OFFSET_COMMIT]
RESP = gc.response_cls(ApiKey.OFFSET_COMMIT)
TOPIC_IDS = {"a": uuid.uuid4(), "b": uuid.uuid4()}
METADATA_LIMIT = 8  # the fake cluster's offset.metadata.max.bytes
OFFSET_METADATA_TOO_LARGE = 12  # Kafka's code for a committed metadata string over the limit


def commit(parts: dict[str, list[int]] | list[tuple[str, int, int]], version: int = 9, metadata: str = "",
           retention: int = -1) -> Any:
    """An OffsetCommit (simple: generation -1, no member) of (topic, partition, offset) triples."""
    if isinstance(parts, dict):
        triples = [(t, p, 100) for t, ps in parts.items() for p in ps]
    else:
        triples = parts
    cls = REQ[version]
    topic_cls = cls.OffsetCommitRequestTopic
    part_cls = topic_cls.OffsetCommitRequestPartition
    topics: dict[str, Any] = {}
    for t, p, off in triples:
        if t not in topics:
            topics[t] = topic_cls(name=t, topic_id=TOPIC_IDS[t], partitions=[])
        topics[t].partitions.append(
            part_cls(partition_index=p, committed_offset=off, committed_leader_epoch=-1, committed_metadata=metadata,
                     commit_timestamp=-1)
        )
    kw: dict[str, Any] = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
                          "group_instance_id": None, "topics": list(topics.values())}
    if 2 <= version <= 4:
        kw["retention_time_ms"] = retention
    return cls(**kw)


def pend(parts: Any, version: int = 9, **kw: Any) -> Pending:
    return Pending(version, commit(parts, version, **kw))


class FakeCluster:
    """Applies a commit request the way a broker does, in the order requests reach it: per partition its
    offset, or OFFSET_METADATA_TOO_LARGE when the metadata is too long. Answers through the codec (the
    request is encoded and decoded, as on the wire), one topic entry per partition when ``split``."""

    def __init__(self, split: bool = False) -> None:
        self.offsets: dict[tuple[str, int], int] = {}
        self.requests: list[Any] = []
        self.split = split
        self.gate: asyncio.Event | None = None
        self.fail_next: Exception | None = None

    def apply(self, version: int, req: Any) -> Any:
        req = REQ[version].decode(bytes(req.encode(version=version)), version=version)
        self.requests.append(req)
        topics = []
        for t in req.topics:
            name = t.name if version < 10 else {v: k for k, v in TOPIC_IDS.items()}[t.topic_id]
            parts = []
            for p in t.partitions:
                if len(p.committed_metadata or "") > METADATA_LIMIT:
                    err = OFFSET_METADATA_TOO_LARGE
                else:
                    self.offsets[(name, p.partition_index)] = p.committed_offset
                    err = 0
                parts.append((p.partition_index, err))
            groups = [[x] for x in parts] if self.split else [parts]
            for g in groups:
                topics.append(RESP.OffsetCommitResponseTopic(
                    name=name, topic_id=TOPIC_IDS[name],
                    partitions=[RESP.OffsetCommitResponseTopic.OffsetCommitResponsePartition(partition_index=i, error_code=e)
                                for i, e in g],
                ))
        return RESP[version](topics=topics)

    def sequential(self, version: int, req: Any) -> list[tuple[str, Any, list[tuple[int, int]]]]:
        """What a commit alone would be answered (for comparison)."""
        r = self.apply(version, req)
        return [(t.name, None, [(p.partition_index, p.error_code) for p in t.partitions]) for t in r.topics]

    async def send(self, group_id: str, version: int, req: Any, lane: int) -> Any:
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(0)
        if self.fail_next is not None:
            e, self.fail_next = self.fail_next, None
            raise e
        return self.apply(version, req)


# --- which commits merge ---------------------------------------------------------------------------------


def test_commits_of_disjoint_partitions_leave_together_in_order() -> None:
    a, b, c = pend({"a": [0]}), pend({"a": [1], "b": [0]}), pend({"b": [1]})
    waiting = deque([a, b, c])
    assert take_batch(waiting) == [a, b, c]
    assert not waiting


def test_a_commit_sharing_a_partition_waits_and_blocks_later_commits_of_its_partitions() -> None:
    first, again, other, after_again, free = (
        pend({"a": [0]}), pend({"a": [0, 1]}), pend({"a": [2]}), pend({"a": [1]}), pend({"b": [0]}),
    )
    waiting = deque([first, again, other, after_again, free])
    # `again` names a:0 (in the request): it waits; `after_again` names a:1, which `again` holds back.
    assert take_batch(waiting) == [first, other, free]
    assert list(waiting) == [again, after_again]
    # `after_again` merges with `again`? No: it shares a:1 with it, so it leaves after it.
    assert take_batch(waiting) == [again]
    assert take_batch(waiting) == [after_again]
    assert not waiting


def test_only_commits_of_the_same_version_and_retention_merge() -> None:
    v9, v8, v9b = pend({"a": [0]}), pend({"a": [1]}, version=8), pend({"a": [2]})
    waiting = deque([v9, v8, v9b])
    assert take_batch(waiting) == [v9, v9b]
    assert take_batch(waiting) == [v8]
    r1, r2 = pend({"a": [0]}, version=2, retention=1000), pend({"a": [1]}, version=2, retention=2000)
    waiting = deque([r1, r2])
    assert take_batch(waiting) == [r1]
    assert take_batch(waiting) == [r2]


def test_a_commit_naming_a_partition_twice_goes_alone() -> None:
    twice = pend([("a", 0, 1), ("a", 0, 2)])
    assert twice.solo
    other = pend({"a": [1]})
    waiting = deque([twice, other])
    assert take_batch(waiting) == [twice]
    waiting = deque([other, twice, pend({"b": [0]})])
    batch = take_batch(waiting)
    assert twice not in batch and len(batch) == 2


def test_the_request_stays_within_the_partition_cap_unless_one_commit_is_larger() -> None:
    big = pend({"a": list(range(10))})
    small = [pend({"b": [i]}) for i in range(5)]
    waiting = deque([big, *small])
    assert take_batch(waiting, max_partitions=12) == [big, small[0], small[1]]
    assert take_batch(waiting, max_partitions=2) == small[2:4]
    assert take_batch(deque([pend({"a": list(range(10))})]), max_partitions=2)  # the first always leaves


def test_the_request_stays_within_the_record_bytes_cap() -> None:
    """Long metadata fills the request by bytes before the partition cap: the cluster would refuse a
    too-large batch of offset records as a whole, where the commits alone would each succeed."""
    long = [pend({"a": [i]}, metadata="m" * 4000) for i in range(4)]
    assert long[0].size > 4000
    waiting = deque(long)
    assert take_batch(waiting, max_bytes=3 * long[0].size) == long[:3]
    assert take_batch(waiting, max_bytes=3 * long[0].size) == long[3:]
    short = [pend({"a": [i]}) for i in range(4)]
    assert take_batch(deque(short), max_bytes=3 * long[0].size) == short


# --- the merged request and the answers ------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 8, 9, 10])
def test_merged_request_has_one_entry_per_topic_and_every_partition(version: int) -> None:
    batch = [pend({"a": [0], "b": [1]}, version), pend({"a": [2]}, version), pend({"b": [0, 3]}, version)]
    req = merged_request(batch)
    decoded = REQ[version].decode(bytes(req.encode(version=version)), version=version)
    key = (lambda t: t.name) if version < 10 else (lambda t: t.topic_id)
    got = {key(t): sorted(p.partition_index for p in t.partitions) for t in decoded.topics}
    a, b = (("a", "b") if version < 10 else (TOPIC_IDS["a"], TOPIC_IDS["b"]))
    assert got == {a: [0, 2], b: [0, 1, 3]}
    assert len(decoded.topics) == 2
    assert decoded.group_id == "g"
    if version >= 1:
        assert decoded.generation_id_or_member_epoch == -1 and decoded.member_id == ""


@pytest.mark.parametrize("split", [False, True])
def test_each_commit_gets_its_own_partitions_errors_as_the_cluster_gave_them(split: bool) -> None:
    batch = [
        pend({"a": [0, 1]}),
        pend({"a": [2]}, metadata="x" * (METADATA_LIMIT + 1)),
        pend({"b": [0]}),
    ]
    cluster = FakeCluster(split=split)
    got = answers(batch, cluster.apply(9, merged_request(batch)))
    alone = FakeCluster()
    want = [alone.sequential(9, e.msg) for e in batch]
    assert [[(t, sorted(ps)) for t, _, ps in a] for a in got] == [[(t, sorted(ps)) for t, _, ps in a] for a in want]
    assert got[1] == [("a", None, [(2, OFFSET_METADATA_TOO_LARGE)])]


def test_a_partition_the_cluster_left_out_is_an_error_not_a_success() -> None:
    batch = [pend({"a": [0]}), pend({"a": [1]})]
    response = RESP[9](topics=[RESP.OffsetCommitResponseTopic(name="a", partitions=[
        RESP.OffsetCommitResponseTopic.OffsetCommitResponsePartition(partition_index=0, error_code=0)])])
    got = answers(batch, response)
    assert got[0] == [("a", None, [(0, 0)])]
    assert got[1] == [("a", None, [(1, Errors.UNKNOWN_SERVER_ERROR)])]


def test_by_id_answers_carry_names_and_ids() -> None:
    batch = [pend({"a": [0]}, 10), pend({"b": [0]}, 10)]
    got = answers(batch, FakeCluster().apply(10, merged_request(batch)))
    assert got == [[("a", TOPIC_IDS["a"], [(0, 0)])], [("b", TOPIC_IDS["b"], [(0, 0)])]]


# --- the queue -------------------------------------------------------------------------------------------


async def test_commits_waiting_behind_one_in_flight_leave_as_one_request() -> None:
    cluster = FakeCluster()
    cluster.gate = asyncio.Event()
    writes = CommitWrites(cluster.send)
    first = asyncio.ensure_future(writes.commit("g", 9, commit([("a", 0, 1)])))
    await asyncio.sleep(0)
    rest = [asyncio.ensure_future(writes.commit("g", 9, commit([("a", p, 1)]))) for p in (1, 2, 3)]
    await asyncio.sleep(0)
    cluster.gate.set()
    results = await asyncio.gather(first, *rest)
    assert [r[0][2] for r in results] == [[(0, 0)], [(1, 0)], [(2, 0)], [(3, 0)]]
    assert len(cluster.requests) == 2 and writes.requests == 2 and writes.commits == 4
    assert sorted(p.partition_index for t in cluster.requests[1].topics for p in t.partitions) == [1, 2, 3]


async def test_a_failed_request_fails_each_of_its_commits_and_the_queue_goes_on() -> None:
    cluster = FakeCluster()
    cluster.gate = asyncio.Event()
    writes = CommitWrites(cluster.send)
    first = asyncio.ensure_future(writes.commit("g", 9, commit([("a", 0, 1)])))
    await asyncio.sleep(0)
    cluster.fail_next = LostInFlight("link lost")
    cluster.gate.set()
    with pytest.raises(LostInFlight):
        await first
    assert cluster.offsets == {}
    assert (await writes.commit("g", 9, commit([("a", 0, 2)])))[0][2] == [(0, 0)]
    assert cluster.offsets == {("a", 0): 2}


async def test_a_commit_whose_client_went_away_still_reaches_the_cluster() -> None:
    """Cancelled waits, of a commit in flight and of one still queued behind it: both commits are written
    to the cluster all the same, and the commit after them is answered as usual."""
    cluster = FakeCluster()
    cluster.gate = asyncio.Event()
    writes = CommitWrites(cluster.send)
    in_flight = asyncio.ensure_future(writes.commit("g", 9, commit([("a", 0, 1)])))
    await asyncio.sleep(0)
    queued = asyncio.ensure_future(writes.commit("g", 9, commit([("a", 1, 1)])))
    await asyncio.sleep(0)
    in_flight.cancel()
    queued.cancel()
    await asyncio.sleep(0)
    assert in_flight.cancelled() and queued.cancelled()
    cluster.gate.set()
    assert (await writes.commit("g", 9, commit([("a", 2, 1)])))[0][2] == [(2, 0)]
    assert cluster.offsets == {("a", 0): 1, ("a", 1): 1, ("a", 2): 1}


async def test_different_groups_do_not_wait_for_each_other() -> None:
    sent: list[str] = []
    release = asyncio.Event()

    async def send(group_id: str, version: int, req: Any, lane: int) -> Any:
        sent.append(group_id)
        if group_id == "slow":
            await release.wait()
        return FakeCluster().apply(version, req)

    writes = CommitWrites(send)
    slow = asyncio.ensure_future(writes.commit("slow", 9, commit([("a", 0, 1)])))
    await asyncio.sleep(0)
    assert (await writes.commit("fast", 9, commit([("a", 0, 1)])))[0][2] == [(0, 0)]
    assert not slow.done()
    release.set()
    await slow


@pytest.mark.parametrize("seed", range(20))
async def test_random_concurrent_commits_end_as_sequential_ones_would(seed: int) -> None:
    """Commits sent at random moments, over few partitions so that many collide: every client gets the
    answer its commit alone gets, and each partition ends at the offset of the last commit that named it."""
    rng = random.Random(seed)
    cluster = FakeCluster(split=rng.random() < 0.5)
    writes = CommitWrites(cluster.send, lanes=rng.randint(1, 4))
    sequence: list[Any] = []
    tasks = []
    for n in range(60):
        triples = [(rng.choice("ab"), rng.randrange(4), n) for _ in range(rng.randint(1, 3))]
        metadata = "x" * (METADATA_LIMIT + 1) if rng.random() < 0.1 else ""
        msg = commit(triples, metadata=metadata)
        sequence.append(msg)
        tasks.append(asyncio.ensure_future(writes.commit("g", 9, msg)))
        for _ in range(rng.randint(0, 3)):
            await asyncio.sleep(0)
    got = await asyncio.gather(*tasks)
    model = FakeCluster()
    want = [model.sequential(9, commit(
        [(t.name, p.partition_index, p.committed_offset) for t in m.topics for p in t.partitions],
        metadata=m.topics[0].partitions[0].committed_metadata)) for m in sequence]

    def flat(a: Any) -> list[tuple[str, int, int]]:
        return sorted((t, p, e) for t, _, ps in a for p, e in ps)

    assert [flat(a) for a in got] == [flat(a) for a in want]
    assert cluster.offsets == model.offsets
    assert writes.requests <= len(sequence)


def test_a_coordinator_error_anywhere_in_a_merged_answer_makes_it_retried() -> None:
    """The merged request's retry decision (OffsetBridge._send_commit): one client's missing topic ahead
    of the others must not hide the coordinator's NOT_COORDINATOR on theirs."""
    from gateway.groups.offsets import _moved_error

    def response(*errors: int) -> Any:
        part = RESP.OffsetCommitResponseTopic.OffsetCommitResponsePartition
        return RESP[9](topics=[RESP.OffsetCommitResponseTopic(
            name="a", partitions=[part(partition_index=i, error_code=e) for i, e in enumerate(errors)])])

    assert _moved_error(response(3, Errors.NOT_COORDINATOR, Errors.NOT_COORDINATOR)) == Errors.NOT_COORDINATOR
    assert _moved_error(response(3, 0)) == 3
    assert _moved_error(response(0, 0)) == 0
    assert _moved_error(RESP[9](topics=[])) == 0
