"""Shared fixtures of the dashboards tests: paths, the dashboards, their queries."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

DASHBOARDS_DIR = Path(__file__).resolve().parent.parent
REPO = DASHBOARDS_DIR.parent
GRAFANA = DASHBOARDS_DIR / "grafana"
PROMETHEUS = DASHBOARDS_DIR / "prometheus"
ALERTMANAGER = DASHBOARDS_DIR / "alertmanager"
RULES = PROMETHEUS / "rules" / "mallard.rules.yml"

sys.path.insert(0, str(DASHBOARDS_DIR))

Json = dict[str, Any]


def load_dashboards() -> dict[str, Json]:
    """uid -> dashboard, from the committed JSON files."""
    out = {}
    for path in sorted((GRAFANA / "dashboards").glob("*.json")):
        board = json.loads(path.read_text())
        out[board["uid"]] = board
    return out


def all_panels(board: Json) -> list[Json]:
    """Every panel, rows' nested panels included."""
    panels = []
    for panel in board["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def queries(board: Json) -> list[tuple[str, Json, Json]]:
    """(where, target, owner) for every panel target, annotation and variable query.

    `owner` is the panel, annotation or variable the query belongs to."""
    out = []
    for panel in all_panels(board):
        for target in panel.get("targets", []):
            out.append((f"{board['uid']} panel {panel['id']} {panel['title']!r} "
                        f"ref {target['refId']}", target, panel))
    for anno in board["annotations"]["list"]:
        if "target" in anno:
            out.append((f"{board['uid']} annotation {anno['name']!r}", anno["target"], anno))
    for var in board["templating"]["list"]:
        out.append((f"{board['uid']} variable ${var['name']}", var, var))
    return out


def query_text(target: Json) -> tuple[str, str]:
    """(dialect, text) of a panel target, annotation target or variable."""
    if target.get("datasource", {}).get("uid") == "mallard-prom" or "expr" in target:
        q = target.get("expr", target.get("query"))
        if isinstance(q, dict):
            q = q["query"]
        return "promql", q
    return "sql", target.get("rawSql", target.get("query"))


@pytest.fixture(scope="session")
def dashboards() -> dict[str, Json]:
    return load_dashboards()
