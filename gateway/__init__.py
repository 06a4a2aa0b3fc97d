"""groupgate: gateway layer."""
