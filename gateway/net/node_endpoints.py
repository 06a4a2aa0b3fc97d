"""KIP-951 leader endpoints in Produce (v10+) and Fetch (v16+) responses, rewritten on the hot path.

When a partition's leader moved, the broker answers NOT_LEADER_OR_FOLLOWER together with the new leader's
id (per partition) and its host:port in the top-level tagged field NodeEndpoints (tag 0), so the client
can go straight to the new leader without a Metadata round trip. Those are upstream addresses: they must
be replaced by the gateway's own, like the brokers of a Metadata response.

Produce and Fetch responses are the bulk of all traffic, and a Fetch response carries the record data, so
nothing is decoded or copied unless endpoints are present: ``find_tagged_fields`` walks the response's
structure (lengths only, record batches skipped by their size) to the top-level tagged fields, which are
the last bytes of the body. Only when tag 0 is among them is that tail decoded and rebuilt; the bytes
before it are kept as they are. Every function is pure: frame bytes in, frame bytes (or None) out.

The layouts are those of Kafka's ProduceResponse v10-13 and FetchResponse v16-18 (flexible versions:
compact strings and arrays with length + 1, tagged fields after each struct's fields).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from gateway.wire.api_keys import ApiKey
from gateway.wire.frames import FrameError, read_uvarint, skip_tagged_fields, write_uvarint

# The first version of each API whose response carries NodeEndpoints, and the last one whose layout this
# module knows. The gateway advertises no version above the latter (see rewrite.VERSION_CAPS).
ENDPOINTS_FROM: dict[int, int] = {ApiKey.PRODUCE: 10, ApiKey.FETCH: 16}
KNOWN_UP_TO: dict[int, int] = {ApiKey.PRODUCE: 13, ApiKey.FETCH: 18}
NODE_ENDPOINTS_TAG = 0

_INT32 = struct.Struct(">i")

AddressOf = Callable[[int], "tuple[str, int] | None"]


def carries_endpoints(api_key: int, version: int) -> bool:
    first = ENDPOINTS_FROM.get(api_key)
    return first is not None and version >= first


# --- walking ----------------------------------------------------------------------------------------------


# The walk runs over every Produce/Fetch response: uvarints below 128 (empty tagged fields, short arrays
# and strings) are read inline, the general decoder only for longer ones (e.g. a record batch's length).
Buf = bytes | memoryview


def _skip_tagged(buf: Buf, pos: int) -> int:
    if buf[pos] == 0:
        return pos + 1
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    return pos


def _uvarint(buf: Buf, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    return read_uvarint(buf, pos)


def _skip_compact_bytes(buf: Buf, pos: int) -> int:
    # Compact (nullable) string / bytes / records: uvarint length + 1 (0 = null), then the bytes.
    n, pos = _uvarint(buf, pos)
    return pos + n - 1 if n else pos


def _array_len(buf: Buf, pos: int) -> tuple[int, int]:
    n, pos = _uvarint(buf, pos)
    return (n - 1 if n else 0), pos


def _produce_body_end(buf: Buf, pos: int, version: int) -> int:
    topics, pos = _array_len(buf, pos)
    for _ in range(topics):
        pos = pos + 16 if version >= 13 else _skip_compact_bytes(buf, pos)  # TopicId / Name
        parts, pos = _array_len(buf, pos)
        for _ in range(parts):
            pos += 30  # Index, ErrorCode, BaseOffset, LogAppendTimeMs, LogStartOffset
            errors, pos = _array_len(buf, pos)  # RecordErrors
            for _ in range(errors):
                pos = _skip_compact_bytes(buf, pos + 4)  # BatchIndex, BatchIndexErrorMessage
                pos = _skip_tagged(buf, pos)
            pos = _skip_compact_bytes(buf, pos)  # ErrorMessage
            pos = _skip_tagged(buf, pos)  # CurrentLeader (tag 0) lives here
        pos = _skip_tagged(buf, pos)
    return pos + 4  # ThrottleTimeMs


def _fetch_body_end(buf: Buf, pos: int, version: int) -> int:
    pos += 10  # ThrottleTimeMs, ErrorCode, SessionId
    topics, pos = _array_len(buf, pos)
    for _ in range(topics):
        pos += 16  # TopicId (v13+)
        parts, pos = _array_len(buf, pos)
        for _ in range(parts):
            pos += 30  # PartitionIndex, ErrorCode, HighWatermark, LastStableOffset, LogStartOffset
            aborted, pos = _array_len(buf, pos)  # AbortedTransactions (nullable: 0 = null)
            for _ in range(aborted):
                pos = _skip_tagged(buf, pos + 16)  # ProducerId, FirstOffset
            pos = _skip_compact_bytes(buf, pos + 4)  # PreferredReadReplica, then Records (never read)
            pos = _skip_tagged(buf, pos)  # DivergingEpoch, CurrentLeader, SnapshotId
        pos = _skip_tagged(buf, pos)
    return pos


def find_tagged_fields(api_key: int, version: int, payload: bytes | memoryview, body_offset: int) -> int:
    """Where the top-level tagged fields of a Produce/Fetch response body start (offset into ``payload``)."""
    if api_key == ApiKey.PRODUCE:
        pos = _produce_body_end(payload, body_offset, version)
    elif api_key == ApiKey.FETCH:
        pos = _fetch_body_end(payload, body_offset, version)
    else:
        raise ValueError(f"api key {api_key} carries no node endpoints")
    if pos >= len(payload):
        raise FrameError(f"api {api_key} v{version} response truncated before its tagged fields")
    return pos


# --- the tagged fields ------------------------------------------------------------------------------------


def _read_tagged(buf: memoryview) -> list[tuple[int, memoryview]]:
    count, pos = read_uvarint(buf, 0)
    out = []
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        if pos + size > len(buf):
            raise FrameError("tagged field runs past the end of the response")
        out.append((tag, buf[pos : pos + size]))
        pos += size
    if pos != len(buf):
        raise FrameError(f"{len(buf) - pos} bytes after the response's tagged fields")
    return out


def _compact_str(buf: memoryview, pos: int) -> tuple[str | None, int]:
    n, pos = read_uvarint(buf, pos)
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > len(buf):
        raise FrameError("string runs past the end of its field")
    return bytes(buf[pos:end]).decode("utf-8"), end


def _write_compact_str(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode("utf-8")
    return write_uvarint(len(raw) + 1) + raw


Endpoint = tuple[int, str, int, "str | None", bytes]  # node id, host, port, rack, raw tagged fields


def decode_node_endpoints(value: bytes | memoryview) -> list[Endpoint]:
    buf = memoryview(value)
    n, pos = _array_len(buf, 0)
    out: list[Endpoint] = []
    for _ in range(n):
        (node_id,) = _INT32.unpack_from(buf, pos)
        host, pos = _compact_str(buf, pos + 4)
        (port,) = _INT32.unpack_from(buf, pos)
        rack, pos = _compact_str(buf, pos + 4)
        end = _skip_tagged(buf, pos)
        out.append((node_id, host or "", port, rack, bytes(buf[pos:end])))
        pos = end
    if pos != len(buf):
        raise FrameError("NodeEndpoints field longer than its entries")
    return out


def encode_node_endpoints(endpoints: list[Endpoint]) -> bytes:
    parts = [write_uvarint(len(endpoints) + 1)]
    for node_id, host, port, rack, tagged in endpoints:
        parts += [_INT32.pack(node_id), _write_compact_str(host), _INT32.pack(port), _write_compact_str(rack)]
        parts.append(tagged or b"\x00")
    return b"".join(parts)


def rewrite_frame(api_key: int, version: int, frame: bytes, addr_of: AddressOf) -> bytes | None:
    """The response frame (size prefix included) with every NodeEndpoints entry pointing at the gateway,
    or None when it has none (then the frame passes on untouched, uncopied). A node the gateway does not
    serve is left out: the client falls back to a Metadata request, as for a leader it was not told about."""
    body = skip_tagged_fields(frame, 8)  # size, correlation id, then header v1's tagged fields
    start = find_tagged_fields(api_key, version, frame, body)
    fields = _read_tagged(memoryview(frame)[start:])
    if not any(tag == NODE_ENDPOINTS_TAG for tag, _ in fields):
        return None
    out: list[bytes | memoryview] = [b"", memoryview(frame)[4:start], write_uvarint(len(fields))]
    for tag, value in fields:
        if tag == NODE_ENDPOINTS_TAG:
            kept = []
            for node_id, _host, _port, rack, tagged in decode_node_endpoints(value):
                addr = addr_of(node_id)
                if addr is not None:
                    kept.append((node_id, addr[0], addr[1], rack, tagged))
            value = memoryview(encode_node_endpoints(kept))
        out += [write_uvarint(tag), write_uvarint(len(value)), value]
    out[0] = _INT32.pack(sum(len(part) for part in out))
    return b"".join(out)  # the one copy of the body, only for a response that had endpoints
