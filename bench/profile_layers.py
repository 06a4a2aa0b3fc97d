"""A py-spy profile of the gateway split by layer: how much of its CPU is the connections, the codec, the
group layer, the shard and the group logic itself.

Record a profile of a running gateway in py-spy's raw format (idle samples left out, its default), then
read it here. Each sample counts once, for the innermost frame that belongs to a known layer:

    .venv/bin/python bench/request_cpu.py --requests 120000 --rounds 1 --paths heartbeat &
    py-spy record -p <the dev gateway's pid> -d 30 -r 200 -f raw --nonblocking -o heartbeat.txt
    .venv/bin/python bench/profile_layers.py heartbeat.txt

"event loop" is the loop's own frame (uvloop's C code: polling, reading sockets, running callbacks) and
what it calls natively; "connections" includes the writes of answers to clients and of requests to the
cluster (the send system calls happen in those frames). The LAST line is ``key=value`` pairs (percent).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

# (substring of a frame, layer), first match wins; frames are read from the innermost outwards.
LAYERS: tuple[tuple[str, str], ...] = (
    ("coordinator/", "group_logic"),
    ("translate/", "group_logic"),
    ("gateway/groups/shard", "shard"),
    ("gateway/groups/", "group_layer"),
    ("gateway/state/", "state_store"),
    ("<codegen", "codec"),
    ("kafka/protocol", "codec"),
    ("gateway/wire/", "codec"),
    ("gateway/metrics", "metrics"),
    ("gateway/net/", "connections"),
    ("asyncio/streams", "connections"),
    ("asyncio/runners", "event_loop"),
)

DESCRIPTIONS = {
    "group_logic": "group logic (coordinator/, translate/)",
    "shard": "shard (a group's turn, timers, stall checks)",
    "group_layer": "group layer (dispatch, offsets bridge, commit merging)",
    "state_store": "state store",
    "codec": "codec (kafka-python's generated code, gateway/wire)",
    "metrics": "metrics",
    "connections": "connections (framing, writes to clients and the cluster)",
    "event_loop": "event loop (polling, reads, callbacks; C)",
    "other": "other",
}

_LINE = re.compile(r"^(.*) (\d+)$")


def layer_of(stack: str) -> str:
    for frame in reversed(stack.split(";")):
        for needle, layer in LAYERS:
            if needle in frame:
                return layer
    return "other"


def split(path: Path) -> tuple[int, Counter[str]]:
    """Samples in the profile and their count per layer."""
    total = 0
    layers: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        m = _LINE.match(line.strip())
        if m is None:
            continue
        n = int(m.group(2))
        total += n
        layers[layer_of(m.group(1))] += n
    return total, layers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile", type=Path, help="py-spy record -f raw output")
    args = ap.parse_args()
    total, layers = split(args.profile)
    if not total:
        raise SystemExit(f"{args.profile}: no samples")
    print(f"{args.profile}: {total} samples")
    for layer, n in layers.most_common():
        print(f"  {100 * n / total:5.1f} %  {DESCRIPTIONS[layer]}")
    print(" ".join(f"{layer}_pct={100 * layers[layer] / total:.1f}" for layer in DESCRIPTIONS) + f" samples={total}")


if __name__ == "__main__":
    main()
