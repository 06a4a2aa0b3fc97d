"""groupgate: rehearsal layer."""
