"""What the group service is configured with and what each of its calls returns.

``GroupServiceConfig``: the migration policy (``group.consumer.migration.policy``), the classic
groups mode (``native`` / ``translate``), the classic group settings, and how DescribeGroups shows
consumer groups. What a call returns is the one ``Outcome`` of coordinator/outcome.py: the responses
released by a call (each tagged with the request key it answers), the records to make durable first,
and the timer changes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from coordinator.connect.codec import encode as encode_connect_record
from coordinator.connect.records import ConnectRecord
from coordinator.records import Record as ConsumerGroupRecord
from coordinator.records.codec import encode as encode_consumer_record
from translate.classic_rebalance import ClassicGroupConfig
from translate.conversion import MigrationPolicy
from translate.group_records import GroupMetadataRecord, encode_record

AnyRecord = GroupMetadataRecord | ConsumerGroupRecord | ConnectRecord


class ClassicGroupsMode(enum.Enum):
    NATIVE = "native"
    TRANSLATE = "translate"

    @classmethod
    def parse(cls, value: str | ClassicGroupsMode) -> ClassicGroupsMode:
        if isinstance(value, ClassicGroupsMode):
            return value
        try:
            return cls(value.strip().lower())
        except ValueError:
            raise ValueError(f"invalid classic_groups mode {value!r}: expected native or translate") from None


@dataclass(slots=True)
class GroupServiceConfig:
    migration_policy: MigrationPolicy | str = MigrationPolicy.BIDIRECTIONAL  # group.consumer.migration.policy
    classic_groups: ClassicGroupsMode | str = ClassicGroupsMode.NATIVE
    classic: ClassicGroupConfig = field(default_factory=ClassicGroupConfig)
    # DescribeGroups of a consumer group: False is Kafka's answer (GROUP_ID_NOT_FOUND / Dead); True
    # gives a classic view for tools that only speak DescribeGroups. None: True in translate mode,
    # where legacy fleets (and their legacy tools) see their groups as consumer groups.
    describe_consumer_groups_as_classic: bool | None = None
    # group.consumer.convert.builtin.sticky.userdata (groupgate's own): upgrade classic groups whose
    # assignments carry a built-in sticky assignor's copy of the subscription userData, which Kafka
    # refuses (KAFKA-18134); False refuses them as Kafka does.
    convert_builtin_sticky_userdata: bool = True
    # offsets.retention.minutes (Kafka's default: 7 days), in ms: how long a group may stay Empty
    # before expire_empty_groups deletes it.
    offsets_retention_ms: int = 10080 * 60_000

    def __post_init__(self) -> None:
        self.migration_policy = MigrationPolicy.parse(self.migration_policy)
        self.classic_groups = ClassicGroupsMode.parse(self.classic_groups)
        if self.offsets_retention_ms <= 0:
            raise ValueError("offsets retention must be positive")

    @property
    def policy(self) -> MigrationPolicy:
        assert isinstance(self.migration_policy, MigrationPolicy)
        return self.migration_policy

    @property
    def classic_view_of_consumer_groups(self) -> bool:
        if self.describe_consumer_groups_as_classic is None:
            return self.mode is ClassicGroupsMode.TRANSLATE
        return self.describe_consumer_groups_as_classic

    @property
    def mode(self) -> ClassicGroupsMode:
        assert isinstance(self.classic_groups, ClassicGroupsMode)
        return self.classic_groups


def encode_any_record(record: AnyRecord) -> tuple[bytes, bytes | None]:
    if isinstance(record, GroupMetadataRecord):
        return encode_record(record)
    if isinstance(record, ConnectRecord):
        return encode_connect_record(record)
    return encode_consumer_record(record)


__all__ = ["AnyRecord", "ClassicGroupsMode", "GroupServiceConfig", "encode_any_record"]
