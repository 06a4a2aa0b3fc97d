"""groupgate: compat_tests layer."""
