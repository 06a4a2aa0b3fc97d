"""How long one ``GET /metrics`` takes with 10,000 managed groups (target: under 200 ms).

A group layer with in-memory state (no broker: its upstream is unreachable) is given ``--groups`` groups
through its own request handlers: half of them consumer groups with two KIP-848 members each, half
classic groups with one member each (JoinGroup, SyncGroup). The lag watch's snapshot is filled with
``--partitions`` partitions per group (the values a refresh would leave; a scrape never asks the cluster),
and its families are written out once, as after every refresh (printed: that is not a scrape's cost).
Then the registry of gateway/ops/health.py is rendered ``--rounds`` times, both directly and through the
aiohttp endpoint over loopback; the median and the worst are printed. The LAST line is ``key=value``
pairs.

    PYTHONPATH=. .venv/bin/python bench/metrics_scrape.py [--groups 10000] [--partitions 4] [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kafka.protocol.consumer.group import JoinGroupRequest, SyncGroupRequest  # noqa: E402

from gateway.groups.lag import LagSnapshot, PartitionLag  # noqa: E402
from gateway.ops.admin_http import AdminServer  # noqa: E402
from gateway.ops.health import Health  # noqa: E402
from gateway.wire.api_keys import ApiKey  # noqa: E402
from gateway.wire.protocol.messages import ConsumerGroupHeartbeatRequest  # noqa: E402
from tests.gateway._groups_support import StubGateway, call, layer_on  # noqa: E402
from tests.gateway.test_groups_layer import settings  # noqa: E402

LONG_MS = 1_800_000  # no member expires while the bench runs


async def fill(layer: Any, groups: int) -> None:
    image = {"t": (uuid.uuid4(), 4)}
    layer.watch.topics, layer.watch.loaded = image, True
    layer._on_topics(image)
    # No broker here: every group is taken as one the cluster holds no share or streams group of, instead of
    # asking the (unreachable) cluster once per new group.
    now = time.monotonic()
    for i in range(groups):
        layer.cluster._not_foreign[f"group-{i:05d}"] = now
    protocols = [JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]
    for i in range(groups):
        gid = f"group-{i:05d}"
        if i % 2:
            for _ in range(2):
                r = await call(layer, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, ConsumerGroupHeartbeatRequest[1](
                    group_id=gid, member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout_ms=LONG_MS,
                    subscribed_topic_names=["t"], topic_partitions=[],
                ))
                assert r.error_code == 0, r
        else:
            j = await call(layer, ApiKey.JOIN_GROUP, 3, JoinGroupRequest[3](
                group_id=gid, session_timeout_ms=LONG_MS, rebalance_timeout_ms=LONG_MS, member_id="",
                protocol_type="consumer", protocols=protocols,
            ))
            assert j.error_code == 0, j
            s = await call(layer, ApiKey.SYNC_GROUP, 2, SyncGroupRequest[2](
                group_id=gid, generation_id=j.generation_id, member_id=j.member_id, assignments=[],
            ))
            assert s.error_code == 0, s


async def scrape_http(addr: tuple[str, int]) -> int:
    reader, writer = await asyncio.open_connection(*addr)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
    data = await reader.read()
    writer.close()
    assert data.startswith(b"HTTP/1.1 200 "), data[:80]
    return len(data)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()

    gw = StubGateway()
    layer = layer_on(gw, settings(
        ephemeral_state=True, consumer_session_timeout_ms=LONG_MS, consumer_max_session_timeout_ms=LONG_MS,
        consumer_heartbeat_interval_ms=60_000, consumer_max_heartbeat_interval_ms=60_000, lag_refresh_s=0,
    ))
    await layer.start()
    admin = AdminServer(Health(gw, layer))  # type: ignore[arg-type]
    try:
        began = time.perf_counter()
        await fill(layer, args.groups)
        filled_s = time.perf_counter() - began
        snapshot = LagSnapshot(
            {
                f"group-{i:05d}": tuple(PartitionLag("t", p, 1000 + i, 2000 + i) for p in range(args.partitions))
                for i in range(args.groups)
            },
            time.time(), 0.0,
        )
        layer.lag.snapshot = snapshot
        health = admin.health
        began = time.perf_counter()
        await health.on_lag_snapshot(snapshot)  # what the watch hands over after each refresh
        lag_written_s = time.perf_counter() - began
        body = health.render()
        samples = body.count(b"\n") - body.count(b"\n#")
        direct = []
        for _ in range(args.rounds):
            t = time.perf_counter()
            health.render()
            direct.append(time.perf_counter() - t)
        in_runtime = layer.runtime.group_count()
        addr = await admin.start("127.0.0.1", 0)
        over_http = []
        size = 0
        for _ in range(args.rounds):
            t = time.perf_counter()
            size = await scrape_http(addr)
            over_http.append(time.perf_counter() - t)
    finally:
        await admin.stop()
        await layer.stop()
    ms = 1000
    print(f"{args.groups} groups ({in_runtime} in the runtime) made in {filled_s:.1f}s; "
          f"{samples} samples, {size / 1e6:.1f} MB per scrape")
    print(f"lag families written once per snapshot (worker thread): {lag_written_s * ms:.0f} ms")
    print(f"render:    median {statistics.median(direct) * ms:.0f} ms, worst {max(direct) * ms:.0f} ms")
    print(f"over HTTP: median {statistics.median(over_http) * ms:.0f} ms, worst {max(over_http) * ms:.0f} ms")
    print(
        f"groups={args.groups} samples={samples} bytes={size} render_median_ms={statistics.median(direct) * ms:.1f} "
        f"http_median_ms={statistics.median(over_http) * ms:.1f} http_worst_ms={max(over_http) * ms:.1f} "
        f"lag_written_ms={lag_written_s * ms:.0f}"
    )


if __name__ == "__main__":
    asyncio.run(main())
