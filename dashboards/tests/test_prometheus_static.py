"""promtool and amtool on the committed Prometheus and Alertmanager configuration."""

from __future__ import annotations

import re

import yaml
from conftest import ALERTMANAGER, DASHBOARDS_DIR, PROMETHEUS, RULES
from promtools import dashboard_promql, render_alertmanager, run, tool

ALERTS = {"MallardRegressionOpen", "MallardRunnerDown", "MallardQueueStuck", "MallardApiErrorRate"}
# Any values will do for a syntax check; the real ones are used against Prometheus.
SAMPLE_VARS = {"arch": ["x86_64", "aarch64"]}


def alert_rules() -> list[dict]:
    doc = yaml.safe_load(RULES.read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_check_config():
    res = run(tool("promtool"), "check", "config", PROMETHEUS / "prometheus.yml")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 rule files found" in res.stdout


def test_promtool_check_rules():
    res = run(tool("promtool"), "check", "rules", RULES)
    assert res.returncode == 0, res.stdout + res.stderr


def test_promtool_unit_tests_pass():
    tests = sorted((PROMETHEUS / "tests").glob("*.yml"))
    assert tests
    res = run(tool("promtool"), "test", "rules", *tests)
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_alert_is_unit_tested_and_documented():
    names = {r["alert"] for r in alert_rules()}
    assert ALERTS <= names
    tested = set()
    for path in (PROMETHEUS / "tests").glob("*.yml"):
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                if case["exp_alerts"]:
                    tested.add(case["alertname"])
    assert names <= tested, f"alerts never seen firing in a unit test: {names - tested}"
    runbook = (DASHBOARDS_DIR / "RUNBOOK.md").read_text()
    anchors = {
        re.sub(r"[^a-z0-9-]", "", h.strip().lower().replace(" ", "-"))
        for h in re.findall(r"^#+ (.*)$", runbook, re.M)
    }
    for rule in alert_rules():
        assert rule["labels"]["severity"] in ("warning", "critical")
        ann = rule["annotations"]
        assert ann["summary"] and ann["description"]
        path, _, anchor = ann["runbook_url"].partition("#")
        assert path == "dashboards/RUNBOOK.md" and anchor in anchors, ann["runbook_url"]


def test_dashboard_promql_passes_promtool(tmp_path):
    exprs = dashboard_promql(SAMPLE_VARS)
    assert len(exprs) >= 8
    rules = {
        "groups": [
            {
                "name": "dashboards",
                "rules": [
                    {"record": f"dashboard:expr_{i}:check", "expr": expr}
                    for i, (_, expr) in enumerate(exprs)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-exprs.yml"
    path.write_text(yaml.safe_dump(rules))
    res = run(tool("promtool"), "check", "rules", path)
    assert res.returncode == 0, (
        res.stdout
        + res.stderr
        + "\n"
        + "\n".join(f"expr_{i}: {w}: {e}" for i, (w, e) in enumerate(exprs))
    )


def test_amtool_check_config_on_rendered_alertmanager(tmp_path):
    out = tmp_path / "alertmanager.yml"
    res = render_alertmanager(
        out,
        {
            "MALLARD_ALERT_WEBHOOK_URL": "http://127.0.0.1:1/reg",
            "MALLARD_OPS_WEBHOOK_URL": "http://127.0.0.1:1/ops",
        },
    )
    assert res.returncode == 0, res.stderr
    assert "${" not in "".join(
        ln for ln in out.read_text().splitlines() if not ln.lstrip().startswith("#")
    )
    res = run(tool("amtool"), "check-config", out)
    assert res.returncode == 0, res.stdout + res.stderr

    def route(*labels: str) -> str:
        r = run(tool("amtool"), "config", "routes", "test", f"--config.file={out}", *labels)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    assert (
        route(
            "alertname=MallardRegressionOpen", "workload=larson", "arch=x86_64", "kind=regression"
        )
        == "regressions"
    )
    assert route("alertname=MallardRunnerDown", "kind=service", "arch=x86_64") == "ops"
    assert route("alertname=MallardApiErrorRate", "kind=service") == "ops"


def test_alertmanager_render_refuses_unset_variables(tmp_path):
    out = tmp_path / "alertmanager.yml"
    res = render_alertmanager(out, {"MALLARD_OPS_WEBHOOK_URL": "http://127.0.0.1:1/ops"})
    assert res.returncode != 0
    assert "MALLARD_ALERT_WEBHOOK_URL is not set" in res.stderr
    assert not out.exists()


def test_alertmanager_groups_regressions_by_workload_and_arch_and_inhibits():
    doc = yaml.safe_load((ALERTMANAGER / "alertmanager.yml").read_text())
    (reg,) = [r for r in doc["route"]["routes"] if r["receiver"] == "regressions"]
    assert set(reg["group_by"]) == {"workload", "arch"}
    inhibit = [
        (i["source_matchers"], i["target_matchers"], i["equal"]) for i in doc["inhibit_rules"]
    ]
    assert (
        ['alertname = "MallardRunnerDown"'],
        ['alertname = "MallardQueueStuck"'],
        ["arch"],
    ) in inhibit
