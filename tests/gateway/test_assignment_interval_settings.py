"""The [coordinator] settings of KIP-1263 (assignment interval) and of per-group configs: Kafka's names
and defaults, validated as Kafka validates them, and handed to the coordinator."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.config.coordinator import CoordinatorSettings
from gateway.config.settings import load_config


def test_kafka_defaults_reach_the_coordinator_config() -> None:
    _, cfg = CoordinatorSettings().service_configs()
    assert (cfg.assignment_interval_ms, cfg.min_assignment_interval_ms, cfg.max_assignment_interval_ms) == (
        1_000, 0, 15_000,
    )
    assert (cfg.min_session_timeout_ms, cfg.max_session_timeout_ms) == (45_000, 60_000)
    assert (cfg.min_heartbeat_interval_ms, cfg.max_heartbeat_interval_ms) == (5_000, 15_000)
    assert cfg.group_configs == {}


def test_toml_with_kafka_names_and_per_group_configs(tmp_path) -> None:
    f = tmp_path / "gw.toml"
    f.write_text(
        """
[coordinator]
"group.consumer.assignment.interval.ms" = 0
"group.consumer.max.assignment.interval.ms" = 30000

[coordinator.group_configs.orders]
"consumer.assignment.interval.ms" = 25000
"consumer.session.timeout.ms" = 50000
"""
    )
    settings = load_config(str(f), {}, environ={}).coordinator
    _, cfg = settings.service_configs()
    assert cfg.assignment_interval_for("other") == 0
    assert cfg.assignment_interval_for("orders") == 25_000
    assert cfg.session_timeout_for("orders") == 50_000
    assert cfg.session_timeout_for("other") == 45_000


@pytest.mark.parametrize(
    "kw",
    [
        {"group.consumer.assignment.interval.ms": -1},
        {"group.consumer.assignment.interval.ms": 15_001},
        {"group.consumer.min.assignment.interval.ms": 2_000},  # above the 1000 default interval
        {"group.consumer.min.assignment.interval.ms": 500, "group.consumer.max.assignment.interval.ms": 400,
         "group.consumer.assignment.interval.ms": 450},
        {"group_configs": {"g": {"consumer.assignment.interval.ms": 15_001}}},
        {"group_configs": {"g": {"consumer.session.timeout.ms": 30_000}}},  # below the 45000 minimum
        {"group_configs": {"g": {"consumer.heartbeat.interval.ms": 4_000}}},  # below the 5000 minimum
        {"group_configs": {"g": {"consumer.unknown": 1}}},
    ],
)
def test_values_kafka_would_refuse_are_refused(kw: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        CoordinatorSettings(**kw)  # type: ignore[arg-type]


def test_assignor_offload_settings_with_kafka_names_and_per_group(tmp_path) -> None:
    # Kafka's default: on, with groupgate's own size threshold.
    _, cfg = CoordinatorSettings().service_configs()
    assert (cfg.offload_enable, cfg.offload_min_size_for("g")) == (True, 1_000_000)
    f = tmp_path / "gw.toml"
    f.write_text(
        """
[coordinator]
"group.consumer.assignor.offload.enable" = false
"group.consumer.assignor.offload.min.size" = 5000
"group.coordinator.background.threads" = 3

[coordinator.group_configs.orders]
"consumer.assignor.offload.enable" = true
"""
    )
    settings = load_config(str(f), {}, environ={}).coordinator
    assert settings.background_threads == 3
    _, cfg = settings.service_configs()
    assert (cfg.offload_min_size_for("other"), cfg.offload_min_size_for("orders")) == (None, 5000)
    with pytest.raises(ValidationError):
        CoordinatorSettings.model_validate({"group_configs": {"g": {"consumer.assignor.offload.enable": 2}}})
