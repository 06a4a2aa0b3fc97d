"""Kafka 4.3.1's own kafka-consumer-groups tool against the broker and through the gateway: the same
answers for a missing and for an existing group (--describe, --list, --delete).

DescribeGroups v6 (KIP-1043) answers a missing group GROUP_ID_NOT_FOUND; a gateway stuck at v5 made the
tool print its v5 text ("does not exist") where the broker's answer gives GroupIdNotFoundException.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse

from .harness.java import consumer_groups_command
from .harness.probe import find_coordinator_endpoints, roundtrip

RELEASE = "4.3.1"


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
