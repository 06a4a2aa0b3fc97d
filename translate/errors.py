"""Kafka error codes for the classic front: the coordinator's own enum, so both layers answer with
the same numbers and the same exception type."""

from __future__ import annotations

from coordinator.errors import ApiError, Errors

__all__ = ["ApiError", "Errors"]
