"""The ``roundrobin`` strategy of classic consumers, computed on the server.

The layout of Java's ``RoundRobinAssignor`` (and librdkafka's ``roundrobin``, which deals the same
way): every partition of every subscribed topic, topics sorted by name and partitions by number, is
dealt in turn to the members (sorted static first by instance id, then by member id), the turn
passing over members not subscribed to the partition's topic and carrying on from topic to topic.
With identical subscriptions the counts differ by at most one; 2 members and 4 partitions give the
first member 0 and 2, the second 1 and 3.

Not sticky: the layout depends on the current members and topics only, as on the client.
"""

from __future__ import annotations

from coordinator.assignors._classic import TP, as_result, sorted_members, subscribed_topics
from coordinator.assignors.api import Assignment, AssignmentDelta, GroupSpec


class RoundRobinAssignor:
    name = "roundrobin"

    def assign(self, spec: GroupSpec, delta: AssignmentDelta | None = None) -> dict[str, Assignment]:
        members = spec.members
        if not members:
            return {}
        order = sorted_members(members)
        lists: dict[str, list[TP]] = {mid: [] for mid in order}
        n = len(order)
        turn = 0
        for t in subscribed_topics(spec):
            # A topic some member subscribes to, so the loop below finds one within n steps.
            for p in range(spec.topics[t].num_partitions):
                while t not in members[order[turn]].subscribed_topic_ids:
                    turn = (turn + 1) % n
                lists[order[turn]].append((t, p))
                turn = (turn + 1) % n
        return as_result(spec, lists)
