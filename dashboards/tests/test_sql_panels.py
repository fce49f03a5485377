"""Every SQL query of every dashboard, run against a real PostgreSQL migrated by db/ and
filled with realistic results through the real API (seed.py).

Variables are resolved in dashboard order the way Grafana does it: each variable's own
query runs (with the variables above it substituted) and must return values; a
variable that allows "All" takes all of them, another its default or its first value.
Each panel query then runs with Grafana's macros and the variables substituted
(grafana_vars.py) and must return rows carrying the columns the panel refers to.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from conftest import all_panels, load_dashboards, query_text
from grafana_vars import interpolate

BOARDS = load_dashboards()
SQL_BOARDS = sorted(
    uid
    for uid, b in BOARDS.items()
    if any(query_text(t)[0] == "sql" for p in all_panels(b) for t in p.get("targets", []))
)
TIME_TO = datetime.now(UTC) + timedelta(hours=1)
TIME_FROM = TIME_TO - timedelta(days=60)


def run_sql(pg, text: str, values: dict[str, list[str]]) -> tuple[list[str], list[tuple]]:
    query = interpolate(text, values, dialect="sql", time_from=TIME_FROM, time_to=TIME_TO)
    try:
        cur = pg.execute(query)
    except Exception as exc:  # show the query Grafana would have sent
        raise AssertionError(f"{exc}\n--- query ---\n{query}") from exc
    columns = [d.name for d in cur.description]
    return columns, cur.fetchall()


def resolve_variables(
    pg, board: dict[str, Any]
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(selected values, all values) per SQL variable, in dashboard order."""
    selected: dict[str, list[str]] = {}
    options: dict[str, list[str]] = {}
    for var in board["templating"]["list"]:
        if var.get("type", "query") != "query":
            continue
        dialect, text = query_text(var)
        if dialect != "sql":
            continue
        columns, rows = run_sql(pg, text, selected)
        assert rows, f"variable ${var['name']} has no values:\n{text}"
        col = columns.index("__value") if "__value" in columns else 0
        if "__value" in columns:
            assert "__text" in columns, f"${var['name']}: __value without __text"
        values = [str(r[col]) for r in rows]
        assert all(v not in ("None", "") for v in values), f"${var['name']}: empty value"
        options[var["name"]] = values
        current = var.get("current", {}).get("value")
        current = [current] if isinstance(current, str) else current or []
        if var.get("includeAll"):
            selected[var["name"]] = values
        elif current and all(c in values for c in current):
            selected[var["name"]] = current
        else:
            selected[var["name"]] = values[:1]
    return selected, options


class Variables:
    """Resolved lazily per dashboard, so one dashboard's failure stays its own."""

    def __init__(self, pg) -> None:
        self.pg = pg
        self.cache: dict[str, Any] = {}

    def __getitem__(self, uid: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        if uid not in self.cache:
            try:
                self.cache[uid] = resolve_variables(self.pg, BOARDS[uid])
            except AssertionError as exc:
                self.cache[uid] = exc
        if isinstance(self.cache[uid], AssertionError):
            raise self.cache[uid]
        return self.cache[uid]


@pytest.fixture(scope="module")
def variables(pg):
    return Variables(pg)


def referenced_columns(panel: dict[str, Any]) -> tuple[set[str], list[str]]:
    """(names, regexes) of the fields a panel's options, overrides, transforms name."""
    names: set[str] = set()
    regexes: list[str] = []
    opts = panel.get("options", {})
    if "xField" in opts:
        names.add(opts["xField"])
    if "x" in opts.get("dims", {}):
        names.add(opts["dims"]["x"])
    for ov in panel.get("fieldConfig", {}).get("overrides", []):
        m = ov["matcher"]
        if m["id"] == "byName":
            names.add(m["options"])
        elif m["id"] == "byRegexp":
            regexes.append(m["options"].strip("/"))
    for tr in panel.get("transformations", []):
        if tr["id"] == "partitionByValues":
            names.update(tr["options"]["fields"])
    return names, regexes


def sql_panels() -> list[tuple[str, str]]:
    return [
        (uid, f"{p['id']}")
        for uid in SQL_BOARDS
        for p in all_panels(BOARDS[uid])
        if any(query_text(t)[0] == "sql" for t in p.get("targets", []))
    ]


@pytest.mark.parametrize("uid", SQL_BOARDS)
def test_variable_queries_return_values(variables, uid):
    selected, options = variables[uid]
    for var in BOARDS[uid]["templating"]["list"]:
        if var.get("type", "query") == "query" and query_text(var)[0] == "sql":
            assert options[var["name"]], var["name"]


@pytest.mark.parametrize(
    ("uid", "panel_id"), sql_panels(), ids=[f"{u}-{p}" for u, p in sql_panels()]
)
def test_panel_sql_returns_the_columns_it_uses(pg, variables, uid, panel_id):
    board = BOARDS[uid]
    panel = next(p for p in all_panels(board) if str(p["id"]) == panel_id)
    selected, options = variables[uid]
    # A repeated panel is drawn once per value of its variable, with that value alone.
    runs = [selected]
    if panel.get("repeat"):
        runs = [{**selected, panel["repeat"]: [v]} for v in selected[panel["repeat"]]]
    names, regexes = referenced_columns(panel)
    for values in runs:
        columns: set[str] = set()
        series: set[str] = set()
        for target in panel["targets"]:
            cols, rows = run_sql(pg, target["rawSql"], values)
            where = f"{panel['title']!r} ref {target['refId']} with {values}"
            assert rows, f"{where} returned no rows"
            assert len(cols) == len(set(cols)), f"{where}: duplicate column names {cols}"
            columns.update(cols)
            if target["format"] == "time_series":
                assert {"time", "metric", "value"} <= set(cols), f"{where}: {cols}"
                t, m, v = cols.index("time"), cols.index("metric"), cols.index("value")
                assert all(isinstance(r[t], datetime) for r in rows), where
                assert all(isinstance(r[v], (int, float)) for r in rows), where
                assert all(r[m] for r in rows), f"{where}: a series without a name"
                series.update(r[m] for r in rows)
                points: dict[str, int] = {}
                for r in rows:
                    points[r[m]] = points.get(r[m], 0) + 1
                lonely = sorted(k for k, n in points.items() if n < 2)
                assert not lonely, f"{where}: series with a single point (no line): {lonely}"
            elif panel["type"] in ("barchart", "xychart"):
                numeric = [
                    c
                    for i, c in enumerate(cols)
                    if any(isinstance(r[i], (int, float)) for r in rows)
                ]
                assert numeric, f"{where}: nothing numeric to draw"
        missing = names - columns
        assert not missing, f"{panel['title']!r} refers to {missing}, not in {sorted(columns)}"
        for rx in regexes:
            targets = series if series else columns
            assert any(re.fullmatch(rx, s) or re.search(rx, s) for s in targets), (
                f"{panel['title']!r}: override /{rx}/ matches none of {sorted(targets)}"
            )


@pytest.mark.parametrize("uid", SQL_BOARDS)
def test_annotations_return_time_and_text(pg, variables, uid):
    selected, _ = variables[uid]
    for anno in BOARDS[uid]["annotations"]["list"]:
        if "target" not in anno:
            continue
        cols, rows = run_sql(pg, anno["target"]["rawSql"], selected)
        assert {"time", "text"} <= set(cols), cols
        assert rows, f"annotation {anno['name']!r} returned no rows"
        assert all(isinstance(r[cols.index("time")], datetime) for r in rows)
