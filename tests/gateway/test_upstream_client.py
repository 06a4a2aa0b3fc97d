"""The gateway's shared links to the cluster (gateway/net/upstream_client.py) against a real broker: one bad
request or one broken link does not fail the other groups' requests for good."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from gateway.config.settings import GatewayConfig
from gateway.net.upstream import BrokerDirectory
from gateway.net.upstream_client import CoordinatorMoved, LostInFlight, RefusedRequest, UpstreamClient
from gateway.wire import codec
from gateway.wire.api_keys import ApiKey

pytestmark = pytest.mark.kafka

OF = codec.REQUESTS[ApiKey.OFFSET_FETCH]
OC = codec.REQUESTS[ApiKey.OFFSET_COMMIT]


def _fetch(group: str) -> object:
    return OF[7](group_id=group, topics=None, require_stable=False)


def _commit(group: str, topic: str) -> object:
    P = OC.OffsetCommitRequestTopic.OffsetCommitRequestPartition
    return OC[8](
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[OC.OffsetCommitRequestTopic(name=topic, partitions=[
            P(partition_index=0, committed_offset=3, committed_leader_epoch=-1, committed_metadata="")])],
    )  # fmt: skip


async def _client(kafka_broker) -> UpstreamClient:
    directory = BrokerDirectory(GatewayConfig(upstream=kafka_broker.bootstrap, upstream_connect_timeout_s=5))
    await directory.refresh()
    return UpstreamClient(directory, lambda: 15.0)


async def _coordinator(client: UpstreamClient, group: str) -> tuple[str, int]:
    for _ in range(100):  # a fresh broker creates and loads __consumer_offsets on the first lookups
        try:
            addr = await client.coordinator(group)
            if (await client.send(addr, ApiKey.OFFSET_FETCH, 7, _fetch(group))).error_code == 0:
                return addr
        except CoordinatorMoved:
            pass
        await asyncio.sleep(0.3)
    raise AssertionError("no group coordinator on the broker")


async def test_a_null_group_id_is_refused_before_it_reaches_the_shared_link(kafka_broker) -> None:
    client = await _client(kafka_broker)
    try:
        group = f"uc-{uuid.uuid4().hex[:8]}"
        addr = await _coordinator(client, group)
        link = await client._link(addr)
        ok = asyncio.ensure_future(client.send(addr, ApiKey.OFFSET_FETCH, 7, _fetch(group)))
        with pytest.raises(RefusedRequest, match="group_id is null"):
            await client.to_coordinator(group, ApiKey.OFFSET_FETCH, 7, _fetch(None), lambda r: r.error_code)  # type: ignore[arg-type]
        assert (await ok).error_code == 0
        # The same link still serves: the broker never saw the bad request.
        assert not link.closed and client._links[(*addr, 0)] is link
        assert (await client.send(addr, ApiKey.OFFSET_FETCH, 7, _fetch(group))).error_code == 0
    finally:
        client.close()


async def test_a_broken_link_resends_reads_but_not_commits(kafka_broker) -> None:
    client = await _client(kafka_broker)
    try:
        group = f"uc-{uuid.uuid4().hex[:8]}"
        addr = await _coordinator(client, group)
        link = await client._link(addr)
        read = asyncio.ensure_future(client.to_coordinator(group, ApiKey.OFFSET_FETCH, 7, _fetch(group), lambda r: r.error_code))
        commit = asyncio.ensure_future(
            client.to_coordinator(group, ApiKey.OFFSET_COMMIT, 8, _commit(group, "uc-topic"), lambda r: 0, idempotent=False)
        )
        while len(link.waiting) < 2:  # both written on the shared link, neither answered yet
            await asyncio.sleep(0)
        link.writer.transport.abort()  # what a broker dropping the connection looks like from here
        assert (await read).error_code == 0  # sent again on a fresh link
        with pytest.raises(LostInFlight):
            await commit  # may have been written: not sent again, its client is told to retry
        assert client._links[(*addr, 0)] is not link
    finally:
        client.close()


async def test_merged_commits_of_one_group_on_a_lane_of_their_own_store_each_partitions_last_offset(kafka_broker) -> None:
    """CommitWrites (gateway/groups/commit_batch.py) over this client against the real broker: commits of
    one group sent together, several naming the same partitions, on a lane apart from lane 0."""
    from compat_tests.harness.admin import create_topic
    from gateway.groups.commit_batch import CommitWrites

    topic = create_topic(kafka_broker.bootstrap, f"uc-merge-{uuid.uuid4().hex[:6]}", 4)
    client = await _client(kafka_broker)
    try:
        group = f"uc-{uuid.uuid4().hex[:8]}"
        addr = await _coordinator(client, group)

        async def send(gid: str, version: int, msg: object, lane: int) -> object:
            return await client.to_coordinator(gid, ApiKey.OFFSET_COMMIT, version, msg, lambda r: 0, idempotent=False, lane=lane)

        writes = CommitWrites(send, lanes=3)
        P = OC.OffsetCommitRequestTopic.OffsetCommitRequestPartition

        def commit(partitions: list[int], offset: int, topic_name: str = topic) -> object:
            return OC[8](group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                         topics=[OC.OffsetCommitRequestTopic(name=topic_name, partitions=[
                             P(partition_index=p, committed_offset=offset, committed_leader_epoch=-1, committed_metadata="")
                             for p in partitions])])  # fmt: skip

        last: dict[int, int] = {}
        sent = []
        for n in range(40):
            parts = [n % 4] if n % 3 else [n % 4, (n + 1) % 4]
            sent.append(commit(parts, 10 + n))
            for p in parts:
                last[p] = 10 + n
        # A topic the cluster does not have: its partitions answered UNKNOWN_TOPIC_OR_PARTITION, the others not.
        missing = commit([0], 7, topic_name=f"uc-missing-{uuid.uuid4().hex[:6]}")
        results = await asyncio.gather(*(writes.commit(group, 8, m) for m in [*sent[:20], missing, *sent[20:]]))
        assert writes.requests < writes.commits == 41  # merged
        assert results[20][0][2] == [(0, 3)]  # UNKNOWN_TOPIC_OR_PARTITION
        for got in results[:20] + results[21:]:
            assert all(err == 0 for _, _, parts in got for _, err in parts), got
        assert (*addr, writes.lane_of(group)) in client._links
        fetched = await client.send(addr, ApiKey.OFFSET_FETCH, 7, OF[7](
            group_id=group, topics=[OF.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1, 2, 3])],
            require_stable=False))  # fmt: skip
        stored = {p.partition_index: p.committed_offset for t in fetched.topics for p in t.partitions}
        assert stored == last
    finally:
        client.close()
