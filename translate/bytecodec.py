"""Reading and writing Kafka's primitive wire types for the small blobs this layer owns.

The embedded consumer protocol (subscription / assignment) and the classic group records are
byte strings inside other messages; they are decoded here rather than through a full message
framework so that a client omitting trailing fields can be tolerated field by field.
"""

from __future__ import annotations

import struct


class MalformedBytes(ValueError):
    """The bytes cannot be read as the structure they claim to be."""


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class Reader:
    __slots__ = ("_buf", "_pos")

    def __init__(self, buf: bytes) -> None:
        self._buf = memoryview(buf)
        self._pos = 0

    def at_end(self) -> bool:
        return self._pos >= len(self._buf)

    def remaining(self) -> int:
        return len(self._buf) - self._pos

    def _take(self, n: int) -> memoryview:
        if n < 0 or self._pos + n > len(self._buf):
            raise MalformedBytes(f"need {n} bytes at offset {self._pos}, have {self.remaining()}")
        view = self._buf[self._pos : self._pos + n]
        self._pos += n
        return view

    def int16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def int64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def unsigned_varint(self) -> int:
        value = 0
        shift = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise MalformedBytes("varint longer than 5 bytes")

    def _text(self, n: int) -> str:
        try:
            return bytes(self._take(n)).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedBytes(f"string is not UTF-8: {exc}") from exc

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise MalformedBytes("null where a string is required")
        return value

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n == -1:
            return None
        if n < -1:
            raise MalformedBytes(f"negative string length {n}")
        return self._text(n)

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        if n == -1:
            return None
        if n < -1:
            raise MalformedBytes(f"negative bytes length {n}")
        return bytes(self._take(n))

    def array_length(self) -> int:
        """Length of a classic (int32-prefixed) array; -1 means null."""
        n = self.int32()
        if n < -1:
            raise MalformedBytes(f"negative array length {n}")
        # Each element needs at least one byte: reject absurd counts before allocating anything.
        if n > self.remaining():
            raise MalformedBytes(f"array of {n} elements in {self.remaining()} bytes")
        return n

    # Flexible (compact) encodings: lengths are unsigned varints of length + 1, 0 meaning null.
    def compact_nullable_string(self) -> str | None:
        n = self.unsigned_varint()
        if n == 0:
            return None
        return self._text(n - 1)

    def compact_string(self) -> str:
        value = self.compact_nullable_string()
        if value is None:
            raise MalformedBytes("null where a compact string is required")
        return value

    def compact_nullable_bytes(self) -> bytes | None:
        n = self.unsigned_varint()
        if n == 0:
            return None
        return bytes(self._take(n - 1))

    def compact_array_length(self) -> int:
        n = self.unsigned_varint() - 1
        if n > self.remaining():
            raise MalformedBytes(f"array of {n} elements in {self.remaining()} bytes")
        return n

    def skip_tagged_fields(self) -> None:
        for _ in range(self.unsigned_varint()):
            self.unsigned_varint()  # tag
            self._take(self.unsigned_varint())


class Writer:
    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def getvalue(self) -> bytes:
        return b"".join(self._parts)

    def int16(self, value: int) -> None:
        self._parts.append(_I16.pack(value))

    def int32(self, value: int) -> None:
        self._parts.append(_I32.pack(value))

    def int64(self, value: int) -> None:
        self._parts.append(_I64.pack(value))

    def unsigned_varint(self, value: int) -> None:
        out = bytearray()
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        self._parts.append(bytes(out))

    def nullable_string(self, value: str | None) -> None:
        if value is None:
            self.int16(-1)
            return
        raw = value.encode("utf-8")
        self.int16(len(raw))
        self._parts.append(raw)

    string = nullable_string

    def nullable_bytes(self, value: bytes | None) -> None:
        if value is None:
            self.int32(-1)
            return
        self.int32(len(value))
        self._parts.append(bytes(value))

    def array_length(self, n: int) -> None:
        self.int32(n)

    def compact_nullable_string(self, value: str | None) -> None:
        if value is None:
            self.unsigned_varint(0)
            return
        raw = value.encode("utf-8")
        self.unsigned_varint(len(raw) + 1)
        self._parts.append(raw)

    compact_string = compact_nullable_string

    def compact_nullable_bytes(self, value: bytes | None) -> None:
        if value is None:
            self.unsigned_varint(0)
            return
        self.unsigned_varint(len(value) + 1)
        self._parts.append(bytes(value))

    def compact_array_length(self, n: int) -> None:
        self.unsigned_varint(n + 1)

    def empty_tagged_fields(self) -> None:
        self.unsigned_varint(0)
