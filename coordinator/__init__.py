"""groupgate: coordinator layer."""
