"""Calibrate the rehearsal simulator against real clients: ``groupgate rehearse calibrate`` (rehearsal/calibrate_cli.py).

    .venv/bin/python bench/calibrate.py [--client java|librdkafka] [--members 3] [--partitions 6] [--groups 1]
        [--mix all|classic-eager,...] [--scenario all|rolling-upgrade,...] [--seeds 3] [--out DIR] [--json FILE]
        [--replay DIR ...]

Kept for the commands of docs/rehearsal.md made before the command existed (``--client confluent`` is
``--client librdkafka``).
"""

from __future__ import annotations

import sys
from pathlib import Path

# This directory holds bench/rehearsal.py, which would shadow the rehearsal package: the project comes first.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.ops.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["rehearse", "calibrate", *("librdkafka" if a == "confluent" else a for a in sys.argv[1:])]))
