"""Helpers that build Grafana dashboard JSON: datasources, targets, panels, variables.

Only what Mallard's dashboards use. Panel ids and grid positions are assigned by
`Dashboard` in the order panels are added, so a new panel never collides with an old id.
"""

from __future__ import annotations

from typing import Any

PG_UID = "mallard-pg"
PROM_UID = "mallard-prom"
PG = {"type": "grafana-postgresql-datasource", "uid": PG_UID}
PROM = {"type": "prometheus", "uid": PROM_UID}

Json = dict[str, Any]

# An allocator as one line across commits: `allocator_label` names the commit
# (mallard@abc1234), which would make every commit a series of its own.
ALLOCATOR = "(allocator || CASE WHEN variant <> 'default' THEN ' ' || variant ELSE '' END)"


def sql(query: str, ref: str = "A", fmt: str = "table") -> Json:
    """A PostgreSQL target: raw SQL, `fmt` is "table" or "time_series"."""
    return {
        "refId": ref,
        "datasource": PG,
        "editorMode": "code",
        "format": fmt,
        "rawQuery": True,
        "rawSql": dedent(query),
    }


def prom(expr: str, legend: str = "", ref: str = "A", instant: bool = False) -> Json:
    """A Prometheus target; `instant` ones feed tables and stats."""
    target: Json = {
        "refId": ref,
        "datasource": PROM,
        "editorMode": "code",
        "expr": dedent(expr),
        "legendFormat": legend or "__auto",
        "range": not instant,
        "instant": instant,
    }
    if instant:
        target["format"] = "table"
    return target


def dedent(text: str) -> str:
    lines = [line.rstrip() for line in text.strip("\n").splitlines()]
    indent = min((len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()), default=0)
    return "\n".join(ln[indent:] for ln in lines)


def sql_variable(
    name: str,
    label: str,
    query: str,
    *,
    multi: bool = False,
    include_all: bool = False,
    default: str | None = None,
    sort: int = 1,
) -> Json:
    """A query variable whose values come from a SELECT on the views.

    Columns `__value`/`__text` give an id with a readable name; otherwise the first column.
    """
    q = dedent(query)
    var: Json = {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": PG,
        "query": q,
        "definition": q,
        "refresh": 1,
        "multi": multi,
        "includeAll": include_all,
        "sort": sort,
        "hide": 0,
        "options": [],
    }
    if default is not None:
        value: str | list[str] = [default] if multi else default
        var["current"] = {"selected": True, "text": value, "value": value}
    elif include_all:
        var["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
    return var


def prom_variable(name: str, label: str, query: str, *, multi: bool = True) -> Json:
    """A Prometheus variable, `label_values(metric, label)`."""
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": PROM,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "definition": query,
        "refresh": 2,
        "multi": multi,
        "includeAll": multi,
        "sort": 1,
        "hide": 0,
        "options": [],
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
    }


def sql_annotation(name: str, query: str, color: str) -> Json:
    """An annotation read from SQL: columns time, [timeend], text, tags."""
    return {
        "name": name,
        "datasource": PG,
        "enable": True,
        "iconColor": color,
        "target": sql(query, ref="Anno"),
    }


def xy_options(x: str, *, exclude: list[str] | None = None, tooltip: bool = True) -> Json:
    """An xychart's options: series as the query gives them, ``x`` on the x axis (and
    ``exclude`` left off), the legend below."""
    dims: Json = {"x": x}
    if exclude:
        dims["exclude"] = exclude
    out: Json = {"seriesMapping": "auto", "dims": dims,
                 "legend": {"showLegend": True, "displayMode": "list", "placement": "bottom"}}
    if tooltip:
        out["tooltip"] = {"mode": "single"}
    return out


def field_config(
    unit: str | None = None,
    *,
    custom: Json | None = None,
    overrides: list[Json] | None = None,
    mappings: list[Json] | None = None,
    thresholds: list[Json] | None = None,
    decimals: int | None = None,
) -> Json:
    defaults: Json = {}
    if unit:
        defaults["unit"] = unit
    if decimals is not None:
        defaults["decimals"] = decimals
    if custom:
        defaults["custom"] = custom
    if mappings:
        defaults["mappings"] = mappings
    if thresholds:
        defaults["thresholds"] = {"mode": "absolute", "steps": thresholds}
    return {"defaults": defaults, "overrides": overrides or []}


def override(matcher: str, match: str, props: dict[str, Any]) -> Json:
    """Field override: matcher is byName, byRegexp, ..."""
    return {
        "matcher": {"id": matcher, "options": match},
        "properties": [{"id": k, "value": v} for k, v in props.items()],
    }


VERDICT_COLOURS = [
    {
        "type": "value",
        "options": {
            "improved": {"color": "green", "index": 0},
            "regressed": {"color": "red", "index": 1},
            "same": {"color": "text", "index": 2},
            "unknown": {"color": "orange", "index": 3},
        },
    }
]


class Dashboard:
    """A dashboard under construction: panels are laid out left to right, 24 columns wide."""

    def __init__(self, uid: str, title: str, description: str, tags: list[str]) -> None:
        self.uid = uid
        self.title = title
        self.description = description
        self.tags = tags
        self.panels: list[Json] = []
        self.variables: list[Json] = []
        self.annotations: list[Json] = []
        self.links: list[Json] = []  # extra dashboard links (page_link)
        self.time_from = "now-30d"
        self.refresh = ""
        self._x = 0
        self._y = 0
        self._row_h = 0

    def row(self, title: str) -> None:
        """A collapsed=false row header; following panels start on a new line."""
        self._newline()
        self.panels.append(
            {
                "type": "row",
                "title": title,
                "collapsed": False,
                "gridPos": {"x": 0, "y": self._y, "w": 24, "h": 1},
                "panels": [],
            }
        )
        self._y += 1

    def _newline(self) -> None:
        if self._x:
            self._y += self._row_h
            self._x = 0
            self._row_h = 0

    def add(
        self,
        kind: str,
        title: str,
        targets: list[Json],
        *,
        w: int = 12,
        h: int = 8,
        description: str = "",
        field: Json | None = None,
        options: Json | None = None,
        transformations: list[Json] | None = None,
        repeat: str | None = None,
    ) -> Json:
        if self._x + w > 24:
            self._newline()
        datasource = targets[0]["datasource"]
        if any(t["datasource"] != datasource for t in targets):
            datasource = {"type": "datasource", "uid": "-- Mixed --"}
        panel: Json = {
            "type": kind,
            "title": title,
            "description": description,
            "datasource": datasource,
            "gridPos": {"x": self._x, "y": self._y, "w": w, "h": h},
            "targets": targets,
            "fieldConfig": field or field_config(),
            "options": options or {},
        }
        if transformations:
            panel["transformations"] = transformations
        if repeat:
            panel["repeat"] = repeat
            panel["repeatDirection"] = "h"
            panel["maxPerRow"] = 2
        self.panels.append(panel)
        self._x += w
        self._row_h = max(self._row_h, h)
        return panel

    def to_json(self) -> Json:
        for i, panel in enumerate(self.panels, start=1):
            panel["id"] = i
        return {
            "uid": self.uid,
            "title": self.title,
            "description": self.description,
            "tags": self.tags,
            "editable": True,
            "graphTooltip": 1,
            "schemaVersion": 39,
            "version": 1,
            "timezone": "utc",
            "refresh": self.refresh,
            "time": {"from": self.time_from, "to": "now"},
            "annotations": {
                "list": [
                    {
                        "builtIn": 1,
                        "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                        "enable": True,
                        "hide": True,
                        "iconColor": "rgba(0, 211, 255, 1)",
                        "name": "Annotations & Alerts",
                        "type": "dashboard",
                    },
                    *self.annotations,
                ]
            },
            "templating": {"list": self.variables},
            "links": [
                {
                    "type": "dashboards",
                    "tags": ["mallard"],
                    "asDropdown": True,
                    "title": "Mallard",
                    "includeVars": False,
                    "keepTime": True,
                },
                *self.links,
            ],
            "panels": self.panels,
        }


# The API's web pages (/ui/...): their base URL is the `pages` variable, a text box whose
# default is the API of `make up`; set it to MALLARD_PUBLIC_URL in the variable bar, in the
# dashboard's saved default, or with `?var-pages=...` in the dashboard's URL.
PAGES_DEFAULT = "http://127.0.0.1:8000"


def pages_variable() -> Json:
    """$pages: the base URL of Mallard's pages, for links (not used in any query)."""
    return {
        "type": "textbox",
        "name": "pages",
        "label": "Mallard pages URL",
        "query": PAGES_DEFAULT,
        "current": {"selected": False, "text": PAGES_DEFAULT, "value": PAGES_DEFAULT},
        "hide": 0,
        "options": [{"selected": True, "text": PAGES_DEFAULT, "value": PAGES_DEFAULT}],
    }


def page_link(title: str, path: str, tooltip: str = "") -> Json:
    """A link to one of the API's pages (`path` after ${pages}, may use variables)."""
    return {"title": title, "url": "${pages}" + path, "targetBlank": True,
            **({"tooltip": tooltip} if tooltip else {})}


# The history dashboards (trends, memory) scope their variables to one branch of one project.
SERIES_SCOPE = "FROM v_series WHERE project = ${project:sqlstring} AND branch = ${branch:sqlstring}"


def project_branch_variables() -> list[Json]:
    """$project, then $branch within it (from v_series)."""
    return [
        sql_variable("project", "Project", "SELECT DISTINCT project FROM v_series ORDER BY 1"),
        sql_variable(
            "branch",
            "Branch",
            "SELECT DISTINCT branch FROM v_series WHERE project = ${project:sqlstring} ORDER BY 1",
        ),
    ]


def arch_threads_variables() -> list[Json]:
    """$arch and $threads on the branch in scope, both multi-valued with All."""
    return [
        sql_variable(
            "arch",
            "Architecture",
            f"SELECT DISTINCT arch {SERIES_SCOPE} ORDER BY 1",
            multi=True,
            include_all=True,
        ),
        sql_variable(
            "threads",
            "Threads",
            f"SELECT DISTINCT threads {SERIES_SCOPE} AND threads IS NOT NULL ORDER BY 1",
            multi=True,
            include_all=True,
            sort=3,
        ),
    ]


def bar_options(x_field: str, orientation: str = "auto", **extra: Any) -> Json:
    """Options of a bar chart with `x_field` as its categories, values shown, legend below."""
    return {
        "xField": x_field,
        "orientation": orientation,
        **extra,
        "showValue": "auto",
        "legend": {"displayMode": "list", "placement": "bottom"},
    }
