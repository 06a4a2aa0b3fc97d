"""Kafka 4.3.1's own kafka-consumer-groups tool against the broker and through the gateway: the same
answers for a missing and for an existing group (--describe, --list, --delete).

DescribeGroups v6 (KIP-1043) answers a missing group GROUP_ID_NOT_FOUND; a gateway stuck at v5 made the
tool print its v5 text ("does not exist") where the broker's answer gives GroupIdNotFoundException.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .harness.java import consumer_groups_command

RELEASE = "4.3.1"


def _tool(bootstrap: str, *args: str) -> tuple[int, str]:
    r = consumer_groups_command(RELEASE, bootstrap, *args)
    return r.returncode, r.stdout + r.stderr


def _normalised(text: str, group: str, topic: str) -> str:
    """The tool's text with the per-target names (and the broker's consumer ids, hosts) taken out."""
    text = text.replace(group, "<group>").replace(topic, "<topic>")
    return "\n".join(re.sub(r"\s+", " ", line).strip() for line in text.splitlines() if line.strip())


def test_consumer_groups_tool_gives_the_same_answers_direct_and_through_the_gateway(
    kafka, gateway, make_topic: Callable[..., str], names: Callable[[str], str]
) -> None:
    topic = make_topic(2)
    seen: dict[str, dict[str, tuple[int, str]]] = {}
    for target, bootstrap in (("direct", kafka.bootstrap), ("gateway", gateway.bootstrap)):
        missing, existing = names(f"{target}-missing"), names(f"{target}-existing")
        out: dict[str, tuple[int, str]] = {}

        def run(what: str, group: str, *args: str, _out: dict[str, tuple[int, str]] = out, _b: str = bootstrap) -> None:
            rc, text = _tool(_b, *args)
            _out[what] = (rc, _normalised(text, group, topic))

        run("describe missing", missing, "--describe", "--group", missing)
        run("delete missing", missing, "--delete", "--group", missing)
        # An existing group: offsets committed by the tool itself (a simple commit, no members).
        run("reset", existing, "--reset-offsets", "--to-earliest", "--execute", "--group", existing, "--topic", topic)
        run("describe existing", existing, "--describe", "--group", existing)
        rc, listed = _tool(bootstrap, "--list")
        out["list has existing"] = (rc, str(existing in listed.split()))
        run("delete existing", existing, "--delete", "--group", existing)
        rc, listed = _tool(bootstrap, "--list")
        out["list after delete"] = (rc, str(existing in listed.split()))
        run("describe deleted", existing, "--describe", "--group", existing)
        seen[target] = out
    direct, through = seen["direct"], seen["gateway"]
    # The broker's own answers first, so that a change of the tool or broker shows here, not as a diff.
    assert "GroupIdNotFoundException" in direct["describe missing"][1], direct["describe missing"]
    assert direct["list has existing"] == (0, "True") and direct["list after delete"] == (0, "False")
    for what in direct:
        assert through[what] == direct[what], f"{what}:\n direct: {direct[what]}\n gateway: {through[what]}"
