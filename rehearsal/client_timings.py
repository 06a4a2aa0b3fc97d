"""What the calibration measured of real clients (docs/rehearsal.md, "Calibration against real clients"):
the group timings a calibration run uses and each client's behaviour around them. Both the calibration's
replays (rehearsal/calibration.py) and the fleet's client models (rehearsal/fleet_settings.py) read them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Timings:
    """The group timings both runs use (the real gateway's configuration and client settings)."""

    heartbeat_interval_ms: int = 500  # classic heartbeat.interval.ms and group.consumer.heartbeat.interval.ms
    session_timeout_ms: int = 6_000  # classic session.timeout.ms and group.consumer.session.timeout.ms
    initial_rebalance_delay_ms: int = 3_000  # group.initial.rebalance.delay.ms (the gateway's default)
    # Rebalance callbacks / reconciliation. Measured on an idle machine (docs/rehearsal.md, item 10): from the
    # gateway's assignment to a Java classic consumer's callback, p10/p50/p90/max 3/6/12/26 ms.
    processing_ms: tuple[int, int] = (2, 12)
    # One way between a client and the coordinator (the fleet simulation's 1-5 ms is a data centre's;
    # the calibration runs on loopback, where a request and its answer take 1-3 ms through the gateway).
    network_ms: tuple[int, int] = (0, 2)
    # Stragglers: about one Java callback in ten takes longer (cooperative members, idle machine: p90 32 ms,
    # max 47); every eager partition waits for the slowest member, so this share takes straggler_ms instead.
    straggler_share: float = 0.1
    straggler_ms: tuple[int, int] = (12, 50)
    # From a consumer's start (the Java tool's startup_complete) to its first group request: metadata and
    # FindCoordinator. Measured through the gateway: the first ConsumerGroupHeartbeat of a restarted Java
    # 4.3.1 consumer answered 130-260 ms after startup_complete (median 170 ms) on an idle machine; a loaded
    # one takes seconds, so a step replays its Step.first_request_ms where the gateway's log gives one.
    start_latency_ms: int = 170
    # The new protocol's callbacks wait for the application thread's poll loop (ConsumerClient.callback_wait_ms):
    # measured on an idle machine, from the gateway's assignment to the Java callback, half within 20 ms,
    # most of the rest 34-111 ms, one in twenty a whole fetch long poll (fetch.max.wait.ms, 500 ms).
    callback_wait_ms: int = 110
    callback_long_wait_share: float = 0.05
    callback_long_wait_ms: int = 500
    # Classic clients: the least time between two JoinGroups when the coordinator asks for a rejoin
    # (ClassicClient.join_interval_ms; librdkafka 1 s, Java none).
    classic_join_interval_ms: int = 0
    # Classic clients: the heartbeat timer restarts on the SyncGroup response (ClassicClient.heartbeat_from_sync).
    classic_heartbeat_from_sync: bool = False
    # Classic clients: the leader's SyncGroup waits for its assignor (ClassicClient.leader_assign_delay).
    classic_leader_assign_delay: bool = True


def client_timings(client: str) -> Timings:
    """The timings of a calibration with ``client``: librdkafka runs in the calling process (no JVM to start:
    its first group request follows its creation within tens of milliseconds) and serves its rebalance
    callbacks from the poll that the rebalance itself wakes up."""
    if client == "confluent":
        return Timings(
            start_latency_ms=40, processing_ms=(1, 5), callback_wait_ms=0, callback_long_wait_share=0.0, straggler_share=0.0,
            classic_join_interval_ms=1_000, classic_heartbeat_from_sync=True,
        )
    return Timings()
