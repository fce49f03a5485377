"""Helpers around the real promtool / amtool binaries and the dashboards' PromQL."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import ALERTMANAGER, load_dashboards, queries, query_text
from grafana_vars import interpolate


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed: run `make deps` (Debian's prometheus / "
            "prometheus-alertmanager packages)"
        )
    return path


def run(*cmd: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=60)


def dashboard_promql(values: dict[str, list[str]]) -> list[tuple[str, str]]:
    """(where, expression) for every PromQL target of every dashboard, interpolated."""
    out = []
    for board in load_dashboards().values():
        for where, target, owner in queries(board):
            dialect, text = query_text(target)
            if dialect != "promql" or owner.get("type") == "query" and "name" in owner:
                continue  # variables (label_values) are not PromQL expressions
            out.append((where, interpolate(text, values, dialect="promql")))
    return out


def dashboard_prom_variables() -> list[tuple[str, str]]:
    out = []
    for board in load_dashboards().values():
        for var in board["templating"]["list"]:
            dialect, text = query_text(var)
            if dialect == "promql":
                out.append((f"{board['uid']} ${var['name']}", text))
    return out


def render_alertmanager(out: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(ALERTMANAGER / "render.sh"), str(ALERTMANAGER / "alertmanager.yml"), str(out)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **env},
        timeout=30,
    )


def rules_with(
    path: Path, rules: Path, *, for_: str | None = None, interval: str | None = None
) -> Path:
    """A test copy of the rules file, `for:` and the group interval overridden."""
    doc = yaml.safe_load(rules.read_text())
    for group in doc["groups"]:
        if interval:
            group["interval"] = interval
        for rule in group["rules"]:
            if for_ is not None and "alert" in rule:
                rule["for"] = for_
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
