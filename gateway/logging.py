"""structlog setup: JSON lines or console rendering, always to stderr (stdout carries the bootstrap line)."""

from __future__ import annotations

import logging as std_logging
import sys

import structlog

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}


def setup_logging(fmt: str = "console", level: str = "info") -> None:
    renderer: structlog.typing.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    std_logging.basicConfig(level=_LEVELS[level], stream=sys.stderr)
    # The state topic's Kafka client narrates every coordinator lookup and subscription at INFO; its
    # warnings and errors are what an operator needs (the store logs its own state changes).
    std_logging.getLogger("aiokafka").setLevel(max(_LEVELS[level], std_logging.WARNING))


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    return structlog.get_logger(name)  # type: ignore[no-any-return]
