"""The gateway under test as a child process: groupgate.testing.process.GatewayProcess, the public
testing package's, so that every compat run exercises it; plus the harness's own shorthand below.
"""

from __future__ import annotations

from pathlib import Path

from groupgate.testing._net import free_port_block
from groupgate.testing.process import READY_TIMEOUT_S, GatewayProcess, GatewayStartError, groupgate_binary

__all__ = ["READY_TIMEOUT_S", "GatewayProcess", "GatewayStartError", "configured_gateway", "groupgate_binary"]


def configured_gateway(upstream: str, root: Path, config_toml: str, *extra_args: str) -> GatewayProcess:
    """A gateway (not started yet: use it in ``with``) reading ``config_toml`` from ``root/gateway.toml``,
    keeping its state log in ``root/state`` and its log in ``root``, on a fresh block of ports."""
    config = root / "gateway.toml"
    config.write_text(config_toml)
    return GatewayProcess(
        upstream=upstream,
        listen_port=free_port_block(3),
        log_dir=root,
        extra_args=["--config", str(config), "--state-dir", str(root / "state"), *extra_args],
    )
