"""Runner DaemonSets: one per architecture, Guaranteed QoS on whole CPUs, pinned to
their architecture and to benchmark nodes; and their entrypoint, run for real."""

from __future__ import annotations

import os
import stat
import subprocess
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from k8s_helpers import OVERLAYS, find, pod_spec

ARCH_OF_OVERLAY = {
    "dev": {"amd64"},
    "production": {"amd64", "arm64"},
    "production-cnpg": {"amd64", "arm64"},
}
TAINT = {"key": "mallard.dev/benchmark", "value": "true", "effect": "NoSchedule"}


def quantity(value: str | int) -> Decimal:
    """A Kubernetes quantity as a number (CPU: cores; memory: bytes)."""
    text = str(value)
    suffixes = {
        "m": Decimal("0.001"), "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9),
        "T": Decimal(10**12), "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30),
        "Ti": Decimal(2**40),
    }  # fmt: skip
    for suffix in sorted(suffixes, key=len, reverse=True):
        if text.endswith(suffix):
            return Decimal(text[: -len(suffix)]) * suffixes[suffix]
    return Decimal(text)


def qos_class(spec: dict[str, Any]) -> str:
    """The pod's QoS class, by the kubelet's rules (for cpu and memory)."""
    containers = spec.get("containers", []) + spec.get("initContainers", [])
    guaranteed = True
    any_set = False
    for c in containers:
        res = c.get("resources", {})
        requests = dict(res.get("limits", {}))  # requests default to limits
        requests.update(res.get("requests", {}))
        limits = res.get("limits", {})
        for r in ("cpu", "memory"):
            if r in requests or r in limits:
                any_set = True
            if r not in limits or quantity(requests[r]) != quantity(limits[r]):
                guaranteed = False
    if guaranteed and containers:
        return "Guaranteed"
    return "Burstable" if any_set else "BestEffort"


def exclusive_cpu_problems(spec: dict[str, Any]) -> list[str]:
    """Why the static CPU manager would not give this pod exclusive cores ([] if it would)."""
    problems = []
    if qos_class(spec) != "Guaranteed":
        problems.append(f"QoS is {qos_class(spec)}, not Guaranteed")
    for c in spec.get("containers", []):
        res = c.get("resources", {})
        for r in ("cpu", "memory"):
            if res.get("requests", {}).get(r) != res.get("limits", {}).get(r):
                problems.append(f"{c['name']}: {r} request != limit (both must be written)")
        cpu = quantity(res.get("limits", {}).get("cpu", "0"))
        if cpu <= 0 or cpu != cpu.to_integral_value():
            problems.append(f"{c['name']}: cpu {cpu} is not a whole number of CPUs")
    return problems


def runner_daemonsets(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d for d in find(docs, "DaemonSet") if d["metadata"]["name"].startswith("mallard-runner")
    ]


def test_qos_rules_tell_guaranteed_from_burstable() -> None:
    def pod(requests: dict, limits: dict) -> dict:
        return {
            "containers": [{"name": "c", "resources": {"requests": requests, "limits": limits}}]
        }

    assert (
        qos_class(pod({"cpu": "2", "memory": "4Gi"}, {"cpu": "2", "memory": "4Gi"})) == "Guaranteed"
    )
    assert qos_class(pod({"cpu": "2000m", "memory": "4096Mi"}, {"cpu": "2", "memory": "4Gi"})) == (
        "Guaranteed"
    )
    assert (
        qos_class(pod({"cpu": "1", "memory": "4Gi"}, {"cpu": "2", "memory": "4Gi"})) == "Burstable"
    )
    assert qos_class(pod({"cpu": "2"}, {"cpu": "2"})) == "Burstable"  # no memory limit
    assert qos_class({"containers": [{"name": "c"}]}) == "BestEffort"
    assert exclusive_cpu_problems(
        pod({"cpu": "1500m", "memory": "1Gi"}, {"cpu": "1500m", "memory": "1Gi"})
    )
    assert not exclusive_cpu_problems(
        pod({"cpu": "3", "memory": "1Gi"}, {"cpu": "3", "memory": "1Gi"})
    )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_one_runner_daemonset_per_architecture(rendered, overlay: str) -> None:
    daemonsets = runner_daemonsets(rendered[overlay])
    arches = {
        d["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/arch"] for d in daemonsets
    }
    assert arches == ARCH_OF_OVERLAY[overlay]
    assert len(daemonsets) == len(arches)
    selectors = [tuple(sorted(d["spec"]["selector"]["matchLabels"].items())) for d in daemonsets]
    assert len(set(selectors)) == len(selectors), "runner DaemonSets must not share a selector"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_runners_are_guaranteed_on_whole_cpus(rendered, overlay: str) -> None:
    for ds in runner_daemonsets(rendered[overlay]):
        spec = pod_spec(ds)
        assert qos_class(spec) == "Guaranteed", ds["metadata"]["name"]
        assert exclusive_cpu_problems(spec) == [], ds["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_runners_are_pinned_to_their_arch_and_benchmark_nodes(rendered, overlay: str) -> None:
    for ds in runner_daemonsets(rendered[overlay]):
        name = ds["metadata"]["name"]
        spec = pod_spec(ds)
        arch = spec["nodeSelector"]["kubernetes.io/arch"]
        assert name == f"mallard-runner-{arch}"
        assert spec["nodeSelector"]["mallard.dev/benchmark-node"] == "true"
        assert ds["spec"]["selector"]["matchLabels"]["mallard.dev/arch"] == arch
        assert ds["spec"]["template"]["metadata"]["labels"]["mallard.dev/arch"] == arch
        tolerations = spec["tolerations"]
        assert any(all(t.get(k) == v for k, v in TAINT.items()) for t in tolerations)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_runners_measure_their_nodes_arch_natively(rendered, overlay: str) -> None:
    kernel = {"amd64": "x86_64", "arm64": "aarch64"}  # what the runner registers with
    for ds in runner_daemonsets(rendered[overlay]):
        spec = pod_spec(ds)
        env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
        assert env["MALLARD_RUNNER_ARCH"] == kernel[spec["nodeSelector"]["kubernetes.io/arch"]]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_nothing_else_tolerates_the_benchmark_taint(rendered, overlay: str) -> None:
    for obj in rendered[overlay]:
        if obj["kind"] in {"Deployment", "StatefulSet", "Job"}:
            for t in pod_spec(obj).get("tolerations", []):
                assert t.get("key") != TAINT["key"], obj["metadata"]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_runner_name_is_the_node_and_spool_survives_the_pod(rendered, overlay: str) -> None:
    for ds in runner_daemonsets(rendered[overlay]):
        spec = pod_spec(ds)
        (container,) = spec["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["MALLARD_RUNNER_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
        limit = env["MALLARD_RUNNER_CPU_LIMIT"]["valueFrom"]["resourceFieldRef"]
        assert limit["resource"] == "limits.cpu" and str(limit["divisor"]) == "1"
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        # the state dir (spool, raw outputs) is on the node; the cache may be lost
        assert (
            volumes[mounts["/var/lib/mallard-runner"]]["hostPath"]["path"]
            == "/var/lib/mallard/runner"
        )
        assert "emptyDir" in volumes[mounts["/cache"]]
        assert volumes["token"]["hostPath"] == {"path": "/etc/mallard/runner-token", "type": "File"}


# -- the entrypoint, run as the container would run it ------------------------------------


TOKEN = "tok-1-0123456789abcdef0123456789"


@pytest.fixture
def entrypoint(rendered, tmp_path: Path) -> Path:
    """The script exactly as deployed: from the rendered ConfigMap of the dev overlay."""
    (cm,) = [
        d
        for d in find(rendered["dev"], "ConfigMap")
        if d["metadata"]["name"].startswith("mallard-runner-entrypoint")
    ]
    script = tmp_path / "runner-agent.sh"
    script.write_text(cm["data"]["runner-agent.sh"])
    return script


def run_entrypoint(
    script: Path, tmp_path: Path, cpus_allowed: str, limit: str | None, token: str | None = TOKEN,
    **env: str,
) -> subprocess.CompletedProcess[str]:  # fmt: skip
    status = tmp_path / "status"
    status.write_text(
        f"Name:\tsh\nCpus_allowed:\tff\nCpus_allowed_list:\t{cpus_allowed}\nMems:\t1\n"
    )
    token_file = tmp_path / "token"
    if token is not None:
        token_file.write_text(token + "\n")
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    fake = bindir / "mallard-runner"
    fake.write_text(
        '#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n'
        'printf "env-token=%s\\n" "${MALLARD_RUNNER_TOKEN:-}"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    full_env = {
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "MALLARD_PROC_STATUS": str(status),
        "MALLARD_RUNNER_TOKEN_FILE": str(token_file),
        "MALLARD_RUNNER_API": "http://mallard-api.mallard.svc:8000",
        "MALLARD_RUNNER_NAME": "node-a",
        **env,
    }
    if limit is not None:
        full_env["MALLARD_RUNNER_CPU_LIMIT"] = limit
    return subprocess.run(
        ["/bin/sh", str(script)], env=full_env, capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize(
    ("cpus", "limit"), [("2-3", "2"), ("5", "1"), ("0,2,4-5", "4"), ("8-11,16-19", "8")]
)
def test_entrypoint_passes_the_pinned_cpus(entrypoint: Path, tmp_path: Path, cpus, limit) -> None:
    proc = run_entrypoint(entrypoint, tmp_path, cpus, limit)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "agent", "--api", "http://mallard-api.mallard.svc:8000", "--name", "node-a",
        "--cpus", cpus, "--token-file", str(tmp_path / "token"), "env-token=",
    ]  # fmt: skip
    assert TOKEN not in proc.stderr and TOKEN not in proc.stdout  # the file, never the value


def test_entrypoint_refuses_shared_cores(entrypoint: Path, tmp_path: Path) -> None:
    proc = run_entrypoint(entrypoint, tmp_path, "0-15", "2")
    assert proc.returncode != 0
    assert "refusing to benchmark on shared cores" in proc.stderr
    assert proc.stdout == ""


def test_entrypoint_may_be_told_to_run_unpinned(entrypoint: Path, tmp_path: Path) -> None:
    proc = run_entrypoint(entrypoint, tmp_path, "0-15", "2", MALLARD_RUNNER_ALLOW_UNPINNED="1")
    assert proc.returncode == 0, proc.stderr
    assert "WARNING" in proc.stderr
    assert proc.stdout.splitlines()[-4:] == ["0-15", "--token-file", str(tmp_path / "token"),
                                             "env-token="]


def test_entrypoint_needs_the_node_token(entrypoint: Path, tmp_path: Path) -> None:
    proc = run_entrypoint(entrypoint, tmp_path, "2-3", "2", token=None)
    assert proc.returncode != 0 and "runner token" in proc.stderr
    proc = run_entrypoint(entrypoint, tmp_path, "2-3", "2", token="")
    assert proc.returncode != 0 and "empty" in proc.stderr


@pytest.mark.parametrize(("token", "words"), [
    ("CHANGE-ME", "placeholder"), ("change-me-0123456789abcdef", "placeholder"),
    ("tok-1", "shorter than 16 bytes")])
def test_entrypoint_refuses_placeholder_and_short_tokens(entrypoint: Path, tmp_path: Path,
                                                         token: str, words: str) -> None:
    proc = run_entrypoint(entrypoint, tmp_path, "2-3", "2", token=token)
    assert proc.returncode != 0 and words in proc.stderr and proc.stdout == ""


def test_entrypoint_needs_its_name(entrypoint: Path, tmp_path: Path) -> None:
    proc = run_entrypoint(entrypoint, tmp_path, "2-3", "2", MALLARD_RUNNER_NAME="")
    assert proc.returncode != 0 and "MALLARD_RUNNER_NAME" in proc.stderr


def test_dev_allows_unpinned_and_production_does_not(rendered) -> None:
    def runner_config(docs):
        (cm,) = [
            d
            for d in find(docs, "ConfigMap")
            if d["metadata"]["name"].startswith("mallard-runner-config")
        ]
        return cm["data"]

    assert runner_config(rendered["dev"]).get("MALLARD_RUNNER_ALLOW_UNPINNED") == "1"
    assert "MALLARD_RUNNER_ALLOW_UNPINNED" not in runner_config(rendered["production"])
