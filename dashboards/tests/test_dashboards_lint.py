"""The committed dashboard JSON and Grafana provisioning, checked without Grafana."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from conftest import GRAFANA, all_panels, load_dashboards, queries, query_text
from grafana_vars import macros_used, variables_used

EXPECTED = {"mallard-trends", "mallard-comparison", "mallard-memory", "mallard-service",
            "mallard-calibration"}
BUILTIN_DS = {"-- Grafana --", "-- Mixed --"}
KNOWN_MACROS = {
    "__timeFilter",
    "__timeFrom",
    "__timeTo",
    "__rate_interval",
    "__interval",
    "__range",
    "__all",
}


def provisioned_datasources() -> dict[str, dict]:
    out = {}
    for path in (GRAFANA / "provisioning" / "datasources").glob("*.yaml"):
        for ds in yaml.safe_load(path.read_text())["datasources"]:
            assert ds["uid"] not in out, f"datasource uid {ds['uid']} defined twice"
            out[ds["uid"]] = ds
    return out


def test_committed_json_is_what_the_generator_writes():
    from mallard_dashboards.generate import OUT, render

    rendered = render()
    assert sorted(p.name for p in OUT.glob("*.json")) == sorted(rendered)
    for name, text in rendered.items():
        assert (OUT / name).read_text() == text, (
            f"{name} is stale: run `python dashboards/generate.py` and commit the JSON"
        )


def test_json_files_parse_and_have_the_fixed_uids():
    uids = []
    for path in (GRAFANA / "dashboards").glob("*.json"):
        board = json.loads(path.read_text())  # valid JSON or this raises
        uids.append(board["uid"])
        assert board["title"] and board["schemaVersion"] >= 36
    assert sorted(uids) == sorted(EXPECTED)


def test_datasource_provisioning_has_fixed_uids_and_env_credentials():
    ds = provisioned_datasources()
    assert set(ds) == {"mallard-pg", "mallard-prom"}
    pg, prom = ds["mallard-pg"], ds["mallard-prom"]
    assert pg["type"] == "grafana-postgresql-datasource"
    assert prom["type"] == "prometheus"
    env = re.compile(r"^\$\{?[A-Z][A-Z0-9_]*\}?$")
    for value in (
        pg["url"],
        pg["user"],
        pg["jsonData"]["database"],
        pg["secureJsonData"]["password"],
        prom["url"],
    ):
        assert env.match(value), f"{value!r} should come from an environment variable"


def test_dashboard_provider_points_at_a_folder():
    (path,) = (GRAFANA / "provisioning" / "dashboards").glob("*.yaml")
    (provider,) = yaml.safe_load(path.read_text())["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")


@pytest.mark.parametrize("uid", sorted(EXPECTED))
def test_panel_ids_unique_and_layout_fits(uid):
    board = load_dashboards()[uid]
    panels = all_panels(board)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), f"duplicate panel ids in {uid}: {ids}"
    cells = set()
    for p in panels:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, f"panel {p['id']} is wider than 24"
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panel {p['id']} overlaps another at {x},{y}"
                cells.add((x, y))


@pytest.mark.parametrize("uid", sorted(EXPECTED))
def test_every_datasource_uid_exists(uid):
    board = load_dashboards()[uid]
    known = set(provisioned_datasources()) | BUILTIN_DS

    def walk(node):
        if isinstance(node, dict):
            ds = node.get("datasource")
            if isinstance(ds, dict):
                assert ds.get("uid") in known, f"{uid}: unknown datasource {ds}"
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(board)
    for panel in all_panels(board):
        if panel["type"] != "row":
            assert panel["targets"], f"panel {panel['title']} has no query"


@pytest.mark.parametrize("uid", sorted(EXPECTED))
def test_every_variable_used_is_defined(uid):
    board = load_dashboards()[uid]
    defined = [v["name"] for v in board["templating"]["list"]]
    assert len(defined) == len(set(defined))
    used: dict[str, str] = {}
    texts = [(f"panel title {p['title']!r}", p["title"]) for p in all_panels(board)]
    texts += [(where, query_text(t)[1]) for where, t, _ in queries(board)]
    for where, text in texts:
        assert text, f"{where}: empty query"
        for name in variables_used(text):
            used.setdefault(name, where)
        unknown = macros_used(text) - KNOWN_MACROS
        assert not unknown, f"{where}: unknown macro(s) {unknown}"
    for name, where in used.items():
        assert name in defined, f"{where} uses ${name}, which {uid} does not define"
    for panel in all_panels(board):
        if "repeat" in panel:
            var = next(v for v in board["templating"]["list"] if v["name"] == panel["repeat"])
            assert var["multi"], f"panel {panel['title']} repeats over a single-value variable"


@pytest.mark.parametrize("uid", sorted(EXPECTED))
def test_variables_are_defined_before_use(uid):
    """A variable's query may only use the variables above it (Grafana resolves in order)."""
    board = load_dashboards()[uid]
    seen: set[str] = set()
    for var in board["templating"]["list"]:
        _, text = query_text(var)
        missing = variables_used(text or "") - seen
        assert not missing, f"${var['name']} depends on {missing}, defined later or never"
        seen.add(var["name"])


def test_queries_only_read_the_contract_views():
    """Database <-> Grafana: dashboards query the v_* views, never tables."""
    views = {
        "v_measurements",
        "v_series",
        "v_comparisons",
        "v_comparison_cells",
        "v_comparison_jobs",
        "v_alerts",
        "v_jobs",
        "v_runners",
        "v_calibration_power",
        "v_calibration_false_alarms",
    }
    relation = re.compile(r"\b(?:FROM|JOIN)\s+([a-z_][a-z0-9_]*)", re.I)
    for board in load_dashboards().values():
        for where, target, _ in queries(board):
            dialect, text = query_text(target)
            if dialect != "sql":
                continue
            ctes = set(re.findall(r"(?:WITH|,)\s*([a-z_][a-z0-9_]*)\s+AS\s*\(", text, re.I))
            for name in relation.findall(text):
                if name.lower() in ("lateral",):
                    continue
                assert name in views or name in ctes, f"{where} reads {name}, not a view"


def page_links(board: dict) -> list[tuple[str, str]]:
    """(where, url) of every link to the API's pages: dashboard, panel and data links."""
    out = [(f"{board['uid']} link {lk['title']!r}", lk["url"]) for lk in board["links"]
           if "url" in lk]
    for panel in all_panels(board):
        out += [(f"panel {panel['title']!r}", lk["url"]) for lk in panel.get("links", [])]
        for ov in panel.get("fieldConfig", {}).get("overrides", []):
            for prop in ov["properties"]:
                if prop["id"] == "links":
                    out += [(f"panel {panel['title']!r} field {ov['matcher']['options']}",
                             lk["url"]) for lk in prop["value"]]
    return out


def test_dashboards_link_to_the_pages():
    """The comparison dashboard links to the comparison's page, the trends tables to the
    commit and alert pages, all under ${pages}, a variable the dashboard defines."""
    boards = load_dashboards()
    urls = {uid: [u for _, u in page_links(b)] for uid, b in boards.items()}
    assert "${pages}/ui/comparisons/${comparison}" in urls["mallard-comparison"]
    assert "${pages}/ui/commits/${__value.raw}" in urls["mallard-trends"]
    assert "${pages}/ui/alerts/${__value.raw}" in urls["mallard-trends"]
    for uid, board in boards.items():
        defined = {v["name"] for v in board["templating"]["list"]}
        for where, url in page_links(board):
            assert url.startswith("${pages}/ui/"), f"{uid} {where}: {url}"
            assert variables_used(url) <= defined, f"{uid} {where}: {url}"
