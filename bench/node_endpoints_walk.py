"""Cost of the KIP-951 check on the hot path: ``node_endpoints.rewrite_frame`` over Produce v13 and Fetch v18
responses without leader endpoints (the normal case: the walk finds no tag 0 and the frame passes uncopied),
and with them (the tail is rebuilt). Prints CPU microseconds per response for a few shapes.

    .venv/bin/python bench/node_endpoints_walk.py
"""

from __future__ import annotations

import time
import timeit
import uuid

from gateway.net import node_endpoints
from gateway.wire import codec, frames
from gateway.wire.api_keys import ApiKey


def fetch_frame(topics: int, partitions: int, record_bytes: int, endpoints: bool) -> bytes:
    R = codec.RESPONSES[ApiKey.FETCH]
    T = R.FetchableTopicResponse
    P = T.PartitionData
    records = b"\x01" * record_bytes
    msg = R[18](
        throttle_time_ms=0, error_code=0, session_id=1,
        responses=[
            T(topic_id=uuid.UUID(int=t), partitions=[
                P(partition_index=p, error_code=0, high_watermark=10, aborted_transactions=None, records=records)
                for p in range(partitions)
            ])
            for t in range(topics)
        ],
        node_endpoints=[R.NodeEndpoint(node_id=1, host="10.0.0.1", port=9092)] if endpoints else [],
    )
    return frames.frame(codec.encode_response(ApiKey.FETCH, 18, 1, msg))


def produce_frame(partitions: int, endpoints: bool) -> bytes:
    R = codec.RESPONSES[ApiKey.PRODUCE]
    T = R.TopicProduceResponse
    P = T.PartitionProduceResponse
    msg = R[13](
        responses=[T(topic_id=uuid.UUID(int=1), partition_responses=[
            P(index=p, error_code=0, base_offset=5, record_errors=[]) for p in range(partitions)
        ])],
        throttle_time_ms=0,
        node_endpoints=[R.NodeEndpoint(node_id=1, host="10.0.0.1", port=9092)] if endpoints else [],
    )
    return frames.frame(codec.encode_response(ApiKey.PRODUCE, 13, 1, msg))


def addr_of(node_id: int) -> tuple[str, int]:
    return ("127.0.0.1", 19092)


def per_call_us(api_key: int, version: int, frame: bytes) -> float:
    n = 2000
    # CPU time of this process, so other load on the machine shows less in the figure than wall time would.
    t = min(
        timeit.repeat(
            lambda: node_endpoints.rewrite_frame(api_key, version, frame, addr_of),
            number=n,
            repeat=5,
            timer=time.process_time,
        )
    )
    return t / n * 1e6


def main() -> None:
    shapes = [
        ("produce v13, 1 partition", ApiKey.PRODUCE, 13, lambda e: produce_frame(1, e)),
        ("produce v13, 20 partitions", ApiKey.PRODUCE, 13, lambda e: produce_frame(20, e)),
        ("fetch v18, 1 partition x 1 MiB", ApiKey.FETCH, 18, lambda e: fetch_frame(1, 1, 1 << 20, e)),
        ("fetch v18, 20 partitions x 64 KiB", ApiKey.FETCH, 18, lambda e: fetch_frame(1, 20, 1 << 16, e)),
        ("fetch v18, 10 topics x 50 partitions, empty", ApiKey.FETCH, 18, lambda e: fetch_frame(10, 50, 0, e)),
    ]
    for name, key, version, build in shapes:
        plain, with_endpoints = build(False), build(True)
        print(
            f"{name:45s} {len(plain):>9d} bytes  no endpoints {per_call_us(key, version, plain):8.2f} us"
            f"  with endpoints {per_call_us(key, version, with_endpoints):8.2f} us"
        )


if __name__ == "__main__":
    main()
