"""groupgate: translate layer."""
