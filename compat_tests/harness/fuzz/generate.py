"""Fuzzed request frames: values from the Kafka message schemas (kafka-python's JSON schemas, plus the
gateway's own), some that break the schema's rules, then mutated bytes; and the pools of names they use."""

from __future__ import annotations

import random
import re
import string
import struct
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gateway.wire import codec
from gateway.wire.frames import write_uvarint

from .oracle import MAX_FRAME, Expect

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
