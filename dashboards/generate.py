"""Regenerates grafana/dashboards/*.json: `python dashboards/generate.py [--check]`."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mallard_dashboards.generate import main  # noqa: E402

raise SystemExit(main())
