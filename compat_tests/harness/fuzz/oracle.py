"""What a Kafka server must do with the bytes the fuzzer wrote: split the stream into frames as it does,
refuse a size prefix out of range, answer every frame but a Produce with acks=0."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from gateway.wire import codec
from gateway.wire.api_keys import ApiKey
from gateway.wire.frames import read_uvarint

# The gateway's default max_frame_bytes (Kafka's socket.request.max.bytes): size lies stay mostly within it.
MAX_FRAME = 104_857_600

_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


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
            if api_key == ApiKey.PRODUCE and rng is not None and rng[0] <= version <= rng[1]:
                answer = _produce_acks(frame, version) != 0
        return Expect(corr, answer, frame)


def _produce_acks(frame: bytes, version: int) -> int | None:
    """Acks of a Produce frame, read as a server reads it; None when unreadable (the server closes)."""
    try:
        flexible = bool(codec.REQUESTS[ApiKey.PRODUCE].flexible_version_q(version))
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
