import struct

import pytest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import ProduceRequest

from gateway.wire import codec, frames


def _request_frame(msg, version: int, corr: int = 3, client_id: str | None = "cli") -> bytes:
    msg.with_header(correlation_id=corr, client_id=client_id)
    return bytes(msg.encode(version=version, header=True, framed=True))


def test_frame_buffer_splits_frames_across_arbitrary_chunks():
    stream = b"".join(frames.frame(bytes([i]) * (i * 37 + 1)) for i in range(20))
    for chunk in (1, 3, 4, 5, 64, 1000, len(stream)):
        buf = frames.FrameBuffer(limit=10_000)
        out = []
        for i in range(0, len(stream), chunk):
            out.extend(buf.feed(stream[i : i + chunk]))
        assert b"".join(out) == stream
        assert [len(f) - 4 for f in out] == [i * 37 + 1 for i in range(20)]
        assert buf.buffered == 0


def test_frame_buffer_reassembles_a_large_frame_from_many_reads_and_the_frames_pipelined_after_it():
    large = frames.frame(bytes(range(256)) * 1000)
    small = [frames.frame(bytes([i]) * 10) for i in range(5)]
    stream = large + b"".join(small)
    for chunk in (1000, 65536, 255_999):
        buf = frames.FrameBuffer(limit=1 << 20)
        out = []
        for i in range(0, len(stream), chunk):
            out.extend(buf.feed(stream[i : i + chunk]))
            assert buf.reserved in (0, len(large)) or buf.reserved <= 14
        assert out == [large, *small]
        assert buf.buffered == 0 and buf.reserved == 0


def test_frame_buffer_refuses_oversize_as_soon_as_the_size_is_known():
    buf = frames.FrameBuffer(limit=100)
    assert buf.feed(b"\x00\x00") == []
    with pytest.raises(frames.FrameTooLarge) as e:
        buf.feed(struct.pack(">h", 101))
    assert e.value.size == 101


def test_frame_buffer_refuses_negative_size():
    with pytest.raises(frames.FrameTooLarge):
        frames.FrameBuffer(limit=100).feed(struct.pack(">i", -5))


def test_frame_buffer_keeps_a_partial_frame():
    buf = frames.FrameBuffer(limit=100)
    assert buf.feed(frames.frame(b"abcdef")[:7]) == []
    assert buf.buffered == 7


def test_frame_buffer_reserves_the_declared_size_of_a_frame_in_progress():
    buf = frames.FrameBuffer(1 << 20)
    assert buf.feed(struct.pack(">i", 3) + b"abc") == [struct.pack(">i", 3) + b"abc"]
    assert (buf.reserved, buf.partials) == (0, 0)  # whole frames never reserve anything
    assert buf.feed(b"\x00\x00") == []
    assert (buf.reserved, buf.partials) == (4, 1)  # the size itself is incomplete
    assert buf.feed(b"\x03\xe8" + b"x" * 10) == []  # 1000 declared
    assert buf.reserved == 1004 and buf.buffered == 14
    partials = buf.partials
    assert buf.feed(b"x" * 500) == [] and buf.partials == partials  # the same frame, still in progress
    out = buf.feed(b"x" * 490 + struct.pack(">i", 8) + b"ab")  # completes it and starts another
    assert len(out) == 1 and len(out[0]) == 1004
    assert (buf.reserved, buf.partials) == (12, partials + 1)
    buf.clear()
    assert (buf.reserved, buf.buffered) == (0, 0)


@pytest.mark.parametrize("version", [0, 8, 9, 12])
@pytest.mark.parametrize("client_id", ["c", None, "ü-client"])
def test_request_header_round_trip(version, client_id):
    raw = _request_frame(MetadataRequest[version](topics=[]), version, corr=99, client_id=client_id)
    header = frames.parse_request_header(raw[4:], codec.request_header_flexible(3, version))
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (
        3,
        version,
        99,
        client_id,
    )
    body = MetadataRequest[version].decode(raw[4 + header.body_offset :])
    assert body.topics == ([] if version else [])


def test_flexible_header_tagged_fields_are_skipped():
    # header v2 with one tagged field (tag 5, 3 bytes) before the body
    payload = struct.pack(">hhih", 3, 12, 1, 1) + b"x" + b"\x01\x05\x03abc" + b"BODY"
    header = frames.parse_request_header(payload, flexible=True)
    assert payload[header.body_offset :] == b"BODY"


@pytest.mark.parametrize(
    "payload", [b"", b"\x00\x03\x00\x0c\x00\x00", struct.pack(">hhih", 3, 1, 1, 50) + b"ab"]
)
def test_truncated_headers_are_frame_errors(payload):
    with pytest.raises(frames.FrameError):
        frames.parse_request_header(payload, flexible=False)


def test_uvarint_round_trip():
    for v in (0, 1, 127, 128, 300, 2**21, 2**28 - 1):
        assert frames.read_uvarint(frames.write_uvarint(v), 0) == (v, len(frames.write_uvarint(v)))


@pytest.mark.parametrize("version", [3, 7, 8, 9, 11])
@pytest.mark.parametrize("acks", [0, 1, -1])
@pytest.mark.parametrize("txn", [None, "txn-1"])
def test_produce_acks(version, acks, txn):
    msg = ProduceRequest[version](transactional_id=txn, acks=acks, timeout_ms=1000, topic_data=[])
    raw = _request_frame(msg, version)
    assert frames.produce_acks(raw, version, codec.request_header_flexible(0, version)) == acks


def test_response_header_flexibility():
    assert frames.response_body_offset(frames.response_header(5, True), True) == 5
    assert frames.response_body_offset(frames.response_header(5, False), False) == 4
    assert frames.response_correlation_id(frames.response_header(-7, False)) == -7
