"""groupgate's public Python surface beside the ``groupgate`` command.

``groupgate.testing`` runs a gateway (with a broker behind it) inside other projects' test suites; the
gateway itself lives in the ``gateway`` package.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("groupgate")
except PackageNotFoundError:  # a source tree on sys.path without an installed distribution
    __version__ = "0.0.0"

__all__ = ["__version__"]
