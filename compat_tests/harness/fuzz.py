"""A structure-aware request fuzzer for the gateway, and the live consumer groups that run beside it.

Requests are built from the Kafka message schemas (kafka-python's JSON schemas, plus the gateway's own for
ConsumerGroupHeartbeat/ConsumerGroupDescribe) for every api key and version the gateway advertises in
ApiVersions, with random field values: group and member ids from small pools (so requests meet each
other's groups), nulls for nullable and non-nullable strings and arrays, negative and oversized lengths,
empty arrays, unknown tagged fields. Then the frame bytes are mutated: bit flips, truncation, extension,
a size prefix that lies, unknown api keys, versions out of range, the other header version.

Several frames are pipelined per connection over several concurrent connections. After each batch a
sentinel ApiVersions request follows; since a Kafka server answers in request order, its answer proves
that every frame before it was handled. Each batch must end in that answer or a close of the connection;
neither within the timeout is a *silent* connection. Answers must carry the correlation id of the frame
they answer, in order; Produce with acks=0 expects none (as on a broker).

The fuzzer never names the live groups' topic or groups: its names come from its own pools, so whatever it
sends may fail but can never legitimately change what the live groups consume or commit.
"""

from __future__ import annotations

import asyncio
import random
import re
import string
import struct
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from gateway.wire import codec
from gateway.wire.frames import read_uvarint, write_uvarint

from .clients import ConfluentConsumer, values
from .events import EventLog, ProducedRecord
from .probe import roundtrip, split_address

# The gateway's default max_frame_bytes (Kafka's socket.request.max.bytes): size lies stay mostly within it.
MAX_FRAME = 104_857_600
# A partial frame left at the end of a batch is completed with this many filler bytes at most; a longer
# lie is left open and the connection half-closed instead (the gateway then sees end of stream).
FILL_MAX = 256 * 1024
SENTINEL_BASE = 0x5E000000

_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_U16, _U32, _F64 = struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">d")
_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}
_PACK = {"int8": _I8, "int16": _I16, "int32": _I32, "int64": _I64, "uint16": _U16, "uint32": _U32}


def uvarint(value: int) -> bytes:
    """An unsigned varint; a negative (lying) length is written as its 32-bit two's complement."""
    return write_uvarint(value & 0xFFFFFFFF)


def _in_versions(spec: str | None, version: int) -> bool:
    if not spec or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    lo, _, hi = spec.partition("-")
    return int(lo) <= version <= int(hi or lo)


# --- the gateway's advertised versions -------------------------------------------------------------------


def advertised_versions(bootstrap: str) -> dict[int, tuple[int, int]]:
    """api key -> (min, max) version, from ApiVersions v3 through the gateway."""
    req = ApiVersionsRequest[3](client_software_name="groupgate-fuzz", client_software_version="1")
    resp = roundtrip(bootstrap, req, ApiVersionsResponse, 3)
    assert resp.error_code == 0, f"ApiVersions error {resp.error_code}"
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def sentinel_frame(correlation_id: int) -> bytes:
    """ApiVersions v0: answered by any Kafka server, so its answer marks the end of a batch."""
    payload = _I16.pack(codec.API_VERSIONS) + _I16.pack(0) + _I32.pack(correlation_id) + _I16.pack(-1)
    return _I32.pack(len(payload)) + payload


# --- request generation --------------------------------------------------------------------------------


@dataclass
class Names:
    """What the fuzzer may name. Never the live groups' topic or group ids."""

    groups: list[str]
    members: list[str]
    topics: list[str]
    # Generations and member epochs the gateway handed out (learned from answers), so that follow-up
    # requests (SyncGroup, Heartbeat, OffsetCommit, ConsumerGroupHeartbeat) reach past the first check.
    generations: list[int] = field(default_factory=lambda: [-1, 0, 1])

    def learn(self, member_id: str | None, generation: int | None) -> None:
        for pool, value in ((self.members, member_id), (self.generations, generation)):
            if value is None or value in pool:
                continue
            if len(pool) < _POOL_MAX:
                pool.append(value)  # type: ignore[arg-type]
            else:
                slot = _POOL_KEEP + zlib.crc32(repr(value).encode()) % (_POOL_MAX - _POOL_KEEP)
                pool[slot] = value  # type: ignore[index]

    @classmethod
    def for_run(cls, tag: str) -> Names:
        return cls(
            groups=["", f"fuzz-{tag}-g0", f"fuzz-{tag}-g1", f"fuzz-{tag}-g2"],
            members=["", f"fuzz-{tag}-m0", "consumer-1-00000000-0000-0000-0000-000000000000"],
            topics=["", f"fuzz-{tag}-t0", f"fuzz-{tag}-t1"],
        )


_POOL_MAX = 24
_POOL_KEEP = 3  # the fixed first entries of a pool stay

# Fields whose value a server waits on (JoinGroup rebalance timeout, Fetch max wait, ...): kept short, so a
# request that is right to wait is answered within the fuzzer's silence timeout.
_WAIT_FIELD = re.compile(r"(TimeoutMs|MaxWaitMs|WaitMs)$")
# Counts a server would honour by creating things on the shared broker (partitions, replicas): kept small.
_COUNT_FIELD = re.compile(r"^(NumPartitions|ReplicationFactor|Count)$")


class RequestFuzzer:
    """Builds fuzzed request frames (size prefix included) from the schemas, one ``frame()`` at a time."""

    def __init__(self, rng: random.Random, api_ranges: dict[int, tuple[int, int]], names: Names) -> None:
        self.rng = rng
        # Only what both the gateway advertises and the codec can describe; unknown keys come from mutation.
        self.apis = sorted(k for k in api_ranges if k in codec.REQUESTS)
        self.ranges = api_ranges
        self.names = names
        self.evil = False  # per frame: break the schema's rules (nulls where not nullable, length lies)
        self.op_counts: Counter[str] = Counter()
        self.api_counts: Counter[int] = Counter()  # frames built per api key (before any mutation)

    # Values -------------------------------------------------------------------------------------------

    def _int(self, kind: str, name: str) -> int:
        """A value the field's type can carry (unsigned fields such as a uint16 port never get -1)."""
        lo, hi = _RANGES[kind]
        return max(lo, min(hi, self._pick_int(lo, hi, name)))

    def _pick_int(self, lo: int, hi: int, name: str) -> int:
        r = self.rng
        if _WAIT_FIELD.search(name):
            return r.choice([-1, 0, 1, 10, 100, 500, 1000, 6000])
        if _COUNT_FIELD.match(name):
            return r.choice([-2, -1, 0, 1, 2, 3])
        if name in ("GenerationId", "MemberEpoch", "GenerationIdOrMemberEpoch"):
            return r.choice(self.names.generations) if r.random() < 0.8 else r.randint(lo, hi)
        if "Partition" in name or name in ("Index", "BrokerId", "NodeId", "LeaderId", "ReplicaId"):
            return max(lo, min(hi, r.choice([-1, 0, 0, 1, 2, 1000, r.randint(lo, hi)])))
        choice = r.random()
        if choice < 0.5:
            return r.choice([0, 1, -1, 2, 5])
        if choice < 0.75:
            return r.choice([lo, hi, lo + 1, hi - 1, 0 if lo == 0 else -2])
        return r.randint(lo, hi)

    def _text(self, name: str, path: tuple[str, ...]) -> str:
        r = self.rng
        if "GroupId" in name or name == "Key" and "Coordinator" in "".join(path):
            return r.choice(self.names.groups)
        if "MemberId" in name or "InstanceId" in name:
            return r.choice(self.names.members)
        if name in ("Name", "Topic", "TopicName") and any("Topic" in p for p in path) or name == "Topics":
            return r.choice(self.names.topics)
        choice = r.random()
        if choice < 0.3:
            return ""
        if choice < 0.6:
            return "".join(r.choice(string.ascii_letters + "-_.") for _ in range(r.randint(1, 12)))
        if choice < 0.75:
            return r.choice(["consumer", "range", "uniform", "cooperative-sticky", "classic"])
        if choice < 0.9:
            return "".join(chr(r.randint(0x80, 0x2FFF)) for _ in range(r.randint(1, 6)))
        # Not up to Kafka's 32767-byte limit: Kafka 4.4.0 decodes invalid UTF-8 to U+FFFD (3 bytes) and
        # then fails to encode the longer name in its answer. An AlterUserScramCredentials naming such a
        # user is never answered, and the broker has exited (FatalExitError in its controller forwarding
        # thread) when that forwarded request was cancelled: the fuzzer must not take the broker down.
        return "x" * r.choice([255, 256, 1000, 4000])

    def _string(self, name: str, path: tuple[str, ...], nullable: bool, compact: bool) -> bytes:
        r = self.rng
        if (nullable and r.random() < 0.15) or (self.evil and r.random() < 0.1):
            self.op_counts["null-string"] += 1
            return uvarint(0) if compact else _I16.pack(-1)
        data = self._text(name, path).encode("utf-8", "surrogatepass")
        if self.evil and r.random() < 0.05:
            data = bytes(r.randrange(256) for _ in range(r.randint(1, 8)))  # not UTF-8
        n = len(data)
        if self.evil and r.random() < 0.05:
            self.op_counts["length-lie"] += 1
            n = r.choice([-2, -32768, n + 1, n + 1000, 32767]) if not compact else r.choice([n + 5, 2**31])
            return (uvarint(n + 1) if compact else _I16.pack(max(-32768, min(32767, n)))) + data
        return (uvarint(n + 1) if compact else _I16.pack(min(n, 32767))) + data

    def _bytes(self, nullable: bool, compact: bool, records: bool) -> bytes:
        r = self.rng
        if (nullable and r.random() < 0.2) or (self.evil and r.random() < 0.1):
            return uvarint(0) if compact else _I32.pack(-1)
        data = bytes(r.randrange(256) for _ in range(r.choice([0, 1, 4, 16, 61, 200])))
        if records and r.random() < 0.5:
            data = _record_batch(r)
        n = len(data)
        if self.evil and r.random() < 0.05:
            self.op_counts["length-lie"] += 1
            n = r.choice([n + 1, n + 4096, 2**31 - 1 if not compact else 2**31 - 2, -2 if not compact else n + 9])
        return (uvarint(n + 1) if compact else _I32.pack(n)) + data

    def _array_len(self, nullable: bool, compact: bool) -> tuple[bytes, int]:
        """(encoded count, elements to write)."""
        r = self.rng
        if (nullable and r.random() < 0.15) or (self.evil and r.random() < 0.1):
            self.op_counts["null-array"] += 1
            return (uvarint(0) if compact else _I32.pack(-1)), 0
        n = r.choice([0, 0, 1, 1, 1, 2, 3])
        if self.evil and r.random() < 0.05:
            self.op_counts["length-lie"] += 1
            lie = r.choice([n + 1, n + 100, 2**31 - 1, -2] if not compact else [n + 1, n + 100, 2**31 - 2])
            return (uvarint(lie + 1) if compact else _I32.pack(lie)), n
        return (uvarint(n + 1) if compact else _I32.pack(n)), n

    # Structure ----------------------------------------------------------------------------------------

    def _scalar(self, kind: str, name: str, path: tuple[str, ...], nullable: bool, compact: bool) -> bytes:
        r = self.rng
        if kind in _PACK:
            return _PACK[kind].pack(self._int(kind, name))
        if kind == "bool":
            return bytes([r.choice([0, 1, 1, 2, 255])])
        if kind == "float64":
            return _F64.pack(r.choice([0.0, 1.0, -1.0, float("nan"), float("inf"), r.random()]))
        if kind == "uuid":
            return r.choice([bytes(16), bytes(r.randrange(256) for _ in range(16))])
        if kind == "string":
            return self._string(name, path, nullable, compact)
        if kind in ("bytes", "records"):
            return self._bytes(nullable, compact, kind == "records")
        raise ValueError(f"unknown field type {kind}")

    def _struct(self, fields: list[dict[str, Any]], version: int, flexible: bool, path: tuple[str, ...],
                common: dict[str, list[dict[str, Any]]]) -> bytes:
        out = bytearray()
        tagged: list[tuple[int, bytes]] = []
        for f in fields:
            if not _in_versions(f.get("versions"), version):
                continue
            tag = f.get("tag")
            if tag is not None:
                if flexible and _in_versions(f.get("taggedVersions", f.get("versions")), version) \
                        and self.rng.random() < 0.3:
                    tagged.append((int(tag), self._field(f, version, flexible, path, common)))
                continue
            out += self._field(f, version, flexible, path, common)
        if flexible:
            out += self._tags(tagged)
        return bytes(out)

    def _tags(self, tagged: list[tuple[int, bytes]]) -> bytes:
        r = self.rng
        if r.random() < 0.05:
            tagged.append((r.choice([7, 99, 1000, 2**20]), bytes(r.randrange(256) for _ in range(r.randint(0, 6)))))
        tagged.sort(key=lambda t: t[0])
        count = len(tagged)
        if self.evil and r.random() < 0.05:
            self.op_counts["tag-count-lie"] += 1
            count = r.choice([count + 1, 2**28])
        out = bytearray(uvarint(count))
        for tag, data in tagged:
            out += uvarint(tag) + uvarint(len(data)) + data
        return bytes(out)

    def _field(self, f: dict[str, Any], version: int, flexible: bool, path: tuple[str, ...],
               common: dict[str, list[dict[str, Any]]]) -> bytes:
        kind: str = f["type"]
        name: str = f["name"]
        nullable = _in_versions(f.get("nullableVersions"), version)
        here = (*path, name)
        if kind.startswith("[]"):
            elem = kind[2:]
            head, n = self._array_len(nullable, flexible)
            sub = f.get("fields") or common.get(elem)
            parts = [
                self._struct(sub, version, flexible, here, common) if sub is not None
                else self._scalar(elem, name, here, False, flexible)
                for _ in range(n)
            ]
            return head + b"".join(parts)
        sub = f.get("fields") or common.get(kind)
        if sub is not None:
            body = self._struct(sub, version, flexible, here, common)
            if nullable:  # a nullable struct carries a presence byte
                return (_I8.pack(-1) if self.rng.random() < 0.2 else _I8.pack(1) + body)
            return body
        return self._scalar(kind, name, path, nullable, flexible)

    def body(self, api_key: int, version: int) -> bytes:
        schema = codec.REQUESTS[api_key].json
        common = {s["name"]: s["fields"] for s in schema.get("commonStructs", [])}
        flexible = bool(codec.REQUESTS[api_key].flexible_version_q(version))
        return self._struct(schema["fields"], version, flexible, (schema["name"],), common)

    def header(self, api_key: int, version: int, correlation_id: int, flexible: bool) -> bytes:
        r = self.rng
        client = r.choice([None, "", "groupgate-fuzz", "fz" * r.randint(1, 40)])
        out = _I16.pack(api_key) + _I16.pack(version) + _I32.pack(correlation_id)
        if client is None:
            out += _I16.pack(-1)
        else:
            cid = client.encode()
            out += _I16.pack(len(cid)) + cid
        if flexible:
            out += self._tags([])
        return out

    def frame(self, correlation_id: int) -> bytes:
        """One request frame, valid per its schema or bent by ``evil`` values, then maybe mutated bytes."""
        r = self.rng
        api_key = r.choice(self.apis)
        self.api_counts[api_key] += 1
        lo, hi = self.ranges[api_key]
        version = r.randint(lo, min(hi, codec.REQUESTS[api_key].max_version))
        self.evil = r.random() < 0.3
        flexible = bool(codec.REQUESTS[api_key].flexible_version_q(version))
        header_flexible = flexible
        if r.random() < 0.03:
            self.op_counts["header-version"] += 1
            header_flexible = not flexible
        payload = self.header(api_key, version, correlation_id, header_flexible) + self.body(api_key, version)
        if r.random() < 0.25:
            payload = self.mutate(payload)
        if r.random() < 0.03:
            return self.size_lie(payload)
        return _I32.pack(len(payload)) + payload

    def learn(self, request: Expect, payload: bytes) -> None:
        """Take member ids and generations from JoinGroup and ConsumerGroupHeartbeat answers."""
        if len(request.frame) < 8:
            return
        api_key, version = _I16.unpack_from(request.frame, 4)[0], _I16.unpack_from(request.frame, 6)[0]
        if api_key not in _LEARN_FROM:
            return
        try:
            _, msg = codec.decode_response(api_key, version, payload)
        except Exception:  # noqa: BLE001 - an answer the codec cannot read teaches nothing
            return
        if getattr(msg, "error_code", 1) != 0 and api_key != _JOIN_GROUP:
            return
        generation = getattr(msg, "generation_id", None) if api_key == _JOIN_GROUP else msg.member_epoch
        self.names.learn(msg.member_id or None, generation)

    # Byte mutations -----------------------------------------------------------------------------------

    def mutate(self, payload: bytes) -> bytes:
        r = self.rng
        buf = bytearray(payload)
        for _ in range(r.choice([1, 1, 1, 2, 3])):
            op = r.choice(["flip", "flip", "byte", "truncate", "extend", "api-key", "version", "garbage"])
            self.op_counts[op] += 1
            if op == "flip" and buf:
                for _ in range(r.randint(1, 4)):
                    i = r.randrange(len(buf) * 8)
                    buf[i // 8] ^= 1 << (i % 8)
            elif op == "byte" and buf:
                buf[r.randrange(len(buf))] = r.choice([0x00, 0xFF, 0x7F, 0x80, 0x01])
            elif op == "truncate":
                del buf[r.randint(0, len(buf)) :]
            elif op == "extend":
                buf += bytes(r.randrange(256) for _ in range(r.choice([1, 3, 17, 300])))
            elif op == "api-key" and len(buf) >= 2:
                unknown = [k for k in (r.randint(-32768, 32767), 38, 40, 56, 67, 1000, -1, 32767)
                           if k not in self.ranges]
                buf[0:2] = _I16.pack(r.choice(unknown))
            elif op == "version" and len(buf) >= 4:
                key = _I16.unpack_from(buf, 0)[0]
                lo, hi = self.ranges.get(key, (0, 0))
                buf[2:4] = _I16.pack(r.choice([lo - 1, hi + 1, -1, 32767, -32768]))
            elif op == "garbage":
                buf = bytearray(r.randrange(256) for _ in range(r.choice([0, 1, 7, 9, 10, 13, 64, 512])))
        return bytes(buf)

    def size_lie(self, payload: bytes) -> bytes:
        r = self.rng
        self.op_counts["size-lie"] += 1
        n = len(payload)
        lie = r.choice([
            max(0, n - r.randint(1, 12)),
            n + r.randint(1, 64),
            n + r.randint(65, 4096),
            r.randint(n, MAX_FRAME),
            MAX_FRAME,
            MAX_FRAME + 1,
            2**31 - 1,
            -1,
            -(2**31),
            0,
        ])
        return _I32.pack(lie) + payload


# Every kind of byte mutation and schema-breaking value the fuzzer counts in ``op_counts``.
OPS = frozenset({
    "flip", "byte", "truncate", "extend", "api-key", "version", "garbage", "size-lie", "header-version",
    "null-string", "null-array", "length-lie", "tag-count-lie",
})

_JOIN_GROUP = 11
_LEARN_FROM = frozenset({_JOIN_GROUP, 68})  # JoinGroup (also MEMBER_ID_REQUIRED), ConsumerGroupHeartbeat
_BATCH_CACHE: list[bytes] = []


def _record_batch(rng: random.Random) -> bytes:
    """A well-formed record batch (magic 2), built once, so Produce bodies sometimes carry real records."""
    if not _BATCH_CACHE:
        from kafka.record.memory_records import MemoryRecordsBuilder

        b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 16)
        for i in range(3):
            b.append(timestamp=None, key=f"k{i}".encode(), value=b"fuzz", headers=[])
        b.close()
        _BATCH_CACHE.append(bytes(b.buffer()))
    return _BATCH_CACHE[0]


# --- what the gateway should do with the bytes it got ---------------------------------------------------


@dataclass
class Expect:
    """One complete frame as the gateway will split the stream, and what it may do with it."""

    correlation_id: int
    answer: bool  # False: no response follows (Produce acks=0); the gateway may still close
    frame: bytes


class StreamModel:
    """Splits what the fuzzer wrote to one connection into frames the same way a Kafka server does."""

    def __init__(self, api_ranges: dict[int, tuple[int, int]], max_frame: int = MAX_FRAME) -> None:
        self.ranges = api_ranges
        self.max_frame = max_frame
        self.partial = b""
        self.broken = False  # a size prefix the server must refuse: it closes, nothing later is read

    def feed(self, data: bytes) -> list[Expect]:
        out: list[Expect] = []
        buf = self.partial + data
        pos = 0
        while not self.broken and len(buf) - pos >= 4:
            (size,) = _I32.unpack_from(buf, pos)
            if size < 0 or size > self.max_frame:
                self.broken = True
                break
            if len(buf) - pos - 4 < size:
                break
            frame = buf[pos : pos + 4 + size]
            out.append(self._expect(frame))
            pos += 4 + size
        self.partial = b"" if self.broken else buf[pos:]
        return out

    def missing(self) -> int:
        """Bytes the server still waits for to complete the current frame (0: at a frame boundary)."""
        if self.broken or not self.partial:
            return 0
        if len(self.partial) < 4:
            return 4 - len(self.partial)
        return 4 + _I32.unpack_from(self.partial, 0)[0] - len(self.partial)

    def _expect(self, frame: bytes) -> Expect:
        corr = _I32.unpack_from(frame, 8)[0] if len(frame) >= 12 else -1
        answer = True
        if len(frame) >= 8:
            api_key, version = _I16.unpack_from(frame, 4)[0], _I16.unpack_from(frame, 6)[0]
            rng = self.ranges.get(api_key)
            if api_key == codec.PRODUCE and rng is not None and rng[0] <= version <= rng[1]:
                answer = _produce_acks(frame, version) != 0
        return Expect(corr, answer, frame)


def _produce_acks(frame: bytes, version: int) -> int | None:
    """Acks of a Produce frame, read as a server reads it; None when unreadable (the server closes)."""
    try:
        flexible = bool(codec.REQUESTS[codec.PRODUCE].flexible_version_q(version))
        pos = 12
        (n,) = _I16.unpack_from(frame, pos)
        pos += 2 + max(n, 0)
        if flexible:
            count, pos = read_uvarint(frame, pos)
            for _ in range(count):
                _, pos = read_uvarint(frame, pos)
                size, pos = read_uvarint(frame, pos)
                pos += size
        if version >= 3:
            if flexible:
                n, pos = read_uvarint(frame, pos)
                pos += max(n - 1, 0)
            else:
                (n,) = _I16.unpack_from(frame, pos)
                pos += 2 + max(n, 0)
        if pos + 2 > len(frame):
            return None
        return int(_I16.unpack_from(frame, pos)[0])
    except (struct.error, ValueError):
        return None


# --- running it against a server ------------------------------------------------------------------------


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


# --- the gateway's log ----------------------------------------------------------------------------------

_TRACEBACK = "Traceback (most recent call last):"
_FILE_LINE = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')


def traceback_signatures(log_text: str) -> Counter[str]:
    """``ExceptionType at file:function`` (innermost function) for every Python traceback in a log.

    A chained traceback ("During handling of the above exception ...") counts once, by its last exception.
    """
    out: Counter[str] = Counter()
    lines = log_text.splitlines()
    i = 0
    chained: str | None = None
    while i < len(lines):
        if _TRACEBACK not in lines[i]:
            i += 1
            continue
        where = "?"
        j = i + 1
        while j < len(lines):
            m = _FILE_LINE.match(lines[j])
            # The innermost named function (a comprehension is named after the function it sits in).
            if m and not (m.group(3).startswith("<") and m.group(3) != "<module>" and where != "?"):
                where = f"{Path(m.group(1)).name}:{m.group(3)}"
            elif m:
                pass
            elif not (lines[j].startswith(" ") or not lines[j].strip()):
                break
            j += 1
        exc = lines[j].split(":", 1)[0].strip() if j < len(lines) else "?"
        if chained is not None:
            out[chained] -= 1
            out += Counter()  # drops the zero count
        chained = f"{exc} at {where}"
        out[chained] += 1
        k = j + 1
        while k < len(lines) and not lines[k].strip():
            k += 1
        if k < len(lines) and lines[k].startswith(("During handling of the above", "The above exception was")):
            i = k + 1
        else:
            chained = None
            i = j + 1
    return out


def rss_kb(pid: int | None) -> int:
    """Resident set size of a process in KiB (Linux /proc), 0 when unknown."""
    if pid is None:
        return 0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


# --- live consumer groups alongside ---------------------------------------------------------------------


@dataclass
class LiveGroups:
    """A producer and consumer groups on one topic through the gateway, running while the fuzzer runs.

    ``groups`` maps a group id to its members' group protocols (``classic`` or ``consumer``, KIP-848).
    Consumers commit synchronously after each batch; every group must consume every produced record and
    end with its committed offsets at the end of each partition.
    """

    bootstrap: str
    topic: str
    groups: dict[str, Sequence[str]]
    records_per_s: float = 50.0
    produced: list[ProducedRecord] = field(default_factory=list)
    logs: dict[str, EventLog] = field(default_factory=dict)
    consumers: list[ConfluentConsumer] = field(default_factory=list)
    produce_errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> LiveGroups:
        for gid, protocols in self.groups.items():
            log = self.logs.setdefault(gid, EventLog())
            for i, proto in enumerate(protocols):
                c = ConfluentConsumer(
                    name=f"{gid}-{i}", log=log, bootstrap=self.bootstrap, group_id=gid, topics=[self.topic],
                    group_protocol=proto, tolerate_commit_errors=True,
                )
                self.consumers.append(c.start())  # type: ignore[arg-type]
        self._thread = threading.Thread(target=self._produce, name="live-producer", daemon=True)
        self._thread.start()
        return self

    def _produce(self) -> None:
        producer = confluent_kafka.Producer({
            "bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True,
        })
        lock = threading.Lock()

        def delivered(err: Any, msg: Any) -> None:
            with lock:
                if err is not None:
                    self.produce_errors.append(str(err))
                else:
                    self.produced.append(ProducedRecord(msg.topic(), msg.partition(), msg.offset(), msg.value()))

        i = 0
        interval = 1.0 / self.records_per_s
        next_at = time.monotonic()
        while not self._stop.is_set():
            for v in values(f"live-{i}", 1):
                producer.produce(self.topic, key=str(i).encode(), value=v, on_delivery=delivered)
            i += 1
            producer.poll(0)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
        left = producer.flush(60)
        if left:
            self.produce_errors.append(f"{left} records undelivered at the end")

    def stop_producing(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(90)

    def missing(self) -> dict[str, int]:
        """Per group: produced records not consumed by any of its members."""
        want = {r.position for r in self.produced}
        return {gid: len(want - {r.position for r in log.records}) for gid, log in self.logs.items()}

    def end_offsets(self) -> dict[int, int]:
        ends: dict[int, int] = {}
        for r in self.produced:
            ends[r.partition] = max(ends.get(r.partition, 0), r.offset + 1)
        return ends

    def committed(self, bootstrap: str, group: str) -> dict[int, int]:
        """Committed offsets of ``group`` on the topic, read with a consumer that does not join the group."""
        c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                      "enable.auto.commit": False})
        try:
            md = c.list_topics(self.topic, timeout=10)
            parts = [confluent_kafka.TopicPartition(self.topic, p) for p in md.topics[self.topic].partitions]
            return {tp.partition: tp.offset for tp in c.committed(parts, timeout=10)}
        except confluent_kafka.KafkaException:
            return {}  # unreadable now: settle() tries again until its deadline
        finally:
            c.close()

    def settle(self, timeout_s: float) -> tuple[dict[str, int], dict[str, dict[int, int]]]:
        """Wait until every group consumed everything and committed the end offsets (or time runs out).

        Returns (records missing per group, committed offsets per group as read through the gateway).
        """
        deadline = time.monotonic() + timeout_s
        ends = self.end_offsets()
        while True:
            missing = self.missing()
            committed = {gid: self.committed(self.bootstrap, gid) for gid in self.groups}
            done = not any(missing.values()) and all(
                all(c.get(p, -1001) >= end for p, end in ends.items()) for c in committed.values())
            if done or time.monotonic() > deadline:
                return missing, committed
            time.sleep(0.5)

    def stop(self) -> list[str]:
        """Stop the consumers; their errors, if any."""
        errors = []
        self._stop.set()
        for c in self.consumers:
            try:
                c.stop()
            except AssertionError as exc:
                errors.append(str(exc))
        return errors


def hexdump_frames(batch_hex: str, limit: int = 8) -> list[str]:
    """The frames of a batch (as the server splits them), hex each, for a failure message."""
    data = bytes.fromhex(batch_hex)
    out = []
    pos = 0
    while pos + 4 <= len(data) and len(out) < limit:
        (size,) = _I32.unpack_from(data, pos)
        if size < 0 or pos + 4 + size > len(data):
            out.append(data[pos:].hex())
            break
        out.append(data[pos : pos + 4 + size].hex())
        pos += 4 + size
    return out
