"""Groups as a compatibility suite sees them: a group's type and state, and converting a live classic
group into a KIP-848 consumer group mid-test (as the first upgraded member of a rolling upgrade does)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from groupgate.testing.wire import roundtrip


def group_type(bootstrap: str, group: str) -> tuple[str, str] | None:
    """(type, state) of ``group`` as ListGroups v5 lists it (``classic``/``consumer``, ``Stable``...),
    None when it is not listed."""
    from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse

    r = roundtrip(bootstrap, ListGroupsRequest[5](states_filter=[], types_filter=[]), ListGroupsResponse, 5)
    for g in r.groups:
        if g.group_id == group:
            return str(g.group_type).lower(), str(g.group_state)
    return None


def wait_group_type(bootstrap: str, group: str, kind: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    seen = group_type(bootstrap, group)
    while seen is None or seen[0] != kind:
        if time.monotonic() > deadline:
            raise TimeoutError(f"group {group} is {seen}, not a {kind} group, after {timeout_s}s")
        time.sleep(0.2)
        seen = group_type(bootstrap, group)


class ConsumerMember:
    """A KIP-848 member (ConsumerGroupHeartbeat) joined by hand and kept alive by a thread.

    Joining a classic group converts it into a consumer group (migration policy ``bidirectional`` or
    ``upgrade``); with ``bidirectional`` its ``leave()`` converts the group back once only classic
    members remain. It acknowledges what it is assigned and consumes nothing: its partitions stand still
    while it is a member.
    """

    def __init__(self, bootstrap: str, group: str, topics: list[str], rebalance_timeout_ms: int = 30_000) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.topics = topics
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.assigned: list[tuple[Any, list[int]]] = []
        self.interval_s = 1.0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _heartbeat(self, epoch: int) -> Any:
        from gateway.wire.protocol.messages import (
            ConsumerGroupHeartbeatRequest,
            ConsumerGroupHeartbeatResponse,
        )

        joining = epoch == 0
        req: Any = ConsumerGroupHeartbeatRequest[1](  # type: ignore[misc]
            group_id=self.group, member_id=self.member_id, member_epoch=epoch, instance_id=None, rack_id=None,
            rebalance_timeout_ms=self.rebalance_timeout_ms if joining else -1,
            subscribed_topic_names=self.topics if joining else None, subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=[] if joining else (self.assigned if epoch > 0 else None),
        )
        return roundtrip(self.bootstrap, req, ConsumerGroupHeartbeatResponse, 1)

    def join(self) -> ConsumerMember:
        r = self._heartbeat(0)
        if r.error_code != 0:
            raise RuntimeError(f"ConsumerGroupHeartbeat join of {self.group}: error {r.error_code} {r.error_message}")
        self._apply(r)
        self._thread = threading.Thread(target=self._run, name=f"groupgate-member-{self.group}", daemon=True)
        self._thread.start()
        return self

    def _apply(self, r: Any) -> None:
        self.epoch = r.member_epoch
        self.interval_s = max(0.1, r.heartbeat_interval_ms / 1000)
        if r.assignment is not None:
            self.assigned = [(tp.topic_id, list(tp.partitions)) for tp in r.assignment.topic_partitions]

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                r = self._heartbeat(self.epoch)
                if r.error_code != 0:
                    raise RuntimeError(f"ConsumerGroupHeartbeat of {self.group}: error {r.error_code} {r.error_message}")
                self._apply(r)
            except BaseException as e:  # noqa: BLE001 - reported by leave()
                self.error = e
                return

    def leave(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._heartbeat(-1)
        if self.error is not None:
            raise RuntimeError(f"the member of {self.group} failed while joined: {self.error}") from self.error

    def __enter__(self) -> ConsumerMember:
        return self.join()

    def __exit__(self, *exc: object) -> None:
        self.leave()


def convert_group(bootstrap: str, group: str, topics: list[str], timeout_s: float = 30.0) -> ConsumerMember:
    """Convert the live classic ``group`` into a consumer group: a KIP-848 member subscribed to
    ``topics`` joins through ``bootstrap`` and stays (a context manager; ``leave()`` it to end the
    migration the other way under ``bidirectional``). Returns once ListGroups says ``consumer``."""
    member = ConsumerMember(bootstrap, group, topics).join()
    try:
        wait_group_type(bootstrap, group, "consumer", timeout_s)
    except BaseException:
        member.leave()
        raise
    return member
