"""Fuzzed requests against the gateway while a live producer and consumer groups run through it.

A fixed seed and a bounded number of frames (about a minute on two shared cores); bench/fuzz.py runs the
same fuzzer for a million frames by hand. The run is short but not narrow: every api key the gateway
advertises is fuzzed several times and every kind of mutation is applied (checked below). What must hold
(the gateway's bad-input contract):

- every fuzzed frame is answered, or its connection is closed: no connection is left silent;
- answers come in request order, each with its request's correlation id;
- the gateway is alive at the end and still serves: the live groups consumed every record produced
  during the fuzzing and their committed offsets are at the end of each partition, the same read through
  the gateway and on the broker;
- the gateway logged no Python traceback (a traceback is a request the gateway did not expect, answered
  by closing the connection instead of with a Kafka error code).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from compat_tests.harness.fuzz import gateway_health, generate, live_groups, oracle, runner
from compat_tests.harness.probe import metadata_endpoints

pytestmark = pytest.mark.kafka

SEED = 20261125
FRAMES = 2400
CONNECTIONS = 8  # a batch mostly waits for answers (the broker's, or a JoinGroup held): more of them overlap
MIN_FRAMES_PER_API = 5
SILENCE_S = 20.0  # longer than any wait a fuzzed request may rightly cause (JoinGroup: 3 s delay + 6 s)

# Traceback signatures ("ExceptionType at file:function") accepted while their fix is pending. Each entry
# is a known gateway bug; keep this empty.
KNOWN_TRACEBACKS: list[str] = []


def _wait(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.2)


def test_fuzzed_requests_beside_live_groups(gateway, kafka, make_topic, names) -> None:
    if getattr(gateway, "direct", False):
        pytest.skip("--compat-direct: the contract checked here is the gateway's (its log, its process)")
    topic = make_topic(3)
    live = live_groups.LiveGroups(
        gateway.bootstrap, topic, {names("classic"): ["classic", "classic"], names("kip848"): ["consumer"]},
        records_per_s=40.0,
    ).start()
    try:
        # The groups are formed and consuming before the fuzzing starts.
        _wait(lambda: all(log.count() > 0 for log in live.logs.values()), 60, "every live group consuming")
        stats, fz = asyncio.run(runner.run_fuzz(
            gateway.bootstrap, seed=SEED, frames=FRAMES, connections=CONNECTIONS,
            names=generate.Names.for_run(names("fuzz")), silence_s=SILENCE_S, alive=gateway.alive,
        ))
        assert gateway.alive(), f"the gateway died under fuzzing ({stats.line()}):\n{gateway.tail(60)}"
        assert not stats.crashed, stats.line()
        assert stats.silent == 0, (
            f"{stats.silent} batches got neither an answer nor a close ({stats.line()}); frames of the first: "
            f"{oracle.hexdump_frames(stats.silent_examples[0])}"
        )
        assert stats.misanswered == 0, f"answers out of order ({stats.line()}): {stats.misanswered_examples[0][:3000]}"
        # Enough got through to mean something: frames reached the handlers and were answered.
        assert stats.answers > FRAMES // 10, stats.line()
        # The variety of the long run: every api key fuzzed, every mutation applied.
        rare = {k: fz.api_counts[k] for k in fz.apis if fz.api_counts[k] < MIN_FRAMES_PER_API}
        assert not rare, f"api keys fuzzed fewer than {MIN_FRAMES_PER_API} times: {rare}"
        assert generate.OPS <= set(fz.op_counts), f"mutations never applied: {sorted(generate.OPS - set(fz.op_counts))}"

        # Still serving: a fresh connection gets Metadata, and the live groups finish their work.
        assert metadata_endpoints(gateway.bootstrap), "no brokers in Metadata through the gateway"
        live.stop_producing()
        assert not live.produce_errors, live.produce_errors[:5]
        assert live.produced, "the live producer produced nothing"
        missing, committed = live.settle(90.0)
        assert not any(missing.values()), f"records produced but never consumed, per group: {missing}"
        ends = live.end_offsets()
        for group, offsets in committed.items():
            short = {p: (offsets.get(p), end) for p, end in ends.items() if offsets.get(p, -1) < end}
            assert not short, f"group {group}: committed offsets short of the end (committed, end): {short}"
            assert live.committed(kafka.bootstrap, group) == offsets, f"group {group}: gateway and broker differ"
    finally:
        errors = live.stop()
    assert not errors, errors

    signatures = gateway_health.traceback_signatures(gateway.log_path.read_text(errors="replace"))
    unexpected = {sig: n for sig, n in signatures.items() if sig not in KNOWN_TRACEBACKS}
    assert not unexpected, "Python tracebacks in the gateway log:\n" + "\n".join(
        f"  x{n} {sig}" for sig, n in sorted(unexpected.items(), key=lambda kv: -kv[1])
    )


# --- the fuzzer's own checks can fail ------------------------------------------------------------------


def test_stream_model_splits_frames_like_a_server() -> None:
    ranges = {0: (3, 9), 18: (0, 4)}
    model = oracle.StreamModel(ranges, max_frame=1000)
    # Produce v3, acks=0: no answer expected. Header: key, version, correlation id, null client id;
    # body: null transactional id, acks.
    produce = bytes.fromhex("0000 0003 00000007 ffff ffff 0000 00000000 00000000".replace(" ", ""))
    frames = model.feed(len(produce).to_bytes(4, "big") + produce + runner.sentinel_frame(9)[:6])
    assert [(f.correlation_id, f.answer) for f in frames] == [(7, False)]
    assert model.missing() == 8  # the rest of the 14-byte sentinel
    assert [(f.correlation_id, f.answer) for f in model.feed(runner.sentinel_frame(9)[6:])] == [(9, True)]
    model.feed((5000).to_bytes(4, "big"))
    assert model.broken and model.missing() == 0  # over the limit: the server closes, reads nothing more


def test_traceback_signatures_count_chains_once() -> None:
    log = "\n".join([
        "2026-01-01T00:00:00Z [error    ] group request failed",
        "Traceback (most recent call last):",
        '  File "/x/gateway/net/upstream.py", line 3, in send',
        "    raise UpstreamError()",
        "gateway.net.upstream.UpstreamError: lost",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/x/gateway/groups/offsets.py", line 9, in _partition_errors',
        "    return [p for p in t.partitions]",
        '  File "/x/gateway/groups/offsets.py", line 9, in <listcomp>',
        "    return [p for p in t.partitions]",
        "TypeError: 'NoneType' object is not iterable",
        "2026-01-01T00:00:01Z [warning  ] unknown api key; closing",
    ])
    assert gateway_health.traceback_signatures(log) == {"TypeError at offsets.py:_partition_errors": 1}
    assert gateway_health.traceback_signatures("all quiet\n") == {}
