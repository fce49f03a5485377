"""Writes grafana/dashboards/*.json from the dashboard modules; `--check` compares instead."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from . import calibration, comparison, memory, service, trends
from .grafana import Json

OUT = Path(__file__).resolve().parent.parent / "grafana" / "dashboards"

DASHBOARDS: dict[str, Callable[[], Json]] = {
    "trends.json": trends.build,
    "comparison.json": comparison.build,
    "memory.json": memory.build,
    "service.json": service.build,
    "calibration.json": calibration.build,
}


def render() -> dict[str, str]:
    """File name -> the JSON text the generator produces for it."""
    return {
        name: json.dumps(build(), indent=2, ensure_ascii=False) + "\n"
        for name, build in DASHBOARDS.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the JSON is stale")
    args = parser.parse_args(argv)
    stale = []
    for name, text in render().items():
        path = OUT / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"stale: {', '.join(stale)}; run python dashboards/generate.py", file=sys.stderr)
        return 1
    return 0
