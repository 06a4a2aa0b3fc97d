"""``classic_groups = translate``: a fleet of unmodified classic consumers runs as a consumer group
from its first member - server-side assignment and per-member incremental rebalances."""

from __future__ import annotations

import pytest
from migration_harness import TOPIC, Driver, partitions_of

from coordinator.errors import Errors
from translate.group_config import ClassicGroupsMode, GroupServiceConfig
from translate.group_service import GroupService


class Client:
    """What a classic consumer knows: its id, generation and the partitions it owns."""

    def __init__(self, d: Driver, name: str, cooperative: bool) -> None:
        self.d, self.name, self.cooperative = d, name, cooperative
        self.protocol = "cooperative-sticky" if cooperative else "range"
        self.member_id = ""
        self.generation = -1
        self.owned: list[int] = []
        self.history: list[list[int]] = []

    def join(self) -> int:
        """JoinGroup then SyncGroup; returns the generation. Eager clients give everything up first."""
        if not self.cooperative:
            self.owned = []
        key = self.d.join(member_id=self.member_id, client=self.name, protocols=(self.protocol,),
                          owned={TOPIC: self.owned})
        response = self.d.join_response(key)
        if response.error_code == Errors.MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            return self.join()
        assert response.error_code == 0, response
        # No barrier: the answer comes at once, and every classic member is a follower.
        assert response.leader == "" and response.members == []
        self.generation = response.generation_id
        sync = self.d.sync_response(self.d.sync(self.member_id, self.generation))
        assert sync.error_code == 0, sync
        self.owned = partitions_of(sync.assignment).get(TOPIC, [])
        self.history.append(self.owned)
        return self.generation

    def heartbeat(self) -> bool:
        """True when told to rejoin (and rejoined)."""
        if self.d.heartbeat(self.member_id, self.generation) == Errors.REBALANCE_IN_PROGRESS:
            self.join()
            return True
        return False


def settle(clients: list[Client]) -> int:
    rejoins = 0
    for _ in range(10):
        moved = [c.heartbeat() for c in clients]
        rejoins += sum(moved)
        if not any(moved):
            return rejoins
    raise AssertionError("the group did not settle")


@pytest.mark.parametrize("cooperative", [False, True], ids=["eager", "cooperative"])
def test_translate_mode_classic_fleet_gets_server_side_assignment(cooperative: bool) -> None:
    d = Driver(mode="translate")
    clients = [Client(d, name, cooperative) for name in ("a", "b", "c")]
    for c in clients:
        c.join()
    assert d.service.classic_groups.group("g") is None
    settle(clients)
    owned = [p for c in clients for p in c.owned]
    assert sorted(owned) == list(range(6)) and all(len(c.owned) == 2 for c in clients)
    group = d.cgroup()
    assert group.state().value == "Stable" and all(m.uses_classic_protocol for m in group.members.values())
    # Each member's strategy picks the server assignor standing in for it (range -> range,
    # cooperative-sticky -> uniform).
    expected = "uniform" if cooperative else "range"
    assert all(m.server_assignor == expected for m in group.members.values())


@pytest.mark.parametrize("cooperative", [False, True], ids=["eager", "cooperative"])
def test_translate_mode_rebalances_are_incremental_and_per_member(cooperative: bool) -> None:
    d = Driver(mode="translate")
    clients = [Client(d, name, cooperative) for name in ("a", "b", "c")]
    for c in clients:
        c.join()
    settle(clients)
    before = {c.name: set(c.owned) for c in clients}
    seen = {c.name: len(c.history) for c in clients}
    newcomer = Client(d, "d", cooperative)
    newcomer.join()
    # The others are told one by one; each answer comes without waiting for the rest.
    settle([*clients, newcomer])
    after = {c.name: set(c.owned) for c in [*clients, newcomer]}
    assert sorted(p for parts in after.values() for p in parts) == list(range(6))
    moved = sum(len(before[n] - after[n]) for n in before)
    # Sticky server-side assignment: only what the newcomer needs changes hands.
    assert moved == len(after["d"]) and 1 <= moved <= 2
    if cooperative:
        # A cooperative member never loses a partition it keeps, even for a moment.
        for c in clients:
            kept = before[c.name] & after[c.name]
            assert all(kept <= set(owned) for owned in c.history[seen[c.name]:])


def test_translate_mode_keeps_other_protocol_types_classic() -> None:
    d = Driver(mode="translate")
    key = d.join(client="w", protocol_type="connect")
    first = d.join_response(key)
    d.join(member_id=first.member_id, client="w", protocol_type="connect")
    assert d.service.classic_groups.group("g") is not None and d.service.coordinator.group("g") is None


def test_translate_mode_join_answered_member_id_required_leaves_no_group() -> None:
    d = Driver(mode="translate")
    response = d.join_response(d.join(client="a"))
    assert response.error_code == Errors.MEMBER_ID_REQUIRED
    assert d.service.coordinator.group("g") is None and d.records == []


def test_translate_mode_never_downgrades() -> None:
    d = Driver(mode="translate")
    clients = [Client(d, name, False) for name in ("a", "b")]
    for c in clients:
        c.join()
    assert d.consumer("m1").error_code == 0
    d.consumer("m1", epoch=-1, full=False)
    assert set(d.cgroup().members) == {c.member_id for c in clients}


def test_translate_mode_replay_rebuilds_identical_state() -> None:
    d = Driver(mode="translate")
    clients = [Client(d, name, True) for name in ("a", "b", "c")]
    for c in clients:
        c.join()
    settle(clients)
    replayed = GroupService(GroupServiceConfig(classic_groups="translate"))
    for r in d.records:
        replayed.replay(r)
    assert replayed.coordinator.snapshot() == d.service.coordinator.snapshot()


@pytest.mark.parametrize("text", ["native", "TRANSLATE", " Translate "])
def test_classic_groups_mode_setting_is_case_insensitive(text: str) -> None:
    assert ClassicGroupsMode.parse(text).value == text.strip().lower()
    with pytest.raises(ValueError):
        ClassicGroupsMode.parse("both")
