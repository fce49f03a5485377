"""Who connects as whom, and what a runner may fetch: checked on the rendered manifests.

- The API and the migrations connect as the database's owner role, never the superuser;
  the superuser's password reaches only PostgreSQL and the migration Job's db-roles init
  container (StatefulSet component), which runs copies of docker/postgres/roles.sh and
  docker/secrets.sh.
- Grafana's datasource (monitoring component) reads as mallard_reader; CloudNativePG
  manages that role with the overlay's Secret.
- Every overlay tells its runners which repositories a job may name, and dev's egress to
  "any address" leaves out private, link-local and shared ranges.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from k8s_helpers import K8S_DIR, OVERLAYS, REPO_ROOT, find, one, pod_spec, workloads

PRIVATE = {"10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
           "192.168.0.0/16"}


def secret_refs(container: dict[str, Any]) -> set[str]:
    refs = {e["valueFrom"]["secretKeyRef"]["name"] for e in container.get("env", [])
            if "secretKeyRef" in e.get("valueFrom", {})}
    refs |= {e["secretRef"]["name"] for e in container.get("envFrom", []) if "secretRef" in e}
    return refs


def test_db_roles_scripts_are_copies_of_the_docker_ones() -> None:
    copies = K8S_DIR / "components" / "postgres-statefulset" / "db-roles"
    for name, source in (("roles.sh", REPO_ROOT / "docker" / "postgres" / "roles.sh"),
                         ("secrets.sh", REPO_ROOT / "docker" / "secrets.sh")):
        assert (copies / name).read_bytes() == source.read_bytes(), (
            f"k8s/components/postgres-statefulset/db-roles/{name} differs from {source}: "
            f"cp {source.relative_to(REPO_ROOT)} {copies.relative_to(REPO_ROOT)}/")


def test_statefulset_superuser_is_not_the_apis_role(rendered) -> None:
    docs = rendered["dev"]
    sts = one(docs, "StatefulSet", "mallard-postgres")
    (pg,) = pod_spec(sts)["containers"]
    env = {e["name"]: e for e in pg["env"]}
    superuser = env["POSTGRES_USER"]["value"]
    (db_secret,) = [d for d in find(docs, "Secret")
                    if d["metadata"]["name"].startswith("mallard-database-")]
    url = urlsplit(base64.b64decode(db_secret["data"]["url"]).decode().strip())
    assert url.username and url.username != superuser
    (pg_secret,) = [d for d in find(docs, "Secret")
                    if d["metadata"]["name"].startswith("mallard-postgres-")]
    # the superuser's password: PostgreSQL and the db-roles init container, nothing else
    users = []
    for w in workloads(docs):
        spec = pod_spec(w)
        for c in spec.get("initContainers", []) + spec["containers"]:
            if pg_secret["metadata"]["name"] in secret_refs(c):
                users.append((w["kind"], c["name"]))
    assert sorted(users) == [("Job", "db-roles"), ("StatefulSet", "postgres")]


def test_migration_job_sets_up_roles_first_as_the_superuser(rendered) -> None:
    docs = rendered["dev"]
    (job,) = find(docs, "Job")
    spec = pod_spec(job)
    (init,) = spec["initContainers"]
    env = {e["name"]: e for e in init["env"]}
    assert env["PGUSER"]["value"] == "postgres"
    assert env["PGHOST"]["value"].startswith("mallard-postgres.")
    assert env["MALLARD_READER_PASSWORD"]["valueFrom"]["secretKeyRef"]["optional"] is True
    assert init["command"][:3] == ["/bin/sh", "/scripts/secrets.sh", "PGPASSWORD"]
    assert init["command"][-2:] == ["/bin/sh", "/scripts/roles.sh"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    (cm,) = [d for d in find(docs, "ConfigMap")
             if d["metadata"]["name"] == volumes["db-roles"]["configMap"]["name"]]
    assert cm["data"]["roles.sh"] == (REPO_ROOT / "docker/postgres/roles.sh").read_text()
    assert init["securityContext"]["readOnlyRootFilesystem"] is True
    assert {m["mountPath"] for m in init["volumeMounts"]} == {"/scripts", "/tmp"}


@pytest.mark.parametrize("overlay", ["production", "production-cnpg"])
def test_grafana_reads_as_mallard_reader(rendered, overlay: str) -> None:
    cm = one(rendered[overlay], "ConfigMap", "mallard-grafana-datasources")
    assert cm["metadata"]["labels"]["grafana_datasource"] == "1"
    (text,) = cm["data"].values()
    sources = {d["uid"]: d for d in yaml.safe_load(text)["datasources"]}
    assert set(sources) == {"mallard-pg", "mallard-prom"}
    assert sources["mallard-pg"]["user"] == "mallard_reader"
    assert sources["mallard-pg"]["secureJsonData"]["password"].startswith("${")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_names_the_repositories_its_runners_may_fetch(rendered, overlay) -> None:
    (cm,) = [d for d in find(rendered[overlay], "ConfigMap")
             if d["metadata"]["name"].startswith("mallard-runner-config")]
    allow = cm["data"]["MALLARD_RUNNER_REPO_ALLOW"].split(",")
    assert allow and all(a.startswith(("https://", "ssh://")) for a in allow), allow
    assert not any(a.startswith("file:") for a in allow)


def test_dev_runners_reach_no_private_address(rendered) -> None:
    (pol,) = [p for p in find(rendered["dev"], "NetworkPolicy")
              if p["metadata"]["name"] == "mallard-runner"]
    blocks = [peer["ipBlock"] for r in pol["spec"]["egress"] for peer in r["to"]
              if "ipBlock" in peer]
    for block in blocks:
        if block["cidr"] == "0.0.0.0/0":
            assert set(block.get("except", [])) >= PRIVATE


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_runner_secrets_are_not_in_the_runners_pods(rendered, overlay: str) -> None:
    """The runner builds and runs pushed code: no Secret of the cluster is mounted there."""
    for ds in find(rendered[overlay], "DaemonSet"):
        spec = pod_spec(ds)
        assert not any(secret_refs(c) for c in spec["containers"])
        assert not any("secret" in v for v in spec["volumes"])
