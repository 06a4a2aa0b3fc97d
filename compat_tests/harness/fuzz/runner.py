"""Fuzzed frames sent against a server: several pipelined per connection over several concurrent
connections, each batch closed by a sentinel whose answer proves every frame before it was handled, the
answers checked against the oracle (order, correlation ids, silence)."""

from __future__ import annotations

import asyncio
import random
import struct
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from gateway.wire.api_keys import ApiKey

from ..probe import roundtrip, split_address
from .generate import Names, RequestFuzzer
from .oracle import Expect, StreamModel

# A partial frame left at the end of a batch is completed with this many filler bytes at most; a longer
# lie is left open and the connection half-closed instead (the gateway then sees end of stream).
FILL_MAX = 256 * 1024
SENTINEL_BASE = 0x5E000000

_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


def advertised_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    """api key -> (min, max) version, from ApiVersions v3 through the gateway."""
    req = ApiVersionsRequest[3](client_software_name="groupgate-fuzz", client_software_version="1")
    resp = roundtrip(bootstrap, req, ApiVersionsResponse, 3)
    assert resp.error_code == 0, f"ApiVersions error {resp.error_code}"
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def sentinel_frame(correlation_id: int) -> bytes:
    """ApiVersions v0: answered by any Kafka server, so its answer marks the end of a batch."""
    payload = _I16.pack(ApiKey.API_VERSIONS) + _I16.pack(0) + _I32.pack(correlation_id) + _I16.pack(-1)
    return _I32.pack(len(payload)) + payload


@dataclass
class FuzzStats:
    generated: int = 0  # fuzzed frames written (a size lie can merge, split or swallow some)
    frames: int = 0  # complete fuzzed frames the server received (sentinels not counted)
    answers: int = 0  # responses to fuzzed frames
    closes: int = 0  # batches that ended with the server closing the connection
    batches: int = 0
    connections: int = 0
    silent: int = 0  # batches with neither the sentinel's answer nor a close within the timeout
    misanswered: int = 0  # a response out of order or with another frame's correlation id
    crashed: bool = False  # the server stopped accepting connections
    silent_examples: list[str] = field(default_factory=list)  # hex of the batches that met silence
    misanswered_examples: list[str] = field(default_factory=list)
    # The slowest batches that ended well: (seconds, "api_key/version ..." of their frames)
    slowest: list[tuple[float, str]] = field(default_factory=list)

    def note_latency(self, seconds: float, expects: list[Expect]) -> None:
        if len(self.slowest) >= _EXAMPLES and seconds <= self.slowest[-1][0]:
            return
        what = " ".join(
            f"{_I16.unpack_from(e.frame, 4)[0]}/{_I16.unpack_from(e.frame, 6)[0]}" if len(e.frame) >= 8 else "short"
            for e in expects
        )
        self.slowest.append((round(seconds, 2), what))
        self.slowest.sort(key=lambda t: -t[0])
        del self.slowest[_EXAMPLES:]

    def line(self) -> str:
        return (f"generated={self.generated} frames={self.frames} answers={self.answers} closes={self.closes} batches={self.batches} "
                f"connections={self.connections} silent={self.silent} misanswered={self.misanswered} "
                f"crashed={int(self.crashed)}")


_EXAMPLES = 5


async def _fuzz_connection(
    host: str, port: int, fuzzer: RequestFuzzer, ranges: dict[int, tuple[int, int]], stats: FuzzStats,
    budget: list[int], silence_s: float, alive: Callable[[], bool], corr_seq: list[int],
) -> None:
    """One connection after another, each sent batches until the server closes it or the budget ends."""
    rng = fuzzer.rng
    while budget[0] > 0 and not stats.crashed:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), silence_s)
        except (OSError, TimeoutError):
            if not alive():
                stats.crashed = True
                return
            await asyncio.sleep(0.1)
            continue
        stats.connections += 1
        model = StreamModel(ranges)
        try:
            while budget[0] > 0:
                n = min(budget[0], rng.choice([1, 1, 2, 3, 4, 6, 8]))
                budget[0] -= n
                if not await _batch(reader, writer, fuzzer, model, stats, n, silence_s, corr_seq):
                    break
        finally:
            writer.close()


async def _batch(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, fuzzer: RequestFuzzer, model: StreamModel,
    stats: FuzzStats, n: int, silence_s: float, corr_seq: list[int],
) -> bool:
    """Send n fuzzed frames and a sentinel; True when the connection is still usable afterwards."""
    data = bytearray()
    for _ in range(n):
        corr_seq[0] += 1
        data += fuzzer.frame(corr_seq[0] & 0x0FFFFFFF)
    expects = model.feed(bytes(data))
    half_close = False
    missing = model.missing()
    if 0 < missing <= FILL_MAX:
        filler = bytes(missing)  # completes the frame the lie announced; its tail is zeros
        data += filler
        expects += model.feed(filler)
    elif missing > FILL_MAX:
        half_close = True  # the server rightly waits for the rest; end of stream must make it close
    corr_seq[0] += 1
    sentinel = SENTINEL_BASE + (corr_seq[0] & 0xFFFFFF)
    if not half_close and not model.broken:
        data += sentinel_frame(sentinel)
        model.feed(sentinel_frame(sentinel))
    stats.generated += n
    stats.frames += len(expects)
    stats.batches += 1
    try:
        writer.write(bytes(data))
        if half_close or model.broken:
            if writer.can_write_eof():
                writer.write_eof()
        await writer.drain()
    except (ConnectionError, OSError):
        stats.closes += 1
        return False
    queue = [e for e in expects if e.answer]
    sent_at = time.monotonic()
    try:
        async with asyncio.timeout(silence_s):
            while True:
                head = await reader.readexactly(4)
                payload = await reader.readexactly(_I32.unpack(head)[0])
                corr = _I32.unpack_from(payload, 0)[0]
                if corr == sentinel and not queue:
                    stats.note_latency(time.monotonic() - sent_at, expects)
                    return not (half_close or model.broken)
                if queue and queue[0].correlation_id == corr:
                    fuzzer.learn(queue.pop(0), payload)
                    stats.answers += 1
                    continue
                stats.misanswered += 1
                if len(stats.misanswered_examples) < _EXAMPLES:
                    stats.misanswered_examples.append(
                        f"got correlation id {corr}, expected {queue[0].correlation_id if queue else sentinel}; "
                        f"batch={bytes(data).hex()}")
                return False
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        stats.closes += 1
        return False
    except TimeoutError:
        stats.silent += 1
        if len(stats.silent_examples) < _EXAMPLES:
            stats.silent_examples.append(bytes(data).hex())
        return False


async def run_fuzz(
    bootstrap: str, *, seed: int, frames: int, connections: int, names: Names,
    silence_s: float = 15.0, alive: Callable[[], bool] = lambda: True,
    progress: Callable[[FuzzStats], None] | None = None,
) -> tuple[FuzzStats, RequestFuzzer]:
    """Send ``frames`` fuzzed frames over ``connections`` concurrent connections; returns what happened."""
    ranges = advertised_versions(bootstrap)
    host, port = split_address(bootstrap)
    stats = FuzzStats()
    # One generator per connection, each seeded from the run's seed: a run is reproducible per seed
    # (up to the interleaving the server's answers cause).
    fuzzers = [RequestFuzzer(random.Random(seed * 1000 + i), ranges, names) for i in range(connections)]
    per = [frames // connections + (1 if i < frames % connections else 0) for i in range(connections)]
    budgets = [[p] for p in per]
    corr_seqs = [[i << 24] for i in range(connections)]

    async def reporter() -> None:
        while progress is not None:
            await asyncio.sleep(10)
            progress(stats)

    rep = asyncio.ensure_future(reporter())
    try:
        await asyncio.gather(*(
            _fuzz_connection(host, port, fuzzers[i], ranges, stats, budgets[i], silence_s, alive, corr_seqs[i])
            for i in range(connections)
        ))
    finally:
        rep.cancel()
    ops: Counter[str] = Counter()
    apis: Counter[int] = Counter()
    for f in fuzzers:
        ops.update(f.op_counts)
        apis.update(f.api_counts)
    fuzzers[0].op_counts, fuzzers[0].api_counts = ops, apis
    return stats, fuzzers[0]
