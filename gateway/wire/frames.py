"""Kafka framing and the request/response headers, parsed by hand on the hot path.

Every Kafka message is a 4-byte big-endian size followed by that many bytes. A request starts with
api key (int16), api version (int16), correlation id (int32) and client id (nullable int16-length string,
never compact, even in flexible header v2); header v2 then carries tagged fields. A response header is the
correlation id, plus tagged fields in header v1. Which header version applies depends on whether the
message version is flexible (KIP-482), which codec.py knows per api key.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class FrameError(ValueError):
    """Bytes that do not form a readable Kafka frame or header; the connection is closed."""


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # where the request body starts inside the frame payload


def encode_size(n: int) -> bytes:
    return _SIZE.pack(n)


def peek_request(payload: bytes | memoryview) -> tuple[int, int, int]:
    """(api key, api version, correlation id): the fixed 8 bytes every request version starts with."""
    if len(payload) < 8:
        raise FrameError(f"request of {len(payload)} bytes is shorter than the 8-byte fixed header")
    return _HEAD.unpack_from(payload, 0)  # type: ignore[return-value]


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    shift = 0
    value = 0
    while True:
        if pos >= len(buf):
            raise FrameError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise FrameError("varint too long")


def write_uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def skip_tagged_fields(buf: bytes | memoryview, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise FrameError("tagged field runs past the end of the frame")
    return pos


def parse_request_header(payload: bytes | memoryview, flexible: bool) -> RequestHeader:
    api_key, api_version, correlation_id = peek_request(payload)
    if len(payload) < 10:
        raise FrameError("request header truncated before the client id")
    (n,) = _INT16.unpack_from(payload, 8)
    pos = 10
    client_id: str | None = None
    if n >= 0:
        if pos + n > len(payload):
            raise FrameError("client id runs past the end of the frame")
        try:
            client_id = bytes(payload[pos : pos + n]).decode("utf-8")
        except UnicodeDecodeError as e:
            raise FrameError("client id is not UTF-8") from e
        pos += n
    elif n != -1:
        raise FrameError(f"negative client id length {n}")
    if flexible:
        pos = skip_tagged_fields(payload, pos)
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def response_body_offset(payload: bytes | memoryview, flexible: bool) -> int:
    if len(payload) < 4:
        raise FrameError("response shorter than its correlation id")
    return skip_tagged_fields(payload, 4) if flexible else 4


def response_correlation_id(payload: bytes | memoryview) -> int:
    return _INT32.unpack_from(payload, 0)[0]  # type: ignore[no-any-return]


def response_header(correlation_id: int, flexible: bool) -> bytes:
    """A response header with no tagged fields (v0, or v1 when flexible)."""
    return _INT32.pack(correlation_id) + (b"\x00" if flexible else b"")


def frame(payload: bytes) -> bytes:
    return _SIZE.pack(len(payload)) + payload


class FrameTooLarge(FrameError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class FrameBuffer:
    """Splits a byte stream into whole frames (each returned *with* its 4-byte size prefix).

    Bytes are kept as a list of received chunks and joined only once a frame is complete, so a large
    Produce/Fetch frame costs one copy; a chunk that is exactly one frame is passed on without copying.
    The size is checked as soon as it is known, so an oversized frame is refused before it is buffered.
    ``reserved`` is the declared size of the frame being read (what the request memory budget counts),
    ``partials`` counts the frames that did not arrive whole (the partial-request timeout tells a new
    frame from one that is still incomplete by it).
    """

    __slots__ = ("_chunks", "_have", "_need", "limit", "partials")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._chunks: list[bytes] = []
        self._have = 0
        self._need = 4
        self.partials = 0

    @property
    def buffered(self) -> int:
        return self._have

    @property
    def reserved(self) -> int:
        """The size (prefix included) of the incomplete frame held, 0 when none; the prefix alone (4)
        while the size itself is still incomplete."""
        return self._need if self._chunks else 0

    def clear(self) -> None:
        """Drop what is buffered (the connection is closed)."""
        self._chunks = []
        self._have = 0
        self._need = 4

    def feed(self, data: bytes) -> list[bytes]:
        if self._chunks:
            self._chunks.append(data)
            self._have += len(data)
            if self._have < self._need:
                return []
            data = b"".join(self._chunks)
            self._chunks = []
            self._have = 0
        out: list[bytes] = []
        n = len(data)
        pos = 0
        need = 4
        while n - pos >= 4:
            (size,) = _SIZE.unpack_from(data, pos)
            if size < 0 or size > self.limit:
                raise FrameTooLarge(size, self.limit)
            end = pos + 4 + size
            if end > n:
                need = 4 + size
                break
            out.append(data if (pos == 0 and end == n) else data[pos:end])
            pos = end
        if pos < n:
            rest = data[pos:] if pos else data
            self._chunks = [rest]
            self._have = len(rest)
            self._need = need
            self.partials += 1
        return out


def produce_acks(frame: bytes, version: int, flexible: bool) -> int:
    """The acks field of a Produce request frame (size prefix included); 0 means no response follows.

    Produce v3+ starts with TransactionalId (nullable string; compact in flexible v9+), then Acks (int16).
    """
    header = parse_request_header(memoryview(frame)[4:], flexible)
    pos = 4 + header.body_offset
    if version >= 3:
        if flexible:
            n, pos = read_uvarint(frame, pos)
            pos += max(n - 1, 0)
        else:
            (n,) = _INT16.unpack_from(frame, pos)
            pos += 2 + max(n, 0)
    if pos + 2 > len(frame):
        raise FrameError("Produce request truncated before acks")
    return int(_INT16.unpack_from(frame, pos)[0])
