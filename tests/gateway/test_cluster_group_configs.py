"""gateway/groups/cluster_configs.py without a cluster: which DescribeConfigs values count, and the
precedence of the gateway's own group_configs over the cluster's."""

from __future__ import annotations

from types import SimpleNamespace

from coordinator.config import CoordinatorConfig
from gateway.config.coordinator import CoordinatorSettings
from gateway.groups.cluster_configs import GROUP_CONFIG_SOURCE, ClusterGroupConfigs, cluster_values, effective

DEFAULT_CONFIG_SOURCE = 5


def _entry(name: str, value: str | None, source: int = GROUP_CONFIG_SOURCE) -> SimpleNamespace:
    return SimpleNamespace(name=name, value=value, config_source=source)


def test_only_values_set_on_the_group_count() -> None:
    configs = [
        _entry("consumer.session.timeout.ms", "50000"),
        _entry("consumer.heartbeat.interval.ms", "5000", DEFAULT_CONFIG_SOURCE),  # the cluster's default
        _entry("share.session.timeout.ms", "50000"),  # not a consumer group config
        _entry("consumer.assignment.interval.ms", None),
    ]
    assert cluster_values(configs) == {"consumer.session.timeout.ms": 50_000}


def test_overrides_win_and_an_invalid_combination_keeps_the_overrides_alone() -> None:
    config = CoordinatorConfig()
    cluster = {"consumer.heartbeat.interval.ms": 7_000, "consumer.session.timeout.ms": 50_000}
    assert effective(config, {"consumer.heartbeat.interval.ms": 6_000}, cluster) == (
        {"consumer.heartbeat.interval.ms": 6_000, "consumer.session.timeout.ms": 50_000}, None
    )
    values, err = effective(config, {"consumer.session.timeout.ms": 6_000}, cluster)
    assert values == {"consumer.session.timeout.ms": 6_000} and err is not None


def _tracker(group_configs: dict[str, dict[str, int]]) -> tuple[ClusterGroupConfigs, CoordinatorConfig]:
    settings = CoordinatorSettings(group_configs=group_configs)
    _, config = settings.service_configs()
    runtime = SimpleNamespace(group_config=lambda _group_id: config, consumer_groups=lambda: iter(()))  # one shard
    layer = SimpleNamespace(  # never connected
        settings=settings, directory=None, config=SimpleNamespace(upstream_request_timeout_s=1.0), runtime=runtime
    )
    return ClusterGroupConfigs(layer), config  # type: ignore[arg-type]


def test_applied_values_reach_the_coordinator_and_a_cleared_config_falls_back() -> None:
    tracker, config = _tracker({"pinned": {"consumer.heartbeat.interval.ms": 6_000}})
    tracker.apply("g", {"consumer.heartbeat.interval.ms": 9_000})
    assert config.heartbeat_interval_for("g") == 9_000
    tracker.apply("g", {})  # deleted in the cluster: the gateway's default again
    assert config.heartbeat_interval_for("g") == config.heartbeat_interval_ms
    tracker.apply("pinned", {"consumer.heartbeat.interval.ms": 9_000, "consumer.session.timeout.ms": 50_000})
    assert config.heartbeat_interval_for("pinned") == 6_000
    assert config.session_timeout_for("pinned") == 50_000
    tracker.apply("pinned", {})
    assert config.group_configs["pinned"] == {"consumer.heartbeat.interval.ms": 6_000}


def test_the_clusters_per_group_offload_flag_is_read_as_a_boolean() -> None:
    configs = [_entry("consumer.assignor.offload.enable", "false"), _entry("consumer.assignment.interval.ms", "0")]
    values = cluster_values(configs)
    assert values == {"consumer.assignor.offload.enable": 0, "consumer.assignment.interval.ms": 0}
    config = CoordinatorConfig(offload_enable=True)
    merged, err = effective(config, {}, values)
    assert err is None
    config.group_configs["g"] = merged
    assert config.offload_min_size_for("g") is None and config.offload_min_size_for("h") == 1_000_000
