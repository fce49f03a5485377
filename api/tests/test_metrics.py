"""/metrics exposes the contract's metric names (contracts §6)."""

from __future__ import annotations

from helpers import job_spec


def test_metrics_exposes_the_contract_names(client, make_runner, user_headers):
    runner, headers = make_runner()
    client.post("/api/v1/jobs", headers=user_headers,
                json={"kind": "commit", "arch": runner["arch"], "spec": job_spec()})
    client.get("/api/v1/jobs/1", headers=user_headers)
    body = client.get("/metrics").text
    for name in ("mallard_http_requests_total", "mallard_http_request_duration_seconds_bucket",
                 "mallard_jobs", "mallard_queue_oldest_job_age_seconds",
                 "mallard_runner_last_seen_timestamp_seconds", "mallard_trials_ingested_total",
                 "mallard_alerts_open"):
        assert name in body, name
    assert f'mallard_jobs{{arch="{runner["arch"]}",state="queued"}} 1.0' in body
    assert f'runner="{runner["name"]}"' in body
    # labelled by route template, not by raw path
    assert 'route="/api/v1/jobs/{job_id}"' in body
    assert 'route="/api/v1/jobs/1"' not in body


def test_made_up_methods_do_not_grow_the_metrics(client):
    for i in range(30):
        client.request(f"X{i}FOO", "/api/v1/health")
        client.request(f"Y{i}", "/metrics")
    body = client.get("/metrics").text
    methods = {line.split('method="')[1].split('"')[0] for line in body.splitlines()
               if line.startswith("mallard_http_requests_total{")}
    assert methods <= {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other"}
    assert "other" in methods
