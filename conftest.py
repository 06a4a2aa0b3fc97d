"""The repository's own pytest setup: groupgate.testing's plugin, also where the installed distribution
has not registered its ``pytest11`` entry point (a source tree on PYTHONPATH) or autoloading is off."""

from __future__ import annotations

import os
from importlib.metadata import entry_points

_autoloaded = not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD") and any(
    ep.name == "groupgate" for ep in entry_points(group="pytest11")
)
pytest_plugins = [] if _autoloaded else ["groupgate.testing.plugin"]
