"""Kafka 4.4.0's own kafka-consumer-groups tool against the broker and through the gateway: the same
answers for a missing and for an existing group (--describe, --list, --delete), and for live classic
and KIP-848 consumer groups (--describe --members / --offsets / --state, also with the 3.9.1 tool);
2.8.2's tool (in that release's Scala broker jar) on a live classic group, then --reset-offsets and --delete.

DescribeGroups v6 (KIP-1043) answers a missing group GROUP_ID_NOT_FOUND; a gateway stuck at v5 made the
tool print its v5 text ("does not exist") where the broker's answer gives GroupIdNotFoundException.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import confluent_kafka
import pytest
from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse

from .harness.clients import produce_confluent
from .harness.java import consumer_groups_command
from .harness.probe import find_coordinator_endpoints, roundtrip

RELEASE = "4.4.0"


def _tool(bootstrap: str, *args: str) -> tuple[int, str]:
    r = consumer_groups_command(RELEASE, bootstrap, *args)
    return r.returncode, r.stdout + r.stderr


def _normalised(text: str, group: str, topic: str) -> str:
    """The tool's text with the per-target group name taken out and blanks folded."""
    text = text.replace(group, "<group>").replace(topic, "<topic>")
    return "\n".join(re.sub(r"\s+", " ", line).strip() for line in text.splitlines() if line.strip())


def _simple_commit(bootstrap: str, group: str, topic: str) -> None:
    """Offsets committed outside any membership (what admin tools do): the group exists, Empty."""
    (c,) = find_coordinator_endpoints(bootstrap, group, 3, timeout_s=60.0)
    cls = OffsetCommitRequest
    part = cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
        partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata=""
    )
    req = cls[8](
        group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[cls.OffsetCommitRequestTopic(name=topic, partitions=[part])],
    )
    r = roundtrip(c.address, req, OffsetCommitResponse, 8)
    assert r.topics[0].partitions[0].error_code == 0, r


def _answers(bootstrap: str, missing: str, existing: str, topic: str) -> dict[str, tuple[int, str]]:
    out: dict[str, tuple[int, str]] = {}

    def run(what: str, group: str, *args: str) -> None:
        rc, text = _tool(bootstrap, *args)
        out[what] = (rc, _normalised(text, group, topic))

    run("describe missing", missing, "--describe", "--group", missing)
    run("delete missing", missing, "--delete", "--group", missing)
    _simple_commit(bootstrap, existing, topic)
    run("describe existing", existing, "--describe", "--group", existing)
    rc, listed = _tool(bootstrap, "--list")
    out["list has existing"] = (rc, str(existing in listed.split()))
    run("delete existing", existing, "--delete", "--group", existing)
    return out


def test_consumer_groups_tool_gives_the_same_answers_direct_and_through_the_gateway(
    kafka, gateway, make_topic: Callable[..., str], names: Callable[[str], str]
) -> None:
    topic = make_topic(1)
    targets = {"direct": kafka.bootstrap, "gateway": gateway.bootstrap}
    # Both targets at once: each answer depends only on its own target (names differ per target).
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            t: pool.submit(_answers, b, names(f"{t}-missing"), names(f"{t}-existing"), topic)
            for t, b in targets.items()
        }
        direct, through = futures["direct"].result(), futures["gateway"].result()
    # The broker's own answers first, so that a change of the tool or broker shows here, not as a diff.
    assert "GroupIdNotFoundException" in direct["describe missing"][1], direct["describe missing"]
    assert "has no active members" in direct["describe existing"][1], direct["describe existing"]
    assert direct["list has existing"] == (0, "True")
    assert "was successful" in direct["delete existing"][1], direct["delete existing"]
    for what in direct:
        assert through[what] == direct[what], f"{what}:\n direct: {direct[what]}\n gateway: {through[what]}"


# --- live groups ----------------------------------------------------------------------------------------

LIVE_PARTITIONS, LIVE_RECORDS = 2, 20
# The 4.4.0 tool, and the 3.9.1 one (DescribeGroups v5, ConsumerGroupDescribe v0) a fleet may still run.
TOOL_RELEASES = ("4.4.0", "3.9.1")
DESCRIBE_VIEWS = ("--members", "--offsets", "--state")


@contextmanager
def _live_group(bootstrap: str, group: str, topic: str, protocol: str) -> Iterator[list[str]]:
    """Two librdkafka members of ``group`` (``group.protocol`` classic or consumer), each owning one
    partition, every record consumed and committed as it came; yields their member ids and keeps them in the group
    (librdkafka heartbeats from its own threads) until the block ends."""
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    }  # fmt: skip
    members = [confluent_kafka.Consumer({**conf, "client.id": f"live-{i}"}) for i in range(2)]
    try:
        consumed = 0
        deadline = time.monotonic() + 60
        for m in members:
            m.subscribe([topic])
        # Both polled in turn: a rebalance completes only while its members poll.
        while consumed < LIVE_RECORDS or not all(len(m.assignment()) == 1 for m in members):
            assert time.monotonic() < deadline, (consumed, [m.assignment() for m in members])
            for m in members:
                msg = m.poll(0.1)
                if msg is not None and msg.error() is None:
                    m.commit(message=msg, asynchronous=False)  # whoever owns the partition later, it is committed
                    consumed += 1
        yield [m.memberid() for m in members]
    finally:
        for m in members:
            m.close()


def _live_view(release: str, bootstrap: str, group: str, topic: str, member_ids: list[str], view: str) -> tuple[int, str]:
    r = consumer_groups_command(release, bootstrap, "--describe", "--group", group, view)
    lines = []
    for line in (r.stdout + r.stderr).splitlines():
        # Member ids are random, so which client owns which partition differs from run to run; the
        # coordinator's address is the gateway's by design.
        for member in member_ids:
            line = line.replace(member, "<member>")
        line = re.sub(r"\blive-[01]\b", "<client>", line) if view == "--offsets" else line
        line = re.sub(r"\S+:\d+\s+\(\d+\)", "<coordinator>", line)
        lines.append(line)
    header, *rows = _normalised("\n".join(lines), group, topic).splitlines() or [""]
    return r.returncode, "\n".join([header, *sorted(rows)])  # rows in member id order: random


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_consumer_groups_tool_describes_a_live_group_alike_direct_and_through_the_gateway(
    kafka, module_gateway, make_topic: Callable[..., str], names: Callable[[str], str], protocol: str
) -> None:
    """``kafka-consumer-groups --describe`` with ``--members``, ``--offsets`` and ``--state``, of Kafka
    4.4.0 and of 3.9.1, on a live group of two members: a classic group (DescribeGroups) or a KIP-848
    consumer group (ConsumerGroupDescribe), the gateway coordinating it."""
    if getattr(module_gateway, "direct", False):
        pytest.skip("--compat-direct: the comparison needs the gateway")
    targets = {"direct": kafka.bootstrap, "gateway": module_gateway.bootstrap}
    topics = {t: make_topic(LIVE_PARTITIONS) for t in targets}
    for topic in topics.values():
        produce_confluent(kafka.bootstrap, topic, [f"r{i}".encode() for i in range(LIVE_RECORDS)])

    def describe(target: str) -> dict[tuple[str, str], tuple[int, str]]:
        bootstrap, topic, group = targets[target], topics[target], names(f"live-{target}")
        with _live_group(bootstrap, group, topic, protocol) as member_ids:
            return {
                (release, view): _live_view(release, bootstrap, group, topic, member_ids, view)
                for release in TOOL_RELEASES for view in DESCRIBE_VIEWS
            }  # fmt: skip

    # Both targets at once (each group and topic its own).
    with ThreadPoolExecutor(max_workers=2) as pool:
        texts = dict(zip(targets, pool.map(describe, targets), strict=True))
    direct = texts["direct"]
    for release in TOOL_RELEASES:
        # The broker's own answers first: a live, Stable group of two, no lag, both clients.
        rc, state = direct[(release, "--state")]
        assert rc == 0 and re.search(r"<group> <coordinator> \S+ Stable 2\b", state), state
        rc, members = direct[(release, "--members")]
        assert rc == 0 and "live-0" in members and "live-1" in members, members
        rc, offsets = direct[(release, "--offsets")]
        rows = [r.split() for r in offsets.splitlines() if r.startswith("<group> <topic>")]
        assert rc == 0 and len(rows) == LIVE_PARTITIONS, offsets
        assert all(r[5] == "0" and r[6] == "<member>" for r in rows), offsets  # LAG 0, owned by a live member
    for key in direct:
        assert texts["gateway"][key] == direct[key], f"{key}:\n direct: {direct[key]}\n gateway: {texts['gateway'][key]}"


# --- the 2.8.2 tool (Scala, in the broker jar) ------------------------------------------------------------

LEGACY_TOOL = "2.8.2"


def _legacy_answers(bootstrap: str, group: str, topic: str) -> dict[str, tuple[int, str]]:
    """What 2.8.2's ``kafka.admin.ConsumerGroupCommand`` answers about ``group``: listed and described
    (--state, --members, --offsets) while two classic members consume ``topic``, then, once they have left,
    its offsets reset to the earliest, described again, the group deleted and listed again."""
    out: dict[str, tuple[int, str]] = {}

    def listed() -> tuple[int, str]:
        r = consumer_groups_command(LEGACY_TOOL, bootstrap, "--list")
        return r.returncode, str(group in r.stdout.split())

    def plain(*args: str) -> tuple[int, str]:
        r = consumer_groups_command(LEGACY_TOOL, bootstrap, *args)
        header, *rows = _normalised(r.stdout + r.stderr, group, topic).splitlines() or [""]
        return r.returncode, "\n".join([header, *sorted(rows)])  # 2.8 prints partitions in hash-map order

    with _live_group(bootstrap, group, topic, "classic") as member_ids:
        out["list live"] = listed()
        for view in DESCRIBE_VIEWS:
            out[f"describe live {view}"] = _live_view(LEGACY_TOOL, bootstrap, group, topic, member_ids, view)
    out["reset to earliest"] = plain("--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    out["describe after reset"] = plain("--describe", "--group", group, "--offsets")
    out["delete"] = plain("--delete", "--group", group)
    out["list after delete"] = listed()
    return out


def test_consumer_groups_tool_of_2_8_2_gives_the_same_answers_direct_and_through_the_gateway(
    kafka, module_gateway, make_topic: Callable[..., str], names: Callable[[str], str]
) -> None:
    """2.8.2's kafka-consumer-groups (``kafka.admin.ConsumerGroupCommand`` of the kafka_2.13 jar, older
    ListGroups/DescribeGroups/OffsetFetch/DeleteGroups versions) on a live classic group and after it:
    --list, --describe, --reset-offsets --to-earliest --execute and --delete answer alike direct and
    through the gateway."""
    if getattr(module_gateway, "direct", False):
        pytest.skip("--compat-direct: the comparison needs the gateway")
    targets = {"direct": kafka.bootstrap, "gateway": module_gateway.bootstrap}
    topics = {t: make_topic(LIVE_PARTITIONS) for t in targets}
    for topic in topics.values():
        produce_confluent(kafka.bootstrap, topic, [f"r{i}".encode() for i in range(LIVE_RECORDS)])
    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = dict(
            zip(targets, pool.map(lambda t: _legacy_answers(targets[t], names(f"legacy-{t}"), topics[t]), targets),
                strict=True)
        )  # fmt: skip
    direct = answers["direct"]
    # The broker's own answers first: live and listed, no lag; reset to 0 (the whole topic is lag again);
    # deleted and no longer listed.
    assert direct["list live"] == (0, "True"), direct["list live"]
    rc, state = direct["describe live --state"]
    assert rc == 0 and re.search(r"<group> <coordinator> \S+ Stable 2\b", state), state
    rc, offsets = direct["describe live --offsets"]
    rows = [r.split() for r in offsets.splitlines() if r.startswith("<group> <topic>")]
    assert rc == 0 and len(rows) == LIVE_PARTITIONS and all(r[5] == "0" for r in rows), offsets
    rc, reset = direct["reset to earliest"]
    rows = [r.split() for r in reset.splitlines() if r.startswith("<group> <topic>")]
    assert rc == 0 and len(rows) == LIVE_PARTITIONS and all(r[3] == "0" for r in rows), reset
    rc, after = direct["describe after reset"]
    assert rc == 0 and "has no active members" in after, after
    rows = [r.split() for r in after.splitlines() if r.startswith("<group> <topic>")]
    assert sum(int(r[5]) for r in rows) == LIVE_RECORDS, after  # everything to be read again
    rc, deleted = direct["delete"]
    assert rc == 0 and "was successful" in deleted, deleted
    assert direct["list after delete"] == (0, "False")
    for what in direct:
        through = answers["gateway"][what]
        assert through == direct[what], f"{what}:\n direct: {direct[what]}\n gateway: {through}"
