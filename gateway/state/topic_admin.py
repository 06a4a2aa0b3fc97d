"""Creating and verifying the state topic (gateway/state/topic.py): a compacted topic with one partition per
shard, its replication factor and ``min.insync.replicas`` defaulted from the cluster's size, unclean leader
election off. A topic that exists is verified, never changed: a wrong partition count or cleanup policy
refuses the store (``StateTopicMismatch``), a weaker replication setting is a warning.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from gateway.logging import get_logger
from gateway.security.rights import MissingRight
from gateway.state.store import StateStoreMismatch

log = get_logger("gateway.state.topic")

# How long a state topic another instance just created may stay out of this broker's listing.
LISTING_WAIT_S = 5.0


class StateTopicError(Exception):
    """The state topic cannot be used as configured (missing rights, creation refused, ...)."""


class StateTopicMismatch(StateTopicError, StateStoreMismatch):
    """The state topic exists with settings the store refuses to use (partition count, cleanup policy)."""


def default_replication_factor(brokers: int) -> int:
    return max(1, min(3, brokers))


def default_min_insync_replicas(replication_factor: int) -> int:
    return max(1, min(2, replication_factor))


@dataclass(frozen=True, slots=True)
class TopicCheck:
    """What ``open()`` found or made: the topic's partition count, replication and settings."""

    created: bool
    partitions: int
    replication_factor: int
    cleanup_policy: str
    min_insync_replicas: int | None
    warnings: tuple[str, ...] = ()


class StateTopicAdmin:
    """The admin calls on one state topic, through an admin client the caller started and closes."""

    def __init__(self, admin: AIOKafkaAdminClient, topic: str, load_timeout_ms: int, principal: str | None = None) -> None:
        self.admin = admin
        self.topic = topic
        self.load_timeout_ms = load_timeout_ms
        self.principal = principal  # User:<name> of the gateway, for the refusals that name a right

    def _missing(self, operation: str, purpose: str) -> MissingRight:
        return MissingRight(self.principal, operation, f"topic {self.topic}", purpose)

    async def ensure(self, shards: int, replication_factor: int | None, min_insync_replicas: int | None) -> TopicCheck:
        """Create the topic if missing (compacted, one partition per shard); verify it when present."""
        admin = self.admin
        brokers = len((await admin.describe_cluster())["brokers"])
        rf = replication_factor or default_replication_factor(brokers)
        mir = min_insync_replicas or default_min_insync_replicas(rf)
        created = False
        described = await self.describe()
        if described is None:
            if rf > brokers:
                raise StateTopicError(
                    f"cannot create state topic {self.topic}: replication factor {rf} needs at least {rf} brokers; "
                    f"the cluster has {brokers}"
                )
            resp = await admin.create_topics(
                [
                    NewTopic(
                        self.topic,
                        num_partitions=shards,
                        replication_factor=rf,
                        topic_configs={
                            "cleanup.policy": "compact",
                            "min.insync.replicas": str(mir),
                            # An out-of-sync replica elected leader would drop acknowledged state.
                            "unclean.leader.election.enable": "false",
                        },
                    )
                ]
            )
            for name, code, *rest in resp.topic_errors:
                err = kafka_errors.for_code(code)
                if err is kafka_errors.NoError:
                    created = True
                elif err in (kafka_errors.TopicAuthorizationFailedError, kafka_errors.ClusterAuthorizationFailedError):
                    # Kafka hides a topic the principal may not DESCRIBE, so a refused creation may also be
                    # of a topic that exists: both rights are named.
                    raise self._missing(
                        "CREATE", f"create the state topic with {shards} partitions, or DESCRIBE to use it if it exists"
                    )
                elif err is not kafka_errors.TopicAlreadyExistsError:  # created meanwhile: verify below
                    message = rest[0] if rest and isinstance(rest[0], str) else ""
                    raise StateTopicError(f"creating state topic {name} failed: {err.__name__} {message}".rstrip())
            if created:
                log.info("state topic created", topic=self.topic, partitions=shards, replication_factor=rf,
                         min_insync_replicas=mir)
            if not created and not await self._listed_soon():
                # It exists (TOPIC_ALREADY_EXISTS) but the listing keeps hiding it: no DESCRIBE.
                raise self._missing("DESCRIBE", "use the state topic")
            described = await self.wait_described()
        partitions = described["partitions"]
        if len(partitions) != shards:
            raise StateTopicMismatch(
                f"state topic {self.topic} has {len(partitions)} partitions but the store runs {shards} shards: "
                "groups would be looked for in the wrong shard. Run with the shard count the state was written "
                "with, or point the store at another topic"
            )
        actual_rf = min(len(p["replicas"]) for p in partitions)
        configs = await self.configs()
        policy = configs.get("cleanup.policy") or ""
        if policy != "compact":
            raise StateTopicMismatch(
                f"state topic {self.topic} has cleanup.policy={policy!r}; it must be 'compact' (retention would delete "
                "group state)"
            )
        warnings: list[str] = []
        if actual_rf < rf:
            warnings.append(f"replication factor {actual_rf} is lower than the {rf} configured/expected")
        mir_value = configs.get("min.insync.replicas")
        actual_mir = int(mir_value) if mir_value else None
        if actual_mir is not None and actual_mir < mir:
            warnings.append(f"min.insync.replicas={actual_mir} is lower than the {mir} configured/expected")
        if (configs.get("unclean.leader.election.enable") or "").lower() == "true":
            warnings.append("unclean.leader.election.enable=true: a lagging replica made leader loses acknowledged state")
        return TopicCheck(created, len(partitions), actual_rf, policy, actual_mir, tuple(warnings))

    async def _listed_soon(self) -> bool:
        """Whether the topic shows in the cluster's listing within a few seconds. Another instance may have
        created it a moment ago (TOPIC_ALREADY_EXISTS here) before the broker asked has its metadata; a
        topic the principal may not DESCRIBE never shows."""
        deadline = time.monotonic() + LISTING_WAIT_S
        while True:
            if self.topic in await self.admin.list_topics():
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.2)

    async def describe(self) -> dict[str, Any] | None:
        # Metadata for a named topic may create it when the cluster has auto.create.topics.enable (with
        # Kafka's default partition count): ask for every topic's name first, which never creates one.
        if self.topic not in await self.admin.list_topics():
            return None
        for t in await self.admin.describe_topics([self.topic]):
            err = kafka_errors.for_code(t["error_code"])
            if err is kafka_errors.UnknownTopicOrPartitionError:
                return None
            if err is kafka_errors.TopicAuthorizationFailedError:
                raise self._missing("DESCRIBE", "use the state topic")
            if err is not kafka_errors.NoError:
                raise StateTopicError(f"describing state topic {self.topic} failed: {err.__name__}")
            return t  # type: ignore[no-any-return]
        return None

    async def wait_described(self) -> dict[str, Any]:
        """The topic's metadata once every partition has a leader (right after creation, it may not yet)."""
        deadline = time.monotonic() + self.load_timeout_ms / 1000
        while True:
            t = await self.describe()
            if t is not None and t["partitions"] and all(p["leader"] >= 0 for p in t["partitions"]):
                return t
            if time.monotonic() > deadline:
                raise StateTopicError(f"state topic {self.topic}: partitions without a leader after creation")
            await asyncio.sleep(0.2)

    async def configs(self) -> dict[str, str | None]:
        # Right after creation the broker asked may not know the topic yet: retry that briefly.
        deadline = time.monotonic() + self.load_timeout_ms / 1000
        while True:
            resp = await self.admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, self.topic)])
            out: dict[str, str | None] = {}
            unknown = False
            for r in resp:
                for code, message, _rtype, _name, entries in r.resources:
                    err = kafka_errors.for_code(code)
                    if err is kafka_errors.UnknownTopicOrPartitionError and time.monotonic() < deadline:
                        unknown = True
                    elif err is kafka_errors.TopicAuthorizationFailedError:
                        raise self._missing("DESCRIBE_CONFIGS", "check the state topic's configuration")
                    elif err is not kafka_errors.NoError:
                        raise StateTopicError(
                            f"describing the configs of {self.topic} failed: {err.__name__} {message or ''}".rstrip()
                        )
                    for entry in entries:
                        out[entry[0]] = entry[1]
            if not unknown:
                return out
            await asyncio.sleep(0.2)
