"""Every group type rebuilt from its stored records, then resumed: the classic groups from their
GroupMetadata records (translate/group_records.py), the consumer groups from theirs
(coordinator/records/), the connect groups from theirs (coordinator/connect/records.py), told apart by
the key's version; after the load, the timers are armed again.
"""

from __future__ import annotations

from coordinator import records as rec
from coordinator.connect.codec import KEY_VERSIONS as CONNECT_KEY_VERSIONS
from coordinator.connect.codec import decode as decode_connect_record
from coordinator.connect.records import ConnectRecord
from coordinator.connect.service import session_key as connect_session_key
from coordinator.outcome import Outcome
from coordinator.records.codec import decode as decode_consumer_record
from coordinator.timers import ScheduleTimer
from translate.classic_group import ClassicGroupState
from translate.conversion import leaves_partitions_unassigned
from translate.group_config import AnyRecord
from translate.group_parts import GroupParts
from translate.group_records import GroupMetadataRecord, decode_record

# The first int16 of a GroupMetadata key (classic groups); consumer group records use 3..16, connect
# group records 1000..1004.
_GROUP_METADATA_KEY_VERSION = 2


def replay(svc: GroupParts, record: AnyRecord) -> None:
    if isinstance(record, GroupMetadataRecord):
        svc.classic_groups.replay(record)
    elif isinstance(record, ConnectRecord):
        svc.connect.replay(record)
    else:
        svc.coordinator.replay(record)


def replay_bytes(svc: GroupParts, key: bytes, value: bytes | None) -> bool:
    """Replay one stored record; False for records that are not group records (offsets)."""
    if len(key) < 2:
        return False
    version = int.from_bytes(key[:2], "big", signed=True)
    if version == _GROUP_METADATA_KEY_VERSION:
        svc.classic_groups.replay(decode_record(key, value))
        return True
    if version in {int(t) for t in rec.RecordType}:
        svc.coordinator.replay(decode_consumer_record(key, value))
        return True
    if version in CONNECT_KEY_VERSIONS:
        svc.connect.replay(decode_connect_record(key, value))
        return True
    return False


def on_loaded(svc: GroupParts, now_ms: int) -> Outcome:
    out = Outcome()
    out.take(svc.classic_groups.on_loaded(now_ms))
    result = Outcome()
    topics = svc.coordinator.state.topics
    for group in svc.classic_groups.groups.values():
        if group.is_in(ClassicGroupState.STABLE) and leaves_partitions_unassigned(group, topics):
            # A rebalance the records do not remember (the one after a downgrade) was under way:
            # start it again rather than leave partitions unassigned. Kafka does not (the same
            # gap); a group whose assignor leaves partitions out on purpose rebalances once more.
            svc.classic_groups.rebalancer.prepare_rebalance(result, group, now_ms)
    out.take(result)
    out.take(svc.coordinator.on_loaded(now_ms))
    out.take(svc.connect.on_loaded(now_ms))
    for cgroup in svc.connect.state.groups.values():
        for w in cgroup.workers.values():
            if w.classic is not None:
                # A classic worker's session is its JoinGroup's (the later change of the key wins).
                key = connect_session_key(cgroup.group_id, w.member_id)
                out.timers.append(ScheduleTimer(key, now_ms + w.classic.session_timeout_ms))
    return out
