"""Configuration: the pydantic settings of `serve` (defaults < TOML < environment < flags) and their sections."""
