"""Kafka 4.3.1 reschedules a classic group member's session when its OffsetCommit is accepted (the
coordinator's commit validation of a Stable or PreparingRebalance classic group): a member that commits
but does not heartbeat stays. A TxnOffsetCommit, or a refused commit, does not count."""

from __future__ import annotations

import pytest
from migration_harness import SESSION, Driver

from coordinator.errors import Errors
from translate.group_messages import OffsetCommitCheck


def _commit(d: Driver, member: str, generation: int, transactional: bool = False) -> int:
    key, _ = d.send(OffsetCommitCheck("g", member, generation, api_version=9, is_transactional=transactional))
    return d.responses[key].error_code  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "generation_offset,transactional,stays",
    [(0, False, True), (0, True, False), (1, False, False)],
    ids=["commit", "transactional commit", "refused commit"],
)
def test_an_accepted_offset_commit_extends_a_classic_members_session(
    generation_offset: int, transactional: bool, stays: bool
) -> None:
    d = Driver()
    (member,), generation = d.classic_fleet(clients=("a",))
    d.advance(SESSION * 6 // 10)
    expected = Errors.NONE if generation_offset == 0 else Errors.ILLEGAL_GENERATION
    assert _commit(d, member, generation + generation_offset, transactional) == expected
    d.advance(SESSION * 6 // 10)  # past the session of the last heartbeat, not of the commit
    assert (member in d.classic().members) is stays
    if stays:
        d.advance(SESSION)  # without further commits or heartbeats the session ends
        assert member not in d.classic().members
