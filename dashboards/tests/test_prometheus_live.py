"""A real Prometheus scraping the real API, and a real Alertmanager delivering to a real
webhook receiver.

- every PromQL expression of the dashboards (variables substituted as Grafana does) is
  evaluated by Prometheus's HTTP API without error, and the ones that describe state
  the seeded API has (queue, runners, jobs, alerts, requests) return series;
- the rules file (a test copy with `for: 1s` and a 1 s evaluation interval) loads and
  every rule evaluates healthy;
- end to end: the regression alert the API opened while ingesting the seeded history
  makes Prometheus fire MallardRegressionOpen, and Alertmanager (the rendered
  alertmanager.yml) POSTs it to the webhook naming the workload and arch; acknowledging
  the alert through the API resolves it, and the resolution is delivered too;
- Alertmanager's inhibition: a runner down silences a stuck queue on the same arch only.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
import yaml
from conftest import ADMIN_TOKEN, RULES
from promtools import dashboard_prom_variables, dashboard_promql, render_alertmanager, rules_with
from stack import Alertmanager, Prometheus, WebhookReceiver, http_json, wait_for


@pytest.fixture(scope="module")
def observability(api, seeded, tmp_path_factory):
    """Webhook receiver, Alertmanager and Prometheus, started in that order, stopped all."""
    _, api_port, _ = api
    work = tmp_path_factory.mktemp("observability")
    hook = WebhookReceiver()
    started: list = [hook]
    try:
        config = work / "alertmanager.yml"
        res = render_alertmanager(
            config,
            {
                "MALLARD_ALERT_WEBHOOK_URL": hook.url("/regressions"),
                "MALLARD_OPS_WEBHOOK_URL": hook.url("/ops"),
            },
        )
        assert res.returncode == 0, res.stderr
        # Test timing: notify within a second instead of after 30 s.
        doc = yaml.safe_load(config.read_text())
        for route in [doc["route"], *doc["route"]["routes"]]:
            route.update(group_wait="1s", group_interval="1s", repeat_interval="1m")
        config.write_text(yaml.safe_dump(doc, sort_keys=False))
        am = Alertmanager(work / "am", config)
        started.append(am)
        rules = rules_with(work / "mallard.rules.yml", RULES, for_="1s", interval="1s")
        prom = Prometheus(work / "prom", api_port=api_port, am_port=am.port, rules=rules)
        started.append(prom)
        wait_for(
            "two scrapes of the API",
            lambda: prom.query('count_over_time(up{job="mallard-api"}[1m]) >= 3')["data"]["result"],
            timeout=60,
            on_timeout=lambda: str(prom.api("targets")),
        )
        yield prom, am, hook
    finally:
        for thing in reversed(started):
            thing.stop()


def arch_values(pg) -> list[str]:
    rows = pg.execute("SELECT arch FROM v_runners UNION SELECT arch FROM v_jobs ORDER BY 1")
    return [r[0] for r in rows]


def test_dashboard_promql_evaluates_on_real_prometheus(observability, pg):
    prom, _, _ = observability
    exprs = dashboard_promql({"arch": arch_values(pg)})
    assert len(exprs) >= 8
    empty = []
    for where, expr in exprs:
        for endpoint, extra in (("query", {}), ("query_range", {"step": "1"})):
            if endpoint == "query_range":
                now = prom.query("time()")["data"]["result"][1]
                extra = {"start": str(float(now) - 60), "end": now, "step": "1"}
            res = prom.api(endpoint, query=expr, **extra)
            assert res["status"] == "success", f"{where}: {expr}\n{res}"
        if not prom.query(expr)["data"]["result"] and 'status=~"5.."' not in expr:
            empty.append(f"{where}: {expr}")
    # Everything but the 5xx ratio (no request failed) describes state the API has.
    assert not empty, "no series for:\n" + "\n".join(empty)


def test_dashboard_prometheus_variables_have_values(observability):
    prom, _, _ = observability
    for where, query in dashboard_prom_variables():
        metric, label = query.removeprefix("label_values(").rstrip(")").split(",")
        res = prom.api(f"label/{label.strip()}/values", **{"match[]": metric.strip()})
        assert res["status"] == "success" and res["data"], f"{where}: {query} -> {res}"


def test_rules_load_and_evaluate_healthy(observability):
    prom, _, _ = observability

    def all_evaluated():
        groups = prom.api("rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return (
            rules
            if all(
                r.get("lastEvaluation", "").startswith("2")
                and not r["lastEvaluation"].startswith("0001")
                for r in rules
            )
            else None
        )

    rules = wait_for("every rule evaluated once", all_evaluated, timeout=30)
    names = {r["name"] for r in rules}
    assert {
        "MallardRegressionOpen",
        "MallardRunnerDown",
        "MallardQueueStuck",
        "MallardApiErrorRate",
        "job:mallard_http_requests:rate5m",
    } <= names
    bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert not bad, bad


def test_regression_alert_reaches_the_webhook_and_resolves(observability, api, seeded):
    prom, am, hook = observability
    base_url, _, _ = api
    workload, arch, measure = seeded.regressed
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    open_alerts = [
        a
        for a in http_json(f"{base_url}/api/v1/alerts?state=open", headers=headers)
        if a["workload"] == workload and a["arch"] == arch and a["measure"] == measure
    ]
    assert len(open_alerts) == 1, open_alerts

    def firing(path, body):
        return (
            path == "/regressions"
            and body["status"] == "firing"
            and any(
                a["labels"].get("alertname") == "MallardRegressionOpen"
                and a["labels"].get("measure") == measure
                and a["status"] == "firing"
                for a in body["alerts"]
            )
        )

    _, body = hook.wait(firing, timeout=60)
    assert body["groupLabels"] == {"workload": workload, "arch": arch}
    assert body["commonLabels"]["workload"] == workload
    assert body["commonLabels"]["arch"] == arch
    (alert,) = [a for a in body["alerts"] if a["labels"]["measure"] == measure]
    assert alert["labels"]["severity"] == "warning"
    assert alert["labels"]["project"] == "mallard"
    assert workload in alert["annotations"]["summary"]
    assert arch in alert["annotations"]["summary"]
    assert alert["annotations"]["runbook_url"].startswith("dashboards/RUNBOOK.md#")
    # Nothing about regressions went to the ops receiver.
    assert not [
        b
        for p, b in hook.received
        if p == "/ops"
        and any(a["labels"]["alertname"] == "MallardRegressionOpen" for a in b["alerts"])
    ]

    # A person acknowledges it in the API: the gauge drops, the alert resolves.
    http_json(
        f"{base_url}/api/v1/alerts/{open_alerts[0]['alert_id']}/acknowledge", {}, headers=headers
    )

    def resolved(path, body):
        return path == "/regressions" and any(
            a["labels"].get("alertname") == "MallardRegressionOpen"
            and a["labels"].get("measure") == measure
            and a["status"] == "resolved"
            for a in body["alerts"]
        )

    hook.wait(resolved, timeout=60)


def test_runner_down_inhibits_queue_stuck_on_the_same_arch(observability):
    """Alertmanager's inhibition, on the real process with the rendered config: alerts
    posted to its API as Prometheus would post them."""
    _, am, hook = observability
    now = datetime.now(UTC).isoformat()

    def alert(name: str, arch: str, severity: str) -> dict:
        return {
            "labels": {
                "alertname": name,
                "arch": arch,
                "severity": severity,
                "kind": "service",
                "job": "mallard-api",
            },
            "annotations": {"summary": f"{name} on {arch}"},
            "startsAt": now,
        }

    http_json(
        f"{am.url}/api/v2/alerts",
        [
            alert("MallardRunnerDown", "riscv64", "critical"),
            alert("MallardQueueStuck", "riscv64", "warning"),
            alert("MallardQueueStuck", "ppc64le", "warning"),  # no runner down on ppc64le
        ],
    )

    def delivered(name: str, arch: str):
        return lambda path, body: (
            path == "/ops"
            and any(
                a["labels"]["alertname"] == name and a["labels"]["arch"] == arch
                for a in body["alerts"]
            )
        )

    hook.wait(delivered("MallardRunnerDown", "riscv64"), timeout=30)
    hook.wait(delivered("MallardQueueStuck", "ppc64le"), timeout=30)
    state = http_json(f"{am.url}/api/v2/alerts?filter=alertname%3D%22MallardQueueStuck%22")
    by_arch = {a["labels"]["arch"]: a["status"] for a in state}
    assert by_arch["riscv64"]["state"] == "suppressed" and by_arch["riscv64"]["inhibitedBy"]
    assert by_arch["ppc64le"]["state"] == "active"
    time.sleep(3)  # several group intervals: an uninhibited alert would have gone out
    assert not any(delivered("MallardQueueStuck", "riscv64")(p, b) for p, b in hook.received)
