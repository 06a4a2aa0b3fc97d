"""The computing worker is a translated classic worker while one qualifies (coordinator/connect/assignors.py)."""

from __future__ import annotations

from coordinator.connect import codec
from coordinator.connect import records as cr
from coordinator.connect.assignors import select
from coordinator.connect.model import ClassicWorkerMetadata, ClientAssignor, ConnectWorker

CLASSIC = ClassicWorkerMetadata(10_000, (("sessioned", b"\x00\x02"),))


def _worker(mid: str, low: int, high: int, classic: bool) -> ConnectWorker:
    return ConnectWorker(mid, url=f"http://{mid}", assignors=(ClientAssignor("sessioned", low, high),),
                         classic=CLASSIC if classic else None)  # fmt: skip


def test_a_classic_worker_is_chosen_over_new_protocol_workers_and_keeps_the_role() -> None:
    ws = [_worker("a", 2, 2, False), _worker("b", 2, 2, True), _worker("c", 2, 2, True)]
    assert select(ws, None) == ("sessioned", "b")
    assert select(ws, "c") == ("sessioned", "c")
    # A sticky new-protocol worker gives the role up while a classic one qualifies.
    assert select(ws, "a") == ("sessioned", "b")
    # Without classic workers the rules are the ones before: sticky, else the first by id.
    plain = [_worker("a", 2, 2, False), _worker("b", 2, 2, False)]
    assert select(plain, "b") == ("sessioned", "b") and select(plain, None) == ("sessioned", "a")


def test_a_classic_worker_whose_range_does_not_cover_the_others_is_not_chosen() -> None:
    ws = [_worker("a", 1, 2, False), _worker("b", 2, 2, True)]
    assert select(ws, "b") == ("sessioned", "a")


def test_a_workers_classic_metadata_survives_its_record_bytes_and_old_records_read_without_it() -> None:
    w = _worker("b", 2, 2, True)
    record = cr.member_metadata("g", w)
    key, value = codec.encode(record)
    assert codec.decode(key, value) == record
    plain = cr.member_metadata("g", _worker("a", 2, 2, False))
    key, value = codec.encode(plain)
    back = codec.decode(key, value)
    assert back == plain and isinstance(back.value, cr.ConnectMemberMetadataValue) and back.value.classic is None
    assert cr.replay([record])["g"].workers["b"].classic == CLASSIC
