"""The monitoring component is generated from dashboards/, and matches it."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from k8s_helpers import K8S_DIR, REPO_ROOT, find, one

GEN = K8S_DIR / "tools" / "gen_monitoring.py"
RULES = REPO_ROOT / "dashboards" / "prometheus" / "rules" / "mallard.rules.yml"
DASHBOARDS = REPO_ROOT / "dashboards" / "grafana" / "dashboards"
MONITORED = ["production", "production-cnpg"]
ALERTMANAGER = REPO_ROOT / "dashboards" / "alertmanager" / "alertmanager.yml"


def load_gen():
    spec = importlib.util.spec_from_file_location("gen_monitoring", GEN)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_gen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GEN), *args], capture_output=True, text=True, timeout=60
    )


def test_committed_component_matches_its_sources() -> None:
    proc = run_gen("--check")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("overlay", MONITORED)
def test_prometheus_rule_holds_the_dashboards_rules(rendered, overlay: str) -> None:
    rule = one(rendered[overlay], "PrometheusRule", "mallard")
    source = yaml.safe_load(RULES.read_text())
    assert rule["spec"]["groups"] == source["groups"]
    assert rule["spec"] == load_gen().prometheus_rule(source["groups"])["spec"]


@pytest.mark.parametrize("overlay", MONITORED)
def test_every_dashboard_is_a_sidecar_configmap(rendered, overlay: str) -> None:
    maps = [
        d
        for d in find(rendered[overlay], "ConfigMap")
        if d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
    ]
    sources = sorted(DASHBOARDS.glob("*.json"))
    assert len(maps) == len(sources) > 0
    by_key = {key: value for m in maps for key, value in m["data"].items()}
    for src in sources:
        assert json.loads(by_key[src.name]) == json.loads(src.read_text())


@pytest.mark.parametrize("overlay", MONITORED)
def test_service_monitor_scrapes_the_api_as_the_rules_expect(rendered, overlay: str) -> None:
    docs = rendered[overlay]
    monitor = one(docs, "ServiceMonitor", "mallard-api")
    service = one(docs, "Service", "mallard-api")
    labels = service["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert service["metadata"]["namespace"] in monitor["spec"]["namespaceSelector"]["matchNames"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    # without jobLabel, the Prometheus Operator names the job after the Service
    assert "jobLabel" not in monitor["spec"]
    jobs = set(re.findall(r'job="([^"]+)"', RULES.read_text()))
    assert jobs <= {service["metadata"]["name"]}, jobs


@pytest.mark.parametrize("overlay", MONITORED)
def test_alertmanager_config_routes_as_the_compose_alertmanager(rendered, overlay: str) -> None:
    """The routing of dashboards/alertmanager/alertmanager.yml ships as an
    AlertmanagerConfig: the same receivers, route tree and inhibitions; URLs from a Secret."""
    config = one(rendered[overlay], "AlertmanagerConfig", "mallard")
    source = yaml.safe_load(ALERTMANAGER.read_text())
    assert config["apiVersion"] == "monitoring.coreos.com/v1alpha1"
    spec = config["spec"]
    assert spec["route"]["receiver"] == source["route"]["receiver"]
    assert spec["route"]["matchers"] == [
        {"name": "alertname", "value": "Mallard.+", "matchType": "=~"}]
    assert [r["receiver"] for r in spec["route"]["routes"]] == [
        r["receiver"] for r in source["route"]["routes"]]
    assert spec["route"]["routes"][0]["matchers"] == [
        {"name": "alertname", "value": "MallardRegressionOpen", "matchType": "="}]
    assert [r["name"] for r in spec["receivers"]] == [r["name"] for r in source["receivers"]]
    for receiver in spec["receivers"]:
        for hook in receiver["webhookConfigs"]:
            assert hook["urlSecret"]["name"] == "mallard-alert-webhooks"
            assert "url" not in hook
    assert len(spec["inhibitRules"]) == len(source["inhibit_rules"])
    assert spec == load_gen().alertmanager_config(ALERTMANAGER)["spec"]


def test_dev_has_no_monitoring(rendered) -> None:
    assert not find(rendered["dev"], "ServiceMonitor")
    assert not find(rendered["dev"], "PrometheusRule")


def test_prometheus_rule_structure(rendered) -> None:
    """PrometheusRule is a CRD (no schema in kubernetes-validate): check its shape."""
    rule = one(rendered["production"], "PrometheusRule", "mallard")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(rule["spec"]) == {"groups"}
    names = [g["name"] for g in rule["spec"]["groups"]]
    assert len(names) == len(set(names))
    for group in rule["spec"]["groups"]:
        assert set(group) <= {"name", "interval", "rules", "limit", "query_offset", "labels"}
        for r in group["rules"]:
            assert ("record" in r) != ("alert" in r), r
            assert isinstance(r["expr"], str) and r["expr"].strip()
            assert set(r) <= {"record", "alert", "expr", "for", "labels", "annotations",
                              "keep_firing_for"}  # fmt: skip
            for field in ("labels", "annotations"):
                assert all(isinstance(v, str) for v in r.get(field, {}).values())


def test_service_monitor_and_cnpg_cluster_structure(rendered) -> None:
    """The other CRD objects: the fields their operators require, with the right types."""
    monitor = one(rendered["production"], "ServiceMonitor", "mallard-api")
    assert set(monitor["spec"]) <= {"selector", "namespaceSelector", "endpoints", "jobLabel"}
    for ep in monitor["spec"]["endpoints"]:
        assert set(ep) <= {"port", "path", "interval", "scrapeTimeout", "scheme"}
        assert re.fullmatch(r"\d+[smh]", ep["interval"]) and re.fullmatch(
            r"\d+[smh]", ep["scrapeTimeout"]
        )
    (cluster,) = find(rendered["production-cnpg"], "Cluster")
    assert cluster["apiVersion"] == "postgresql.cnpg.io/v1"
    spec = cluster["spec"]
    assert isinstance(spec["instances"], int) and spec["instances"] >= 3
    assert re.fullmatch(r"\d+(Gi|Ti|Mi)", spec["storage"]["size"])
    assert spec["bootstrap"]["initdb"] == {"database": "mallard", "owner": "mallard"}
    assert spec["inheritedMetadata"]["labels"]["mallard.dev/postgres"] == "true"
    assert spec["affinity"]["podAntiAffinityType"] == "required"
    for r in ("requests", "limits"):
        assert set(spec["resources"][r]) == {"cpu", "memory"}


# -- the generator itself, on fixtures --------------------------------------------------------

FIXTURE_RULES = """\
groups:
  - name: fixture.alerts
    rules:
      - alert: FixtureDown
        expr: up{job="mallard-api"} == 0
        for: 5m
        labels: {severity: critical}
        annotations:
          description: >-
            two lines
            folded
          runbook: |
            line one
            line two
"""


@pytest.fixture
def fixture_sources(tmp_path: Path) -> tuple[Path, Path, Path]:
    rules = tmp_path / "rules.yml"
    rules.write_text(FIXTURE_RULES)
    dash = tmp_path / "dash"
    dash.mkdir()
    (dash / "My Board.json").write_text('{"uid": "b", "title": "B"}\n')
    return rules, dash, tmp_path / "out"


def test_generator_on_a_fixture(fixture_sources) -> None:
    rules, dash, out = fixture_sources
    assert (
        run_gen("--rules", str(rules), "--dashboards", str(dash), "--out", str(out)).returncode == 0
    )
    rule = yaml.safe_load((out / "prometheusrule.yaml").read_text())
    assert rule["kind"] == "PrometheusRule"
    assert rule["spec"]["groups"] == yaml.safe_load(FIXTURE_RULES)["groups"]
    kust = yaml.safe_load((out / "kustomization.yaml").read_text())
    (cm,) = kust["configMapGenerator"]
    assert cm["name"] == "mallard-dashboard-my-board"
    assert cm["files"] == ["dashboards/My Board.json"]
    assert (out / "dashboards" / "My Board.json").read_text() == '{"uid": "b", "title": "B"}\n'
    text = (out / "prometheusrule.yaml").read_text()
    assert text.startswith("# GENERATED by k8s/tools/gen_monitoring.py")
    args = ["--rules", str(rules), "--dashboards", str(dash), "--out", str(out), "--check"]
    assert run_gen(*args).returncode == 0


def test_generator_check_fails_when_out_of_date(fixture_sources) -> None:
    rules, dash, out = fixture_sources
    base = ["--rules", str(rules), "--dashboards", str(dash), "--out", str(out)]
    run_gen(*base)
    rules.write_text(FIXTURE_RULES.replace("5m", "10m"))
    proc = run_gen(*base, "--check")
    assert proc.returncode == 1 and "prometheusrule.yaml" in proc.stderr
    run_gen(*base)
    (dash / "My Board.json").unlink()
    (dash / "other.json").write_text("{}")
    proc = run_gen(*base, "--check")
    assert proc.returncode == 1 and "stale" in proc.stderr and "missing" in proc.stderr
    run_gen(*base)
    assert not (out / "dashboards" / "My Board.json").exists()
    assert run_gen(*base, "--check").returncode == 0


def test_generator_rejects_a_file_that_is_not_rules(fixture_sources) -> None:
    rules, dash, out = fixture_sources
    rules.write_text("scrape_configs: []\n")
    gen = load_gen()
    with pytest.raises(ValueError, match="groups"):
        gen.render(rules, dash)
