"""Pod hardening, the API's availability settings, NetworkPolicies, and checkov."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import K8S_DIR, OVERLAYS, find, one, pod_spec, workloads

CHECKOV_PROJECT = K8S_DIR / "tools" / "checkov"
# the runner agent is root only to start the code under test as its work user (uid 10002,
# runner/README.md "Security"): these, and no other capability
RUNNER_CAPABILITIES = ["CHOWN", "KILL", "SETGID", "SETUID"]
# what the "baseline" Pod Security Standard lets a container add
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_is_hardened(rendered, overlay: str) -> None:
    for obj in workloads(rendered[overlay]):
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        spec = pod_spec(obj)
        runner = obj["kind"] == "DaemonSet"
        assert spec["automountServiceAccountToken"] is False, name
        assert spec["securityContext"]["runAsNonRoot"] is not runner, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["readOnlyRootFilesystem"] is True, name
            if runner:  # root without root's powers: it drops the code under test to uid 10002
                assert sc["capabilities"] == {"drop": ["ALL"], "add": RUNNER_CAPABILITIES}
                assert sc["runAsUser"] == 0 and sc["privileged"] is False, name
            else:
                assert sc["capabilities"] == {"drop": ["ALL"]}, name
                assert sc["runAsUser"] >= 10000, name
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, name
            assert set(c["resources"]["limits"]) >= {"cpu", "memory"}, name
            # a read-only root needs somewhere to write temporary files
            tmp = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
            assert tmp, f"{name}: no writable /tmp"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_hostpath_only_for_the_runners_own_state(rendered, overlay: str) -> None:
    for obj in workloads(rendered[overlay]):
        paths = {v["hostPath"]["path"] for v in pod_spec(obj)["volumes"] if "hostPath" in v}
        if obj["kind"] == "DaemonSet":
            assert paths == {"/var/lib/mallard/runner", "/etc/mallard/runner-token"}
            assert obj["metadata"]["namespace"] == "mallard-runners"
        else:
            assert not paths, obj["metadata"]["name"]


RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
    "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """The Pod Security Standard "restricted" rules that this pod spec breaks."""
    out = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            out.append(field)
    for v in spec.get("volumes", []):
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {v['name']}: {sorted(kinds)}")
    pod_sc = spec.get("securityContext", {})
    for c in spec["containers"] + spec.get("initContainers", []):
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            out.append(f"{c['name']}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{c['name']}: allowPrivilegeEscalation")
        if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
            out.append(f"{c['name']}: runAsNonRoot")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            out.append(f"{c['name']}: runAsUser 0")
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
        if seccomp not in {"RuntimeDefault", "Localhost"}:
            out.append(f"{c['name']}: seccompProfile")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []) or set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            out.append(f"{c['name']}: capabilities")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            out.append(f"{c['name']}: hostPort")
    return out


def test_restricted_rules_are_checked() -> None:
    bad = {
        "hostPID": True,
        "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
        "containers": [{"name": "c", "securityContext": {"privileged": True}}],
    }
    assert len(restricted_violations(bad)) >= 6


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pods_pass_their_namespaces_pod_security_level(rendered, overlay: str) -> None:
    docs = rendered[overlay]
    levels = {
        d["metadata"]["name"]: d["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        for d in find(docs, "Namespace")
    }
    for obj in workloads(docs):
        violations = restricted_violations(pod_spec(obj))
        if levels[obj["metadata"]["namespace"]] == "restricted":
            assert violations == [], obj["metadata"]["name"]
        else:  # the runners: restricted but for their hostPath volumes and their root agent
            runner = [c["name"] for c in pod_spec(obj)["containers"]]
            allowed = {f"{n}: {rule}" for n in runner
                       for rule in ("runAsNonRoot", "runAsUser 0", "capabilities")}
            assert all(v in allowed or (v.startswith("volume ") and "hostPath" in v)
                       for v in violations), violations
            for c in pod_spec(obj)["containers"]:  # what it adds, "baseline" allows
                assert set(c["securityContext"]["capabilities"]["add"]) <= BASELINE_CAPABILITIES


def test_only_the_runner_namespace_relaxes_pod_security(rendered) -> None:
    namespaces = {d["metadata"]["name"]: d for d in find(rendered["production"], "Namespace")}
    labels = namespaces["mallard"]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert namespaces["mallard-runners"]["metadata"]["labels"][
        "pod-security.kubernetes.io/audit"
    ] == ("restricted")


def api_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment", "mallard-api")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_api_has_probes_resources_pdb_and_spread(rendered, overlay: str) -> None:
    docs = rendered[overlay]
    api = api_spec(docs)
    spec = pod_spec(api)
    (container,) = spec["containers"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/api/v1/health", "port": "http"}
    assert {"name": "http", "containerPort": 8000, "protocol": "TCP"} in container["ports"]
    assert container["args"] == ["serve", "--host", "0.0.0.0", "--port", "8000"]
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    pdb = one(docs, "PodDisruptionBudget", "mallard-api")
    labels = api["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in pdb["spec"]["selector"]["matchLabels"].items())
    keys = {c["topologyKey"] for c in spec["topologySpreadConstraints"]}
    assert keys == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}
    service = one(docs, "Service", "mallard-api")
    assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())


@pytest.mark.parametrize(("overlay", "replicas"), [("dev", 1), ("production", 3)])
def test_api_replica_count(rendered, overlay: str, replicas: int) -> None:
    assert api_spec(rendered[overlay])["spec"]["replicas"] == replicas


@pytest.mark.parametrize("overlay", ["production", "production-cnpg"])
def test_production_api_is_highly_available(rendered, overlay: str) -> None:
    api = api_spec(rendered[overlay])
    assert api["spec"]["replicas"] >= 3
    assert api["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    anti = pod_spec(api)["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    pdb = one(rendered[overlay], "PodDisruptionBudget", "mallard-api")
    assert pdb["spec"]["maxUnavailable"] == 1


# -- NetworkPolicies -----------------------------------------------------------------------


def policies_for(docs, namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
    """The NetworkPolicies that select a pod with these labels in this namespace."""
    out = []
    for p in find(docs, "NetworkPolicy"):
        if p["metadata"]["namespace"] != namespace:
            continue
        match = p["spec"]["podSelector"].get("matchLabels", {})
        if all(labels.get(k) == v for k, v in match.items()):
            out.append(p)
    return out


def labels_of(docs, kind: str, name: str) -> dict[str, str]:
    return one(docs, kind, name)["spec"]["template"]["metadata"]["labels"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_runner_egress_is_api_dns_and_git_only(rendered, overlay: str) -> None:
    docs = rendered[overlay]
    for ds in find(docs, "DaemonSet"):
        pols = policies_for(
            docs, "mallard-runners", labels_of(docs, "DaemonSet", ds["metadata"]["name"])
        )
        assert pols, "runners must be isolated"
        for pol in pols:
            assert set(pol["spec"]["policyTypes"]) == {"Ingress", "Egress"}
            assert not pol["spec"].get("ingress"), "nothing may connect to a runner"
        rules = [r for pol in pols for r in pol["spec"]["egress"]]
        ports = {(p["port"], p["protocol"]) for r in rules for p in r["ports"]}
        assert ports == {
            (8000, "TCP"),
            (53, "UDP"),
            (53, "TCP"),
            (22, "TCP"),
            (443, "TCP"),
            (9418, "TCP"),
        }
        for rule in rules:
            assert rule.get("to"), "every egress rule names its destination"
            for peer in rule["to"]:
                if "ipBlock" in peer:
                    assert {p["port"] for p in rule["ports"]} == {22, 443, 9418}, "git only"
                elif peer["namespaceSelector"]["matchLabels"] == {
                    "kubernetes.io/metadata.name": "mallard"
                }:
                    assert peer["podSelector"]["matchLabels"] == {
                        "app.kubernetes.io/component": "api"
                    }
                    assert [p["port"] for p in rule["ports"]] == [8000]
                else:
                    assert peer["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
                    assert {p["port"] for p in rule["ports"]} == {53}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_api_ingress_and_database_egress(rendered, overlay: str) -> None:
    docs = rendered[overlay]
    api_labels = labels_of(docs, "Deployment", "mallard-api")
    pols = policies_for(docs, "mallard", api_labels)
    assert pols
    sources = [peer for p in pols for r in p["spec"].get("ingress", []) for peer in r["from"]]
    assert {"podSelector": {}} in sources, "in-namespace clients"
    runner_ns = {"kubernetes.io/metadata.name": "mallard-runners"}
    assert any(s.get("namespaceSelector", {}).get("matchLabels") == runner_ns for s in sources)
    egress_ports = {
        p["port"] for pol in pols for r in pol["spec"].get("egress", []) for p in r["ports"]
    }
    assert 5432 in egress_ports and 53 in egress_ports
    # the migration Job reaches the database too, and nothing reaches it
    (job,) = find(docs, "Job")
    job_pols = policies_for(docs, "mallard", job["spec"]["template"]["metadata"]["labels"])
    assert any(
        p["port"] == 5432 for pol in job_pols for r in pol["spec"]["egress"] for p in r["ports"]
    )
    assert not [r for pol in job_pols for r in pol["spec"].get("ingress", [])]


def test_in_cluster_postgres_only_accepts_db_clients(rendered) -> None:
    docs = rendered["dev"]
    pg_labels = labels_of(docs, "StatefulSet", "mallard-postgres")
    (pol,) = policies_for(docs, "mallard", pg_labels)
    (rule,) = pol["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"mallard.dev/db-client": "true"}}}]
    clients = [
        o
        for o in workloads(docs)
        if o["spec"]["template"]["metadata"]["labels"].get("mallard.dev/db-client")
    ]
    assert {o["kind"] for o in clients} == {"Deployment", "Job"}
    assert pg_labels["mallard.dev/postgres"] == "true"


# -- checkov --------------------------------------------------------------------------------


def offline_prefix() -> list[str]:
    """Run checkov in a network namespace of its own (no network at all) when this
    machine allows it: proof that it needs nothing from outside."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-n", "true"], capture_output=True).returncode == 0:
        return [unshare, "-n"]
    return []


def run_checkov(*args: str) -> dict[str, Any]:
    """checkov on the given files, offline, as JSON; every finding reported, none fatal."""
    env = {
        **os.environ,
        # offline: no platform mapping, no policy download
        "BC_SKIP_MAPPING": "TRUE",
        "CHECKOV_SKIP_DOWNLOAD": "TRUE",
    }
    # no platform credentials: nothing is uploaded, nothing is fetched
    for name in ("BC_API_KEY", "PRISMA_API_URL"):
        env.pop(name, None)
    checkov = str(CHECKOV_PROJECT / ".venv" / "bin" / "checkov")
    common = ["--framework", "kubernetes", "--skip-download", "--output", "json", "--soft-fail"]
    proc = subprocess.run(
        [*offline_prefix(), checkov, *args, *common],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    return report[0] if isinstance(report, list) else report


@pytest.fixture(scope="session")
def checkov_ready() -> None:
    # make python installs uv; with pip --user it lands in ~/.local/bin
    uv = shutil.which("uv") or shutil.which("uv", path=str(Path.home() / ".local" / "bin"))
    assert uv, "uv is needed to create checkov's environment (make python installs it)"
    subprocess.run(
        [uv, "sync", "--project", str(CHECKOV_PROJECT), "--frozen", "--quiet"],
        check=True,
        timeout=600,
    )


@pytest.fixture(scope="session")
def checkov_report(rendered, checkov_ready, tmp_path_factory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("rendered")
    for overlay, docs in rendered.items():
        (out / f"{overlay}.yaml").write_text(yaml.safe_dump_all(docs))
    return run_checkov("--directory", str(out))


def test_checkov_scanned_every_object(checkov_report, rendered) -> None:
    summary = checkov_report["summary"]
    assert summary["parsing_errors"] == 0
    assert summary["passed"] > 500
    assert summary["resource_count"] >= sum(len(d) for d in rendered.values()) // 2


def test_checkov_finds_nothing_unjustified(checkov_report) -> None:
    """Offline, checkov knows no severities (they come from its platform), so every
    failed check counts: it is fixed, or skipped on the object with a reason."""
    failed = [
        f"{c['check_id']} {c['resource']}: {c['check_name']}"
        for c in checkov_report["results"]["failed_checks"]
    ]
    assert not failed, "\n".join(failed)


def test_checkov_skips_are_justified_and_few(checkov_report) -> None:
    skipped = checkov_report["results"]["skipped_checks"]
    for c in skipped:
        reason = c["check_result"].get("suppress_comment") or ""
        assert len(reason) > 40, f"{c['check_id']} on {c['resource']} needs a real reason"
    # the skips documented in k8s/README.md, and no others
    assert {c["check_id"] for c in skipped} == {
        "CKV_K8S_8",
        "CKV_K8S_9",
        "CKV_K8S_23",
        "CKV_K8S_25",
        "CKV_K8S_35",
        "CKV_K8S_37",
        "CKV_K8S_40",
        "CKV_K8S_43",
    }


def test_checkov_catches_a_bad_pod(tmp_path: Path, checkov_ready) -> None:
    """checkov runs for real: a privileged root pod fails."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bad, namespace: mallard}\n"
        "spec:\n  containers:\n  - name: c\n    image: busybox:latest\n"
        "    securityContext: {privileged: true}\n"
    )
    report = run_checkov("--file", str(bad))
    failed = {c["check_id"] for c in report["results"]["failed_checks"]}
    assert {"CKV_K8S_16", "CKV_K8S_14"} <= failed


@pytest.mark.parametrize("overlay", ["production", "production-cnpg"])
def test_ingress_exposes_the_api_but_not_its_metrics(rendered, overlay: str) -> None:
    docs = rendered[overlay]
    ingress = one(docs, "Ingress", "mallard-api")
    service = one(docs, "Service", "mallard-api")
    paths = []
    for rule in ingress["spec"]["rules"]:
        assert rule["host"] in ingress["spec"]["tls"][0]["hosts"]
        for p in rule["http"]["paths"]:
            backend = p["backend"]["service"]
            assert backend["name"] == service["metadata"]["name"]
            assert backend["port"]["name"] in {port["name"] for port in service["spec"]["ports"]}
            paths.append(p["path"])
    assert "/api" in paths
    assert not any("/metrics".startswith(p) for p in paths), "metrics stay in the cluster"
