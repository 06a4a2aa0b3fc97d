"""Describe and list views of connect groups."""

from __future__ import annotations

from connect_helpers import Driver, G, names

from coordinator.connect.model import ConnectGroupState
from coordinator.errors import Errors


def test_describe_shows_epochs_the_assignor_and_every_worker() -> None:
    d = Driver()
    assert d.coord.describe([G])[0].error_code == Errors.GROUP_ID_NOT_FOUND
    d.join("W1", client_id="worker-1")
    desc = d.coord.describe([G])[0]
    assert (desc.group_state, desc.group_epoch, desc.assignment_epoch, desc.computing_member_id) == (
        "Assigning", 1, 0, "W1",
    )
    d.compute("W1", {"W1": ["AC0", "AT1"]})
    d.join("W1", client_id="worker-1")
    d.join("W2")
    d.hb("W1", owned=["AC0", "AT1"], client_id="worker-1")
    d.compute("W1", {"W1": ["AC0"], "W2": ["AT1"]})
    d.hb("W1", owned=["AC0", "AT1"], client_id="worker-1")  # told to revoke AT1
    desc = d.coord.describe([G])[0]
    assert (desc.group_state, desc.group_epoch, desc.assignment_epoch, desc.assignor_name) == (
        "Reconciling", 2, 2, "incremental-cooperative",
    )
    w1, w2 = desc.workers
    assert (w1.member_id, w1.url, w1.client_id, w1.member_epoch, w1.state) == (
        "W1", "http://w1:8083", "worker-1", 1, "UNREVOKED",
    )
    assert names(w1.assignment) == ["AC0", "AT1"] and names(w1.target_assignment) == ["AC0"]
    assert (w2.member_id, w2.member_epoch, names(w2.assignment), names(w2.target_assignment)) == ("W2", 1, [], ["AT1"])
    assert w1.assignors == ["incremental-cooperative"]


def test_list_groups_filters_by_state_and_type() -> None:
    d = Driver()
    d.join("W1")
    state = d.group().state()
    assert state is ConnectGroupState.ASSIGNING
    listed = d.coord.list_groups()
    assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed] == [
        (G, "connect", "Assigning", "connect"),
    ]
    assert d.coord.list_groups(states=["ASSIGNING"], types=["Connect"])
    assert not d.coord.list_groups(states=["stable"])
    assert not d.coord.list_groups(types=["consumer"])
