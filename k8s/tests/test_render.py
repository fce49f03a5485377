"""Every overlay renders with `kubectl kustomize`, into objects we can deploy."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from k8s_helpers import K8S_DIR, OUR_NAMESPACES, OVERLAYS, REPO_ROOT, copy_k8s, find, kustomize, one

CLUSTER_SCOPED = {"Namespace"}


def test_overlays_exist() -> None:
    assert {"dev", "production"} <= set(OVERLAYS)


def test_kubectl_carries_kustomize() -> None:
    from k8s_helpers import kubectl

    out = subprocess.run(
        [kubectl(), "version", "--client"], capture_output=True, text=True, check=True
    ).stdout
    assert "Kustomize Version: v5" in out


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_to_named_namespaced_objects(rendered, overlay: str) -> None:
    docs = rendered[overlay]
    assert len(docs) > 10
    seen = set()
    for doc in docs:
        meta = doc["metadata"]
        key = (doc["apiVersion"], doc["kind"], meta.get("namespace"), meta["name"])
        assert key not in seen, f"duplicate object {key}"
        seen.add(key)
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta
        else:
            assert meta.get("namespace") in OUR_NAMESPACES, key
        assert meta.get("labels", {}).get("app.kubernetes.io/part-of") == "mallard", key


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_migration_job_is_named_after_the_release(rendered, overlay: str) -> None:
    docs = rendered[overlay]
    api = one(docs, "Deployment", "mallard-api")
    tag = api["spec"]["template"]["spec"]["containers"][0]["image"].rsplit(":", 1)[1]
    (job,) = find(docs, "Job")
    assert job["metadata"]["name"] == f"mallard-migrate-{tag}"
    # the name becomes the pods' job-name label: a DNS subdomain of at most 63 chars
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?", job["metadata"]["name"])
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["migrate"]
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == f"mallard/api:{tag}"


def test_images_are_overridable_and_the_job_follows_the_tag(tmp_path: Path) -> None:
    k8s = copy_k8s(tmp_path)
    kfile = k8s / "overlays" / "dev" / "kustomization.yaml"
    kust = yaml.safe_load(kfile.read_text())
    kust["images"] = [
        {"name": "mallard/api", "newName": "registry.example/mallard/api", "newTag": "0.2.0"},
        {"name": "mallard/runner", "newName": "registry.example/mallard/runner", "newTag": "0.2.0"},
    ]
    kfile.write_text(yaml.safe_dump(kust))
    docs = kustomize(k8s / "overlays" / "dev")
    images = {
        c["image"]
        for d in docs
        if d["kind"] in {"Deployment", "DaemonSet", "Job"}
        for c in d["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"registry.example/mallard/api:0.2.0", "registry.example/mallard/runner:0.2.0"}
    (job,) = find(docs, "Job")
    assert job["metadata"]["name"] == "mallard-migrate-0.2.0"


def test_a_site_overlay_on_top_of_production_can_release(tmp_path: Path) -> None:
    """An overlay of an overlay sets its own tag and carries the same replacement."""
    k8s = copy_k8s(tmp_path)
    production = yaml.safe_load(
        (k8s / "overlays" / "production" / "kustomization.yaml").read_text()
    )
    site = k8s / "overlays" / "site"
    site.mkdir()
    (site / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": ["../production"],
                "images": [{"name": "mallard/api", "newTag": "1.4.2"}],
                "replacements": production["replacements"],
            }
        )
    )
    docs = kustomize(site)
    (job,) = find(docs, "Job")
    assert job["metadata"]["name"] == "mallard-migrate-1.4.2"
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "mallard/api:1.4.2"


def test_api_does_not_migrate_on_start(rendered) -> None:
    for docs in rendered.values():
        (config,) = [
            d for d in find(docs, "ConfigMap") if d["metadata"]["name"].startswith("mallard-config")
        ]
        assert config["data"]["MALLARD_MIGRATE_ON_START"] == "false"


def test_no_real_secret_is_committed() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "k8s"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    secret_files = [p for p in tracked if "/secrets/" in p]
    assert secret_files, "the example secrets should be tracked"
    assert all(p.endswith(".example") for p in secret_files), secret_files
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "k8s/overlays/production/secrets/database-url"],
        cwd=REPO_ROOT,
    )
    assert ignored.returncode == 0, "a real secrets/database-url must be git-ignored"


def test_example_secrets_say_they_are_examples() -> None:
    for example in K8S_DIR.glob("overlays/*/secrets/*.example"):
        text = example.read_text()
        assert "EXAMPLE" in text or "CHANGE-ME" in text, example


def test_production_needs_its_real_database_secret(tmp_path: Path) -> None:
    k8s = copy_k8s(tmp_path)
    (k8s / "overlays" / "production" / "secrets" / "database-url").unlink()
    with pytest.raises(AssertionError, match="database-url"):
        kustomize(k8s / "overlays" / "production")


def test_production_database_url_comes_from_its_secret(rendered) -> None:
    docs = rendered["production"]
    (secret,) = [
        d for d in find(docs, "Secret") if d["metadata"]["name"].startswith("mallard-database-")
    ]
    api = one(docs, "Deployment", "mallard-api")
    env = {e["name"]: e for e in api["spec"]["template"]["spec"]["containers"][0]["env"]}
    ref = env["DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": secret["metadata"]["name"], "key": "url"}
    assert set(secret["data"]) == {"url"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_api_secret_settings_come_from_the_overlay(rendered, overlay: str) -> None:
    docs = rendered[overlay]
    api = one(docs, "Deployment", "mallard-api")
    refs = [
        e["secretRef"] for e in api["spec"]["template"]["spec"]["containers"][0]["envFrom"]
        if "secretRef" in e
    ]  # fmt: skip
    (ref,) = refs
    secret = one(docs, "Secret", ref["name"])  # the hashed name resolved
    assert secret["metadata"]["name"].startswith("mallard-api-secrets-")
    import base64

    keys = set(secret["data"])
    assert "MALLARD_GITHUB_WEBHOOK_SECRET" in keys
    assert all(k.startswith("MALLARD_") for k in keys)
    assert base64.b64decode(secret["data"]["MALLARD_GITHUB_WEBHOOK_SECRET"]).decode() in {
        "EXAMPLE-dev-only-not-a-secret",
        "CHANGE-ME",
    }


def test_cnpg_overlay_uses_the_operator_secret(rendered) -> None:
    docs = rendered["production-cnpg"]
    (cluster,) = find(docs, "Cluster")
    app_secret = f"{cluster['metadata']['name']}-app"
    for obj in [one(docs, "Deployment", "mallard-api"), *find(docs, "Job")]:
        env = {e["name"]: e for e in obj["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
            "name": app_secret,
            "key": "uri",
        }
    secrets = [d["metadata"]["name"] for d in find(docs, "Secret")]
    assert all(n.startswith("mallard-api-secrets-") or n == "mallard-reader"
               for n in secrets), "no database Secret"
    # the reader's password, for the operator's managed role mallard_reader
    reader = one(docs, "Secret", "mallard-reader")
    assert reader["type"] == "kubernetes.io/basic-auth"
    assert set(reader["data"]) == {"username", "password"}
    (role,) = cluster["spec"]["managed"]["roles"]
    assert role["name"] == "mallard_reader" and role["passwordSecret"] == {"name": "mallard-reader"}
    assert role["login"] and not (role["superuser"] or role["createrole"] or role["createdb"])


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_deploy_selector_holds_back_only_the_api(rendered, overlay: str) -> None:
    """README's first apply step, `-l 'app.kubernetes.io/component!=api'`, must leave out
    the API's Deployment and Service and nothing the migration Job needs."""
    held_back = {
        (d["kind"], d["metadata"]["name"])
        for d in rendered[overlay]
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "api"
    }
    assert held_back == {("Deployment", "mallard-api"), ("Service", "mallard-api")}
